#!/usr/bin/env bash
# The GPU check: the one command a session with a GPU runs (its device time is short, so nothing may
# be lost). On a machine with a GPU and the CUDA toolkit (no Debian -dev packages needed):
#   0. preflight: nvidia-smi, driver, toolkit, cuBLAS/cuDNN/NCCL headers and libraries (the toolkit's,
#      the loader's, or the Python environment's NVIDIA wheels', each saying which), compilers;
#   1. builds the engine, kernels, checks and benchmarks for this card's architecture only, warnings
#      kept but not errors (a newer host compiler warns on more; the count is in the table), or,
#      with --prebuilt DIR, takes the binaries of a bundle that `make gpu-bundle` made elsewhere and
#      skips the build (its row says so);
#   2. runs every CUDA kernel against its CPU reference, fp32 and bf16 (gpu_kernel_check);
#   3. trains `tiny` 50 steps on cuda (bf16 and fp32) and on cpu and compares the losses (gpu_train_check);
#   4. times the dense bf16 GEMM, the MoE layer at DeepSeek-V3 sizes, attention at S = 4096 and a
#      `small` step (moe-bench-gpu), and the same in plain PyTorch (bench/moe_layer_torch.py);
#   5. last, with what is left (at most 120 s), the kernel check under compute-sanitizer memcheck, so
#      a slow memcheck can cut nothing that decides pass or fail;
#   6. prints the table: a row for every step, also one that failed or that its budget cut.
# $OUT (the device tool brings back at most 8 files from it), else <build-dir>/check/, gets exactly two
# files whatever runs, fails or is retried: check.log (every step's output, in order, under a
# '== step' header) and results.json (steps, exits, seconds, every RESULT line; rewritten after every
# step, so a run killed even by SIGKILL leaves one). The script keeps to its budget (--budget,
# default 480 s): each step's time limit is what is left, less the table's reserve, and a step with
# no time left is skipped with a row. SIGTERM/SIGINT still write the table and the JSON.
#
#   tests/gpu/check.sh [--budget S] [--build-dir DIR] [--prebuilt BUNDLE] [--rehearsal]
# --rehearsal: the same script on a CPU machine (make gpu-check-rehearsal, run in CI): no build (the
# CUDA binaries of --build-dir, default build/, built by make build), the kernel check's harness with
# the CPU as its device and the CUDA kernels on the CPU emulator stand in for the kernel check, a
# 3-step cpu run for the training check; the GPU-only steps run and fail fast, or are skipped, each
# with its row. It passes when the machinery does.
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/../.."
me=check.sh budget=480
# shellcheck source=tests/gpu/args.sh
source tests/gpu/args.sh
[ -n "$build" ] || build=$([ $rehearsal = 1 ] && echo build || echo build-gpu)
bin=${prebuilt:+$prebuilt_bin}  # a bundle's binaries, unpacked by args.sh
bin=${bin:-$build/bin}
out=${OUT:-$build/check}
mkdir -p "$out"
log=$out/check.log
rm -f "$log" "$out/results.json" "$out"/[0-9][0-9]-*.log  # two files, whatever an older run left
: >"$log"
card="(no nvidia-smi)"
# shellcheck source=tests/gpu/steps.sh
source tests/gpu/steps.sh
table() {
  local kline tline t32line engine torch dense
  kline=$(grep -E "^(PASS|FAIL): .* kernel checks failed" "$log" | tail -1)
  tline=$(grep -E "^train cuda bf16" "$log" | tail -1)
  t32line=$(grep -E "^train cuda fp32" "$log" | tail -1)
  engine=$(get moe_layer_tflops); torch=$(get torch_moe_layer_tflops); dense=$(get gemm_bf16_expert_shape_tflops | cut -d' ' -f1)
  echo
  echo "== GPU check table ($(date -u +%Y-%m-%d), $card$([ $rehearsal = 1 ] && echo ', REHEARSAL on the CPU stand-in'))"
  row "step" "status (seconds)"
  row "----" "----"
  for i in "${!names[@]}"; do row "${names[$i]}" "${statuses[$i]} (${secs[$i]} s)"; done
  row "build warnings (kept, not errors)" "$(get build_warnings || true)"
  row "CUDA kernels vs CPU (fp32 1e-4, bf16 1e-2)" "${kline:-no result}"
  row "CUDA kernels on the CPU emulator" \
      "$(grep -E "^(PASS|FAIL): [0-9]+ (of [0-9]+ )?comparisons failed" "$log" | cut -c1-72 | paste -sd ';' -)"
  row "tiny 50 steps: cuda bf16 vs cpu fp32" "${tline:-no result}"
  row "tiny 50 steps: cuda fp32 vs cpu fp32" "${t32line:-no result}"
  row "cuBLAS bf16 GEMM 8192^3" "$(get gemm_bf16_8192_tflops) TFLOP/s"
  row "cuBLAS bf16 GEMM, expert shape (dense rate)" "${dense:-?} TFLOP/s"
  for per in 128 512 4096; do
    row "grouped GEMM, $per rows/expert: per expert; grouped; CUTLASS (device counts)" \
        "$(get grouped_gemm_${per}_rows_loop_tflops); $(get grouped_gemm_${per}_rows_grouped_tflops); $(get grouped_gemm_${per}_rows_cutlass_tflops)"
  done
  row "routing plan, top-8 of 256: device; host (us)" "$(get routing_plan_device_us); $(get routing_plan_host_us)"
  row "cuBLASLt FP8 GEMM, expert shape (with quantisation)" "$(get fp8_gemm_expert_shape_tflops)$(get fp8_gemm_expert_shape)"
  row "MoE layer fwd+bwd, DSV3 sizes, engine" "${engine:-?} TFLOP/s, $(get moe_layer_ms) ms"
  row "MoE layer fwd+bwd, DSV3 sizes, PyTorch ($(get torch_baseline))" "${torch:-?} TFLOP/s, $(get torch_moe_layer_ms) ms"
  if [ -n "$engine" ] && [ -n "$torch" ] && [ -n "$dense" ]; then
    row "engine / PyTorch (goal 1.3); engine / dense (goal 0.6)" \
        "$(awk -v a="$engine" -v b="$torch" -v d="$dense" 'BEGIN{printf "%.2f; %.2f", a/b, a/d}')"
  fi
  row "attention S=4096 MLA: engine (cuDNN where it runs), our kernels, SDPA (TFLOP/s, backend)" \
      "$(get attention_mla_tflops), $(get attention_mla_ours_tflops), $(get torch_sdpa_mla_tflops) ($(get torch_sdpa_mla_backend))"
  row "small step (bf16, $(get small_step_shape))" "$(get small_step_tflops) TFLOP/s, $(get small_step_ms) ms"
  echo "== total $((SECONDS - start)) s of a budget of $budget s; check.log and results.json in $out"
}
echo "== $(date -u +%Y-%m-%dT%H:%MZ) tests/gpu/check.sh --budget $budget$([ $rehearsal = 1 ] && echo ' --rehearsal')${prebuilt:+ --prebuilt $prebuilt}" | tee -a "$log"
command -v nvidia-smi >/dev/null && card=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
write_json
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda=$(dirname "$(dirname "$nvcc")")
# cuBLAS/cuBLASLt where the toolkit lacks them: the Python environment's NVIDIA wheels (the engine's
# loader looks in these folders after the toolkit's; preflight says where each was found).
MOE_CUDA_LIB_DIRS=${MOE_CUDA_LIB_DIRS-$(tests/gpu/wheel_lib_dirs.sh)}
export MOE_CUDA_LIB_DIRS
step "preflight" 30 tests/gpu/preflight.sh "$nvcc"

