#!/bin/bash
# Queues with quotas on loopback (Kueue's ClusterQueues and cohorts as the model): two queues of
# quota 2 in one cohort, four CPU workers. A queue alone borrows the other's idle quota; when the
# other queue submits, it reclaims its share (the borrowers checkpoint and wait as PREEMPTED, no
# restart used); when it is idle again the first borrows again. moectl get queues shows it all.
source "$(dirname "$0")/lib.sh"
MOECTL="$BIN/moectl"
cat >"$WORK/queues.yaml" <<YAML
# two teams sharing four CPU workers
queues:
  - {name: team-a, cohort: shared, quota: {cpu: 2}}
  - {name: team-b, cohort: shared, quota: {cpu: 2}}
default_queue: team-a
YAML
# The daemons log JSON lines here (spdlog; one object a line).
start_controller --queues "$WORK/queues.yaml" --log-format json --log-file "$WORK/controller.jsonl"
start_worker w0 r0 n0 --log-format json --log-file "$WORK/w0.jsonl" --log-max-file-mb 1 --log-max-files 2
for n in 1 2 3; do start_worker "w$n" r0 "n$n"; done
wait_workers 4

# A bad queues file is refused at start, naming the field.
printf 'queues:\n  - {name: x, quota: {tpu: 1}}\n' >"$WORK/bad.yaml"
set +e; out=$("$BIN/moe-controller" --listen 127.0.0.1:0 --state-dir "$WORK/bad-state" --queues "$WORK/bad.yaml" 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q "queues\[0\].quota.tpu: unknown device type" <<<"$out" || fail "a bad queues file: rc $rc, $out"

submit_to() {  # submit_to <queue> <name>: a 1-rank job that runs until cancelled
  make_job "$WORK/$2.yaml" "$2" 100000 0 1 1
  sed -i "s/metadata: {name: $2, priority: 0}/metadata: {name: $2, priority: 0, queue: $1}/" "$WORK/$2.yaml"
  grep -q "queue: $1" "$WORK/$2.yaml" || fail "the job file has no queue line"
  "$MOECTL" submit -f "$WORK/$2.yaml"
}
queue_col() {  # queue_col <queue> <column>: from moectl get queues -o json
  "$MOECTL" get queues -o json | python3 -c "
import json,sys
for q in json.load(sys.stdin)['queues']:
    if q['name'] == sys.argv[1]:
        r = (q.get('resources') or [{}])[0]; k = sys.argv[2]
        camel = k.split('_')[0] + ''.join(w.title() for w in k.split('_')[1:])
        print(r.get(k, r.get(camel, q.get(k, q.get(camel, 0)))))" "$1" "$2"
}
wait_until() {  # wait_until <seconds> <what> <command...>
  local t=$1 what=$2; shift 2
  for _ in $(seq 1 $((t * 5))); do "$@" && return 0; sleep 0.2; done
  fail "$what (after ${t}s)"
}

# 1. team-b is idle: team-a runs four, two of them on team-b's lent quota.
A=()
for i in 0 1 2 3; do A+=("$(submit_to team-a "a$i")"); sleep 1.1; done
for id in "${A[@]}"; do wait_state "$id" RUNNING 60; done
[ "$(queue_col team-a used)" = 4 ] && [ "$(queue_col team-a borrowed)" = 2 ] || fail "team-a: $("$MOECTL" get queues)"
"$MOECTL" get queues | tee "$WORK/queues-borrowing.txt"
grep -q "^team-a *shared *cpu *2 *4 *2 " "$WORK/queues-borrowing.txt" || fail "the table does not show team-a borrowing 2"

# 2. team-b submits two: it reclaims its quota from team-a's youngest two within 30 s.
t0=$(date +%s)
B=("$(submit_to team-b b0)" "$(submit_to team-b b1)")
for id in "${B[@]}"; do wait_state "$id" RUNNING 30; done
echo "team-b got its share in $(( $(date +%s) - t0 )) s"
for i in 2 3; do
  s=$(job_state "${A[$i]}"); [ "$s" = PREEMPTED ] || fail "${A[$i]} (team-a's youngest) is $s, not PREEMPTED"
  "$MOECTL" describe job "${A[$i]}" | grep -q "queue team-b reclaims the quota queue team-a borrowed" || fail "no reclaim event on ${A[$i]}"
done
for i in 0 1; do [ "$(job_state "${A[$i]}")" = RUNNING ] || fail "${A[$i]} (within team-a's quota) was disturbed"; done
[ "$(queue_col team-a used)" = 2 ] && [ "$(queue_col team-b used)" = 2 ] && [ "$(queue_col team-a borrowed)" = 0 ] ||
  fail "after the reclaim: $("$MOECTL" get queues)"
[ "$(queue_col team-a pending_jobs)" = 2 ] || fail "team-a's preempted jobs are not pending: $("$MOECTL" get queues)"
"$MOECTL" get job "${A[3]}" -o json | grep -q "over quota: cohort shared uses 4 of its 4 cpu ranks" ||
  fail "the waiting reason: $("$MOECTL" get job "${A[3]}" -o json | grep -i waiting)"

# 3. Under contention each keeps its share: a third team-b job waits.
b2=$(submit_to team-b b2)
sleep 3
[ "$(job_state "$b2")" = PENDING ] || fail "team-b's third job is $(job_state "$b2") past its quota under contention"

# 4. team-b goes idle: team-a borrows again, and its preempted jobs resume with no restart used.
for id in "${B[@]}" "$b2"; do "$MOECTL" cancel --now "$id" >/dev/null; done
for i in 2 3; do wait_state "${A[$i]}" RUNNING 60; done
for i in 2 3; do
  [ "$(job_field "${A[$i]}" 'd.get("restarts",0)')" = 0 ] || fail "${A[$i]}: the reclaim used a restart"
  [ "$(job_field "${A[$i]}" 'd.get("attempt",0)')" = 2 ] || fail "${A[$i]} did not start a second attempt"
done
[ "$(queue_col team-a borrowed)" = 2 ] || fail "team-a does not borrow again: $("$MOECTL" get queues)"
for id in "${A[@]}"; do "$MOECTL" cancel --now "$id" >/dev/null; done

# The JSON logs: every line an object with time, level and component; the rank's lines also name the
# job and the rank.
python3 - "$WORK/controller.jsonl" "$WORK/w0.jsonl" <<'PY' || fail "the JSON logs"
import json, sys
for path, component in zip(sys.argv[1:], ["controller", "worker w0"]):
    lines = [json.loads(l) for l in open(path)]
    assert lines, path
    for d in lines:
        assert {"time", "level", "component", "message"} <= d.keys() and d["component"] == component, d
    ranks = [d for d in lines if "job" in d]
    assert component == "controller" or (ranks and all(isinstance(d["rank"], int) for d in ranks)), path
    print(path, len(lines), "lines,", len(ranks), "from ranks")
PY
echo "queues: team-a borrowed team-b's idle quota, team-b reclaimed it within 30 s, team-a borrowed again"
