#!/usr/bin/env bash
# make gpu-bundle: the binaries the GPU check and the GPU measurement need (gpu_kernel_check,
# gpu_train_check, moe-bench-gpu, moe-bench-slice, moe-train, moe-export, moe-eval), built here with
# the CUDA toolkit alone for one architecture (sm_90: H100/H200), into a folder that travels with
# the working tree to a GPU machine (ignored by git, under 64 MiB: the binaries gzipped), so that `tests/gpu/check.sh
# --prebuilt DIR` and `tests/gpu/perf.sh --prebuilt DIR` spend the GPU's minutes on measuring, not
# on nvcc.
# The binaries need only what a CUDA image has: glibc, libgomp, and libcudart/libcublas from the
# toolkit (libstdc++ and libgcc are linked in; no OpenBLAS, Gloo, NCCL or other -dev package).
#   tests/gpu/bundle.sh [--arch 90] [--build-dir build-gpu-bundle] [--out gpu-bundle]
#   tests/gpu/bundle.sh --pack BUILD_DIR OUT     the packing step alone (the rehearsal's stand-in)
#   tests/gpu/bundle.sh --verify BUNDLE          every library of every binary resolves here
#   tests/gpu/bundle.sh --unpack BUNDLE          its binaries unpacked outside it (they travel gzipped,
#                                                a third of their size); prints their folder
#                                                (check.sh and perf.sh --prebuilt run from there)
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=(gpu_kernel_check gpu_train_check moe-bench-gpu moe-bench-slice moe-train moe-export moe-eval)
limit_kb=$((64 * 1024))

pack() {  # pack <build dir> <out>
  local from=$1 to=$2 b
  rm -rf "$to"
  mkdir -p "$to/bin"
  for b in "${bins[@]}"; do
    [ -x "$from/bin/$b" ] || { echo "bundle.sh: $from/bin/$b was not built" >&2; exit 1; }
    cp "$from/bin/$b" "$to/bin/$b"
    strip --strip-debug "$to/bin/$b" 2>/dev/null || true
    gzip -9 "$to/bin/$b"  # bin/$b.gz: about a third (unpack, below, restores it outside the bundle)
  done
  {
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+uncommitted')"
    echo "arch $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$from/CMakeCache.txt" 2>/dev/null | head -1)"
    echo "nvcc $("${NVCC:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | tail -1)"
    echo "host $(c++ --version | head -1); $(ldd --version | head -1)"
    echo "built $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "binaries ${bins[*]} (gzip -9: bin/*.gz, unpacked by --unpack)"
  } >"$to/MANIFEST"
  local kb
  kb=$(du -sk "$to" | cut -f1)
  [ "$kb" -lt "$limit_kb" ] || { echo "bundle.sh: $to is $((kb / 1024)) MiB, over the 64 MiB a run carries" >&2; exit 1; }
  echo "size $((kb / 1024)) MiB ($kb KiB)" >>"$to/MANIFEST"
  cat "$to/MANIFEST"
  echo "bundle: $to"
}

# Where a bundle's binaries are unpacked: outside it (a bundle carries only its .gz files, under the
# 64 MiB limit), one folder per bundle path, reused while its binaries are newer than the .gz.
unpacked_bin() {
  echo "${TMPDIR:-/tmp}/moe-bundle-$(printf %s "$1" | md5sum | cut -c1-12)/bin"
}

unpack() {  # unpack <bundle>: prints the folder of its runnable binaries (gzip, else Python's)
  local dir=$1 z to x
  if ! compgen -G "$dir/bin/*.gz" >/dev/null; then echo "$dir/bin"; return; fi  # an unpacked bundle
  to=$(unpacked_bin "$dir")
  mkdir -p "$to"
  for z in "$dir"/bin/*.gz; do
    x=$to/$(basename "${z%.gz}")
    [ -x "$x" ] && [ ! "$z" -nt "$x" ] && continue  # unpacked already, from this .gz
    if command -v gzip >/dev/null; then
      gzip -dc "$z" >"$x.part"
    else
      python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$z" "$x.part"
    fi
    chmod +x "$x.part" && mv "$x.part" "$x"
  done
  echo "$to"
}

verify() {  # every binary present, and no library it needs is missing on this machine
  local dir=$1 b bad=0 missing bin
  bin=$(unpack "$dir")
  cat "$dir/MANIFEST"
  for b in "${bins[@]}"; do
    if [ ! -x "$bin/$b" ]; then echo "$b: MISSING"; bad=1; continue; fi
    missing=$(ldd "$bin/$b" 2>&1 | grep -E "not found|not a dynamic" || true)
    if [ -n "$missing" ]; then echo "$b: $missing"; bad=1; else echo "$b: libraries resolve"; fi
  done
  return $bad
}

case "${1:-}" in
  --pack) pack "${2:?--pack BUILD_DIR OUT}" "${3:?--pack BUILD_DIR OUT}"; exit 0 ;;
  --verify) verify "${2:?--verify BUNDLE}"; exit $? ;;
  --unpack) unpack "${2:?--unpack BUNDLE}"; exit 0 ;;  # prints where the binaries are
esac
arch=90 build=build-gpu-bundle out=gpu-bundle
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch=${2:?}; shift 2 ;;
    --build-dir) build=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    *) echo "bundle.sh: unknown argument '$1' (--arch N, --build-dir DIR, --out DIR, --pack, --verify, --unpack)" >&2; exit 2 ;;
  esac
done
[[ $arch =~ ^[0-9]+a?$ ]] || { echo "bundle.sh: --arch: a CUDA architecture number (90), got '$arch'" >&2; exit 2; }
# No OpenBLAS, Gloo or NCCL (a one-GPU check needs no collectives; the GPU machine's image may lack
# their libraries): MOE_NCCL_LIBRARY=OFF is a value find_library keeps, so it does not search.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DMOE_SERVICES=OFF -DMOE_TESTS=OFF -DMOE_BENCH=ON -DMOE_BLAS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON \
  -DMOE_NCCL_LIBRARY=OFF -DMOE_RELEASE_FLAGS=-O2 \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" >/dev/null
nice cmake --build "$build" --parallel "${BUNDLE_JOBS:-2}" --target "${bins[@]}"  # 2: CI machines have 2 cores
pack "$build" "$(realpath -m "$out")"
