#!/bin/bash
# Job lifecycle on loopback (issue #34): a real controller and two CPU workers run tiny jobs.
#   1. cancel: the job is STOPPING (its worker BUSY) until its rank stopped at a step boundary and
#      checkpointed, then CANCELLED with that checkpoint recorded; a SUCCEEDED job records its final
#      checkpoint (the save after the last step report).
#   2. spec.time_limit: a long job with a limit of a few seconds ends TIMEOUT with a checkpoint.
#   3. metadata.depends_on: B waits for A to succeed and starts after A ended; C depends on a job
#      that fails and is CANCELLED naming it; an unknown job is refused naming the field; a
#      dependency survives a controller restart.
source "$(dirname "$0")/lib.sh"
MOECTL="$BIN/moectl"
start_controller --restart-backoff-seconds 1
start_worker w0 r0 n0
start_worker w1 r0 n1
wait_workers 2

job_step() { job_field "$1" 'int(d.get("last_metrics",{}).get("step",0))'; }
wait_step() {  # <id> <step>
  for _ in $(seq 1 300); do [ "$(job_step "$1")" -ge "$2" ] && return 0; sleep 0.2; done
  fail "$1 did not reach step $2"
}
busy_workers() {
  "$MOECTL" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="BUSY"))'
}
event_time() {  # <id> <event type>: the time of its first event of that type
  job_field "$1" "min(e['time'] for e in d['events'] if e['type'] == '$2')"
}

# 1. Cancel: STOPPING until the rank ended, then CANCELLED with the stop's checkpoint.
t0=$(date +%s.%N)
make_job "$WORK/stop.yaml" stop 100000 0 1 1
sed -i 's/seq_length: 64, micro_batch_size: 4/seq_length: 256, micro_batch_size: 8/' "$WORK/stop.yaml"  # slower steps: a longer stop
id=$("$MOECTL" submit -f "$WORK/stop.yaml")
wait_state "$id" RUNNING 60
wait_step "$id" 3
out=$("$MOECTL" cancel "$id")
[ "$out" = "$id STOPPING" ] || fail "cancel answered '$out', not STOPPING"
# The workers first, then the state: a job still STOPPING after the workers were read was STOPPING
# when they were, so its worker must have been BUSY then, unless its rank had just ended and the
# job's CANCELLED record was being written (then it is CANCELLED a moment later).
seen_busy=0
for _ in $(seq 1 300); do
  b=$(busy_workers); s=$(job_state "$id")
  [ "$s" = CANCELLED ] && break
  [ "$s" = STOPPING ] || fail "after the cancel the job is $s"
  if [ "$b" -ge 1 ]; then
    seen_busy=$((seen_busy + 1))
  else
    sleep 0.5; [ "$(job_state "$id")" = CANCELLED ] || fail "its worker is IDLE while the job is STOPPING"
  fi
  sleep 0.05
done
[ "$s" = CANCELLED ] || fail "the stopping job did not end: $s"
ck=$(job_field "$id" 'd.get("checkpoint_step",0)')
[ "$ck" -gt 0 ] || fail "the cancelled job records no checkpoint"
[ -d "$WORK/ckpt-stop/$(printf 'step_%08d' "$ck")" ] || fail "checkpoint $ck is not in $WORK/ckpt-stop: $(ls "$WORK/ckpt-stop")"
newest=$(ls -d "$WORK/ckpt-stop"/step_* | sed 's/.*step_0*//' | sort -n | tail -1)
[ "$ck" = "$newest" ] || fail "the job records checkpoint $ck, the directory's newest is $newest"
job_field "$id" 'd["message"]' | grep -q "every rank stopped; its checkpoint is step $ck" || fail "message: $(job_field "$id" 'd["message"]')"
[ "$(busy_workers)" = 0 ] || fail "workers busy after the job ended"
echo "cancel: $id STOPPING (worker BUSY in $seen_busy+ samples) -> CANCELLED with checkpoint $ck ($(python3 -c "import time; print(round(time.time()-$t0,1))") s)"

# A SUCCEEDED job records its final checkpoint (step 12), not the last periodic one (10).
make_job "$WORK/done.yaml" done 12 5 1 1
id=$("$MOECTL" submit -f "$WORK/done.yaml")
wait_state "$id" SUCCEEDED 120
[ "$(job_field "$id" 'd.get("checkpoint_step",0)')" = 12 ] || fail "a SUCCEEDED job records checkpoint $(job_field "$id" 'd.get("checkpoint_step",0)'), not 12"
echo "succeeded: $id records its final checkpoint 12"

# 2. spec.time_limit: stopped with a checkpoint, TIMEOUT.
t0=$(date +%s.%N)
make_job "$WORK/tl.yaml" limited 100000 0 1 1
sed -i 's/^  max_restarts: 3/  max_restarts: 3\n  time_limit: 8/' "$WORK/tl.yaml"
grep -q "time_limit: 8" "$WORK/tl.yaml" || fail "the job file has no time_limit line"
id=$("$MOECTL" submit -f "$WORK/tl.yaml")
wait_state "$id" TIMEOUT 90
ck=$(job_field "$id" 'd.get("checkpoint_step",0)')
[ "$ck" -gt 0 ] && [ -d "$WORK/ckpt-limited/$(printf 'step_%08d' "$ck")" ] || fail "TIMEOUT without its checkpoint (step $ck): $(ls "$WORK/ckpt-limited" 2>&1)"
job_field "$id" 'd["message"]' | grep -q "time limit of 8 s reached" || fail "message: $(job_field "$id" 'd["message"]')"
"$MOECTL" describe job "$id" | grep -q "TimedOut" || fail "no TimedOut event"
echo "time limit: $id TIMEOUT after $(python3 -c "import time; print(round(time.time()-$t0,1))") s with checkpoint $ck"

