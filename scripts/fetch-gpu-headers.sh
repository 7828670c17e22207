#!/usr/bin/env bash
# NVIDIA's header-only GPU libraries, from their pinned PyPI wheels: the cuDNN frontend (the graph API
# the attention path builds its fused SDPA with) and CUTLASS (the Hopper grouped GEMM of the experts).
# Neither is a Debian package. Each wheel is downloaded with --no-deps, and only its C++ headers and its
# licence files are kept, in a cache folder outside the tree:
#   $MOE_GPU_HEADERS (default ~/.cache/moe-gpu-headers)/<package>-<version>/{include/,licenses/,VERSION}
# A folder is complete once its VERSION file (written last) names the package, version and folders
# above, so a download cut short, or one made by an older list, is redone.
# Nothing here is committed or copied into the tree; CMake (cmake/MoeGpuLibraries.cmake) runs this at
# configure time and points the compiler at the folders. Offline, a warm cache is enough.
#   scripts/fetch-gpu-headers.sh            fetch what is missing; print "NAME VERSION INCLUDE_DIR" lines
#   scripts/fetch-gpu-headers.sh --check    only say whether the cache has both (exit 1 if not)
set -euo pipefail
cd "$(dirname "$0")/.."
# name, PyPI package, version, the folders of the headers inside the wheel (','-separated, merged into
# one include folder: CUTLASS's utilities, such as cutlass/util/packed_stride.hpp, live in tools/util).
packages=(
  "cudnn-frontend nvidia-cudnn-frontend 1.32.0 include"
  "cutlass nvidia-cutlass 4.2.0.0 cutlass_library/source/include,cutlass_library/source/tools/util/include"
)
cache=${MOE_GPU_HEADERS:-$HOME/.cache/moe-gpu-headers}
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "fetch-gpu-headers: unknown argument '$1' (none, or --check)" >&2; exit 2 ;;
esac

# pip that can download wheels: Debian's (python3-pip) or any python3 with pip.
pip_cmd() {
  local py
  for py in /usr/bin/python3 python3; do
    if "$py" -m pip --version >/dev/null 2>&1; then echo "$py -m pip"; return 0; fi
  done
  echo "fetch-gpu-headers: no pip to download wheels with (install Debian's python3-pip)" >&2
  return 1
}

# The wheel's tags: the cuDNN frontend's wheels carry a compiled Python module and so name a Python and
# a platform; we take the CPython 3.11 manylinux x86_64 one whatever runs this (only its headers, which
# are the same in every wheel of a version, are kept).
fetch_one() {  # fetch_one NAME PACKAGE VERSION INNER_DIR
  local name=$1 pkg=$2 ver=$3 inner=$4 dest="$cache/$1-$3" tmp pip wheel
  pip=$(pip_cmd)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe-gpu-headers.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  echo "fetch-gpu-headers: downloading $pkg==$ver (PyPI, --no-deps)" >&2
  # shellcheck disable=SC2086  # pip_cmd is a command and its arguments
  if ! $pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
      -d "$tmp" "$pkg==$ver" >&2; then
    echo "fetch-gpu-headers: could not download $pkg==$ver from PyPI (offline? the cache $dest is empty)" >&2
    return 1
  fi
  wheel=$(ls "$tmp"/*.whl)
  rm -rf "$dest" && mkdir -p "$dest/include" "$dest/licenses"
  # Headers only (and licences); the Python modules, compiled extensions, examples and tools are not kept.
  /usr/bin/python3 - "$wheel" "$inner" "$dest" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[3]
inners = [d.rstrip('/') + '/' for d in sys.argv[2].split(',')]
headers = licences = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if info.is_dir():
            continue
        base = os.path.basename(name)
        inner = next((d for d in inners if name.startswith(d)), None)
        if inner and base.endswith(('.h', '.hpp', '.cuh', '.inl')):
            out = os.path.join(dest, 'include', name[len(inner):])
            headers += 1
        elif '.dist-info/' in name and ('LICENSE' in base.upper() or 'NOTICE' in base.upper()):
            out = os.path.join(dest, 'licenses', base)
            licences += 1
        else:
            continue
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, 'wb') as dst:
            dst.write(src.read())
if headers == 0:
    sys.exit(f'fetch-gpu-headers: {os.path.basename(wheel)} has no C++ headers under {inners}')
print(f'fetch-gpu-headers: kept {headers} headers and {licences} licence files', file=sys.stderr)
PY
  printf '%s %s %s\n%s\n' "$pkg" "$ver" "$inner" "$(basename "$wheel")" >"$dest/VERSION"
}

missing=0
for p in "${packages[@]}"; do
  read -r name pkg ver inner <<<"$p"
  dest="$cache/$name-$ver"
  complete() { [ "$(head -1 "$dest/VERSION" 2>/dev/null)" = "$pkg $ver $inner" ]; }
  if ! complete; then
    if [ $check_only = 1 ]; then echo "fetch-gpu-headers: $name $ver is not in $cache" >&2; missing=1; continue; fi
    mkdir -p "$cache"
    exec 9>"$cache/.$name.lock"   # one download at a time (two configures at once)
    flock 9
    complete || fetch_one "$name" "$pkg" "$ver" "$inner" || exit 1
    exec 9>&-
  fi
  echo "$name $ver $dest/include"
done
exit $missing
