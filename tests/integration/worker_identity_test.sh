#!/usr/bin/env bash
# Each worker is its own principal (docs/operations.md, Security), shown with real processes on
# loopback and a Python gRPC client (tests/integration/moe_grpc.py) for what moectl cannot express:
#   1. an admin token is not a worker credential, and the worker token only bootstraps: it is
#      exchanged once per node for a node credential (a second bootstrap of a node is refused); a
#      finish, a failure or a step from a worker that does not run the rank is refused with
#      PERMISSION_DENIED and the job is untouched; another node's credential cannot register n0 or
#      its worker names;
#   2. a second moe-worker for node n0 without n0's credential waits, saying why; after a controller
#      restart another node still cannot take w0, and the real worker comes back;
#   3. rendezvous keys: none without a session, none for another attempt or a job that does not
#      exist; a rank's own keys are taken and freed when its attempt ends;
#   4. an assigned rank that never starts fails its attempt after --rank-start-seconds;
#   5. gRPC reflection (it answers without a token) is not served with --tokens.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c 'import grpc, google.protobuf' 2>/dev/null ||
  fail "/usr/bin/python3 lacks grpc or protobuf (scripts/install-deps.sh test installs python3-grpcio)"
command -v protoc >/dev/null || fail "protoc is missing (protobuf-compiler)"
export MOE_SOURCE_DIR=${MOE_SOURCE_DIR:-$PWD} BIN
ADMIN=admin-token-0123456789abcdef
WORKER=worker-token-0123456789abcdef
printf '%s admin ops\n%s worker fleet\n' $ADMIN $WORKER >"$WORK/tokens"
chmod 600 "$WORK/tokens"
FLAGS=(--tokens "$WORK/tokens" --lease-seconds 3 --rank-start-seconds 4)
start_controller "${FLAGS[@]}"
export METRICS_PORT MOE_TOKEN=$ADMIN WORK
start_worker w0 r0 n0 --token $WORKER
wait_workers 1
make_job "$WORK/long.yaml" long 100000 0 1 1
id=$("$BIN/moectl" submit -f "$WORK/long.yaml")
wait_state "$id" RUNNING 60
metrics() { curl -sf "http://127.0.0.1:$METRICS_PORT/metrics"; }
py() { $PY - "$MOE_CONTROLLER" "$id" "$WORKER" "$ADMIN" "$@"; }

# 1. Foreign reports.
py <<'PY' || fail "foreign reports (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
addr, job, WORKER, ADMIN = sys.argv[1:5]
p = g.pb()
w = g.FakeWorker(addr, ADMIN, "admin-as-worker")
assert w.wait_end(5) == "PERMISSION_DENIED", "an admin token opened a worker stream: %s" % w.status
w = g.FakeWorker(addr, WORKER, "token-as-worker")
assert w.wait_end(5) == "PERMISSION_DENIED", "the worker token opened a worker stream: %s" % w.status
assert "only bootstraps" in w.details, w.details
print("the worker token alone:", w.status, w.details)
assert g.code_of(lambda: g.bootstrap(addr, WORKER, "n0", "r0")) == "ALREADY_EXISTS", "n0 bootstrapped twice"
assert g.code_of(lambda: g.bootstrap(addr, ADMIN, "n7", "r0")) == "PERMISSION_DENIED", "an admin token bootstrapped"
cred = {}
fin_ok = p.ws.RankFinished(job_id=job, attempt=1, rank=0, ok=True, failure_class=p.ws.FAILURE_NONE)
fin_bad = p.ws.RankFinished(job_id=job, attempt=1, rank=0, ok=False, exit_code=2,
                            failure_class=p.ws.FAILURE_PERMANENT, message="fake")
step = p.ws.StepReport(job_id=job, attempt=1, rank=0,
                       metrics=p.job.StepMetrics(step=-7, loss=float("inf"), mfu=42))
for what, kw in [("finish", dict(finished=fin_ok)), ("failure", dict(finished=fin_bad)), ("step", dict(step=step))]:
    cred[what] = g.bootstrap(addr, WORKER, "intruder-" + what)
    w = g.FakeWorker(addr, cred[what], "intruder-" + what, node="intruder-" + what)
    assert w.next("registered", 5) is not None, "intruder-%s not registered: %s" % (what, w.status)
    w.send(**kw)
    st = w.wait_end(5)
    w.close()
    assert st == "PERMISSION_DENIED", "fake %s: %s" % (what, st)
    print("fake %s from a foreign worker: %s" % (what, st))
w = g.FakeWorker(addr, cred["finish"], "w0", node="intruder-finish")
assert w.wait_end(5) == "PERMISSION_DENIED" and "belongs to node n0" in w.details, \
    "another node registered live w0: %s %s" % (w.status, w.details)
