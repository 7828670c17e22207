# The step machinery the GPU scripts share (tests/gpu/check.sh, tests/gpu/perf.sh), sourced once the
# script has set: out (the folder that comes back), log (its log there), budget (seconds),
# rehearsal (0 or 1), card, and defined `table` (its table, printed last, also after a signal).
# Each step runs under min(its limit, what is left of the budget less a reserve for the table), its
# output to the terminal, to $log under a header and to a step log of its own ($steplog, outside
# $OUT, for counting); its row goes to results.json, rewritten after every step, so a run killed
# even by SIGKILL leaves one. A step's exit: 0 pass, 77 no GPU here, 124/137 cut by its budget.
steplogs=$(mktemp -d /tmp/moe-gpu-steps.XXXXXX)  # each step's own output, for counting (not in $OUT)
export PYTHONUNBUFFERED=1
start=$SECONDS reserve=10
declare -a names=() statuses=() exits=() secs=()

left() { echo $(( budget - (SECONDS - start) - reserve )); }
# step <name> <limit s> <command...>: runs it under min(limit, what is left), its output to the
# terminal, to $log under a header and to $steplog; records its row and rewrites results.json.
step() {
  local name=$1 limit=$2; shift 2
  local n=${#names[@]} t0=$SECONDS rc status avail
  steplog=$steplogs/$(printf %02d "$n").log
  avail=$(left)
  names+=("$name")
  if [ "$avail" -lt 2 ]; then
    record "skipped: no budget left" -1 0
    echo "== $name: skipped (no budget left)" | tee -a "$log"
    return 124
  fi
  [ "$limit" -gt "$avail" ] && limit=$avail
  echo "== step $n: $name (limit ${limit} s)" | tee -a "$log"
  # In the background and waited for: a SIGTERM to this script interrupts the wait at once (the trap
  # stops the step, then writes the table and the JSON).
  { timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$log" "$steplog"; exit "${PIPESTATUS[0]}"; } &
  child=$!
  wait "$child"
  rc=$?
  child=""
  case $rc in
    0) status=pass ;;
    77) status="no GPU here (exit 77)" ;;
    124|137) status="cut by its budget (${limit} s)" ;;
    *) status="fail (exit $rc)" ;;
  esac
  record "$status" "$rc" $((SECONDS - t0))
  echo "== $name: $status in $((SECONDS - t0)) s" | tee -a "$log"
  return "$rc"
}
record() { statuses+=("$1"); exits+=("$2"); secs+=("$3"); write_json; }
skip() { names+=("$1"); echo "== $1: skipped ($2)" | tee -a "$log"; record "skipped: $2" -1 0; }
# note <key> <value>: a RESULT line of the script's own, in the log and so in results.json.
note() { echo "RESULT $1 $2" >>"$log"; }

get() { grep -m1 "^RESULT $1 " "$log" 2>/dev/null | cut -d' ' -f3-; }
row() { printf "| %-${row_width:-52}s | %s |\n" "$1" "$2"; }
write_json() {
  python3 - "$log" "$card" "$budget" "$rehearsal" "$((SECONDS - start))" "${#statuses[@]}" \
      "${names[@]:0:${#statuses[@]}}" "${statuses[@]}" "${exits[@]}" "${secs[@]}" <<'PY' || echo "${0##*/}: results.json not written" >&2
import json, os, sys
log, card, budget, rehearsal, total, n = sys.argv[1:7]
n = int(n); rest = sys.argv[7:]
names, statuses, exits, secs = rest[:n], rest[n:2*n], rest[2*n:3*n], rest[3*n:4*n]
results = {}
out = os.path.dirname(log)
for line in open(log, errors="replace"):
    if line.startswith("RESULT "):
        parts = line.split(None, 2)
        if len(parts) == 3: results.setdefault(parts[1], parts[2].strip())
doc = {"card": card, "budget_s": int(budget), "rehearsal": rehearsal == "1", "total_s": int(total),
       "steps": [{"name": a, "status": b, "exit": int(c), "seconds": int(d)} for a, b, c, d in zip(names, statuses, exits, secs)],
       "results": results}
tmp = os.path.join(out, ".results.json.tmp")
json.dump(doc, open(tmp, "w"), indent=1)
os.replace(tmp, os.path.join(out, "results.json"))
PY
}
finished=0 child=""
finish() {
  [ $finished = 1 ] && return
  finished=1
  # A step the script was stopped in gets its row.
  while [ ${#statuses[@]} -lt ${#names[@]} ]; do statuses+=("interrupted (the script was stopped)"); exits+=(143); secs+=(0); done
  table | tee -a "$log"
  write_json
  rm -rf "$steplogs"
}
on_signal() {
  # The step's subshell and what it runs (timeout, in a process group of its own, passes the TERM on
  # to the program).
  [ -n "$child" ] && { pkill -TERM -P "$child" 2>/dev/null; kill -TERM "$child" 2>/dev/null; }
  finish
  exit 143
}
trap on_signal TERM INT
trap finish EXIT

