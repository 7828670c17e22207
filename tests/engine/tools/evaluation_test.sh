#!/usr/bin/env bash
# Evaluation: the validation split, validation during training, and moe-eval.
#  1. tiny with split "95,5,0", evaluated every 10 steps over 2 batches: the eval loss at W=1, at W=2
#     (EP 2) and at PP 2 x EP 2 (W=4) agree within 1e-6 relative (the MTP eval loss within 1e-5), and
#     it falls;
#  2. moe-eval --checkpoint on the W=1 run's final checkpoint prints that run's last eval loss, bitwise;
#  3. moe-eval --hf on the checkpoint's fp32 export prints it bitwise, on the bf16 export within bf16
#     rounding;
#  4. --tokens with --dump-logits: NumPy reads the logits of the scored positions back and recomputes
#     the printed loss;
#  5. moe-prep --split prints the split's documents and tokens; bad input is refused naming the field.
set -euo pipefail
bin=${MOE_BIN:?}
source tests/engine/tools/lib.sh eval
JOB_TEMPLATE=examples/fortunes-eval.yaml
every10="s/eval_interval: 50, eval_batches: 4/eval_interval: 10, eval_batches: 2/"
job "$work/w1.yaml" "world_size: 1, expert_parallel: 1" "$every10"
job "$work/w2.yaml" "world_size: 2, expert_parallel: 2" "$every10"
job "$work/pp.yaml" "world_size: 4, expert_parallel: 2, pipeline_parallel: 2" "$every10"
grep -q 'split: "95,5,0"' "$work/w1.yaml" || fail "examples/fortunes-eval.yaml has no validation split"

# 1. The same evaluation at three layouts.
"$bin/moe-train" --config "$work/w1.yaml" --steps 20 --checkpoint-dir "$work/ck" --metrics-out "$work/w1.jsonl" 2>"$work/w1.log" ||
  { tail -20 "$work/w1.log"; fail "W=1"; }
"$bin/moe-train" --config "$work/w2.yaml" --steps 20 --metrics-out "$work/w2.jsonl" 2>"$work/w2.log" || { tail -20 "$work/w2.log"; fail "W=2"; }
"$bin/moe-train" --config "$work/pp.yaml" --steps 20 --metrics-out "$work/pp.jsonl" 2>"$work/pp.log" || { tail -20 "$work/pp.log"; fail "PP2"; }
grep -q "validation after step 20: loss" "$work/w1.log" || fail "no validation line in the log"
last=$(python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ev = {n: {r["step"]: r for r in map(json.loads, open(f"{w}/{n}.jsonl")) if "eval_loss" in r} for n in ("w1", "w2", "pp")}
assert sorted(ev["w1"]) == [10, 20], f"evaluations at steps {sorted(ev['w1'])}, want 10 and 20"
for n in ("w2", "pp"):
    assert sorted(ev[n]) == [10, 20], f"{n}: evaluations at {sorted(ev[n])}"
    for s in (10, 20):
        # The layouts train to weights a hair apart (float reordering); the main loss agrees to 1e-6,
        # the MTP depth (one block on top of the whole model) to 1e-5.
        for key, tol in (("eval_loss", 1e-6), ("eval_mtp_loss", 1e-5)):
            a, b = ev["w1"][s][key], ev[n][s][key]
            assert abs(a - b) <= tol * abs(a), f"{n} step {s} {key}: {b} vs W=1 {a}"
r = ev["w1"]
assert r[20]["eval_loss"] < r[10]["eval_loss"], "the eval loss did not fall"
assert abs(r[20]["eval_ppl"] - 2.718281828459045 ** r[20]["eval_loss"]) < 1e-9 * r[20]["eval_ppl"]
print(f"layouts: W=1, W=2 (EP2) and PP2 x EP2 evaluate alike; eval loss {r[10]['eval_loss']:.4f} -> {r[20]['eval_loss']:.4f}", file=sys.stderr)
print(repr(r[20]["eval_loss"]))
PY
)

# 2. moe-eval on the checkpoint: the run's last eval loss, bitwise.
"$bin/moe-eval" --checkpoint "$work/ck" --data data/fortunes --split valid --batches 2 >"$work/eval.txt" 2>"$work/eval.err" ||
  { cat "$work/eval.err"; fail "moe-eval --checkpoint"; }
got=$(sed -n 's/^eval loss: \([^ ]*\) .*/\1/p' "$work/eval.txt")
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a == b else 1)" "$got" "$last" ||
  fail "moe-eval --checkpoint printed $got, the run's last eval loss is $last"
