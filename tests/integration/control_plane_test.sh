#!/usr/bin/env bash
# The control plane with real processes on loopback: a controller with tokens, three CPU workers in
# one rack, and moectl.
#   1. bad token / wrong role refused; bad and impossible jobs refused with the reason
#   2. submit -> SUCCEEDED (watch ends with it), get job -o json
#   3. cancel a running job: its ranks checkpoint at the step they stop (no periodic checkpoint here);
#      cancel --now kills them without one; labels select jobs (get jobs -l), -o wide; drain --wait
#      moves a running job off a worker without using a restart; a higher priority preempts a lower one,
#      which resumes from the checkpoint it wrote as it stopped
#   4. kill -9 a worker mid-run -> RESTARTING -> SUCCEEDED, and the losses after the resume equal an
#      uninterrupted run's, bitwise
#   5. kill -9 the controller and restart it, then SIGTERM it and restart it -> the job is still there,
#      never restarted, and finishes
#   6. a cuda job placed on a worker that claims cuda:0 where there is no GPU fails at once (no
#      restarts), saying why
source "$(dirname "$0")/lib.sh"
ADMIN=admin-token-0123456789abcdef
VIEWER=viewer-token-0123456789abcdef
WORKER=worker-token-0123456789abcdef
printf '%s admin ops\n%s viewer dashboards\n%s worker agents\n' $ADMIN $VIEWER $WORKER >"$WORK/tokens"
chmod 600 "$WORK/tokens"
start_controller --tokens "$WORK/tokens" --lease-seconds 3 --restart-backoff-seconds 1  # the backoff itself: controller_test
for n in 0 1 2; do start_worker w$n r0 n$n --token $WORKER; done
export MOE_TOKEN=$ADMIN
wait_workers 3
MOECTL="$BIN/moectl"

# 1. Refusals.
set +e
out=$(MOE_TOKEN= "$MOECTL" get jobs 2>&1); rc=$?
set -e
[ $rc -eq 4 ] && grep -q UNAUTHENTICATED <<<"$out" || fail "no token: rc $rc, $out"
set +e
out=$(MOE_TOKEN=wrong-token-0123456789 "$MOECTL" get jobs 2>&1); rc=$?
set -e
[ $rc -eq 4 ] && grep -q "unknown token" <<<"$out" || fail "bad token: rc $rc, $out"
make_job "$WORK/ok.yaml" ok 30 10
set +e
out=$(MOE_TOKEN=$VIEWER "$MOECTL" submit -f "$WORK/ok.yaml" 2>&1); rc=$?
set -e
[ $rc -eq 4 ] && grep -q PERMISSION_DENIED <<<"$out" || fail "viewer submit: rc $rc, $out"
MOE_TOKEN=$VIEWER "$MOECTL" get jobs >/dev/null || fail "a viewer may list jobs"
sed 's/{preset: tiny}/{preset: tiny, moe: {topk: 2}}/' "$WORK/ok.yaml" >"$WORK/typo.yaml"
set +e
out=$("$MOECTL" submit -f "$WORK/typo.yaml" 2>&1); rc=$?
set -e
[ $rc -eq 6 ] && grep -q "spec.model.moe.topk.*did you mean 'top_k'" <<<"$out" || fail "unknown field: rc $rc, $out"
sed 's/{preset: tiny}/{preset: tiny, moe: {top_k: 9}}/' "$WORK/ok.yaml" >"$WORK/bad.yaml"
set +e
out=$("$MOECTL" submit -f "$WORK/bad.yaml" 2>&1); rc=$?
set -e
[ $rc -eq 6 ] && grep -q "spec.model.moe.top_k: 9 exceeds num_experts = 8" <<<"$out" || fail "bad top_k: rc $rc, $out"
# A job larger than the cluster waits for capacity, saying how many workers it lacks (a controller
# started before its workers is the normal order); one over --max-job-ranks would be refused.
make_job "$WORK/huge.yaml" huge 30 10 4 4
huge=$("$MOECTL" submit -f "$WORK/huge.yaml") || fail "a job larger than the cluster was refused"
[ "$(job_state "$huge")" = PENDING ] || fail "the too-large job is $(job_state "$huge"), not PENDING"
"$MOECTL" describe job "$huge" | grep -q "Waiting: *waiting for capacity: the job needs 4 cpu workers and the cluster has 3 (1 more)" ||
  fail "no capacity reason: $("$MOECTL" describe job "$huge" | grep Waiting)"
