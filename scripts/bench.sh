#!/usr/bin/env bash
# Runs every benchmark in bench/ and prints their RESULT lines at the end. Benchmarks time things;
# tests never do. Each benchmark measures its ceiling in the same run, so read the ratios.
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
log=$(mktemp /tmp/moe-bench.XXXXXX)
run() { echo "== $*"; "$@" 2>&1 | tee -a "$log"; }
run "$build/bin/moe-bench-train-step"
run "$build/bin/moe-bench-gemm"
run "$build/bin/moe-bench-attention"
run "$build/bin/moe-bench-alltoall"
run bench/ep_scaling_bench.sh "$build"
run bench/pipeline_bubble_bench.sh "$build"
run "$build/bin/moe-bench-scheduler"
run "$build/bin/moe-bench-metrics-overhead"
run bench/control_plane_bench.sh "$build"
echo
echo "== results"
grep '^RESULT' "$log"
rm -f "$log"