# 3. Dependencies.
t0=$(date +%s.%N)
make_job "$WORK/a.yaml" dep-a 20 0 1 1
make_job "$WORK/b.yaml" dep-b 5 0 1 1
sed -i 's/metadata: {name: dep-b, priority: 0}/metadata: {name: dep-b, priority: 0, depends_on: [{job: dep-a, condition: succeeded}]}/' "$WORK/b.yaml"
grep -q "depends_on" "$WORK/b.yaml" || fail "the job file has no depends_on"
a=$("$MOECTL" submit -f "$WORK/a.yaml")
b=$("$MOECTL" submit -f "$WORK/b.yaml")
sleep 1
[ "$(job_state "$b")" = PENDING ] || fail "B is $(job_state "$b") while A runs"
job_field "$b" 'd.get("waiting_reason","")' | grep -q "waiting for job $a to succeed" || fail "B's waiting reason: $(job_field "$b" 'd.get("waiting_reason","")')"
[ "$(job_field "$b" 'd["spec"]["metadata"]["depends_on"][0]["job"]')" = "$a" ] || fail "B's dependency is not stored as A's id"
wait_state "$a" SUCCEEDED 120
wait_state "$b" SUCCEEDED 120
a_end=$(event_time "$a" Succeeded); b_start=$(event_time "$b" Scheduled)
python3 -c "import sys; sys.exit(0 if '$b_start' >= '$a_end' else 1)" ||  # RFC 3339, one format: ordered as text fail "B was scheduled at $b_start, before A ended at $a_end"
echo "depends_on: $b started $(python3 -c "print(round($b_start-$a_end,2))") s after $a succeeded"

# C depends on a job that fails (a dataset that does not exist: the rank fails, permanently).
make_job "$WORK/f.yaml" dep-f 5 0 1 1
# A relative dataset found in no data root: accepted at submit (the agents resolve relative paths),
# the rank fails at once (an absolute one the controller can see would be refused at submit).
sed -i "s#data: {path: data/fortunes#data: {path: data/no-such-data#" "$WORK/f.yaml"
grep -q "no-such-data" "$WORK/f.yaml" || fail "the failing job has the real data path"
f=$("$MOECTL" submit -f "$WORK/f.yaml")
make_job "$WORK/c.yaml" dep-c 5 0 1 1
sed -i "s/metadata: {name: dep-c, priority: 0}/metadata: {name: dep-c, priority: 0, depends_on: [{job: $f}]}/" "$WORK/c.yaml"
c=$("$MOECTL" submit -f "$WORK/c.yaml")
wait_state "$f" FAILED 60
wait_state "$c" CANCELLED 30
job_field "$c" 'd["message"]' | grep -q "dependency job $f ended FAILED" || fail "C's message: $(job_field "$c" 'd["message"]')"
echo "depends_on: $c CANCELLED: $(job_field "$c" 'd["message"]')"

# An unknown job is refused at submit, naming the field.
make_job "$WORK/u.yaml" dep-u 5 0 1 1
sed -i "s/metadata: {name: dep-u, priority: 0}/metadata: {name: dep-u, priority: 0, depends_on: [{job: no-such-job}]}/" "$WORK/u.yaml"
set +e; out=$("$MOECTL" submit -f "$WORK/u.yaml" 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "INVALID_ARGUMENT" <<<"$out" && grep -q "metadata.depends_on\[0\].job: no job 'no-such-job'" <<<"$out" ||
  fail "an unknown dependency: rc $rc, $out"

# The wait survives a controller restart; the dependency's cancel then cancels the dependent.
make_job "$WORK/l.yaml" dep-l 100000 0 1 1
make_job "$WORK/d.yaml" dep-d 5 0 1 1
sed -i "s/metadata: {name: dep-d, priority: 0}/metadata: {name: dep-d, priority: 0, depends_on: [{job: dep-l}]}/" "$WORK/d.yaml"
l=$("$MOECTL" submit -f "$WORK/l.yaml")
d=$("$MOECTL" submit -f "$WORK/d.yaml")
wait_state "$l" RUNNING 60
kill -TERM $CTL_PID
wait $CTL_PID 2>/dev/null || true
start_controller --restart-backoff-seconds 1
sleep 2
[ "$(job_state "$d")" = PENDING ] || fail "after the restart the dependent is $(job_state "$d")"
wait_state "$l" RUNNING 60
"$MOECTL" cancel --now "$l" >/dev/null
wait_state "$d" CANCELLED 30
job_field "$d" 'd["message"]' | grep -q "dependency job $l ended CANCELLED" || fail "D's message: $(job_field "$d" 'd["message"]')"
echo "depends_on: the wait survived a controller restart ($(python3 -c "import time; print(round(time.time()-$t0,1))") s for part 3)"
echo "lifecycle_test passed"