"$MOECTL" cancel "$huge" >/dev/null
set +e
"$MOECTL" get job nope-12345 >/dev/null 2>&1; rc=$?
set -e
[ $rc -eq 3 ] || fail "unknown job: rc $rc (want 3)"
"$MOECTL" --version | grep -q "^moectl [0-9][0-9.]*$" || fail "moectl --version: $("$MOECTL" --version 2>&1)"
rc=0; out=$("$MOECTL" gett jobs 2>&1) || rc=$?
[ $rc -eq 2 ] && grep -q "unknown command 'gett'; the commands are get, describe" <<<"$out" ||
  fail "an unknown command: exit $rc: $out"
echo "refusals: tokens, roles, field paths, unknown ids; a job larger than the cluster waits for capacity"

# 2. Submit -> SUCCEEDED.
id=$("$MOECTL" submit -f "$WORK/ok.yaml")
[[ $id == ok-* ]] || fail "submit printed '$id'"
"$MOECTL" watch "$id" >"$WORK/watch.txt" || fail "watch exited $? for a job that should succeed"
grep -q "SUCCEEDED" "$WORK/watch.txt" || fail "watch did not end with the job"
grep -q "step 30/30" "$WORK/watch.txt" || fail "no progress line"
[ "$(job_state "$id")" = SUCCEEDED ] || fail "state $(job_state "$id")"
"$MOECTL" describe job "$id" >"$WORK/ok-describe.txt"
grep -q "rack r0" "$WORK/ok-describe.txt" || fail "describe shows no placement"
grep -q "rank 1 (pp 0, dp 1, ep 1; " "$WORK/ok-describe.txt" || { cat "$WORK/ok-describe.txt"; fail "describe shows no rank coordinates"; }
"$MOECTL" events "$id" | grep -q "Succeeded" || fail "moectl events shows no Succeeded: $("$MOECTL" events "$id" 2>&1)"
[ "$("$MOECTL" get job "$id" -o name)" = "job/$id" ] || fail "get job -o name: $("$MOECTL" get job "$id" -o name)"
"$MOECTL" get workers -o name | grep -qx "worker/w0" || fail "get workers -o name: $("$MOECTL" get workers -o name)"
"$MOECTL" describe worker w0 | grep -q "^Rack: *r0" || fail "describe worker: $("$MOECTL" describe worker w0 2>&1)"
rc=0; "$MOECTL" describe worker nope >/dev/null 2>&1 || rc=$?
[ $rc -eq 3 ] || fail "describe worker nope exited $rc (expected 3: not found)"
# get job -o yaml is the whole job in the object form (its document under spec, its status beside
# it). Under another name it is refused (the checkpoint directory is the finished job's); resubmitted
# as it is (the same name, the same token) it runs again on that directory and finds the work done.
"$MOECTL" get job "$id" -o yaml >"$WORK/again.yaml"
grep -q "^state: SUCCEEDED" "$WORK/again.yaml" || fail "get job -o yaml: no state: $(head -5 "$WORK/again.yaml")"
python3 - "$WORK/again.yaml" "$WORK/other.yaml" <<'PY'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
d["spec"]["metadata"]["name"] = "ok-other"
yaml.safe_dump(d, open(sys.argv[2], "w"))
PY
"$MOECTL" submit -f "$WORK/other.yaml" >/dev/null 2>&1 && fail "another job took a finished job's checkpoint directory"
again=$("$MOECTL" submit -f "$WORK/again.yaml") || fail "get job -o yaml could not be resubmitted"
"$MOECTL" watch "$again" >/dev/null || fail "the resubmitted job did not succeed"
echo "submit: $id SUCCEEDED"

# 2b. A pipeline-parallel job through the controller: the ranks' coordinates follow the layout.
make_job "$WORK/pp.yaml" pp 6 0 2 1
sed -i 's/expert_parallel: 1, timeout_seconds/expert_parallel: 1, pipeline_parallel: 2, timeout_seconds/' "$WORK/pp.yaml"
id=$("$MOECTL" submit -f "$WORK/pp.yaml")
"$MOECTL" watch "$id" >"$WORK/pp-watch.txt" || { cat "$WORK/pp-watch.txt"; fail "the PP2 job failed"; }
"$MOECTL" describe job "$id" >"$WORK/pp-describe.txt"
grep -q "PP 2 x DP 1" "$WORK/pp-describe.txt" && grep -q "rank 1 (pp 1, dp 0, ep 0; " "$WORK/pp-describe.txt" ||
  { cat "$WORK/pp-describe.txt"; fail "describe of the PP2 job"; }
