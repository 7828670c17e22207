#!/usr/bin/env bash
# tests/gpu/check.sh on the CPU stand-in (its --rehearsal): the table has a row for every step and
# results.json lists them, also when the script's own budget cuts a step and when it is killed (by
# SIGTERM, or by SIGKILL with no chance to clean up); $OUT never holds more than check.log and
# results.json (the device tool brings back 8 files); a --prebuilt bundle (packed from the build's
# binaries as make gpu-bundle packs them) skips the build and says so.
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
grep -q "^== step 0: preflight" "$work/full/check.log" || fail "no preflight output in check.log"
two_files() {  # two_files <dir>: check.log and results.json, nothing else
  local n
  n=$(find "$1" -type f | wc -l)
  [ "$n" -le 2 ] && [ -f "$1/check.log" ] && [ -f "$1/results.json" ] ||
    fail "$1 holds $n files: $(ls -A "$1" | tr '\n' ' ') (expected check.log and results.json)"
}
two_files "$work/full"
grep -q "^emulated: " "$work/full/check.log" || fail "the emulated kernels' list is not in check.log"
# 2. A budget too small for the longest step: it is cut, the steps after it are skipped, and the
#    table and the JSON are still written. The budget is set from a run's own step times (10 s of
#    table reserve, the steps before the longest, half of the longest, at least 2 s), so the cut does
#    not depend on how fast this machine is. A loaded machine (CI runs this beside other tests) can
#    run the same steps twice as fast or slow from one run to the next, so a try that missed sets the
#    next budget from its own times when every step ran, and adds to it when the longest was skipped.
budget_from() {  # budget_from <results.json>: the budget that cuts that run's longest step halfway
  python3 - "$1" <<'PY'
import json, sys
steps = json.load(open(sys.argv[1]))["steps"]
longest = max(range(len(steps)), key=lambda i: steps[i]["seconds"])
if steps[longest]["seconds"] < 3:
    sys.exit(f"no step of the rehearsal took 3 s or more to be cut: {steps}")
prior = sum(s["seconds"] for s in steps[:longest] if s["seconds"] > 0)
print(10 + prior + max(2, steps[longest]["seconds"] // 2))
PY
}
budget=$(budget_from "$work/full/results.json") || fail "choosing a budget from the full run: $budget"
for try in 1 2 3 4 5 6; do
  set +e; OUT=$work/cut tests/gpu/check.sh --rehearsal --budget "$budget" --build-dir "$build" >"$work/cut.txt" 2>&1; set -e
  grep -q "cut by its budget" "$work/cut.txt" && break
  if grep -q "skipped: no budget left" "$work/cut.txt"; then  # the steps before it ran slower
    budget=$((budget + 3))
  else  # every step fit: this run was faster than the one the budget came from
    budget=$(budget_from "$work/cut/results.json") || fail "choosing a budget from try $try: $budget"
  fi
done
grep -q "cut by its budget" "$work/cut.txt" || fail "no step was cut by a budget of $budget s (6 tries): $(tail -20 "$work/cut.txt")"
grep -q "skipped: no budget left" "$work/cut.txt" || fail "no step skipped for want of budget"
grep -q "== GPU check table" "$work/cut.txt" || fail "no table after the budget ran out"
steps_ok "$work/cut" 9 || fail "results.json after the budget ran out"
two_files "$work/cut"
# 3. Killed halfway: the table and the JSON all the same.
OUT=$work/killed tests/gpu/check.sh --rehearsal --budget 400 --build-dir "$build" >"$work/killed.txt" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "CPU emulator (stand-in) (limit" "$work/killed.txt" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ $rc -ne 0 ] || fail "a killed rehearsal exited 0"
grep -q "== GPU check table" "$work/killed.txt" || fail "no table after SIGTERM: $(tail -5 "$work/killed.txt")"
steps_ok "$work/killed" 2 || fail "results.json after SIGTERM"
two_files "$work/killed"
# 4. SIGKILL (no trap runs): results.json, rewritten after every step, is there all the same.
OUT=$work/sigkill setsid tests/gpu/check.sh --rehearsal --budget 400 --build-dir "$build" >"$work/sigkill.txt" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "CPU emulator (stand-in) (limit" "$work/sigkill.txt" 2>/dev/null && break; sleep 0.1; done
pkill -KILL -s $pid  # its whole session (setsid): the script and its step (timeout has its own group)
set +e; wait $pid; set -e
steps_ok "$work/sigkill" 2 || fail "results.json after SIGKILL"
two_files "$work/sigkill"
# 5. --prebuilt: a bundle packed from this build's binaries; the build is skipped, and the row says so.
tests/gpu/bundle.sh --pack "$build" "$work/bundle" >"$work/pack.txt" 2>&1 || fail "packing a bundle: $(tail -5 "$work/pack.txt")"
grep -q "^bundle: $work/bundle" "$work/pack.txt" || fail "bundle.sh --pack printed no 'bundle: DIR' line"
#    (A short budget: the steps after the build are the full run's, already checked above.)
set +e
OUT=$work/prebuilt tests/gpu/check.sh --rehearsal --prebuilt "$work/bundle" --budget 30 --build-dir "$build" \
  >"$work/prebuilt.txt" 2>&1
set -e
grep -q "^| build for this card .*skipped: prebuilt bundle $work/bundle" "$work/prebuilt.txt" ||
  fail "the --prebuilt run's table does not say the build was skipped"
grep -q "^| prebuilt bundle: its libraries resolve here .*pass" "$work/prebuilt.txt" || fail "the bundle's libraries"
two_files "$work/prebuilt"
echo "gpu check rehearsal: a full run, a budget that cuts a step ($budget s, try $try), SIGTERM and SIGKILL all leave check.log and results.json (2 files), and --prebuilt skips the build"
