#!/usr/bin/env bash
# Bounded inputs and safe output (docs/operations.md, Limits), with moectl and a Python gRPC client:
#   1. a 6 MiB data path and a report with a million per-layer entries are refused, and `get jobs`
#      keeps working, page by page (Python: page_size 2, then the token);
#   2. `moectl delete job` removes a finished job (and refuses a live one);
#   3. priorities at the bounds (±10^9) sort correctly; beyond them they are refused;
#   4. a second live job naming the same checkpoint directory is refused;
#   5. a retried submit with the same request id returns the same job;
#   6. a newline or ANSI escape in what a worker reports is escaped in the controller's log and in
#      moectl's tables; such a worker name is refused at registration; a worker whose registration
#      places a waiting job on it hears Registered before the assignment.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c 'import grpc, google.protobuf' 2>/dev/null ||
  fail "/usr/bin/python3 lacks grpc or protobuf (scripts/install-deps.sh test installs python3-grpcio)"
export MOE_SOURCE_DIR=${MOE_SOURCE_DIR:-$PWD} BIN
start_controller --rank-start-seconds 30
start_worker w0 r0 n0
wait_workers 1
"$BIN/moectl" drain w0 >/dev/null
MOECTL="$BIN/moectl"
py() { $PY - "$MOE_CONTROLLER" "$WORK" "$@"; }

# 1. Oversized inputs.
make_job "$WORK/big.yaml" bigpath 100 0 1 1
$PY - "$WORK/big.yaml" <<'PY'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1])); d["spec"]["data"]["path"] = "x" * (6 << 20)
yaml.safe_dump(d, open(sys.argv[1], "w"))
PY
set +e
out=$("$MOECTL" submit -f "$WORK/big.yaml" 2>&1); rc=$?
set -e
[ $rc -eq 6 ] || fail "a 6 MiB data path: rc $rc, ${out:0:200}"
echo "6 MiB path refused: ${out:0:160}"
[[ "$out" == *"over the limit of 1048576 bytes (1 MiB) for a job document"* ]] || fail "the size refusal names no limit: ${out:0:200}"
# Deep nesting: a sentence naming the limit, never a crash (a 100,000-level document once overflowed
# the parser's stack).
for n in 100 1000 100000; do
  python3 -c "import sys; n=int(sys.argv[1]); print('apiVersion: moe/v1\nkind: TrainingJob\nmetadata: {name: deep}\nspec: {model: ' + '['*n + ']'*n + '}')" $n >"$WORK/deep.yaml"
  set +e; out=$("$MOECTL" submit -f "$WORK/deep.yaml" 2>&1); rc=$?; set -e
  [ $rc -eq 6 ] && [[ "$out" == *"nesting deeper than 64 levels"* ]] || fail "$n-level nesting: rc $rc, ${out:0:200}"
done
echo "deep nesting refused: ${out:0:160}"
# The controller's own bound, for clients other than moectl: a 2 MiB path in the protobuf itself.
py <<'PY' || fail "the controller's document bound (above)"
import os, sys, grpc
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
p = g.pb()
job = p.job.TrainingJob(api_version="moe/v1", kind="TrainingJob")
job.metadata.name = "huge"
job.spec.data.path = "x" * (2 << 20)
try:
    g.unary(g.channel(sys.argv[1]), "/moe.v1.JobService/SubmitJob", p.js.SubmitJobRequest(job=job), p.job.Job)
    raise SystemExit("a 2 MiB job document was accepted")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "bytes; at most 65536" in e.details(), (e.code(), e.details())
    print("controller:", e.details()[:120])
PY
for n in 1 2 3 4 5; do make_job "$WORK/p$n.yaml" page$n 100 0 1 1; "$MOECTL" submit -f "$WORK/p$n.yaml" >/dev/null; done
py <<'PY' || fail "oversized report and paging (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
addr, work = sys.argv[1:3]
p = g.pb()
ch = g.channel(addr)
ids, token = [], ""
while True:
    r = g.unary(ch, "/moe.v1.JobService/ListJobs", p.js.ListJobsRequest(page_size=2, page_token=token), p.js.ListJobsResponse)
    assert len(r.jobs) <= 2
    ids += [j.id for j in r.jobs]
    token = r.next_page_token
    if not token:
        break