grep -q "pipeline bubble [0-9.]*%" "$WORK/pp-describe.txt" && grep -q "memory peak 0.0[0-9]* GB on rank 0" "$WORK/pp-describe.txt" ||
  { cat "$WORK/pp-describe.txt"; fail "the PP2 job's metrics lack the bubble or the memory peak"; }
echo "pipeline: $id (PP 2) SUCCEEDED; describe shows (pp, dp, ep) per rank"

# 3. Cancel.
wait_free() {
  for _ in $(seq 1 100); do
    busy=$("$MOECTL" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="BUSY"))')
    [ "$busy" = 0 ] && return 0; sleep 0.2
  done
  fail "workers still busy: $busy"
}
wait_step() {  # <id> <step>
  for _ in $(seq 1 300); do [ "$(job_field "$1" 'int(d.get("last_metrics",{}).get("step",0))')" -ge "$2" ] && return 0; sleep 0.2; done
  fail "$1 did not reach step $2"
}
make_job "$WORK/long.yaml" long 100000 0
sed -i 's/metadata: {name: long, priority: 0}/metadata: {name: long, priority: 0, labels: {team: research, tier: low}}/' "$WORK/long.yaml"
grep -q "team: research" "$WORK/long.yaml" || fail "examples/tiny.yaml's metadata line changed: this test's sed no longer applies"
id=$("$MOECTL" submit -f "$WORK/long.yaml")
wait_state "$id" RUNNING 60
wait_step "$id" 2
[ "$("$MOECTL" cancel "$id")" = "$id STOPPING" ] || fail "cancel: $(job_state "$id") (want STOPPING until the ranks ended)"
wait_state "$id" CANCELLED 60
for _ in $(seq 1 100); do
  busy=$("$MOECTL" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="BUSY"))')
  [ "$busy" = 0 ] && break; sleep 0.2
done
[ "$busy" = 0 ] || fail "workers still busy after the cancel"
grep -q "stopping before step" "$WORK"/worker-*.log || fail "the ranks did not stop at a step boundary"
# The cancel kept the work: a checkpoint at the last step trained (interval_steps is 0: no other).
ck=$(ls -d "$WORK/ckpt-long"/step_* 2>/dev/null | sed 's/.*step_0*//' | sort -n | tail -1)
stopped=$(grep -ho "stopping before step [0-9]*" "$WORK"/worker-*.log | tail -1 | grep -o '[0-9]*$')
[ -n "$ck" ] && [ "$ck" = $((stopped - 1)) ] || fail "the cancel's checkpoint is at step ${ck:-none}; the ranks stopped before step $stopped"
[ "$(job_field "$id" 'd.get("checkpoint_step",0)')" = "$ck" ] || fail "the job records checkpoint $(job_field "$id" 'd.get("checkpoint_step",0)'), not the stop's $ck"
# Labels select it; -o wide shows them with the attempt and the reason.
[ "$("$MOECTL" get jobs -l team=research,tier!=high -o name)" = "job/$id" ] || fail "get jobs -l does not select the labelled job"
[ -z "$("$MOECTL" get jobs -l team=infra -o name)" ] || fail "get jobs -l team=infra selected a research job"
"$MOECTL" get jobs -l 'team in (a,b)' >/dev/null 2>"$WORK/sel.err" && fail "a set-based selector was accepted"
grep -q -- "--selector: cannot read" "$WORK/sel.err" || fail "the selector error does not name the flag: $(cat "$WORK/sel.err")"
"$MOECTL" get jobs -o wide -l team | grep -q "team=research,tier=low" || fail "-o wide lacks the labels"
# Who did it: the admin token's name ("ops") is in the job's events.
"$MOECTL" describe job "$id" >"$WORK/cancel-describe.txt"
grep -q "Submitted.*; by ops" "$WORK/cancel-describe.txt" && grep -q "cancelled by ops" "$WORK/cancel-describe.txt" ||
  { cat "$WORK/cancel-describe.txt"; fail "the events do not say who submitted and cancelled"; }
echo "cancel: $id CANCELLED, ranks stopped at a step boundary and checkpointed step $ck; selected by its labels"
wait_free

