#!/usr/bin/env bash
# bench/load.py's jobs phase at a small size (40 jobs from 4 clients, 4 watchers, 16 fake devices):
# the benchmark itself works, moe-bench-submit's clients and watchers included (every watcher opened
# a stream and read its jobs' updates, every job SUCCEEDED, the SQLite file agrees with the API). Its
# figures are not judged here: a benchmark, not a timed test (docs/benchmarks.md has them).
set -euo pipefail
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
  fail "/usr/bin/python3 lacks grpc or protobuf (scripts/install-deps.sh test installs python3-grpcio)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
/usr/bin/python3 "$MOE_SOURCE_DIR/bench/load.py" --bin "$MOE_BIN" --skip-heartbeats --skip-restart \
  --jobs 40 --clients 4 --watchers 4 --workers 16 --steps 5 >"$log" 2>&1 || {
  cat "$log"
  fail "bench/load.py's jobs phase exited non-zero"
}
grep -q "SQLite holds 41 jobs, 41 of 41 as the API reports them" "$log" || {
  cat "$log"
  fail "the SQLite file and the API disagree (or a job is missing)"
}
line=$(grep -o "[0-9]* watch streams open at most, [0-9]* updates received" "$log") || {
  cat "$log"
  fail "no watchers' line"
}
read -r streams _ _ _ _ _ updates _ <<<"$line"
[ "$streams" -ge 1 ] && [ "$streams" -le 4 ] || fail "watch streams at most: $streams (4 watchers)"
[ "$updates" -ge 4 ] || fail "the watchers received $updates updates (at least a snapshot each)"
for r in submit_per_second submit_p99_ms get_p99_ms list_p99_ms; do
  grep -q "^RESULT $r [0-9]" "$log" || {
    cat "$log"
    fail "no RESULT $r"
  }
done
echo "load_bench_test: OK ($line)"
