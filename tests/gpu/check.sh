#!/usr/bin/env bash
# The GPU check: the one command a session with a GPU runs (its device time is short, so nothing may
# be lost). On a machine with a GPU and the CUDA toolkit (no Debian -dev packages needed):
#   0. preflight: nvidia-smi, driver, toolkit, cuBLAS/cuDNN/NCCL headers and libraries, compilers;
#   1. builds the engine, kernels, checks and benchmarks for this card's architecture only (a build
#      that fails only on a warning is retried without -Werror, and the row says so);
#   2. runs every CUDA kernel against its CPU reference, fp32 and bf16 (gpu_kernel_check), then the
#      same under compute-sanitizer memcheck where the tool exists;
#   3. trains `tiny` 50 steps on cuda (bf16 and fp32) and on cpu and compares the losses (gpu_train_check);
#   4. times the dense bf16 GEMM, the MoE layer at DeepSeek-V3 sizes, attention at S = 4096 and a
#      `small` step (moe-bench-gpu), and the same in plain PyTorch (bench/moe_layer_torch.py);
#   5. prints the table: a row for every step, also one that failed or that its budget cut.
# Every step's log and results.json (steps, exits, seconds, every RESULT line) go to $OUT when it is
# set (the device tool brings $OUT back), else to <build-dir>/check/. The script keeps to its budget
# (--budget, default 480 s): each step's time limit is what is left, less the table's reserve, and a
# step with no time left is skipped with a row. SIGTERM/SIGINT still write the table and the JSON.
#
#   tests/gpu/check.sh [--budget S] [--build-dir DIR] [--rehearsal]
# --rehearsal: the same script on a CPU machine (make gpu-check-rehearsal, run in CI): no build (the
# CUDA binaries of --build-dir, default build/, built by make build), the kernel check's harness with
# the CPU as its device and the CUDA attention kernels on the CPU emulator stand in for the kernel
# check, a 3-step cpu run for the training check; the GPU-only
# steps run and fail fast, or are skipped, each with its row. It passes when the machinery does.
set -uo pipefail
cd "$(dirname "$0")/../.."
budget=480 build="" rehearsal=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --rehearsal) rehearsal=1; shift ;;
    *) [ -z "$build" ] && [ "${1#-}" = "$1" ] && { build=$1; shift; continue; }
       echo "check.sh: unknown argument '$1' (--budget S, --build-dir DIR, --rehearsal)" >&2; exit 2 ;;
  esac
done
[[ $budget =~ ^[0-9]+$ ]] && [ "$budget" -ge 5 ] || { echo "check.sh: --budget: seconds >= 5, got '$budget'" >&2; exit 2; }
[ -n "$build" ] || build=$([ $rehearsal = 1 ] && echo build || echo build-gpu)
out=${OUT:-$build/check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
start=$SECONDS reserve=10
card="(no nvidia-smi)"
declare -a names=() statuses=() exits=() secs=()

left() { echo $(( budget - (SECONDS - start) - reserve )); }
# step <name> <limit s> <command...>: runs it under min(limit, what is left), output to the terminal
# and to $out/<n>-<slug>.log; records its row.
step() {
  local name=$1 limit=$2; shift 2
  local n=${#names[@]} slug t0=$SECONDS rc status
  slug=$(echo "$name" | tr -c 'a-zA-Z0-9' '-' | cut -c1-40)
  local logf="$out/$(printf %02d "$n")-$slug.log" avail
  avail=$(left)
  names+=("$name")
  if [ "$avail" -lt 2 ]; then
    statuses+=("skipped: no budget left"); exits+=(-1); secs+=(0)
    echo "== $name: skipped (no budget left)"
    return 124
  fi
  [ "$limit" -gt "$avail" ] && limit=$avail
  echo "== $name (limit ${limit} s)"
  # In the background and waited for: a SIGTERM to this script interrupts the wait at once (the trap
  # stops the step, then writes the table and the JSON).
  { timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$logf"; exit "${PIPESTATUS[0]}"; } &  # the log is whole when it ends
  child=$!
  wait "$child"
  rc=$?
  child=""
  case $rc in
    0) status=pass ;;
    77) status="no GPU here (exit 77)" ;;
    124|137) status="cut by its budget (${limit} s)" ;;
    *) status="fail (exit $rc)" ;;
  esac
  statuses+=("$status"); exits+=("$rc"); secs+=($((SECONDS - t0)))
  echo "== $name: $status in $((SECONDS - t0)) s"
  return "$rc"
}
skip() { names+=("$1"); statuses+=("skipped: $2"); exits+=(-1); secs+=(0); echo "== $1: skipped ($2)"; }