# cancel --now: killed at once, no checkpoint.
make_job "$WORK/now.yaml" now 100000 0
id=$("$MOECTL" submit -f "$WORK/now.yaml")
wait_step "$id" 3
"$MOECTL" cancel --now "$id" >/dev/null
wait_free
ls -d "$WORK/ckpt-now"/step_* >/dev/null 2>&1 && fail "cancel --now left a checkpoint"
"$MOECTL" describe job "$id" | grep -q -- "--now" || fail "the Cancelled event does not say --now"
echo "cancel --now: $id killed without a checkpoint"

# drain --wait: the job moves off the drained worker, resumes from the checkpoint its ranks wrote as
# they stopped, and uses no restart.
make_job "$WORK/mv.yaml" moving 40 0
id=$("$MOECTL" submit -f "$WORK/mv.yaml")
wait_step "$id" 5
victim=$(job_field "$id" 'd["placement"][0]["worker"]')
"$MOECTL" get workers -w --interval 0.2 >"$WORK/workers-w.txt" 2>&1 &
wpid=$!
PIDS+=($wpid)
sleep 1
timeout 120 "$MOECTL" drain --wait "$victim" >"$WORK/drain.txt" || fail "drain --wait: $(cat "$WORK/drain.txt")"
sleep 1
kill $wpid 2>/dev/null || true
# get -w: the table (header and 3 workers), then a row per change: the victim DRAINING, then DRAINED.
[ "$(head -1 "$WORK/workers-w.txt" | awk '{print $1}')" = NAME ] || fail "get workers -w printed no header: $(head -3 "$WORK/workers-w.txt")"
tail -n +5 "$WORK/workers-w.txt" | grep -E "^$victim " | grep -q DRAINED || fail "get -w showed no DRAINED row for $victim: $(cat "$WORK/workers-w.txt")"
grep -q "is free" "$WORK/drain.txt" || fail "drain --wait did not wait for the worker: $(cat "$WORK/drain.txt")"
"$MOECTL" get workers | grep -E "^$victim " | grep -q DRAINED || fail "the drained worker is not DRAINED: $("$MOECTL" get workers)"
wait_state "$id" SUCCEEDED 180
[ "$(job_field "$id" 'd.get("restarts",0)')" = 0 ] || fail "drain --wait used a restart"
[ "$(job_field "$id" 'd.get("attempt",0)')" = 2 ] || fail "the drained job did not move to a second attempt"
job_field "$id" '[p["worker"] for p in d["placement"]]' | grep -q "'$victim'" && fail "the job still runs on the drained worker"
"$MOECTL" undrain "$victim" >/dev/null
echo "drain --wait: $id moved off $victim without a restart and SUCCEEDED"

# 3b. Preemption: a job of higher priority that does not fit stops a lower one, which checkpoints,
# waits as PREEMPTED and resumes from that checkpoint once the higher one is done, with no restart used.
make_job "$WORK/low.yaml" low 60 0
make_job "$WORK/high.yaml" high 10 0
sed -i 's/metadata: {name: high, priority: 0}/metadata: {name: high, priority: 10}/' "$WORK/high.yaml"
low=$("$MOECTL" submit -f "$WORK/low.yaml")
wait_step "$low" 5
high=$("$MOECTL" submit -f "$WORK/high.yaml")
wait_state "$high" RUNNING 60
timeout 120 "$MOECTL" logs "$high" -f >"$WORK/high-f.txt" 2>&1 &
follower=$!
[ "$(job_state "$low")" = PREEMPTED ] || fail "the low-priority job is $(job_state "$low") while the high one runs"
wait_state "$high" SUCCEEDED 120
# moectl logs: -f ended by itself when the rank did, with the rank's whole output; --tail; a bad rank.
wait $follower || fail "logs -f did not end with the rank: $(tail -3 "$WORK/high-f.txt")"
grep -q "iteration *10/ *10" "$WORK/high-f.txt" || fail "logs -f lacks the last iteration: $(tail -3 "$WORK/high-f.txt")"
[ "$("$MOECTL" logs "$high" --tail 2 | wc -l)" = 2 ] || fail "logs --tail 2: $("$MOECTL" logs "$high" --tail 2)"
# By name, as every other verb takes a job (one job is named high): the same lines as by its id;
# job/high too; a name no job has is refused, naming it.
[ "$("$MOECTL" logs high --tail 2)" = "$("$MOECTL" logs "$high" --tail 2)" ] ||
  fail "logs by name: $("$MOECTL" logs high --tail 2 2>&1)"
