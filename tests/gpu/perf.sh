#!/usr/bin/env bash
# The GPU measurement: one prepared command that spends a short GPU lease on where the training step
# stands against the card and against PyTorch, in one run on one card (docs/benchmarks.md, "GPU"):
#   0. the environment: card, SM clock before and after, driver, CUDA, cuBLAS, cuDNN, NCCL and
#      PyTorch versions, the machine's uptime;
#   1. the engine's components and ceilings (moe-bench-gpu): the dense bf16 GEMM at 8192^3 and at
#      the experts' shape on random data, the grouped GEMM at 128, 512 and 4,096 rows per expert
#      and a skewed split,
#      FP8 at the experts' shape, the MoE layer at DeepSeek-V3 sizes, attention at S = 4096;
#   2. PyTorch's ceilings (bench/ceilings_torch.py): bf16 and FP8 GEMM at 8192^3, device copy
#      bandwidth; PyTorch's grouped GEMM at the engine's splits (bench/grouped_gemm_torch.py: a
#      torch.mm loop and torch._grouped_mm);
#   3. the DeepSeek-V3-width slice's training step (moe-bench-slice): bf16 with force-balanced
#      routing, bf16 with the learned router, FP8 with force-balanced routing; each the median of its
#      timed steps on the device, Megatron-counted TFLOP/s, MFU against the rate measured in step 1
#      and the card's datasheet, host syncs per step, and where its time goes (phase rows that add up
#      to the step);
#   4. the same slice in PyTorch (bench/slice_torch.py), written apart from the engine;
#   5. the MoE layer and attention in PyTorch (bench/moe_layer_torch.py);
#   6. transformers on our weights: `tiny` trained a few steps, exported by moe-export, loaded by
#      Hugging Face transformers as DeepseekV3ForCausalLM; its logits against moe-eval's
#      (bench/hf_logits.py);
#   7. prints the table: a row for every step, also one that failed or that its budget cut.
# $OUT (the device tool brings back at most 8 files from it), else <build-dir>/perf/, gets exactly
# two files: perf.log (every step's output under a '== step' header) and results.json (rewritten
# after every step, so a run killed even by SIGKILL leaves one). The script keeps to --budget
# (default 540 s: the device tool runs a command for at most 600); SIGTERM/SIGINT still write the
# table and the JSON (tests/gpu/steps.sh).
#
#   tests/gpu/perf.sh [--budget S] [--build-dir DIR] [--prebuilt BUNDLE] [--rehearsal]
# --prebuilt: the binaries of a bundle `make gpu-bundle` made (no build on the GPU's time); without
# it, those of --build-dir (default build-gpu/, tests/gpu/check.sh's build for this card).
# --rehearsal: the same script on a CPU machine (run in CI): the binaries of --build-dir (default
# build/) at toy sizes with the CPU standing in, the PyTorch programs on the CPU at toy sizes; the
# GPU-only rows say so. It passes when the machinery does; its figures mean nothing.
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/../.."
me=perf.sh budget=540
# shellcheck source=tests/gpu/args.sh
source tests/gpu/args.sh
# check.sh's build for this card (build-gpu), unless rehearsing on make build's tree.
build=${build:-$([ $rehearsal = 1 ] && echo build || echo build-gpu)}
bin=${prebuilt:+$prebuilt_bin}  # a bundle's binaries, unpacked by args.sh
bin=${bin:-$build/bin}
out=${OUT:-$build/perf}
mkdir -p "$out"
log=$out/perf.log
rm -f "$log" "$out/results.json"
: >"$log"
card="(no nvidia-smi)"
row_width=60
# The Python with PyTorch: python3, or Debian's where python3 (a pyenv shim, say) has none.
py=python3
python3 -c 'import torch' 2>/dev/null || { /usr/bin/python3 -c 'import torch' 2>/dev/null && py=/usr/bin/python3; }
# shellcheck source=tests/gpu/steps.sh
source tests/gpu/steps.sh

# The card's dense bf16 datasheet peak (TFLOP/s) by its name (nvidia-smi's, e.g. "NVIDIA H100 80GB
# HBM3"); empty when not known.
datasheet() {
  case "$1" in
    *H100*NVL*|*H200*NVL*) echo 835 ;;
    *H100*PCIe*|*H800*PCIe*) echo 756 ;;
    *H20) echo 148 ;;
    *GH200*|*H100*|*H200*|*H800*) echo 989 ;;
    *GB200*|*GB300*) echo 2500 ;;
    *B200*) echo 2250 ;;
    *A100*) echo 312 ;;
    *) echo "" ;;
  esac
}

