#!/usr/bin/env bash
# moectl in kubectl's grammar, against a real controller and fake node agents (no training):
#   - submit -f - reads the job from stdin;
#   - get job/ID, get jobs/ID, get job NAME (a job by its metadata.name), describe ID; get worker
#     NAME, get worker/NAME, get workers A B;
#   - cancel job/ID, events job/ID;
#   - a name two jobs carry is refused with both ids; an unknown id or name is NOT_FOUND (exit 3);
#   - a mistyped resource or kind is refused with the choices and the nearest (exit 2);
#   - several ids a verb; -o json keeps zero values (rank 0) with numbers as numbers and RFC 3339
#     times; -o jsonpath= and -o custom-columns=; events -o json and events -w -o json;
#   - cancel by -l selector, by --name, and delete job --state (docs/operations.md);
#   - a dataset the controller can see is checked at submit.
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

# An absolute dataset under a data root the controller sees too (here the same machine) that does
# not exist: refused at submit naming it, not by a rank minutes later.
src=${MOE_SOURCE_DIR:-$PWD}
sed "s#path: data/fortunes#path: $src/data/no-such-set#" "$WORK/job.yaml" >"$WORK/missing.yaml"
grep -q "no-such-set" "$WORK/missing.yaml" || fail "the missing-data job file: $(grep path: "$WORK/missing.yaml")"
rc=0; out=$("$M" submit -f "$WORK/missing.yaml" 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "spec.data.path: $src/data/no-such-set.idx does not exist" <<<"$out" || fail "a missing dataset: rc $rc, $out"

# The same name twice: refused with both ids.
id2=$("$M" submit -f "$WORK/job.yaml")
rc=0; out=$("$M" get job grammar-probe 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "names 2 jobs" <<<"$out" && grep -q "$id" <<<"$out" && grep -q "$id2" <<<"$out" ||
  fail "an ambiguous name: rc $rc, $out"
rc=0; out=$("$M" get job no-such-job 2>&1) || rc=$?
[ $rc = 3 ] && grep -q "no job with the id or name 'no-such-job'" <<<"$out" || fail "an unknown job: rc $rc, $out"

# Workers by name: get worker NAME, worker/NAME, get workers A B.
w0=$("$M" get workers -o name | head -1); w0=${w0#worker/}
[ "$("$M" get worker "$w0" -o 'jsonpath={.name}')" = "$w0" ] || fail "get worker NAME: $("$M" get worker "$w0" 2>&1)"
[ "$("$M" get "worker/$w0" -o name)" = "worker/$w0" ] || fail "get worker/NAME: $("$M" get "worker/$w0" -o name 2>&1)"
[ "$("$M" get workers -o name | wc -l)" = 2 ] && [ "$("$M" get workers $("$M" get workers -o name | sed 's#worker/##') -o name | wc -l)" = 2 ] ||
  fail "get workers A B: $("$M" get workers -o name 2>&1)"
rc=0; "$M" get worker no-such-worker >/dev/null 2>&1 || rc=$?
[ $rc = 3 ] || fail "get worker no-such-worker exited $rc (expected 3)"

# Mistyped resources and kinds.
rc=0; out=$("$M" get jbos 2>&1) || rc=$?
[ $rc = 2 ] && grep -q "unknown resource 'jbos' (did you mean 'jobs'?); the resources are jobs, job, workers" <<<"$out" ||
  fail "get jbos: rc $rc, $out"
rc=0; out=$("$M" describe wroker a0 2>&1) || rc=$?
[ $rc = 2 ] && grep -q "did you mean 'worker'" <<<"$out" || fail "describe wroker: rc $rc, $out"

# Several ids a verb; the object form; jsonpath and custom-columns.
wait_state "$id2" RUNNING 30
[ "$("$M" get job "$id" "job/$id2" -o name | sort | tr '\n' ' ')" = "$(printf 'job/%s\n' "$id" "$id2" | sort | tr '\n' ' ')" ] ||
  fail "get job A B: $("$M" get job "$id" "$id2" -o name 2>&1)"
"$M" get job "$id" "$id2" -o json | python3 -c 'import json,sys; assert len(json.load(sys.stdin)["jobs"]) == 2' ||
  fail "get job A B -o json is not a list of two"
"$M" get job "$id" -o json >"$WORK/one.json" || fail "get job -o json"
python3 - "$WORK/one.json" <<'PY' || fail "-o json: $(head -c 600 "$WORK/one.json")"
import json, re, sys
d = json.load(open(sys.argv[1]))
p = d["placement"][0]
assert p["rank"] == 0 and p["dp"] == 0 and p["ep"] == 0, p      # zero values kept
assert isinstance(d["attempt"], int) and isinstance(d["restarts"], int), d
assert isinstance(d["last_metrics"]["step"], int), d["last_metrics"]  # int64: a number
assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", d["created_at"]), d["created_at"]
assert "lastMetrics" not in d and "waiting_reason" in d, sorted(d)
PY
[ "$("$M" get "job/$id" -o 'jsonpath={.state}')" = RUNNING ] || fail "jsonpath={.state}: $("$M" get "job/$id" -o 'jsonpath={.state}' 2>&1)"
[ "$("$M" get job "$id" -o 'jsonpath={.placement[?(@.rank==0)].rank}')" = 0 ] || fail "jsonpath with a filter"
"$M" get jobs -o 'jsonpath={range .jobs[*]}{.id}{"\t"}{.state}{"\n"}{end}' | grep -qx "$id2	RUNNING" ||
  fail "jsonpath range: $("$M" get jobs -o 'jsonpath={range .jobs[*]}{.id}{"\t"}{.state}{"\n"}{end}' 2>&1)"
# The object forms list the jobs whole (ListJobs' full view): a column from the spec's body is there.
"$M" get jobs -o custom-columns=ID:.id,STATE:.state,NAME:.spec.metadata.name,SEQ:.spec.spec.data.seq_length >"$WORK/cols.txt" || fail "custom-columns"
head -1 "$WORK/cols.txt" | grep -q "^ID  *STATE  *NAME  *SEQ$" && grep -q "^$id  *RUNNING  *grammar-probe  *64$" "$WORK/cols.txt" ||
  fail "custom-columns: $(cat "$WORK/cols.txt")"
rc=0; out=$("$M" get jobs -o custom-columns=ID 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "is not NAME:PATH" <<<"$out" || fail "a bad custom-columns: rc $rc, $out"
rc=0; out=$("$M" get jobs -o jsonpath='{.jobs[0' 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "jsonpath: an unclosed" <<<"$out" || fail "a bad jsonpath: rc $rc, $out"
rc=0; out=$("$M" get jobs -o jsn 2>&1) || rc=$?
[ $rc = 2 ] && grep -q "none of table, wide, json" <<<"$out" || fail "-o jsn: rc $rc, $out"
"$M" events "$id" -o json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["events"] and d["events"][0]["seq"] >= 1' ||
  fail "events -o json"

# Cancel by selector and by name, with events -w -o json following one job to its end.
sed 's/metadata: {name: grammar-probe,/metadata: {name: grammar-labelled, labels: {team: probe},/' "$WORK/job.yaml" >"$WORK/labelled.yaml"
grep -q "labels: {team: probe}" "$WORK/labelled.yaml" || fail "the labelled job file: $(grep metadata "$WORK/labelled.yaml")"
id3=$("$M" submit -f "$WORK/labelled.yaml") || fail "submit the labelled job"
"$M" events "$id3" -w -o json --interval 0.2 >"$WORK/events3.jsonl" &
watcher=$!
rc=0; out=$("$M" cancel 2>&1) || rc=$?
[ $rc = 6 ] && grep -q "select jobs with -l" <<<"$out" || fail "cancel with nothing: rc $rc, $out"
"$M" cancel -l team=probe >"$WORK/cancel-l.txt" || fail "cancel -l team=probe"
grep -q "^$id3 " "$WORK/cancel-l.txt" && ! grep -q "^$id " "$WORK/cancel-l.txt" || fail "cancel -l: $(cat "$WORK/cancel-l.txt")"
wait_state "$id3" CANCELLED 30
for _ in $(seq 1 50); do kill -0 $watcher 2>/dev/null || break; sleep 0.2; done
kill -0 $watcher 2>/dev/null && { kill $watcher; fail "events -w did not end with the job"; }
python3 - "$WORK/events3.jsonl" <<'PY' || fail "events -w -o json: $(cat "$WORK/events3.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
types = [e["type"] for e in lines]
assert "Submitted" in types and types[-1] == "Cancelled", types
assert len({e["seq"] for e in lines}) == len(lines), "an event printed twice"
PY
[ "$(job_state "$id")" = RUNNING ] || fail "cancel -l touched a job without the label: $(job_state "$id")"
"$M" cancel --name grammar-probe >"$WORK/cancel-n.txt" || fail "cancel --name"
[ "$(wc -l <"$WORK/cancel-n.txt")" = 2 ] || fail "cancel --name grammar-probe: $(cat "$WORK/cancel-n.txt")"
wait_state "$id" CANCELLED 30
wait_state "$id2" CANCELLED 30
"$M" delete job --state CANCELLED >"$WORK/deleted.txt" || fail "delete job --state CANCELLED"
[ "$(grep -c deleted "$WORK/deleted.txt")" = 3 ] || fail "delete job --state: $(cat "$WORK/deleted.txt")"
rc=0; "$M" get job "$id" >/dev/null 2>&1 || rc=$?
[ $rc = 3 ] || fail "a deleted job is still there (rc $rc)"
echo "moectl_grammar_test passed"