w = g.FakeWorker(addr, cred["finish"], "w9", node="n0")
assert w.wait_end(5) == "PERMISSION_DENIED", "another node's credential registered node n0: %s" % w.status
print("another node's credential: w0 and node n0 refused (%s)" % w.details)
open(os.environ["WORK"] + "/intruder.cred", "w").write(cred["finish"])
PY
[ "$(job_state "$id")" = RUNNING ] || fail "the job is $(job_state "$id") after the fake reports"
# A second real moe-worker for node n0, without n0's credential (its own runtime directory), cannot
# bootstrap n0: it waits and says why, and takes nothing from w0.
rc=0
timeout 4 "$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name w0 --rack r0 --node n0 --token $WORKER \
  --runtime-dir "$WORK/rt-dup" >"$WORK/dup.log" 2>&1 || rc=$?
[ $rc -eq 124 ] || { cat "$WORK/dup.log"; fail "a second moe-worker of n0 exited $rc (expected to wait)"; }
grep -q "node n0 already holds a credential" "$WORK/dup.log" || { cat "$WORK/dup.log"; fail "no clear message for the held node"; }
[ -e "$WORK/rt-dup/node-n0.credential" ] && fail "the second agent has a credential for n0"
[ "$(stat -c %a "$WORK/rt-w0/node-n0.credential")" = 600 ] || fail "w0's credential file is not 0600"
grep -q "node n0 bootstrapped" "$WORK/worker-w0.log" || fail "w0 did not say it bootstrapped"
echo "a second moe-worker of node n0: $(grep -o 'node n0 already holds a credential[^:]*' "$WORK/dup.log" | head -1)"
step=$(job_field "$id" 'd.get("last_metrics",{}).get("step","0")')
[ "$step" -ge 1 ] || fail "the job's last step is $step"
if metrics | grep -E "^moe_job_(loss|step|mfu_ratio)\{[^}]*job_id=\"$id\"" | grep -qE ' (\+Inf|-7|42)$'; then
  fail "a fake step reached /metrics: $(metrics | grep -E "job_id=\"$id\"" | grep -E ' (\+Inf|-7|42)$')"
fi
"$BIN/moectl" describe job "$id" | grep -q "Failed\|Succeeded" && fail "the fake finish or failure reached the events"
echo "foreign finish, failure and step refused; the job is untouched"

# 2. Takeover after a controller restart: w0 is held by its session while it is away.
kill -STOP "${WORKER_PID[w0]}"
kill -9 "$CTL_PID"
wait "$CTL_PID" 2>/dev/null || true
start_controller "${FLAGS[@]}"
py <<'PY' || fail "takeover after restart (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
addr, job, WORKER, ADMIN = sys.argv[1:5]
p = g.pb()
intruder = open(os.environ["WORK"] + "/intruder.cred").read()
w = g.FakeWorker(addr, intruder, "w0", register=p.ws.Register(
    name="w0", rack="r0", node="intruder-finish", device="cpu",
    running=[p.ws.RunningRank(job_id=job, attempt=1, rank=0)]))
st = w.wait_end(5)
assert st == "PERMISSION_DENIED", "a takeover of w0 after the restart: %s" % st
print("takeover after restart:", st, w.details)
PY
kill -CONT "${WORKER_PID[w0]}"
for _ in $(seq 1 100); do "$BIN/moectl" describe job "$id" | grep -q Reconnected && break; sleep 0.2; done
"$BIN/moectl" describe job "$id" | grep -q Reconnected || fail "w0 did not come back under its session"
[ "$(job_state "$id")" = RUNNING ] || fail "the job is $(job_state "$id") after w0 came back"
echo "takeover refused after a restart; the real worker reconnected with its session"

# 3 and 4. Rendezvous scope, keys freed at the attempt's end, the start deadline.
make_job "$WORK/lazy.yaml" lazy 100 0 1 1
py "$WORK/lazy.yaml" <<'PY' || fail "rendezvous and start deadline (above)"
import os, subprocess, sys, time, urllib.request
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
addr, job, WORKER, ADMIN, lazy_yaml = sys.argv[1:6]
p = g.pb()
ch = g.channel(addr)
SET = "/moe.v1.WorkerService/RendezvousSet"
LAZY = g.bootstrap(addr, WORKER, "lazy")
def set_key(key, session, value=b"x", token=LAZY):
    return g.code_of(lambda: g.unary(ch, SET, p.ws.RendezvousSetRequest(key=key, value=value),
                                     p.ws.RendezvousSetResponse, token=token, session=session))
def keys():
    port = os.environ["METRICS_PORT"]
    for line in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port).read().decode().splitlines():
        if line.startswith("moe_rendezvous_keys "):
            return float(line.split()[1])
