#!/usr/bin/env bash
# tests/gpu/perf.sh on the CPU stand-in (its --rehearsal): the table has every row the GPU
# measurement names (the slice's steps, engine and PyTorch, its phase rows, launches and host syncs
# per step, attention, the MoE layer in bf16 and FP8, the grouped GEMM, transformers' logits), each
# step's row, and $OUT holds perf.log and results.json alone (the device tool brings back 8 files);
# a budget too small for it cuts a step and still writes both.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MOE_BUILD_DIR:-build}
work=$(mktemp -d /tmp/moe-gpu-perf.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
two_files() {  # two_files <dir>: perf.log and results.json, nothing else
  local n
  n=$(find "$1" -type f | wc -l)
  [ "$n" -le 2 ] && [ -f "$1/perf.log" ] && [ -f "$1/results.json" ] ||
    fail "$1 holds $n files: $(ls -A "$1" | tr '\n' ' ') (expected perf.log and results.json)"
}
OUT=$work/full tests/gpu/perf.sh --rehearsal --budget 500 --build-dir "$build" >"$work/full.txt" 2>&1 ||
  fail "the rehearsal failed: $(tail -30 "$work/full.txt")"
two_files "$work/full"
for row in 'slice step bf16_forced: ms' 'slice step bf16_learned: ms' 'slice step fp8_forced: ms' \
           'slice step pytorch: ms' '| phase:attention fwd (bf16 forced)' '| phase:experts bwd (bf16 forced)' \
           'launches per step' 'host syncs per step' 'attention MLA' 'moe layer bf16' 'moe layer fp8' \
           'grouped gemm, 128 rows' 'grouped gemm, skewed rows/expert, TFLOP/s: engine loop' \
           'grouped gemm, skewed rows/expert, TFLOP/s: torch.mm loop' 'transformers logits' 'ceiling: bf16 GEMM 8192^3'; do
  grep -qF -- "$row" "$work/full.txt" || fail "the table has no '$row' row: $(grep '^|' "$work/full.txt" | head -60)"
done
# Every engine slice step ran (the rehearsal's toy sizes on the CPU), and the phase rows add up.
for k in bf16_forced bf16_learned fp8_forced; do
  grep -q "^RESULT slice_${k}_tflops [0-9]" "$work/full/perf.log" || fail "no TFLOP/s for the $k slice step"
done
python3 - "$work/full/perf.log" <<'PY' || fail "the phase rows do not add up to the step"
import re, sys
text = open(sys.argv[1]).read()
step = float(re.search(r"^RESULT slice_bf16_forced_step_ms ([0-9.]+)", text, re.M).group(1))
phases = [float(v) for v in re.findall(r"^RESULT slice_bf16_forced_phase:\S+ ([0-9.]+) ms", text, re.M)]
assert len(phases) >= 10, phases
# The median step and the mean of the phases: equal when the steps are alike; within 25 % on a toy
# CPU run beside other tests.
assert abs(sum(phases) - step) <= 0.25 * step, (sum(phases), step)
print(f"{len(phases)} phases sum to {sum(phases):.2f} ms; the median step {step:.2f} ms")
PY
grep -q '^RESULT torch_slice_step_ms [0-9]' "$work/full/perf.log" || fail "the PyTorch slice did not run"
# The grouped GEMM's skewed split on both sides: the engine's and PyTorch's loop (its rows say the split).
grep -qE '^RESULT grouped_gemm_skewed_rows_grouped_tflops [0-9]' "$work/full/perf.log" || fail "no skewed grouped GEMM row"
grep -qE '^RESULT torch_grouped_gemm_skewed_rows_loop_tflops [0-9.]+  \(512 rows over 32 experts, 3-138 each\)' \
  "$work/full/perf.log" || fail "PyTorch's grouped GEMM did not run the skewed split: $(grep torch_grouped "$work/full/perf.log")"
grep -q '^RESULT slice_bf16_forced_launches_per_step unavailable (not counted on the CPU: CUPTI' "$work/full/perf.log" ||
  fail "the traced step's row does not say why the CPU has no launch count"
grep -q '^RESULT moe_layer_fp8_tflops [0-9]' "$work/full/perf.log" || fail "the FP8 MoE layer did not run"
# transformers' check up to transformers (Debian has none): tiny trained, exported, scored by moe-eval.
grep -q "^moe-eval: wrote .*ours.npy (float32 \[2, 63, " "$work/full/perf.log" || fail "moe-eval did not score the exported tiny"
grep -q '^RESULT transformers_logits_rel_err ' "$work/full/perf.log" || fail "no transformers row"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["steps"]) >= 8, d["steps"]' \
  "$work/full/results.json" || fail "results.json lists too few steps"
# A budget too small (12 s, 10 of them the table's reserve): the steps it cannot hold are cut or
# skipped, and the table and the JSON are written all the same.
set +e; OUT=$work/cut tests/gpu/perf.sh --rehearsal --budget 12 --build-dir "$build" >"$work/cut.txt" 2>&1; set -e
grep -q "== GPU perf table" "$work/cut.txt" || fail "no table when the budget ran out: $(tail -10 "$work/cut.txt")"
grep -qE "cut by its budget|skipped: no budget left" "$work/cut.txt" || fail "nothing was cut by a budget of 12 s"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["steps"]) >= 8, d["steps"]' \
  "$work/cut/results.json" || fail "the cut run's results.json lists too few steps"
two_files "$work/cut"
echo "gpu perf rehearsal: every row ($(grep -c '^| ' "$work/full.txt") table lines), two files, and a 12 s budget cut it cleanly"