echo "moe-eval --checkpoint: $got, the run's last eval loss, bitwise"

# 3. Through the Hugging Face exports.
for dtype in fp32 bf16; do
  "$bin/moe-export" --checkpoint "$work/ck" --output "$work/hf-$dtype" --dtype $dtype 2>/dev/null || fail "moe-export $dtype"
  "$bin/moe-eval" --hf "$work/hf-$dtype" --job "$work/w1.yaml" --data data/fortunes --batches 2 >"$work/hf-$dtype.txt" 2>&1 ||
    { cat "$work/hf-$dtype.txt"; fail "moe-eval --hf $dtype"; }
done
python3 - "$last" "$work/hf-fp32.txt" "$work/hf-bf16.txt" <<'PY'
import re, sys
want = float(sys.argv[1])
got = {d: float(re.search(r"^eval loss: (\S+)", open(p).read(), re.M).group(1)) for d, p in (("fp32", sys.argv[2]), ("bf16", sys.argv[3]))}
assert got["fp32"] == want, f"the fp32 export evaluates to {got['fp32']}, want {want}"
rel = abs(got["bf16"] - want) / want
assert rel <= 2e-3, f"the bf16 export is {rel:.1e} off"
print(f"moe-eval --hf: fp32 export bitwise, bf16 export {rel:.1e} relative")
PY

# 4. Given tokens, and the logits.
/usr/bin/python3 -c "import numpy as np; np.save('$work/tok.npy', np.random.RandomState(0).randint(0, 2048, size=(3, 48)).astype(np.int64))"
"$bin/moe-eval" --checkpoint "$work/ck" --tokens "$work/tok.npy" --dump-logits "$work/logits.npy" >"$work/tok.txt" 2>&1 ||
  { cat "$work/tok.txt"; fail "moe-eval --tokens"; }
/usr/bin/python3 - "$work/logits.npy" "$work/tok.npy" "$work/tok.txt" <<'PY'
import re, sys
import numpy as np
l = np.load(sys.argv[1]).astype(np.float64); t = np.load(sys.argv[2])
assert l.shape == (3, 47, 2048), l.shape  # positions 0..46, each predicting the next token
z = l - l.max(-1, keepdims=True); lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
loss = -np.take_along_axis(lp, t[:, 1:, None], -1).mean()
printed = float(re.search(r"eval loss: (\S+)", open(sys.argv[3]).read()).group(1))
assert abs(loss - printed) <= 1e-5 * printed, f"NumPy {loss} vs printed {printed}"
print(f"--dump-logits: {l.shape} float32; NumPy's loss {loss:.6f} = the printed {printed:.6f}")
PY

# 5. The split, and bad input.
if [ -x "$bin/moe-prep" ]; then
  "$bin/moe-prep" --output data/fortunes --split 95,5,0 >"$work/split.txt" || fail "moe-prep --split"
  grep -Eq "^  valid documents [0-9]+-[0-9]+ \([1-9][0-9]*\), tokens" "$work/split.txt" || { cat "$work/split.txt"; fail "moe-prep --split output"; }
  echo "moe-prep --split: $(grep valid "$work/split.txt" | sed 's/^ *//')"
else
  echo "moe-prep not built (no SentencePiece): its --split is not checked here" >&2
fi
sed 's/split: "95,5,0"/split: "100,0,0"/' "$work/w1.yaml" >"$work/bad.yaml"
set +e
out=$("$bin/moe-train" --config "$work/bad.yaml" --steps 1 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "spec.training.eval_interval: evaluation needs a validation split" <<<"$out" || fail "no validation split: rc $rc: $out"
sed 's/split: "95,5,0"/split: "95,x"/' "$work/w1.yaml" >"$work/bad.yaml"
set +e
out=$("$bin/moe-train" --config "$work/bad.yaml" --steps 1 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "spec.data.split" <<<"$out" || fail "a malformed split: rc $rc: $out"
/usr/bin/python3 -c "import numpy as np; np.save('$work/big.npy', np.full((1, 8), 5000, dtype=np.int32))"
set +e
out=$("$bin/moe-eval" --checkpoint "$work/ck" --tokens "$work/big.npy" 2>&1); rc=$?
set -e
[ $rc -eq 2 ] && grep -q "outside the vocabulary" <<<"$out" || fail "out-of-vocabulary tokens: rc $rc: $out"
echo "bad input: a missing validation split, a malformed split and out-of-vocabulary tokens are refused"
echo "evaluation: layouts agree, moe-eval reproduces the run's eval loss from checkpoints, exports and tokens"
