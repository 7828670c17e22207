#!/usr/bin/env bash
# A trained model that other tools can load, scored the same by every path, and sampled
# (docs/operations.md, "Export, load elsewhere, sample"). For a run without YaRN and one with it
# (tiny at seq 64 over an original length of 32):
#  1. moe-eval --data --dump-tokens, then --tokens of those sequences, from the checkpoint and from
#     its fp32 export (--hf, no job file): the same loss to the last bit;
#  2. the export holds config.json, the weights, tokenizer.model (the run's), tokenizer_config.json
#     and generation_config.json; rope_scaling only for the YaRN run, with its values; bos/eos ids;
#     the true torch_dtype;
#  3. export -> read back as --init-from reads (moe-export --hf) -> export: the same bytes;
#  4. a config with an unsupported convention is refused naming it;
#  5. moe-generate: text and tokens/s; the same seed, the same text; greedy with the latent cache is
#     greedy recomputing the prefix, past the original length too; --hf is --checkpoint.
set -euo pipefail
bin=${MOE_BIN:?}
source tests/engine/tools/lib.sh interop
[ -f data/fortunes.bin ] || fail "data/fortunes is missing (make data)"
[ -x "$bin/moe-generate" ] || fail "$bin/moe-generate is missing"
py=/usr/bin/python3
yarn='s/model: {preset: tiny}/model: {preset: tiny, rope_scaling: {type: yarn, factor: 4, original_max_position_embeddings: 32, mscale: 0.707, mscale_all_dim: 0.707}}/'
job "$work/plain.yaml" "world_size: 1, expert_parallel: 1"
job "$work/yarn.yaml" "world_size: 1, expert_parallel: 1" "$yarn"
grep -q "original_max_position_embeddings: 32" "$work/yarn.yaml" || fail "the YaRN job was not made"

loss() { sed -n 's/^eval loss: \([^ ]*\) .*/\1/p' "$1"; }
for run in plain yarn; do
  "$bin/moe-train" --config "$work/$run.yaml" --steps 2 --checkpoint-dir "$work/$run.ck" 2>"$work/$run.train.log" ||
    { tail -20 "$work/$run.train.log"; fail "training $run"; }
  ck=$work/$run.ck hf=$work/$run.hf
  # 1. One scoring path.
  "$bin/moe-eval" --checkpoint "$ck" --data data/fortunes --split all --batches 2 --batch-size 4 \
    --dump-tokens "$work/$run.npy" >"$work/$run.data.txt" 2>"$work/$run.data.err" || { cat "$work/$run.data.err"; fail "$run: moe-eval --data"; }
  "$bin/moe-eval" --checkpoint "$ck" --tokens "$work/$run.npy" --batch-size 4 >"$work/$run.tok.txt" 2>&1 ||
    { cat "$work/$run.tok.txt"; fail "$run: moe-eval --tokens"; }
  "$bin/moe-export" --checkpoint "$ck" --output "$hf" --dtype fp32 2>"$work/$run.export.log" || { cat "$work/$run.export.log"; fail "$run: moe-export"; }
  "$bin/moe-eval" --hf "$hf" --tokens "$work/$run.npy" --batch-size 4 >"$work/$run.hf.txt" 2>&1 ||
    { cat "$work/$run.hf.txt"; fail "$run: moe-eval --hf DIR --tokens t.npy"; }
  d=$(loss "$work/$run.data.txt") t=$(loss "$work/$run.tok.txt") h=$(loss "$work/$run.hf.txt")
  [ -n "$d" ] && [ "$d" = "$t" ] && [ "$d" = "$h" ] ||
    fail "$run: --data scores $d, --tokens of the same sequences $t, --hf --tokens $h (want one loss)"
  echo "$run: --data, --tokens and --hf --tokens of 8 x 65 tokens: eval loss $d, bit for bit"
  # 2. The directory stands on its own.
  "$bin/moe-export" --checkpoint "$ck" --output "$hf-bf16" 2>/dev/null || fail "$run: moe-export bf16"
  cmp -s "$hf/tokenizer.model" data/fortunes.tokenizer.model || fail "$run: tokenizer.model is not the run's"
  "$py" - "$hf" "$run" <<'PY' || fail "$run: the export's files"
import json, os, sys
hf, run = sys.argv[1], sys.argv[2]
for f in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json", "generation_config.json"):
    assert os.path.isfile(os.path.join(hf, f)), f"no {f}"
c = json.load(open(os.path.join(hf, "config.json")))
assert (c["bos_token_id"], c["eos_token_id"]) == (1, 2), (c["bos_token_id"], c["eos_token_id"])
assert c["torch_dtype"] == "float32", c["torch_dtype"]
assert json.load(open(hf + "-bf16/config.json"))["torch_dtype"] == "bfloat16"
for k, v in {"rope_interleave": True, "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
             "n_group": 4, "topk_group": 2, "num_nextn_predict_layers": 1, "routed_scaling_factor": 1}.items():
    assert c[k] == v, f"{k}: {c[k]!r}, want {v!r}"
