#!/bin/bash
# Elastic recovery on loopback (spec.elastic): a DP 2 x EP 2 job (W = 4, expert-data-parallel 2)
# loses a worker with no spare; it continues at W = 2 (data-parallel 2, EP 2) from its checkpoint
# within 30 s instead of waiting, and grows back to W = 4 when a worker joins, at a step boundary
# with a checkpoint and without using a restart. Each resize is an event.
source "$(dirname "$0")/lib.sh"
MOECTL="$BIN/moectl"
start_controller --lease-seconds 2 --restart-backoff-seconds 1
for n in 0 1 2 3; do start_worker "w$n" r0 "n$n"; done
wait_workers 4

make_job "$WORK/el.yaml" elastic 100000 4 4 2
echo "  elastic: {min_data_parallel: 2}" >>"$WORK/el.yaml"
# A size the layout cannot take is refused at submit, naming the field.
sed 's/min_data_parallel: 2/min_data_parallel: 3/' "$WORK/el.yaml" >"$WORK/bad.yaml"
set +e; out=$("$MOECTL" submit -f "$WORK/bad.yaml" 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "spec.elastic.min_data_parallel: the job cannot run at data-parallel 3" <<<"$out" ||
  fail "min_data_parallel 3 with EP 2: rc $rc, $out"

id=$("$MOECTL" submit -f "$WORK/el.yaml")
world() { job_field "$id" 'len(d.get("placement",[]))'; }
step() { job_field "$id" 'int(d.get("last_metrics",{}).get("step",0))'; }
wait_until() {  # wait_until <seconds> <what> <command...>
  local t=$1 what=$2; shift 2
  for _ in $(seq 1 $((t * 5))); do "$@" && return 0; sleep 0.2; done
  fail "$what (after ${t}s)"
}
wait_state "$id" RUNNING 60
checkpointed() { [ "$(job_field "$id" 'int(d.get("checkpoint_step",0))')" -ge 4 ]; }
wait_until 120 "no checkpoint at step 4" checkpointed
before=$(step)
victim=$(job_field "$id" 'd["placement"][3]["worker"]')

# 1. A worker dies and there is no spare: it continues at W = 2 within 30 s.
t0=$(date +%s)
kill -9 "${WORKER_PID[$victim]}"
at_two() { [ "$(job_state "$id")" = RUNNING ] && [ "$(world)" = 2 ] && [ "$(step)" -gt "$before" ]; }
wait_until 60 "the job did not continue at W = 2 (state $(job_state "$id"), world $(world))" at_two
took=$(( $(date +%s) - t0 ))
[ $took -le 30 ] || fail "it took ${took} s to continue at W = 2 (the bound is 30)"
"$MOECTL" describe job "$id" | grep -q "Resized.*runs at world size 2 (data-parallel 2) of 4" ||
  fail "no Resized event: $("$MOECTL" describe job "$id" | tail -8)"
grep -h "resumed from .*ckpt-elastic/step_" "$WORK"/worker-*.log | grep -q . || fail "the W = 2 attempt did not resume from the checkpoint"
echo "elastic: lost $victim at step $before; running at W = 2 after ${took} s"

# 2. A worker joins: it grows back to W = 4 at a step boundary, without using a restart.
restarts=$(job_field "$id" 'd.get("restarts",0)')
mid=$(step)
start_worker w4 r0 n4
at_four() { [ "$(job_state "$id")" = RUNNING ] && [ "$(world)" = 4 ] && [ "$(step)" -gt "$mid" ]; }
wait_until 90 "the job did not grow back to W = 4 (state $(job_state "$id"), world $(world))" at_four
"$MOECTL" describe job "$id" | grep -q "Resizing.*grows back from world size 2 to 4" || fail "no Resizing event"
[ "$(job_field "$id" 'd.get("restarts",0)')" = "$restarts" ] || fail "growing back used a restart"
"$MOECTL" cancel --now "$id" >/dev/null
echo "elastic: grew back to W = 4 from step $mid when w4 joined, without a restart"
