#!/usr/bin/env bash
# The GPU check, in one go on a machine with a GPU and the CUDA toolkit (no Debian -dev packages
# needed: the engine, kernels, checks and benchmarks build with the toolkit, CMake and Ninja alone):
#   1. builds them for this card's architecture;
#   2. runs every CUDA kernel against its CPU reference, fp32 and bf16 (gpu_kernel_check);
#   3. trains `tiny` 50 steps on cuda (bf16 and fp32) and on cpu and compares the losses (gpu_train_check);
#   4. times the dense bf16 GEMM rate, the MoE layer at DeepSeek-V3 expert sizes, flash attention at
#      S = 4096 (MLA and MHA head sizes) and a `small` step (moe-bench-gpu), and the same MoE layer and
#      PyTorch's scaled_dot_product_attention in plain PyTorch (bench/moe_layer_torch.py);
#   5. prints a table last. Meant to finish in under 8 minutes on an H200.
#   tests/gpu/check.sh [build-dir]        (exit 0 when every kernel and the training comparison pass)
# MOE_CHECK_CMAKE_ARGS adds configure flags (a rehearsal here: "-DMOE_BLAS=OFF
# -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON" builds as the bare GPU machine does).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
start=$SECONDS
log=$(mktemp /tmp/moe-gpu-check.XXXXXX)
echo "== $(date -u +%Y-%m-%dT%H:%MZ) tests/gpu/check.sh"
card="(no nvidia-smi)"
if command -v nvidia-smi >/dev/null; then
  card=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
  echo "== card: $card"
fi
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
echo "== $("$nvcc" --version | tail -1)"
# This card's architecture only (the CI build covers sm_90, sm_100 and sm_103): a faster build.
arch=""
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$cap" ] && arch="-DCMAKE_CUDA_ARCHITECTURES=$cap"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" $arch \
      -DMOE_SERVICES=OFF -DMOE_TESTS=OFF -DMOE_BENCH=ON ${MOE_CHECK_CMAKE_ARGS:-} >"$build.configure.log" 2>&1 \
  || { tail -40 "$build.configure.log"; exit 1; }
cmake --build "$build" --target gpu_kernel_check gpu_train_check moe-bench-gpu moe-train >"$build.build.log" 2>&1 \
  || { grep -E "error|FAILED" "$build.build.log" | head -40; exit 1; }
echo "== built in $((SECONDS - start)) s (arch ${cap:-default})"

run() {  # run <name> <timeout s> <command...>: output to the terminal and the log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc in $((SECONDS - t0)) s"
  return "$rc"
}
run "kernels against their CPU references" 120 "$build/bin/gpu_kernel_check"; kernels_rc=$?
run "tiny, 50 steps, cuda vs cpu" 240 "$build/bin/gpu_train_check"; train_rc=$?
run "benchmarks: dense bf16 GEMM, MoE layer at DeepSeek-V3 sizes, small step" 240 "$build/bin/moe-bench-gpu"; bench_rc=$?
run "the same MoE layer and attention in plain PyTorch" 180 python3 bench/moe_layer_torch.py; torch_rc=$?

get() { grep -m1 "^RESULT $1 " "$log" | cut -d' ' -f3-; }
kline=$(grep -E "^(PASS|FAIL): .* kernel checks failed" "$log" | tail -1)
tline=$(grep -E "^train cuda bf16" "$log" | tail -1)
t32line=$(grep -E "^train cuda fp32" "$log" | tail -1)
engine=$(get moe_layer_tflops); torch=$(get torch_moe_layer_tflops); dense=$(get gemm_bf16_expert_shape_tflops | cut -d' ' -f1)
vs_torch="n/a"; vs_dense="n/a"; goals="n/a"
if [ -n "$engine" ] && [ -n "$torch" ]; then vs_torch=$(awk -v a="$engine" -v b="$torch" 'BEGIN{printf "%.2f", a/b}'); fi
if [ -n "$engine" ] && [ -n "$dense" ]; then vs_dense=$(awk -v a="$engine" -v b="$dense" 'BEGIN{printf "%.2f", a/b}'); fi
if [ "$vs_torch" != n/a ] && [ "$vs_dense" != n/a ]; then
  goals=$(awk -v t="$vs_torch" -v d="$vs_dense" 'BEGIN{printf "%s 1.5x PyTorch, %s 60%% of dense", (t>=1.5?"meets":"misses"), (d>=0.6?"meets":"misses")}')
fi
# Attention: the engine's TFLOP/s over SDPA's (goal: within 1.5x of its time, a ratio of 0.67 or more).
attn_row() {  # attn_row <mla|mha>
  local e s r="n/a"
  e=$(get "attention_$1_tflops"); s=$(get "torch_sdpa_$1_tflops")
  if [ -n "$e" ] && [ -n "$s" ] && [ "$s" != "n/a" ]; then
    r=$(awk -v a="$e" -v b="$s" 'BEGIN{printf "%.2f (%s 0.67)", a/b, (a/b>=0.67?"meets":"misses")}')
  fi
  echo "engine ${e:-?} TFLOP/s ($(get "attention_$1_ms" | cut -d' ' -f1) ms), SDPA $(get "torch_sdpa_$1_backend") ${s:-?} TFLOP/s ($(get "torch_sdpa_$1_ms" | cut -d' ' -f1) ms); engine/SDPA $r"
}
echo
echo "== GPU check table ($(date -u +%Y-%m-%d), $card)"
printf '| %-52s | %s |\n' "check" "result"
printf '| %-52s | %s |\n' "----" "----"
printf '| %-52s | %s |\n' "CUDA kernels vs CPU (fp32 1e-4, bf16 1e-2)" "${kline:-no result (exit $kernels_rc)}"
printf '| %-52s | %s |\n' "tiny 50 steps: cuda bf16 vs cpu fp32" "${tline:-no result (exit $train_rc)}"
printf '| %-52s | %s |\n' "tiny 50 steps: cuda fp32 vs cpu fp32" "${t32line:-no result (exit $train_rc)}"
printf '| %-52s | %s |\n' "cuBLAS bf16 GEMM 8192^3" "$(get gemm_bf16_8192_tflops) TFLOP/s"
printf '| %-52s | %s |\n' "cuBLAS bf16 GEMM, expert shape (dense rate)" "${dense:-?} TFLOP/s"
printf '| %-52s | %s |\n' "MoE layer fwd+bwd, DSV3 sizes, engine" "${engine:-? (exit $bench_rc)} TFLOP/s, $(get moe_layer_ms) ms, load max/mean $(get moe_layer_load_max_over_mean)"
printf '| %-52s | %s |\n' "MoE layer fwd+bwd, DSV3 sizes, plain PyTorch" "${torch:-? (exit $torch_rc)} TFLOP/s, $(get torch_moe_layer_ms) ms (torch $(get torch_version))"
printf '| %-52s | %s |\n' "engine / PyTorch; engine / dense rate" "$vs_torch; $vs_dense ($goals)"
printf '| %-52s | %s |\n' "attention fwd+bwd S=4096, 128 heads, MLA 192/128" "$(attn_row mla)"
printf '| %-52s | %s |\n' "attention fwd+bwd S=4096, 128 heads, MHA 128/128" "$(attn_row mha)"
printf '| %-52s | %s |\n' "small step (bf16, seq 2048 x 8)" "$(get small_step_tflops) TFLOP/s, $(get small_step_ms) ms, MFU $(get small_step_mfu) of the 8192^3 rate"
echo "== total $((SECONDS - start)) s"
rm -f "$log"
[ "$kernels_rc" = 0 ] && [ "$train_rc" = 0 ]