assert len(ids) == 5 and len(set(ids)) == 5, ids
r = g.unary(ch, "/moe.v1.JobService/ListJobs", p.js.ListJobsRequest(name_prefix="page3"), p.js.ListJobsResponse)
assert [j.id for j in r.jobs] == [i for i in ids if i.startswith("page3")], r
print("paged: 5 jobs in pages of 2; name_prefix filters")
# A worker with a job of its own reports a million per-layer entries.
w = g.FakeWorker(addr, None, "reporter", node="n9")
assert w.next("registered", 5) is not None, w.status
a = w.next("assign", 10)  # the oldest queued job: the only free worker (w0 is drained)
assert a is not None, "no assignment for the reporter"
w.send(started=p.ws.RankStarted(job_id=a.job_id, attempt=a.attempt, rank=a.rank))
m = p.job.StepMetrics(step=1, loss=1.0)
m.expert_load_imbalance_per_layer.extend([1.0] * 1000000)
w.send(step=p.ws.StepReport(job_id=a.job_id, attempt=a.attempt, rank=a.rank, metrics=m))
st = w.wait_end(10)
assert st == "INVALID_ARGUMENT", "a million per-layer entries: %s" % st
print("oversized report refused:", st, w.details[:120])
w.close()
PY
"$MOECTL" get jobs >/dev/null || fail "get jobs fails after the oversized inputs"
[ "$("$MOECTL" get jobs -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')" = 5 ] ||
  fail "get jobs does not page through every job"
"$MOECTL" get jobs --prefix page2 | grep -q page2 || fail "get jobs --prefix"

# 2. Delete.
victim=$("$MOECTL" get jobs -o json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["id"].startswith("page1")][0])')
set +e
"$MOECTL" delete job "$victim" >/dev/null 2>&1; rc=$?
set -e
[ $rc -eq 6 ] || fail "a live job was deleted (rc $rc)"
"$MOECTL" cancel "$victim" >/dev/null
"$MOECTL" delete job "$victim" | grep -q deleted || fail "delete of a cancelled job"
set +e; "$MOECTL" get job "$victim" >/dev/null 2>&1; rc=$?; set -e
[ $rc -eq 3 ] || fail "a deleted job is still found (rc $rc)"
echo "delete: live refused, finished removed"
for j in $("$MOECTL" get jobs -o json | python3 -c 'import json,sys; print(" ".join(j["id"] for j in json.load(sys.stdin)["jobs"]))'); do
  "$MOECTL" cancel "$j" >/dev/null 2>&1 || true
done

# 3. Priorities at the bounds, in queue order once w0 takes work again.
make_job "$WORK/low.yaml" low 100000 0 1 1
make_job "$WORK/high.yaml" high 100000 0 1 1
sed -i 's/priority: 0/priority: -1000000000/' "$WORK/low.yaml"
sed -i 's/priority: 0/priority: 1000000000/' "$WORK/high.yaml"
grep -q "priority: 1000000000" "$WORK/high.yaml" || fail "the example's priority line changed: fix this test"
low=$("$MOECTL" submit -f "$WORK/low.yaml")
high=$("$MOECTL" submit -f "$WORK/high.yaml")
sed 's/priority: 1000000000/priority: -9223372036854775808/; s/name: high/name: huge/' "$WORK/high.yaml" >"$WORK/huge.yaml"
set +e; out=$("$MOECTL" submit -f "$WORK/huge.yaml" 2>&1); rc=$?; set -e
[ $rc -eq 6 ] && grep -q "metadata.priority" <<<"$out" || fail "priority -2^63: rc $rc, $out"
"$MOECTL" undrain w0 >/dev/null
wait_state "$high" RUNNING 60
[ "$(job_state "$low")" = PENDING ] || fail "priority -10^9 went before +10^9"
echo "priorities: +10^9 before -10^9; -2^63 refused"

# 4. One checkpoint directory per live job.
sed "s/name: high/name: copycat/" "$WORK/high.yaml" >"$WORK/copycat.yaml"
set +e; out=$("$MOECTL" submit -f "$WORK/copycat.yaml" 2>&1); rc=$?; set -e
[ $rc -eq 6 ] && grep -q "checkpoint directory of live job $high" <<<"$out" || fail "shared checkpoint dir: rc $rc, $out"
echo "shared checkpoint directory refused"
# ... nor one inside a live job's or around it: one job's commits prune the step directories beneath
# its own (the outer job's final commit deleted the inner one's checkpoints).
# A job deep in $WORK/nest (not around the controller's state), then one inside high's and one
# around deep's.
sed "s/name: high/name: deep/; s#dir: $WORK/ckpt-high,#dir: $WORK/nest/deep,#" "$WORK/high.yaml" >"$WORK/deep.yaml"
sed "s/name: high/name: inner/; s#dir: $WORK/ckpt-high,#dir: $WORK/ckpt-high/inner,#" "$WORK/high.yaml" >"$WORK/inner.yaml"
sed "s/name: high/name: outer/; s#dir: $WORK/ckpt-high,#dir: $WORK/nest,#" "$WORK/high.yaml" >"$WORK/outer.yaml"
deep=$("$MOECTL" submit -f "$WORK/deep.yaml")
for n in inner outer; do
  grep -q "name: $n" "$WORK/$n.yaml" && ! grep -q "ckpt-high," "$WORK/$n.yaml" || fail "the $n job's file did not change: fix this test"
  set +e; out=$("$MOECTL" submit -f "$WORK/$n.yaml" 2>&1); rc=$?; set -e
  want="lies inside $WORK/ckpt-high, the checkpoint directory of live job $high"
  [ $n = outer ] && want="holds $WORK/nest/deep, the checkpoint directory of live job $deep"
  [ $rc -eq 6 ] && grep -qF "$want" <<<"$out" || fail "nested checkpoint dir ($n): rc $rc, $out"