if run == "plain":
    assert c["rope_scaling"] is None, c["rope_scaling"]
else:
    y = c["rope_scaling"]
    want = {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32, "mscale": 0.707, "mscale_all_dim": 0.707}
    assert all(y[k] == v for k, v in want.items()), y
    assert c["max_position_embeddings"] == 64, c["max_position_embeddings"]
t = json.load(open(os.path.join(hf, "tokenizer_config.json")))
assert t["tokenizer_class"] == "LlamaTokenizer" and t["bos_token"] == "<s>" and t["eos_token"] == "</s>", t
g = json.load(open(os.path.join(hf, "generation_config.json")))
assert (g["bos_token_id"], g["eos_token_id"]) == (1, 2), g
print(f"{run}: config.json, weights, tokenizer.model, tokenizer_config.json, generation_config.json; "
      f"rope_scaling {c['rope_scaling']}")
PY
  # 3. The round trip.
  "$bin/moe-export" --hf "$hf" --output "$hf-again" 2>/dev/null || fail "$run: moe-export --hf"
  for f in "$hf"/*; do cmp -s "$f" "$hf-again/$(basename "$f")" || fail "$run: $(basename "$f") differs after export -> read -> export"; done
  [ "$(ls "$hf")" = "$(ls "$hf-again")" ] || fail "$run: the round trip wrote other files"
  echo "$run: export -> read back -> export gives the same $(ls "$hf" | wc -l) files, byte for byte"
  # 5. Sampling.
  gen() { "$bin/moe-generate" "$@" 2>>"$work/gen.err"; }
  a=$(gen --checkpoint "$ck" --prompt "The " --seed 3 --max-tokens 24) || { cat "$work/gen.err"; fail "$run: moe-generate"; }
  b=$(gen --checkpoint "$ck" --prompt "The " --seed 3 --max-tokens 24) || fail "$run: moe-generate again"
  [ "$a" = "$b" ] || fail "$run: the same seed gave '$a' and '$b'"
  grep -q "tokens/s (cpu, fp32, latent KV cache)" "$work/gen.err" || { cat "$work/gen.err"; fail "$run: no tokens/s line"; }
  g1=$(gen --checkpoint "$ck" --prompt "The " --temperature 0 --ignore-eos --max-tokens 40) || fail "$run: greedy"
  g2=$(gen --checkpoint "$ck" --prompt "The " --temperature 0 --ignore-eos --max-tokens 40 --no-cache) || fail "$run: greedy --no-cache"
  g3=$(gen --hf "$hf" --prompt "The " --temperature 0 --ignore-eos --max-tokens 40) || fail "$run: greedy --hf"
  [ "$g1" = "$g2" ] || fail "$run: greedy with the cache '$g1', recomputing '$g2'"
  [ "$g1" = "$g3" ] || fail "$run: greedy from the checkpoint '$g1', from the export '$g3'"
  echo "$run: moe-generate: seeded samples repeat; greedy (42 positions, past the original 32) is the same with the cache, without, and from the export"
done

# 4. Unsupported conventions, by name.
cp -r "$work/plain.hf" "$work/bad.hf"
sed -i 's/"rope_interleave": true/"rope_interleave": false/' "$work/bad.hf/config.json"
set +e
out=$("$bin/moe-eval" --hf "$work/bad.hf" --tokens "$work/plain.npy" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "config.json: rope_interleave is false" <<<"$out" || fail "rope_interleave false: rc $rc: $out"
sed -i 's/"rope_interleave": false/"rope_interleave": true/; s/"rope_scaling": null/"rope_scaling": {"type": "linear", "factor": 2}/' "$work/bad.hf/config.json"
set +e
out=$("$bin/moe-generate" --hf "$work/bad.hf" --prompt x 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "rope_scaling.type is linear" <<<"$out" || fail "linear rope_scaling: rc $rc: $out"
echo "unsupported conventions (rope_interleave false, linear rope_scaling) are refused by name"
# 6. moe-prep --split on a corpus of three documents, the last one short: the split is by documents,
#    so the valid range's share of the tokens is far from its weight, and it says so.
mkdir "$work/corpus"
"$py" - "$work/corpus/three" <<'PY'
import sys
long = " ".join(f"word{i % 50} and more" for i in range(400))
open(sys.argv[1], "w").write(f"{long}\n%\n{long}\n%\nA short one.\n")
PY
"$bin/moe-prep" --input "$work/corpus" --output "$work/three" --tokenizer data/fortunes.tokenizer.model \
  --split 67,33,0 >"$work/split.txt" 2>"$work/split.err" || { cat "$work/split.err"; fail "moe-prep --split"; }
grep -q "the split is by documents" "$work/split.txt" && grep -Eq "note: valid holds [0-9.]+ % of the tokens for a weight of 33.0 %" "$work/split.txt" ||
  { cat "$work/split.txt"; fail "moe-prep --split does not say that it split by documents"; }
echo "moe-prep --split: $(grep 'note:' "$work/split.txt" | sed 's/^ *//')"
echo "model interop: one scoring path, a self-contained export that round-trips, sampling with a cache"
