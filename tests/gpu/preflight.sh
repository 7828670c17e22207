#!/usr/bin/env bash
# What the GPU check needs, found or not, before anything is built: the card and driver, the CUDA
# toolkit and its compilers, cuBLAS, cuDNN and NCCL (headers and libraries), CMake, Ninja, Python with
# PyTorch. Prints one line each; exits 1 only when nvcc, CMake or Ninja is missing (nothing can be
# built), so a GPU run goes on with what it has and the table says what was missing.
#   tests/gpu/preflight.sh [nvcc]
nvcc=${1:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda=$(dirname "$(dirname "$nvcc")")
fatal=0
say() { printf '%-14s %s\n' "$1" "$2"; }
if command -v nvidia-smi >/dev/null; then
  say "card" "$(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>&1 | head -1)"
  say "driver" "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>&1 | head -1)"
else
  say "card" "no nvidia-smi (no GPU driver here)"
fi
if [ -x "$nvcc" ]; then say "nvcc" "$("$nvcc" --version | tail -1)"; else say "nvcc" "MISSING ($nvcc)"; fatal=1; fi
say "host c++" "$(c++ --version 2>/dev/null | head -1 || echo MISSING)"
for tool in cmake ninja; do
  if command -v $tool >/dev/null; then say "$tool" "$($tool --version | head -1)"; else say "$tool" MISSING; fatal=1; fi
done
wheels=${MOE_CUDA_LIB_DIRS-$("$(dirname "$0")/wheel_lib_dirs.sh")}
find_lib() {  # find_lib <header> <library stem>: where each was found (toolkit, system, Python wheel)
  local h l d
  h=$(ls "$cuda/include/$1" /usr/include/$1 /usr/include/x86_64-linux-gnu/$1 2>/dev/null | head -1)
  l=$(ls "$cuda"/lib64/$2.so* "$cuda"/lib/$2.so* /usr/lib/x86_64-linux-gnu/$2.so* /usr/lib/aarch64-linux-gnu/$2.so* 2>/dev/null | head -1)
  [ -n "$l" ] && l="$l (toolkit/system)"
  if [ -z "$l" ]; then
    l=$(ldconfig -p 2>/dev/null | grep -m1 " $2\.so" | sed 's/.*=> //')
    [ -n "$l" ] && l="$l (loader path)"
  fi
  if [ -z "$l" ]; then
    IFS=: read -ra ds <<<"$wheels"
    for d in "${ds[@]}"; do
      l=$(ls "$d"/$2.so* 2>/dev/null | head -1)
      [ -n "$l" ] && { l="$l (Python wheel, via MOE_CUDA_LIB_DIRS)"; break; }
    done
  fi
  say "${2#lib}" "header ${h:-MISSING}; library ${l:-MISSING}"
}
find_lib cublas_v2.h libcublas
find_lib cublasLt.h libcublasLt
find_lib nccl.h libnccl
find_lib cudnn.h libcudnn
say "wheel libs" "${wheels:-none (no Python NVIDIA wheels with cuBLAS)}"
say "sanitizer" "$(command -v compute-sanitizer || ls "$cuda/bin/compute-sanitizer" 2>/dev/null || echo 'none (the memcheck step is skipped)')"
say "python" "$(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
exit $fatal