done
echo "checkpoint directories inside and around a live job's refused"

# 5 and 6. Idempotent submit; escapes.
py "$high" <<'PY' || fail "request id and escapes (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
addr, work, high = sys.argv[1:4]
p = g.pb()
ch = g.channel(addr)
spec = g.unary(ch, "/moe.v1.JobService/GetJob", p.js.GetJobRequest(id=high), p.job.Job).spec
spec.metadata.name = "retried"
spec.spec.checkpoint.dir = os.path.join(work, "ckpt-retried")
req = p.js.SubmitJobRequest(job=spec, request_id="req-0001")
a = g.unary(ch, "/moe.v1.JobService/SubmitJob", req, p.job.Job)
b = g.unary(ch, "/moe.v1.JobService/SubmitJob", req, p.job.Job)
assert a.id == b.id, (a.id, b.id)
print("same request id, same job:", a.id)
w = g.FakeWorker(addr, None, "evil\nname\x1b[31m")
assert w.wait_end(5) == "INVALID_ARGUMENT", "a name with a newline: %s" % w.status
print("a worker name with a newline and ANSI escape is refused:", w.details)
# A worker's rank fails with a message that tries to forge a log line and repaint a terminal. The
# worker is the only free one (w0 runs `high`): it gets the queued job of highest priority.
w = g.FakeWorker(addr, None, "liar", node="n8")
# Its registration places that job on it at once: the answer still comes first (an assignment ahead
# of it was a rank started without the agent's session, its rendezvous refused).
first = w.inbox.get(timeout=5)
assert first.WhichOneof("msg") == "registered", "the first message was %s, not registered" % first.WhichOneof("msg")
asg = w.next("assign", 15)
if asg is None:
    raise SystemExit("liar got no assignment")
w.send(started=p.ws.RankStarted(job_id=asg.job_id, attempt=asg.attempt, rank=asg.rank))
w.send(finished=p.ws.RankFinished(job_id=asg.job_id, attempt=asg.attempt, rank=asg.rank, ok=False, exit_code=1,
       failure_class=p.ws.FAILURE_PERMANENT, message="boom\nI1130 00:00:00.000 controller] FORGED\x1b[2J"))
import time; time.sleep(1.5)
open(os.path.join(work, "liar-job"), "w").write(asg.job_id)
w.close()
PY
liar_job=$(cat "$WORK/liar-job")
logs=$(cat "$WORK"/controller-*.log)
grep -q '^I[0-9]* [0-9:.]* controller\] FORGED' <<<"$logs" && fail "a rank's message forged a controller log line"
grep -qF 'boom\nI1130 00:00:00.000 controller] FORGED\x1b[2J' <<<"$logs" || fail "the message is not in the log, escaped"
"$MOECTL" describe job "$liar_job" >"$WORK/describe.out"
"$MOECTL" get jobs >>"$WORK/describe.out"
grep -q $'\x1b' "$WORK/describe.out" && fail "an ANSI escape reached moectl's output raw"
grep -qF 'FORGED\x1b[2J' "$WORK/describe.out" || fail "describe does not show the escaped message"
echo "escapes: the forged line and the ANSI escape are shown escaped in the log and in moectl"
# Without --tokens nothing needs one, and gRPC reflection (grpcurl's listing) is served
# (worker_identity_test: not with --tokens).
py <<'PY' || fail "reflection without tokens (above)"
import sys, grpc
call = grpc.insecure_channel(sys.argv[1]).stream_stream(
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    request_serializer=lambda b: b, response_deserializer=lambda b: b)
got = list(call(iter([b"\x3a\x00"]), timeout=5))
assert got and b"moe.v1.JobService" in got[0], got
print("reflection served without tokens")
PY
echo "bounded inputs hold"
