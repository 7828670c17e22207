#!/usr/bin/env bash
# moectl in kubectl's grammar, against a real controller and fake node agents (no training):
#   - submit -f - reads the job from stdin;
#   - get job/ID, get jobs/ID, get job NAME (a job by its metadata.name), describe ID;
#   - cancel job/ID, events job/ID;
#   - a name two jobs carry is refused with both ids; an unknown id or name is NOT_FOUND (exit 3);
#   - a mistyped resource or kind is refused with the choices and the nearest (exit 2).
source "$(dirname "$0")/lib.sh"
M="$BIN/moectl"

start_controller
start_worker a0 r0 a0 --fake-step-seconds 0.2 --slots 2 --memory-gb 1000
wait_workers 2
make_job "$WORK/job.yaml" grammar-probe 100000 0 1 1
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/job.yaml"

id=$("$M" submit -f - <"$WORK/job.yaml") || fail "submit -f - refused the job from stdin"
[ -n "$id" ] || fail "submit -f - printed no id"
wait_state "$id" RUNNING 30
for form in "job/$id" "jobs/$id" "job $id" "job grammar-probe"; do
  # shellcheck disable=SC2086  # the form is two words or one on purpose
  got=$("$M" get $form -o name) || fail "get $form failed"
  [ "$got" = "job/$id" ] || fail "get $form gave '$got', not job/$id"
done
"$M" describe "$id" | grep -q "^Job: *$id\|$id" || fail "describe ID (no kind) does not describe the job"
"$M" describe grammar-probe | grep -q "$id" || fail "describe NAME does not describe the job"
"$M" events "job/$id" | grep -q "Scheduled\|Submitted" || fail "events job/ID shows no events"

# The same name twice: refused with both ids.
id2=$("$M" submit -f "$WORK/job.yaml")
rc=0; out=$("$M" get job grammar-probe 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "names 2 jobs" <<<"$out" && grep -q "$id" <<<"$out" && grep -q "$id2" <<<"$out" ||
  fail "an ambiguous name: rc $rc, $out"
rc=0; out=$("$M" get job no-such-job 2>&1) || rc=$?
[ $rc = 3 ] && grep -q "no job with the id or name 'no-such-job'" <<<"$out" || fail "an unknown job: rc $rc, $out"

# Mistyped resources and kinds.
rc=0; out=$("$M" get jbos 2>&1) || rc=$?
[ $rc = 2 ] && grep -q "unknown resource 'jbos' (did you mean 'jobs'?); the resources are jobs, job, workers" <<<"$out" ||
  fail "get jbos: rc $rc, $out"
rc=0; out=$("$M" describe wroker a0 2>&1) || rc=$?
[ $rc = 2 ] && grep -q "did you mean 'worker'" <<<"$out" || fail "describe wroker: rc $rc, $out"

"$M" cancel "job/$id" >/dev/null || fail "cancel job/ID failed"
"$M" cancel "$id2" >/dev/null
wait_state "$id" CANCELLED 30
echo "moectl_grammar_test passed"
