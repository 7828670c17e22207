#!/usr/bin/env bash
# clang's thread-safety analysis over every source that holds an annotated lock (common/mutex.h):
# the controller, the node agent and common/. ABSL_GUARDED_BY and friends are checked only by clang
# (g++ ignores them), so without this the annotations were comments. A field read without its
# mutex, a lock not released, a function that needs a lock called without it: each fails here,
# naming the line. Needs the build's generated protobuf headers ($MOE_BUILD).
set -euo pipefail
build=${MOE_BUILD:?set MOE_BUILD to the build directory (its generated moe/v1/*.pb.h and gen/common/*.gen.h)}
cxx=$(command -v clang++-14 || command -v clang++ || true)
[ -n "$cxx" ] || { echo "FAIL: clang++ is missing (scripts/install-deps.sh test installs clang)" >&2; exit 1; }
# Every source of the controller and the agent (a method defined in any of them may touch guarded
# members), and those of common/ that take an annotated lock.
mapfile -t files < <(git ls-files 'controller/*.cc' 'worker/agent/*.cc'
  git ls-files 'common/*.cc' | xargs grep -l -E 'Mutex|ABSL_GUARDED_BY' || true)
[ ${#files[@]} -gt 30 ] || { echo "FAIL: only ${#files[@]} files to check: the search is broken" >&2; exit 1; }
out=$(printf '%s\n' "${files[@]}" | xargs -P 2 -I{} "$cxx" -std=c++20 -fsyntax-only -Wthread-safety \
  -Werror=thread-safety -Wno-unknown-warning-option -DMOE_VERSION='"test"' -I. -I"$build" -I"$build/gen" \
  -isystem /usr/local/cuda/include {} 2>&1) || {
  echo "$out" | grep -E "error|note" | head -40 >&2
  echo "FAIL: clang's thread-safety analysis (above)" >&2
  exit 1
}
echo "thread safety: ${#files[@]} sources checked by clang -Wthread-safety, no finding"