get() { cat "$out"/*.log 2>/dev/null | grep -m1 "^RESULT $1 " | cut -d' ' -f3-; }
row() { printf '| %-52s | %s |\n' "$1" "$2"; }
write_json() {
  python3 - "$out" "$card" "$budget" "$rehearsal" "$((SECONDS - start))" "${#names[@]}" \
      "${names[@]}" "${statuses[@]}" "${exits[@]}" "${secs[@]}" <<'PY' || echo "check.sh: results.json not written" >&2
import glob, json, os, sys
out, card, budget, rehearsal, total, n = sys.argv[1:7]
n = int(n); rest = sys.argv[7:]
names, statuses, exits, secs = rest[:n], rest[n:2*n], rest[2*n:3*n], rest[3*n:4*n]
results = {}
for path in sorted(glob.glob(os.path.join(out, "*.log"))):
    for line in open(path, errors="replace"):
        if line.startswith("RESULT "):
            parts = line.split(None, 2)
            if len(parts) == 3: results.setdefault(parts[1], parts[2].strip())
doc = {"card": card, "budget_s": int(budget), "rehearsal": rehearsal == "1", "total_s": int(total),
       "steps": [{"name": a, "status": b, "exit": int(c), "seconds": int(d)} for a, b, c, d in zip(names, statuses, exits, secs)],
       "results": results}
tmp = os.path.join(out, "results.json.tmp")
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, os.path.join(out, "results.json"))
PY
}
table() {
  local kline tline t32line engine torch dense
  kline=$(cat "$out"/*.log 2>/dev/null | grep -E "^(PASS|FAIL): .* kernel checks failed" | tail -1)
  tline=$(cat "$out"/*.log 2>/dev/null | grep -E "^train cuda bf16" | tail -1)
  t32line=$(cat "$out"/*.log 2>/dev/null | grep -E "^train cuda fp32" | tail -1)
  engine=$(get moe_layer_tflops); torch=$(get torch_moe_layer_tflops); dense=$(get gemm_bf16_expert_shape_tflops | cut -d' ' -f1)
  echo
  echo "== GPU check table ($(date -u +%Y-%m-%d), $card$([ $rehearsal = 1 ] && echo ', REHEARSAL on the CPU stand-in'))"
  row "step" "status (seconds)"
  row "----" "----"
  for i in "${!names[@]}"; do row "${names[$i]}" "${statuses[$i]} (${secs[$i]} s)"; done
  row "CUDA kernels vs CPU (fp32 1e-4, bf16 1e-2)" "${kline:-no result}"
  [ $rehearsal = 1 ] && row "CUDA attention kernels on the CPU emulator" \
      "$(cat "$out"/*.log 2>/dev/null | grep -E "^(PASS|FAIL): [0-9]+ comparisons failed" | tail -1)"
  row "tiny 50 steps: cuda bf16 vs cpu fp32" "${tline:-no result}"
  row "tiny 50 steps: cuda fp32 vs cpu fp32" "${t32line:-no result}"
  row "cuBLAS bf16 GEMM 8192^3" "$(get gemm_bf16_8192_tflops) TFLOP/s"
  row "cuBLAS bf16 GEMM, expert shape (dense rate)" "${dense:-?} TFLOP/s"
  for per in 128 512 4096; do
    row "grouped GEMM, $per rows/expert: per expert; grouped" \
        "$(get grouped_gemm_${per}_rows_loop_tflops); $(get grouped_gemm_${per}_rows_grouped_tflops)"
  done
  row "routing plan, top-8 of 256: device; host (us)" "$(get routing_plan_device_us); $(get routing_plan_host_us)"
  row "cuBLASLt FP8 GEMM, expert shape (with quantisation)" "$(get fp8_gemm_expert_shape_tflops)$(get fp8_gemm_expert_shape)"
  row "MoE layer fwd+bwd, DSV3 sizes, engine" "${engine:-?} TFLOP/s, $(get moe_layer_ms) ms"
  row "MoE layer fwd+bwd, DSV3 sizes, PyTorch ($(get torch_baseline))" "${torch:-?} TFLOP/s, $(get torch_moe_layer_ms) ms"
  if [ -n "$engine" ] && [ -n "$torch" ] && [ -n "$dense" ]; then
    row "engine / PyTorch (goal 1.3); engine / dense (goal 0.6)" \
        "$(awk -v a="$engine" -v b="$torch" -v d="$dense" 'BEGIN{printf "%.2f; %.2f", a/b, a/d}')"
  fi
  row "attention S=4096 MLA: engine, SDPA (TFLOP/s)" "$(get attention_mla_tflops), $(get torch_sdpa_mla_tflops)"
  row "small step (bf16, seq 2048 x 8)" "$(get small_step_tflops) TFLOP/s, $(get small_step_ms) ms"
  echo "== total $((SECONDS - start)) s of a budget of $budget s; logs and results.json in $out"
}
finished=0 child=""
finish() {
  [ $finished = 1 ] && return
  finished=1
  # A step the script was stopped in gets its row.
  while [ ${#statuses[@]} -lt ${#names[@]} ]; do statuses+=("interrupted (the check was stopped)"); exits+=(143); secs+=(0); done
  table
  write_json
}
on_signal() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  finish
  exit 143
}
trap on_signal TERM INT
trap finish EXIT

echo "== $(date -u +%Y-%m-%dT%H:%MZ) tests/gpu/check.sh --budget $budget$([ $rehearsal = 1 ] && echo ' --rehearsal')"
command -v nvidia-smi >/dev/null && card=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
step "preflight" 30 tests/gpu/preflight.sh "$nvcc"

# 1. Build for this card only (the CI build covers sm_90, sm_100 and sm_103).
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
build_for() {  # build_for <extra cmake flags...> (run through bash -c: timeout runs programs, not functions)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
        ${cap:+-DCMAKE_CUDA_ARCHITECTURES=$cap} -DMOE_SERVICES=OFF -DMOE_TESTS=OFF -DMOE_BENCH=ON \
        ${MOE_CHECK_CMAKE_ARGS:-} "$@" &&
    cmake --build "$build" --target gpu_kernel_check gpu_train_check moe-bench-gpu moe-train
}
export -f build_for
export build nvcc cap
rehearse_build() { cmake --build "$build" --target moe-train gpu_kernel_check gpu_attention_emulated; }
export -f rehearse_build
if [ $rehearsal = 1 ]; then  # the same mechanism on the tree make build made (up to date: seconds)
  step "build (rehearsal: brings $build/ up to date)" 300 bash -c 'rehearse_build'
elif ! step "build for this card (arch ${cap:-default})" 300 bash -c 'build_for "$@"' build_for; then
  # A build that failed only on warnings turned into errors is retried without -Werror, and says so.
  if grep -q "\[-Werror" "$out"/*build-for-this-card*.log && ! grep -E "error:" "$out"/*build-for-this-card*.log | grep -vq "\[-Werror"; then
    step "build again WITHOUT -Werror (the first failed on warnings only)" 300 bash -c 'build_for "$@"' build_for -DMOE_WERROR=OFF
  fi
fi

# 2. Kernels against their CPU references (and memcheck).
if [ $rehearsal = 1 ]; then
  step "CUDA attention kernels on the CPU emulator (stand-in)" 200 "$build/bin/gpu_attention_emulated"
  step "kernel check harness with the CPU as the device (stand-in)" 60 env MOE_GPU_CHECK_DEVICE=cpu "$build/bin/gpu_kernel_check"
  step "kernels against their CPU references (needs a GPU)" 30 "$build/bin/gpu_kernel_check"
else
  step "kernels against their CPU references" 120 "$build/bin/gpu_kernel_check"
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$sanitizer" ]; then
  skip "compute-sanitizer memcheck of the kernel check" "no compute-sanitizer in this toolkit"
elif [ $rehearsal = 1 ]; then
  skip "compute-sanitizer memcheck of the kernel check" "rehearsal: no GPU"
else
  step "compute-sanitizer memcheck of the kernel check" 150 "$sanitizer" --tool memcheck --error-exitcode 9 "$build/bin/gpu_kernel_check"
fi

# 3. Training, cuda against cpu.
if [ $rehearsal = 1 ]; then
  step "tiny, 3 steps on cpu (stand-in for the cuda comparison)" 120 "$build/bin/moe-train" --config examples/tiny.yaml \
       --steps 3 --nproc 1 --expert-parallel 1
else
  step "tiny, 50 steps, cuda vs cpu" 240 "$build/bin/gpu_train_check"
fi

# 4. Benchmarks: ours, then plain PyTorch.
step "benchmarks: GEMM, MoE layer at DeepSeek-V3 sizes, attention, small step" 240 "$build/bin/moe-bench-gpu"
if [ $rehearsal = 1 ]; then
  skip "the same MoE layer and attention in plain PyTorch" "rehearsal: DeepSeek-V3 sizes need a GPU"
else
  step "the same MoE layer and attention in plain PyTorch" 180 python3 bench/moe_layer_torch.py
fi

finish
trap - EXIT
ok=1
for i in "${!names[@]}"; do
  case "${names[$i]}" in
    "kernels against their CPU references"|"tiny, 50 steps, cuda vs cpu") [ "${exits[$i]}" = 0 ] || ok=0 ;;
    "CUDA attention kernels on the CPU emulator (stand-in)"|"kernel check harness"*|"tiny, 3 steps on cpu"*) [ "${exits[$i]}" = 0 ] || ok=0 ;;
  esac
done
[ $ok = 1 ]
