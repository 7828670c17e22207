#!/usr/bin/env bash
# make fuzz: builds the libFuzzer targets with clang (build-fuzz: every library instrumented for
# coverage, ASan + UBSan), replays each target's committed regression inputs, then fuzzes each for
# N seconds from its seed corpus (tests/fuzz/corpus/<target>/; new inputs go to a scratch copy).
#   scripts/fuzz.sh [seconds per target, default 60] [target ...]
# A crash leaves its input in build-fuzz/crashes/<target>/: add it to tests/fuzz/regressions/<target>/
# with the fix, and the replay keeps it fixed.
set -euo pipefail
seconds=${1:-60}
shift || true
cd "$(dirname "$0")/.."
root=$PWD
dir=build-fuzz
scripts/install-deps.sh fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_RELEASE_FLAGS="-O1 -g1" \
    -DMOE_CUDA=OFF -DMOE_BLAS=OFF -DMOE_TESTS=OFF -DMOE_BENCH=OFF -DMOE_SANITIZE=fuzzer >/dev/null
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_yaml fuzz_job_spec fuzz_step_report fuzz_kv_protocol fuzz_tokens_file fuzz_path_roots
                                     fuzz_indexed_dataset fuzz_safetensors fuzz_checkpoint)
cmake --build "$dir" --target "${targets[@]}"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=()
for t in "${targets[@]}"; do
  bin=$dir/tests/fuzz/$t
  [ -x "$bin" ] || bin=$dir/bin/$t
  reg=tests/fuzz/regressions/$t
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
    echo "fuzz: $t: replaying $(ls "$reg" | wc -l) regression input(s)"
    "$bin" "$reg"/* >"$dir/$t.replay.log" 2>&1 || { tail -30 "$dir/$t.replay.log"; failed+=("$t (regression)"); continue; }
  fi
  work=$dir/corpus/$t crashes=$dir/crashes/$t
  rm -rf "$work" && mkdir -p "$work" "$crashes"
  cp tests/fuzz/corpus/$t/* "$work"/ 2>/dev/null || true
  echo "fuzz: $t for ${seconds}s from $(ls "$work" | wc -l) seed(s)"
  if ! "$bin" -max_total_time="$seconds" -max_len=131072 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
      "$work" >"$dir/$t.log" 2>&1; then
    tail -40 "$dir/$t.log"
    failed+=("$t")
  fi
  grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$dir/$t.log" | tail -1 | sed "s/^/fuzz: $t: /" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $dir/crashes/)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s) clean"