environment() {
  echo "RESULT env_date $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "RESULT env_uptime $(cut -d' ' -f1 /proc/uptime) s since this machine started"
  echo "RESULT env_cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    echo "RESULT env_card $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
    echo "RESULT env_driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    echo "RESULT env_sm_clock_before $(nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader | head -1) (now, max)"
  else
    echo "RESULT env_card none (no nvidia-smi)"
  fi
  echo "RESULT env_cuda $({ nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version 2>/dev/null; } | tail -1)"
  "$bin/moe-train" --version 2>&1 | sed -n 's/^/RESULT env_moe_train /p' | head -8
  "$py" - <<'PY' 2>&1 || echo "RESULT env_pytorch none ($("$py" -c 'import torch' 2>&1 | tail -1))"
import torch
print("RESULT env_pytorch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
      "NCCL", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")
try:
    import transformers
    print("RESULT env_transformers", transformers.__version__)
except ImportError as e:
    print("RESULT env_transformers none", e)
PY
}
export -f environment
export bin py

echo "== $(date -u +%Y-%m-%dT%H:%MZ) tests/gpu/perf.sh --budget $budget$([ $rehearsal = 1 ] && echo ' --rehearsal')${prebuilt:+ --prebuilt $prebuilt}" | tee -a "$log"
command -v nvidia-smi >/dev/null && card=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
peak=$(datasheet "${card%%,*}")
write_json
cuda=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
MOE_CUDA_LIB_DIRS=${MOE_CUDA_LIB_DIRS-$(tests/gpu/wheel_lib_dirs.sh)}
export MOE_CUDA_LIB_DIRS
if [ -n "$prebuilt" ]; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda/lib64:$cuda/lib:$cuda/targets/x86_64-linux/lib${MOE_CUDA_LIB_DIRS:+:$MOE_CUDA_LIB_DIRS}
fi
# libcupti, which moe-bench-slice opens at run time for its traced step (bench/kernel_trace.h).
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cuda/extras/CUPTI/lib64
step "environment" 30 bash -c environment
for b in moe-bench-gpu moe-bench-slice moe-train moe-export moe-eval; do
  [ -x "$bin/$b" ] || echo "perf.sh: $bin/$b missing (a bundle of make gpu-bundle and --prebuilt, or tests/gpu/check.sh's build)" | tee -a "$log"
done

# 1-2. Ceilings and components: the engine's, then PyTorch's.
if [ $rehearsal = 1 ]; then
  step "engine: ceilings and components (rehearsal: toy sizes on the CPU)" 240 "$bin/moe-bench-gpu" --rehearse-cpu --small-steps 0
  step "PyTorch: ceilings (rehearsal: toy sizes on the CPU)" 60 "$py" bench/ceilings_torch.py --rehearse-cpu
  step "PyTorch: the grouped GEMM (rehearsal: toy sizes on the CPU)" 60 "$py" bench/grouped_gemm_torch.py --rehearse-cpu
else
  step "engine: ceilings and components" 150 "$bin/moe-bench-gpu" --small-steps 0
  step "PyTorch: ceilings" 60 "$py" bench/ceilings_torch.py
  step "PyTorch: the grouped GEMM" 60 "$py" bench/grouped_gemm_torch.py
fi
measured=$(get gemm_bf16_8192_tflops | cut -d' ' -f1)

# 3-4. The slice: the engine's bf16 step with forced balance and PyTorch's beside it first (the
# comparison this measurement exists for), then the engine's learned routing and FP8.
slice_args=(${measured:+--measured-tflops "$measured"} ${peak:+--datasheet-tflops "$peak"})
[ $rehearsal = 1 ] && slice_args+=(--rehearse-cpu)
engine_slice() {  # engine_slice <precision> <routing>
  step "slice step, engine, $1, $2 routing" 120 "$bin/moe-bench-slice" --precision "$1" --routing "$2" "${slice_args[@]}"
}
engine_slice bf16 forced
layers=$(get slice_bf16_forced_moe_layers) vocab=$(get slice_bf16_forced_vocab)  # the engine's layout
step "slice step, PyTorch, bf16, forced routing" 120 "$py" bench/slice_torch.py $([ $rehearsal = 1 ] && echo --rehearse-cpu) \
  ${layers:+--moe-layers "$layers"} ${vocab:+--vocab "$vocab"} ${peak:+--datasheet-tflops "$peak"} \
  ${measured:+--measured-tflops "$measured"}
engine_slice bf16 learned
engine_slice fp8 forced

# 5. The MoE layer and attention in PyTorch.
if [ $rehearsal = 1 ]; then
  skip "PyTorch: the MoE layer and attention at DeepSeek-V3 sizes" "rehearsal: DeepSeek-V3 sizes need a GPU"
else
  step "PyTorch: the MoE layer and attention at DeepSeek-V3 sizes" 120 "$py" bench/moe_layer_torch.py
fi
# 6. A real client of our weights: `tiny` trained a few steps here, exported by moe-export (fp32),
# loaded by transformers as DeepseekV3ForCausalLM; its logits against moe-eval's on the same tokens.
hf_logits() {
  local tmp dev steps
  tmp=$(mktemp -d /tmp/moe-hf-logits.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT  # (a bash -c of its own: also when its budget stops it)
  dev=$([ "$rehearsal" = 1 ] && echo cpu || echo cuda) steps=$([ "$rehearsal" = 1 ] && echo 3 || echo 20)
  printf '%s\n' "apiVersion: moe/v1" "kind: TrainingJob" "metadata: {name: hf-logits}" "spec:" \
    "  model: {preset: tiny}" "  parallelism: {world_size: 1, expert_parallel: 1}" \
    "  data: {source: synthetic, seq_length: 64, micro_batch_size: 4, global_batch_size: 4}" \
    "  training: {steps: $steps, seed: 7, log_interval: 100}" "  resources: {device: $dev}" >"$tmp/job.yaml"
  "$bin/moe-train" --config "$tmp/job.yaml" --nproc 1 --checkpoint-dir "$tmp/ck" >"$tmp/train.log" 2>&1 ||
    { tail -5 "$tmp/train.log"; return 1; }
  "$bin/moe-export" --checkpoint "$tmp/ck" --output "$tmp/hf" --dtype fp32 --no-tokenizer &&
    "$py" bench/hf_logits.py --hf "$tmp/hf" --make-tokens "$tmp/tokens.npy" &&
    "$bin/moe-eval" --hf "$tmp/hf" --tokens "$tmp/tokens.npy" --dump-logits "$tmp/ours.npy" --device cpu --precision fp32 &&
    "$py" bench/hf_logits.py --hf "$tmp/hf" --tokens "$tmp/tokens.npy" --ours "$tmp/ours.npy" \
      $([ "$rehearsal" = 1 ] && echo --rehearsal)
}
export -f hf_logits
export rehearsal
step "transformers logits on our exported weights" 120 bash -c hf_logits
command -v nvidia-smi >/dev/null &&
  note env_sm_clock_after "$(nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader | head -1) (now, max)"

table() {
  local k
  echo
  echo "== GPU perf table ($(date -u +%Y-%m-%d), $card$([ $rehearsal = 1 ] && echo ', REHEARSAL on the CPU stand-in: the figures mean nothing'))"
  echo "   FLOP convention: Megatron's (a GEMM 2mnk forward, twice that backward; causal attention half the square)."
  row "step" "status (seconds)"
  row "----" "----"
  for i in "${!names[@]}"; do row "${names[$i]}" "${statuses[$i]} (${secs[$i]} s)"; done
  row "environment: card; driver; CUDA" "$(get env_card); $(get env_driver); $(get env_cuda)"
  row "environment: PyTorch" "$(get env_pytorch)"
  row "environment: SM clock before; after" "$(get env_sm_clock_before); $(get env_sm_clock_after)"
  row "ceiling: bf16 GEMM 8192^3, engine; PyTorch" "$(get gemm_bf16_8192_tflops | cut -d' ' -f1); $(get torch_gemm_bf16_8192_tflops | cut -d' ' -f1) TFLOP/s"
  row "ceiling: FP8 GEMM 8192^3, PyTorch" "$(get torch_gemm_fp8_8192_tflops)"
  row "ceiling: device copy bandwidth, PyTorch" "$(get torch_copy_gbps)"
  row "ceiling: datasheet dense bf16" "${peak:-unknown for this card} TFLOP/s"
  for k in bf16_forced bf16_learned fp8_forced; do
    row "slice step $k: ms; TFLOP/s" "$(get slice_${k}_step_ms | cut -d' ' -f1); $(get slice_${k}_tflops | cut -d' ' -f1)"
    row "slice step $k: MFU measured; datasheet" "$(get slice_${k}_mfu_measured | cut -d' ' -f1); $(get slice_${k}_mfu_datasheet | cut -d' ' -f1)"
    row "slice step $k: expert imbalance; host syncs per step" "$(get slice_${k}_expert_imbalance | cut -d' ' -f1); $(get slice_${k}_host_syncs_per_step)"
  done
  row "slice step layout" "$(get slice_bf16_forced_layout)"
  row "slice step pytorch: ms; TFLOP/s; MFU measured" "$(get torch_slice_step_ms | cut -d' ' -f1); $(get torch_slice_tflops | cut -d' ' -f1); $(get torch_slice_mfu_measured)"
  row "slice step pytorch: how" "$(get torch_slice_how)"
  grep "^RESULT slice_bf16_forced_phase:" "$log" | sed 's/^RESULT slice_bf16_forced_//' | while read -r name rest; do
    row "${name//_/ } (bf16 forced)" "$rest"
  done
  row "phase rows over the step (device), bf16 forced" "$(get slice_bf16_forced_device_over_host | cut -d' ' -f1) of the host's step time"
  row "launches per step (bf16 forced; CUPTI)" "$(get slice_bf16_forced_launches_per_step)"
  row "kernel time over the step (bf16 forced)" "$(get slice_bf16_forced_kernel_time_over_step)"
  row "host-device bytes per step (bf16 forced)" "$(get slice_bf16_forced_host_device_bytes_per_step)"
  row "host syncs per step (bf16 forced)" "$(get slice_bf16_forced_host_syncs_per_step)"
  row "attention MLA S=4096 fwd+bwd: engine (cuDNN SDPA where it runs); our kernels; SDPA (backend)" "$(get attention_mla_tflops); $(get attention_mla_ours_tflops); $(get torch_sdpa_mla_tflops) ($(get torch_sdpa_mla_backend)) TFLOP/s"
  grep -E "^RESULT torch_sdpa_mla_[a-z]+_ms " "$log" | grep -v "_fwd_ms " | while read -r _ key rest; do
    k=${key#torch_sdpa_mla_}
    row "attention MLA S=4096 fwd+bwd, SDPA ${k%_ms} (ms)" "$rest"
  done
  row "moe layer bf16 fwd+bwd: engine; PyTorch" "$(get moe_layer_tflops); $(get torch_moe_layer_tflops) TFLOP/s (the engine over its dense rate: $(get moe_layer_of_dense))"
  row "moe layer bf16 fwd+bwd, forward GEMMs on CUTLASS: engine" "$(get moe_layer_cutlass_fwd_tflops)"
  row "moe layer fp8 fwd+bwd: engine; PyTorch" "$(get moe_layer_fp8_tflops); $(get torch_moe_layer_fp8_tflops) TFLOP/s (PyTorch's output vs its bf16 layer: $(get torch_moe_layer_fp8_rel_err | cut -d' ' -f1))"
  row "moe layer fp8: PyTorch's recipe" "$(get torch_moe_layer_fp8_how)"
  for per in 128 512 4096 skewed; do
    row "grouped gemm, $per rows/expert, TFLOP/s: engine loop; grouped" \
        "$(get grouped_gemm_${per}_rows_loop_tflops | cut -d' ' -f1); $(get grouped_gemm_${per}_rows_grouped_tflops | cut -d' ' -f1)"
    row "grouped gemm, $per rows/expert, TFLOP/s: engine CUTLASS, counts on the device" \
        "$(get grouped_gemm_${per}_rows_cutlass_tflops)"
    row "grouped gemm, $per rows/expert, TFLOP/s: torch.mm loop; _grouped_mm" \
        "$(get torch_grouped_gemm_${per}_rows_loop_tflops | cut -d' ' -f1); $(get torch_grouped_gemm_${per}_rows_grouped_mm_tflops)"
  done
  row "transformers logits vs moe-eval, relative error (goal 1e-4)" "$(get transformers_logits_rel_err)"
  echo "== total $((SECONDS - start)) s of a budget of $budget s; perf.log and results.json in $out"
}
finish
trap - EXIT
# A failed step fails the run; so does "no GPU here" from a step on a machine where nvidia-smi saw
# one (a build without CUDA, say: every engine row would be empty).
ok=1
for i in "${!names[@]}"; do
  case "${statuses[$i]}" in
    fail*) ok=0 ;;
    "no GPU here"*) [ $rehearsal = 0 ] && command -v nvidia-smi >/dev/null && ok=0 ;;
  esac
done
[ $ok = 1 ]
