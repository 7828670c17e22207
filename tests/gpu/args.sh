# The arguments the GPU scripts share (tests/gpu/check.sh, tests/gpu/perf.sh), sourced from the
# repository's root with the script's name in $me, its default budget in $budget and the folder it
# was run from in $caller:
#   [--budget S] [--build-dir DIR] [--prebuilt BUNDLE] [--rehearsal], and check.sh's older form, the
#   build folder as a bare argument.
# Sets budget, build (empty: the script's default), prebuilt (an absolute path, or empty), prebuilt_bin
# (where its binaries run from: bundle.sh --unpack, outside the bundle) and
# rehearsal (0 or 1); a bad argument exits 2 naming it.
build="" rehearsal=0 prebuilt="" prebuilt_bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --budget|--build-dir|--prebuilt) [ $# -ge 2 ] || { echo "$me: $1 needs a value" >&2; exit 2; } ;;
  esac
  case "$1" in
    --budget) budget=${2-}; shift 2 ;;
    --build-dir) build=${2-}; shift 2 ;;
    --prebuilt) prebuilt=${2-}; shift 2 ;;
    --rehearsal) rehearsal=1; shift ;;
    *) [ -z "$build" ] && [ "${1#-}" = "$1" ] && { build=$1; shift; continue; }
       echo "$me: unknown argument '$1' (--budget S, --build-dir DIR, --prebuilt BUNDLE, --rehearsal)" >&2; exit 2 ;;
  esac
done
[[ $budget =~ ^[0-9]+$ ]] && [ "$budget" -ge 5 ] || { echo "$me: --budget: seconds >= 5, got '$budget'" >&2; exit 2; }
if [ -n "$prebuilt" ]; then
  case $prebuilt in /*) ;; *) prebuilt=$caller/$prebuilt ;; esac  # relative to where it was run
  [ -d "$prebuilt/bin" ] && [ -f "$prebuilt/MANIFEST" ] ||
    { echo "$me: --prebuilt: '$prebuilt' is not a bundle of make gpu-bundle (no bin/ or MANIFEST)" >&2; exit 2; }
  prebuilt=$(cd "$prebuilt" && pwd)
  prebuilt_bin=$("$(dirname "${BASH_SOURCE[0]}")/bundle.sh" --unpack "$prebuilt") ||
    { echo "$me: --prebuilt: could not unpack the binaries of $prebuilt" >&2; exit 2; }
fi