[ "$("$MOECTL" logs job/high --tail 2)" = "$("$MOECTL" logs "$high" --tail 2)" ] ||
  fail "logs job/NAME: $("$MOECTL" logs job/high --tail 2 2>&1)"
set +e; out=$("$MOECTL" logs no-such-job 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "no job with the id or name 'no-such-job'" <<<"$out" || fail "logs of no such job: rc $rc, $out"
"$MOECTL" logs "$high" --rank 1 | grep -q "device cpu" && fail "rank 1 printed rank 0's setup line"
# Every rank has a log, even one that printed nothing: the agent's lines say where it ran and how it
# ended; --all-ranks prints them all in rank order, prefixed.
"$MOECTL" logs "$high" --rank 1 >"$WORK/high-r1.txt"
grep -q "^moe-worker: rank 1 of $high attempt [0-9]* started on " "$WORK/high-r1.txt" &&
  grep -q "^moe-worker: rank 1 finished (exit code 0)" "$WORK/high-r1.txt" || fail "logs --rank 1: $(cat "$WORK/high-r1.txt")"
"$MOECTL" logs "$high" --all-ranks >"$WORK/high-all.txt"
grep -q "^\[rank 0\] .*iteration *10/ *10" "$WORK/high-all.txt" && grep -q "^\[rank 1\] moe-worker: rank 1 finished" "$WORK/high-all.txt" ||
  fail "logs --all-ranks: $(cat "$WORK/high-all.txt")"
set +e; out=$("$MOECTL" logs "$high" --rank 7 2>&1); rc=$?; set -e
[ $rc -eq 6 ] && grep -q -- "--rank: 7 is not a rank of $high (0..1)" <<<"$out" || fail "logs --rank 7: rc $rc, $out"
wait_state "$low" SUCCEEDED 180
[ "$(job_field "$low" 'd.get("restarts",0)')" = 0 ] || fail "the preemption used a restart"
"$MOECTL" describe job "$low" | grep -q "Preempted.*preempted by job $high" || fail "no Preempted event naming $high"
ck=$(grep -h "resumed from .*ckpt-low/step_" "$WORK"/worker-*.log | grep -o "step_[0-9]*" | head -1 | sed 's/step_0*//')
[ -n "$ck" ] && [ "$ck" -ge 5 ] || fail "the preempted job did not resume from the checkpoint it wrote as it stopped (${ck:-none})"
echo "preemption: $high stopped $low, which resumed from its step-$ck checkpoint without a restart; both SUCCEEDED; moectl logs (-f, --tail, by name) hold"

# 4. kill -9 a worker mid-run.
make_job "$WORK/fo.yaml" failover 60 10
id=$("$MOECTL" submit -f "$WORK/fo.yaml")
"$MOECTL" watch "$id" -o json >"$WORK/fo.jsonl" &
watcher=$!
PIDS+=($watcher)
for _ in $(seq 1 300); do
  step=$(python3 -c 'import json,sys
s=0
for l in open(sys.argv[1]):
    r=json.loads(l)
    if "metrics" in r: s=max(s,int(r["metrics"].get("step",0)))
print(s)' "$WORK/fo.jsonl" 2>/dev/null || echo 0)
  [ "$step" -ge 15 ] && break; sleep 0.1
done
[ "$step" -ge 15 ] || fail "the failover job did not reach step 15"
victim=$(job_field "$id" 'd["placement"][1]["worker"]')
kill -9 "${WORKER_PID[$victim]}"
wait_state "$id" SUCCEEDED 180
wait $watcher || fail "watch -o json did not end with SUCCEEDED"
[ "$(job_field "$id" 'd.get("restarts",0)')" = 1 ] || fail "restarts: $(job_field "$id" 'd.get("restarts",0)')"
"$MOECTL" describe job "$id" >"$WORK/fo-describe.txt"
grep -q "Restarting" "$WORK/fo-describe.txt" || fail "no Restarting event"
grep -q "lost" "$WORK/fo-describe.txt" || fail "the reason does not say the worker was lost"
# The same job, uninterrupted, outside the control plane (same layout and threads).
python3 - "$WORK/fo.yaml" "$WORK/ref.yaml" "$WORK/ckpt-ref" <<'PY'
import sys
t = open(sys.argv[1]).read()
import re
t = re.sub(r"dir: [^,]*, interval_steps: 10", f"dir: {sys.argv[3]}, interval_steps: 10", t)
open(sys.argv[2], "w").write(t)
PY
"$BIN/moe-train" --config "$WORK/ref.yaml" --nproc 2 --threads 1 --metrics-out "$WORK/ref.jsonl" 2>"$WORK/ref.log" || fail "reference run"
python3 - "$WORK/fo.jsonl" "$WORK/ref.jsonl" <<'PY'
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
by_attempt = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "metrics" in r:
        m = r["metrics"]
        by_attempt.setdefault(int(m.get("attempt", 0)), {})[int(m["step"])] = m["loss"]
assert set(by_attempt) >= {1, 2}, f"attempts seen: {sorted(by_attempt)}"
second = by_attempt[2]
first_resumed = min(second)
assert first_resumed > 1 and (first_resumed - 1) % 10 == 0, f"attempt 2 starts at step {first_resumed}: not after a checkpoint"
bad = [s for s in second if second[s] != ref[s]]
assert not bad, f"losses after the resume differ from the uninterrupted run at steps {bad[:5]}"
assert all(by_attempt[1][s] == ref[s] for s in by_attempt[1]), "attempt 1 differs from the reference"
print(f"failover: attempt 2 resumed at step {first_resumed}; {len(second)} steps equal the uninterrupted run bitwise")
PY

# 5. kill -9 the controller mid-run; restart it on the same state.
make_job "$WORK/cr.yaml" restart 160 20
id=$("$MOECTL" submit -f "$WORK/cr.yaml")
wait_state "$id" RUNNING 60
sleep 2
kill -9 $CTL_PID
sleep 1
start_controller --tokens "$WORK/tokens" --lease-seconds 3 --restart-backoff-seconds 1
[ -n "$(job_state "$id")" ] || fail "the job is gone after the controller restart"
# 5b. And a clean stop (SIGTERM, as a rolling update sends): the same, no restart either. Once its
#     ranks reported back after the kill (a SIGTERM before that would only test the second restart).
wait_state "$id" RUNNING 60
for _ in $(seq 1 300); do
  [ "$("$MOECTL" describe job "$id" | grep -c "Reconnected")" -ge 1 ] && break
  sleep 0.1
done
[ "$("$MOECTL" describe job "$id" | grep -c "Reconnected")" -ge 1 ] || fail "no Reconnected event 30 s after the kill -9"
kill -TERM $CTL_PID
wait $CTL_PID 2>/dev/null || true
grep -q "shutting down" "$WORK/controller-$CTL_STARTS.log" || fail "the controller did not stop cleanly on SIGTERM"
start_controller --tokens "$WORK/tokens" --lease-seconds 3 --restart-backoff-seconds 1
wait_state "$id" SUCCEEDED 180
[ "$(job_field "$id" 'd.get("restarts",0)')" = 0 ] || fail "the job restarted although its ranks kept running"
[ "$("$MOECTL" describe job "$id" | grep -c "Reconnected")" -ge 2 ] || fail "not two Reconnected events: $("$MOECTL" describe job "$id")"
echo "controller restarts (kill -9, then SIGTERM): $id still there, carried on and SUCCEEDED without a restart"
# 6. A GPU job on a machine without a usable GPU: the rank exits 4 (cannot run here), the job fails
#    without burning its restarts, and the message says what is missing.
if ! nvidia-smi >/dev/null 2>&1; then
  alive=$("$MOECTL" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin).get("workers",[]) if w.get("state") in ("IDLE","BUSY")))')
  start_worker g0 r9 g0 --token $WORKER --device cuda:0 --memory-gb 80  # a GPU worker says its memory
  wait_workers $((alive + 1))
  make_job "$WORK/gpu.yaml" gpu 5 0 1 1
  sed -i 's/device: cpu/device: cuda/' "$WORK/gpu.yaml"
  id=$("$MOECTL" submit -f "$WORK/gpu.yaml")
  wait_state "$id" FAILED 60
  msg=$(job_field "$id" "d.get('message','')")
  grep -Eq "usable CUDA device|this build of the engine has no CUDA kernels" <<<"$msg" || fail "gpu job failed without saying why: $msg"
  [ "$(job_field "$id" "d.get('restarts',0)")" = 0 ] || fail "a job that cannot run here was restarted"
  echo "gpu job without a GPU: $id FAILED at once: $msg"
fi
echo "control plane holds"