lazy = g.FakeWorker(addr, LAZY, "lazy", node="lazy")
session = lazy.next("registered", 5).session
lazy.heartbeat_forever()
assert set_key("job/%s/attempt/1/evil" % job, None) == "UNAUTHENTICATED"
assert set_key("job/%s/attempt/1/evil" % job, session) == "PERMISSION_DENIED", "an idle worker set a key"
assert set_key("job/nosuch/attempt/1/k", session) == "PERMISSION_DENIED"
new = subprocess.run([os.environ["BIN"] + "/moectl", "submit", "-f", lazy_yaml], capture_output=True, text=True)
assert new.returncode == 0, new.stderr
lazy_id = new.stdout.strip()
a = lazy.next("assign", 10)
assert a is not None and a.job_id == lazy_id, "the lazy worker got no assignment"
prefix = a.rendezvous_prefix
assert set_key(prefix + "mine", session) == "OK", "a rank's own key was refused"
intruder = open(os.environ["WORK"] + "/intruder.cred").read()
assert set_key(prefix + "theirs", session, token=intruder) == "PERMISSION_DENIED", "another node used lazy's session"
assert set_key(prefix + "tok", session, token=WORKER) == "PERMISSION_DENIED", "the worker token set a key"
assert set_key("job/%s/attempt/1/evil" % job, session) == "PERMISSION_DENIED", "another job's key was taken"
assert set_key(prefix + "big", session, b"x" * (1 << 20)) == "INVALID_ARGUMENT", "a 1 MiB value was taken"
time.sleep(1.5)
assert keys() >= 1, "moe_rendezvous_keys is %s with a key set" % keys()
print("rendezvous: own key taken; foreign, unauthenticated and oversized refused")
# The rank never starts: after 4 s its attempt fails, and its keys go with it.
t0 = time.time()
while time.time() - t0 < 15:
    out = subprocess.run([os.environ["BIN"] + "/moectl", "describe", "job", lazy_id], capture_output=True, text=True).stdout
    if "did not start within 4 s" in out:
        break
    time.sleep(0.3)
else:
    raise SystemExit("the lazy rank's attempt did not fail at the start deadline:\n" + out)
print("an assigned rank that never started failed its attempt after %.1f s" % (time.time() - t0))
t0 = time.time()
while keys() != 0 and time.time() - t0 < 5:
    time.sleep(0.2)
assert keys() == 0, "the ended attempt's rendezvous keys are still held (%s)" % keys()
print("the attempt's rendezvous keys were freed at its end")
subprocess.run([os.environ["BIN"] + "/moectl", "cancel", lazy_id], capture_output=True)
lazy.close()
PY
"$BIN/moectl" cancel "$id" >/dev/null

# gRPC reflection answers without a token: with --tokens it is not served (UNIMPLEMENTED) unless
# --grpc-reflection asks for it. The request is ServerReflectionRequest{list_services: ""}, by hand.
py <<'PY' || fail "reflection behind the token (above)"
import sys, grpc
ch = grpc.insecure_channel(sys.argv[1])
call = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
try:
    got = list(call(iter([b"\x3a\x00"]), timeout=5))
    raise SystemExit("reflection answered without a token: %d message(s)" % len(got))
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.UNIMPLEMENTED, e.code()
print("reflection: not served with --tokens")
PY

# 6. A node that left cleanly has its credential dropped: its agent bootstraps again. A node deleted
#    with moectl delete node has it revoked: its agent is told and stops.
start_worker w1 r0 n1 --token $WORKER
wait_workers 2
kill -TERM "${WORKER_PID[w1]}"; wait "${WORKER_PID[w1]}" 2>/dev/null || true
for _ in $(seq 1 50); do grep -q "node n1: its last worker was forgotten, its credential dropped" "$WORK/controller-1.log" "$WORK"/controller-*.log 2>/dev/null && break; sleep 0.1; done
start_worker w1 r0 n1 --token $WORKER
wait_workers 2
grep -q "bootstrapping again" "$WORK/worker-w1.log" || fail "w1 did not bootstrap again after leaving: $(tail -3 "$WORK/worker-w1.log")"
echo "a node that left cleanly bootstraps again: $(grep -o 'the controller does not know node n1.s credential[^:]*' "$WORK/worker-w1.log" | head -1)"
out=$("$BIN/moectl" delete node n1)
grep -q "node n1 deleted: 1 worker(s) forgotten, its node credential revoked" <<<"$out" || fail "delete node: $out"
rc=0
for _ in $(seq 1 100); do kill -0 "${WORKER_PID[w1]}" 2>/dev/null || break; sleep 0.1; done
wait "${WORKER_PID[w1]}" 2>/dev/null || rc=$?
[ $rc -eq 1 ] || fail "the revoked agent exited $rc (expected 1): $(tail -3 "$WORK/worker-w1.log")"
grep -q "revoked" "$WORK/worker-w1.log" || fail "the revoked agent did not say why: $(tail -3 "$WORK/worker-w1.log")"
"$BIN/moectl" get workers | grep -q "^w1 " && fail "w1 is still listed after its node was deleted"
echo "moectl delete node: $out; the agent stopped: $(grep -o 'revoked:.*' "$WORK/worker-w1.log" | head -1 | cut -c1-100)"
# Lost workers are pruned in bulk.
kill -9 "${WORKER_PID[w0]}"
for _ in $(seq 1 100); do "$BIN/moectl" get workers | grep -q "w0 .*LOST" && break; sleep 0.1; done
out=$("$BIN/moectl" delete workers --state lost)
grep -qE "lost workers deleted: [0-9]+ worker\(s\) forgotten" <<<"$out" || fail "delete workers --state lost: $out"
"$BIN/moectl" get workers | grep -q "LOST" && fail "lost workers remain: $("$BIN/moectl" get workers)"
echo "$out"
echo "worker identity holds"
