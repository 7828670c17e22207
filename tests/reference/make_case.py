#!/usr/bin/python3
"""Builds a random DeepSeek-V3 test case without the engine: config.json, model.safetensors,
batch.safetensors, meta.json, and with --fake-engine an engine.safetensors computed by the reference
itself (to exercise compare.py end to end).

  /usr/bin/python3 tests/reference/make_case.py OUT_DIR [--preset NAME] [--dtype float64|float32]
      [--batch B] [--seq S] [--seed N] [--set key=JSON ...] [--shards N] [--fake-engine]

Presets: base (q LoRA, 2 groups, bias, MTP 1), nolora_yarn_mtp2 (q_proj, YaRN active, MTP 2),
softmax (softmax scoring, 1 group, no bias, norm_topk_prob false), dense_tail (last layer dense, so
the MTP block is dense).
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsv3_reference as ref  # noqa: E402
import safetensors_io  # noqa: E402

_BASE = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
    "vocab_size": 19, "hidden_size": 12, "intermediate_size": 20, "moe_intermediate_size": 6,
    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 3, "n_group": 2,
    "topk_group": 1, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "topk_method": "noaux_tc", "norm_topk_prob": True, "first_k_dense_replace": 1,
    "q_lora_rank": 10, "kv_lora_rank": 8, "qk_nope_head_dim": 6, "qk_rope_head_dim": 4,
    "v_head_dim": 5, "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}
_YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4, "beta_fast": 32,
         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
PRESETS = {
    "base": {},
    "nolora_yarn_mtp2": {"q_lora_rank": None, "rope_scaling": _YARN, "num_nextn_predict_layers": 2,
                         "topk_group": 2, "n_group": 4, "num_experts_per_tok": 2},
    "softmax": {"scoring_func": "softmax", "n_group": 1, "topk_group": 1, "norm_topk_prob": False,
                "routed_scaling_factor": 1.0, "n_shared_experts": 2},
    "dense_tail": {"first_k_dense_replace": 2, "num_hidden_layers": 2},
}
_NO_BIAS_PRESETS = {"softmax"}


def make_config(preset="base", **overrides):
    raw = dict(_BASE)
    raw.update(PRESETS[preset])
    raw.update(overrides)
    return raw


def random_weights(cfg, seed=0, dtype=torch.float64, with_bias=True, mtp_table_copies=False):
    """Weights with O(1) activations: linears N(0, 1/fan_in), norms 1 + N(0, 0.1²), embedding
    N(0, 1), bias N(0, 0.1²) (large enough to change some selections)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)
    w = {}
    for name, shape in ref.weight_shapes(cfg).items():
        if len(shape) == 1:
            w[name] = 1.0 + 0.1 * randn(*shape)
        elif name.endswith("embed_tokens.weight"):
            w[name] = randn(*shape)
        else:
            w[name] = randn(*shape) / shape[1] ** 0.5
    for name, shape in ref.optional_shapes(cfg).items():
        if name.endswith("e_score_correction_bias") and with_bias:
            w[name] = 0.1 * randn(*shape)
        elif mtp_table_copies and name.endswith("embed_tokens.weight"):
            w[name] = w["model.embed_tokens.weight"].clone()
        elif mtp_table_copies and name.endswith("shared_head.head.weight"):
            w[name] = w["lm_head.weight"].clone()
    return {n: t.to(dtype) for n, t in w.items()}


def random_tokens(vocab, batch, seq, seed=0):
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.randint(0, vocab, (batch, seq + 1), generator=gen, dtype=torch.int64)


def write_case(out_dir, raw_cfg, weights, tokens, dtype_name, mtp_loss_weight=0.3,
               seq_aux_loss_coeff=0.01, shards=0):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(raw_cfg, f, indent=1)
    if shards > 1:
        per_file = -(-len(weights) // shards)
        safetensors_io.save_sharded(weights, out_dir, per_file)
    else:
        safetensors_io.save_file(weights, os.path.join(out_dir, "model.safetensors"))
    safetensors_io.save_file({"tokens": tokens}, os.path.join(out_dir, "batch.safetensors"))
    meta = {"dtype": dtype_name, "mtp_loss_weight": mtp_loss_weight,
            "seq_aux_loss_coeff": seq_aux_loss_coeff, "batch": tokens.shape[0],
            "seq_length": tokens.shape[1] - 1}
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def engine_like_dump(case_dir, dtype):
    """Runs the reference and returns the tensors of an engine.safetensors in the contract."""
    model = ref.Reference(case_dir, dtype)
    with open(os.path.join(case_dir, "meta.json")) as f:
        meta = json.load(f)
    tokens = safetensors_io.load_file(os.path.join(case_dir, "batch.safetensors"))[0]["tokens"]
    out, grads = model.run(tokens[:, :-1], tokens[:, 1:], meta["mtp_loss_weight"],
                           meta["seq_aux_loss_coeff"])
    dump = {"logits": out["logits"].detach()}
    for key in ["loss.main", "loss.balance", "loss.total"]:
        dump[key] = out[key].detach().reshape(1)
    for k in range(1, model.cfg.num_nextn_predict_layers + 1):
        dump[f"loss.mtp.{k}"] = out[f"loss.mtp.{k}"].detach().reshape(1)
    for layer, ids in out["routing"].items():
        dump[f"routing.{layer}"] = ids.clone()
    for name, g in grads.items():
        dump[f"grad.{name}"] = g
    return dump


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--preset", default="base", choices=sorted(PRESETS))
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mtp-loss-weight", type=float, default=0.3)
    ap.add_argument("--seq-aux-loss-coeff", type=float, default=0.01)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="override a config.json field, e.g. --set n_group=4")
    ap.add_argument("--shards", type=int, default=0, help="split the weights over N files")
    ap.add_argument("--mtp-table-copies", action="store_true",
                    help="store embed_tokens/shared_head.head copies in the MTP layers")
    ap.add_argument("--fake-engine", action="store_true",
                    help="also write engine.safetensors computed by the reference itself")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    raw = make_config(args.preset, **overrides)
    cfg = ref.Config(raw)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    weights = random_weights(cfg, args.seed, dtype, args.preset not in _NO_BIAS_PRESETS,
                             args.mtp_table_copies)
    tokens = random_tokens(cfg.vocab_size, args.batch, args.seq, args.seed)
    write_case(args.out_dir, raw, weights, tokens, args.dtype, args.mtp_loss_weight,
               args.seq_aux_loss_coeff, args.shards)
    if args.fake_engine:
        safetensors_io.save_file(engine_like_dump(args.out_dir, dtype),
                                 os.path.join(args.out_dir, "engine.safetensors"))
    print(f"wrote {args.out_dir} ({args.preset}, {args.dtype}, B={args.batch}, S={args.seq})")


if __name__ == "__main__":
    main()
