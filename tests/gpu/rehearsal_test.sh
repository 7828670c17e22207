#!/usr/bin/env bash
# tests/gpu/check.sh on the CPU stand-in (its --rehearsal): the table has a row for every step and
# results.json lists them, also when the script's own budget cuts a step and when it is killed.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${MOE_BUILD_DIR:-build}
work=$(mktemp -d /tmp/moe-gpu-rehearsal.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
steps_ok() {  # steps_ok <dir> <min steps>: results.json parses and lists them
  python3 - "$1/results.json" "$2" <<'PY' || return 1
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["steps"]) >= int(sys.argv[2]), d["steps"]
for s in d["steps"]:
    assert {"name", "status", "exit", "seconds"} <= s.keys(), s
print(len(d["steps"]), "steps:", "; ".join(f'{s["name"][:30]}: {s["status"]}' for s in d["steps"]))
PY
}
# 1. A full rehearsal passes, with every step's row and log.
OUT=$work/full tests/gpu/check.sh --rehearsal --budget 400 --build-dir "$build" >"$work/full.txt" 2>&1 ||
  fail "the rehearsal failed: $(tail -25 "$work/full.txt")"
steps_ok "$work/full" 9 || fail "results.json of the full rehearsal"
for name in preflight "build (rehearsal" "CPU emulator (stand-in)" "kernel check harness" "compute-sanitizer" "tiny, 3 steps on cpu" \
            "benchmarks: GEMM" "plain PyTorch"; do
  grep -q "^| $name.*|" "$work/full.txt" || grep -q "^| .*$name.*|" "$work/full.txt" || fail "no table row for '$name'"
done
ls "$work"/full/*preflight*.log >/dev/null || fail "no preflight log"
# 2. A budget too small for the emulator step (25 s, 10 of them the table's reserve): it is cut, the
#    steps after it are skipped, and the table and the JSON are still written.
set +e; OUT=$work/cut tests/gpu/check.sh --rehearsal --budget 25 --build-dir "$build" >"$work/cut.txt" 2>&1; set -e
grep -q "cut by its budget" "$work/cut.txt" || fail "no step was cut by a 25 s budget: $(tail -20 "$work/cut.txt")"
grep -q "skipped: no budget left" "$work/cut.txt" || fail "no step skipped for want of budget"
grep -q "== GPU check table" "$work/cut.txt" || fail "no table after the budget ran out"
steps_ok "$work/cut" 9 || fail "results.json after the budget ran out"
# 3. Killed halfway: the table and the JSON all the same.
OUT=$work/killed tests/gpu/check.sh --rehearsal --budget 400 --build-dir "$build" >"$work/killed.txt" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "CPU emulator (stand-in) (limit" "$work/killed.txt" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ $rc -ne 0 ] || fail "a killed rehearsal exited 0"
grep -q "== GPU check table" "$work/killed.txt" || fail "no table after SIGTERM: $(tail -5 "$work/killed.txt")"
steps_ok "$work/killed" 2 || fail "results.json after SIGTERM"
echo "gpu check rehearsal: full run, a 25 s budget and a SIGTERM all leave the table and results.json"
