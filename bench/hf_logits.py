#!/usr/bin/env python3
"""Hugging Face transformers on our exported weights (tests/gpu/perf.sh, "transformers logits"): a
real client of the directories moe-export writes. transformers loads the directory as
DeepseekV3ForCausalLM with no custom code (no trust_remote_code), runs fixed tokens in fp32, and its
logits are compared with moe-eval --dump-logits on the same directory and tokens: the relative error
max |ours - theirs| / max |theirs| (goal 1e-4). Whatever transformers refuses is a bug in our export,
unless this transformers predates DeepseekV3 (said so).

    bench/hf_logits.py --hf DIR --make-tokens T.npy          fixed tokens for the model's vocabulary
    bench/hf_logits.py --hf DIR --tokens T.npy --ours L.npy [--device cuda] [--rehearsal]
--rehearsal: where transformers is not installed (the CPU machine), say so and pass.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hf", required=True, help="a DeepseekV3 directory moe-export wrote")
    ap.add_argument("--make-tokens", help="write fixed tokens [2, 64] for its vocabulary here")
    ap.add_argument("--tokens")
    ap.add_argument("--ours", help="moe-eval --dump-logits of the same directory and tokens")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rehearsal", action="store_true")
    a = ap.parse_args()
    import numpy as np
    config = json.load(open(os.path.join(a.hf, "config.json")))
    if a.make_tokens:
        vocab = int(config["vocab_size"])
        np.save(a.make_tokens, (np.arange(2 * 64).reshape(2, 64) * 7919 + 13) % vocab)
        return 0
    if not a.tokens or not a.ours:
        ap.error("--tokens and --ours, or --make-tokens")
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"RESULT transformers_logits_rel_err skipped ({e}: "
              f"{'the rehearsal stops here' if a.rehearsal else 'install it on the GPU machine'})")
        return 0 if a.rehearsal else 1
    cls = getattr(transformers, "DeepseekV3ForCausalLM", None)
    if cls is None:
        print(f"RESULT transformers_logits_rel_err unavailable (transformers {transformers.__version__} "
              "has no DeepseekV3ForCausalLM)")
        return 1
    dev = a.device if torch.cuda.is_available() else "cpu"
    try:
        model = cls.from_pretrained(a.hf, torch_dtype=torch.float32, attn_implementation="eager").to(dev).eval()
    except Exception as e:  # noqa: BLE001 (what transformers refused is the finding)
        print(f"RESULT transformers_logits_rel_err refused (transformers {transformers.__version__}: "
              f"{str(e).splitlines()[0][:200]})")
        return 1
    tokens = torch.from_numpy(np.load(a.tokens)).long().to(dev)
    try:
        with torch.no_grad():
            theirs = model(tokens).logits.float().cpu().numpy()
    except Exception as e:  # noqa: BLE001 (what transformers refused is the finding)
        print(f"RESULT transformers_logits_rel_err failed (transformers {transformers.__version__} "
              f"ran our weights into: {str(e).splitlines()[0][:200]})")
        return 1
    ours = np.load(a.ours).astype(np.float32)
    # moe-eval scores each sequence's positions but the last (each predicts the next token): a causal
    # model's logits there are the full input's first n - 1.
    if ours.ndim == 3 and ours.shape[1] == theirs.shape[1] - 1:
        theirs = theirs[:, :-1]
    if ours.shape != theirs.shape:
        print(f"RESULT transformers_logits_rel_err shapes differ (ours {ours.shape}, theirs {theirs.shape})")
        return 1
    err = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    print(f"RESULT transformers_logits_rel_err {err:.2e}  (goal 1e-4; transformers {transformers.__version__}, "
          f"{config.get('num_hidden_layers')} layers, vocab {config.get('vocab_size')}, fp32 on {dev})")
    return 0 if err <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