# 1. Build for this card only (the CI build covers sm_90, sm_100 and sm_103), or take a bundle.
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
build_for() {  # (run through bash -c: timeout runs programs, not functions)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
        ${cap:+-DCMAKE_CUDA_ARCHITECTURES=$cap} -DMOE_SERVICES=OFF -DMOE_TESTS=OFF -DMOE_BENCH=ON \
        -DMOE_WERROR=OFF ${MOE_CHECK_CMAKE_ARGS:-} &&
    cmake --build "$build" --target gpu_kernel_check gpu_train_check moe-bench-gpu moe-train \
      moe-bench-slice moe-export moe-eval  # and tests/gpu/perf.sh's
}
export -f build_for
export build nvcc cap
rehearse_build() {
  cmake --build "$build" --target moe-train gpu_kernel_check gpu_attention_emulated gpu_kernels_emulated
}
export -f rehearse_build
count_warnings() { note build_warnings "$(grep -cE '(warning:|warning #)' "$steplog")"; }
if [ -n "$prebuilt" ]; then
  # The bundle's binaries must find libcudart here, whatever the toolkit's layout (their RUNPATH is
  # the building machine's): the toolkit's folders, then the Python wheels' as a last resort.
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda/lib64:$cuda/lib:$cuda/targets/x86_64-linux/lib${MOE_CUDA_LIB_DIRS:+:$MOE_CUDA_LIB_DIRS}
  skip "build for this card" "prebuilt bundle $prebuilt ($(grep -m1 '^commit' "$prebuilt/MANIFEST"), $(grep -m1 '^arch' "$prebuilt/MANIFEST"))"
  step "prebuilt bundle: its libraries resolve here" 20 tests/gpu/bundle.sh --verify "$prebuilt"
elif [ $rehearsal = 1 ]; then  # the same mechanism on the tree make build made (up to date: seconds)
  step "build (rehearsal: brings $build/ up to date)" 300 bash -c 'rehearse_build'
  count_warnings
else
  step "build for this card (arch ${cap:-default}, warnings not errors)" 420 bash -c 'build_for'
  count_warnings
fi

# 2. Kernels against their CPU references.
if [ $rehearsal = 1 ]; then
  step "CUDA kernels on the CPU emulator (stand-in)" 300 "$build/bin/gpu_kernels_emulated" kernels/cuda
  step "CUDA attention kernels on the CPU emulator (stand-in)" 200 "$build/bin/gpu_attention_emulated"
  step "kernel check harness with the CPU as the device (stand-in)" 60 env MOE_GPU_CHECK_DEVICE=cpu "$bin/gpu_kernel_check"
  step "kernels against their CPU references (needs a GPU)" 30 "$bin/gpu_kernel_check"
else
  step "kernels against their CPU references" 120 "$bin/gpu_kernel_check"
fi

# 3. Training, cuda against cpu.
if [ $rehearsal = 1 ]; then
  step "tiny, 3 steps on cpu (stand-in for the cuda comparison)" 120 "$bin/moe-train" --config examples/tiny.yaml \
       --steps 3 --nproc 1 --expert-parallel 1
else
  step "tiny, 50 steps, cuda vs cpu" 240 "$bin/gpu_train_check"
fi

# 4. Benchmarks: ours, then plain PyTorch.
step "benchmarks: GEMM, MoE layer at DeepSeek-V3 sizes, attention, small step" 240 "$bin/moe-bench-gpu"
if [ $rehearsal = 1 ]; then
  skip "the same MoE layer and attention in plain PyTorch" "rehearsal: DeepSeek-V3 sizes need a GPU"
else
  step "the same MoE layer and attention in plain PyTorch" 180 python3 bench/moe_layer_torch.py
fi

# 5. Memcheck last, with what is left (at most 120 s): nothing that decides pass or fail comes after.
sanitizer=$(command -v compute-sanitizer || ls "$cuda/bin/compute-sanitizer" 2>/dev/null || true)
if [ -z "$sanitizer" ]; then
  skip "compute-sanitizer memcheck of the kernel check (last)" "no compute-sanitizer in this toolkit"
elif [ $rehearsal = 1 ]; then
  skip "compute-sanitizer memcheck of the kernel check (last)" "rehearsal: no GPU"
else
  step "compute-sanitizer memcheck of the kernel check (last)" 120 "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/gpu_kernel_check"
fi

finish
trap - EXIT
ok=1
for i in "${!names[@]}"; do
  case "${names[$i]}" in
    "kernels against their CPU references"|"tiny, 50 steps, cuda vs cpu") [ "${exits[$i]}" = 0 ] || ok=0 ;;
    "CUDA"*"on the CPU emulator (stand-in)"|"kernel check harness"*|"tiny, 3 steps on cpu"*) [ "${exits[$i]}" = 0 ] || ok=0 ;;
    "prebuilt bundle"*) [ "${exits[$i]}" = 0 ] || ok=0 ;;
  esac
done
[ $ok = 1 ]
