#!/usr/bin/env bash
# Fake nodes (moe-worker --fake-step-seconds, what bench/load.py loads the controller with): four node
# agents of two devices each in one process, on racks of two nodes, list eight workers <agent>/<device>
# on one stream and lease per agent; jobs run to SUCCEEDED with the synthetic steps their spec asks
# for, a 4-rank job's ranks on two devices of one agent each reporting; a cancel stops a fake rank;
# paths outside the workers' roots are refused (at submit, or by the worker when a symbolic link leads
# out); draining a node by its agent's name drains its devices; heartbeats come as UDP datagrams (none
# on the streams once acknowledged), and on the streams from a controller started with
# --no-udp-heartbeats, no lease missed either way; agents stopped past their lease with their streams
# up come back when resumed (told to register again); agents sharing connections
# (--fake-agents-per-connection); agents outlive a controller gone for good; SIGTERM stops them all.
source "$(dirname "$0")/lib.sh"
# moe_heartbeats_total{transport="$1"} on the controller's /metrics.
beats() {
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | sed -n "s/^moe_heartbeats_total{transport=\"$1\"} //p"
}
start_controller
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name fk --rack rk --fake-step-seconds 0.02 --fake-workers 4 \
    --slots 2 --fake-rack-size 2 --memory-gb 1000 --runtime-dir "$WORK/rt" --data-root "$PWD" --checkpoint-root "$WORK" >"$WORK/fake.log" 2>&1 &
FAKE=$!
PIDS+=($FAKE)
wait_workers 8
racks=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sorted({w["rack"] for w in json.load(sys.stdin)["workers"]}))')
[ "$racks" = "['rk-0', 'rk-1']" ] || fail "racks of two nodes: $racks"
names=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(" ".join(sorted(w["name"] + "@" + w["agent"] for w in json.load(sys.stdin)["workers"])))')
[ "$names" = "fk-0/0@fk-0 fk-0/1@fk-0 fk-1/0@fk-1 fk-1/1@fk-1 fk-2/0@fk-2 fk-2/1@fk-2 fk-3/0@fk-3 fk-3/1@fk-3" ] ||
  fail "four agents of two devices each, listed per device: $names"
# Established client connections to the controller's port (/proc/net/tcp: state 01, remote port).
established() {
  python3 - "${MOE_CONTROLLER##*:}" <<'PY'
import sys
port, n = int(sys.argv[1]), 0
for f in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(f).read().splitlines()[1:]
    except OSError:
        continue
    n += sum(1 for r in rows if r.split()[3] == "01" and int(r.split()[2].split(":")[1], 16) == port)
print(n)
PY
}
conns=$(established)
[ "$conns" -le 4 ] || fail "the fake nodes hold $conns connections to the controller (one per agent: 4)"
make_job "$WORK/a.yaml" a 30 0 4 4
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/a.yaml"
id=$("$BIN/moectl" submit -f "$WORK/a.yaml")
"$BIN/moectl" watch "$id" >"$WORK/watch.txt" || { cat "$WORK/watch.txt"; fail "the fake job did not succeed"; }
grep -q "step 30/30" "$WORK/watch.txt" || { cat "$WORK/watch.txt"; fail "no step 30/30 in the watch"; }
make_job "$WORK/b.yaml" b 100000 0 2 2
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/b.yaml"
id=$("$BIN/moectl" submit -f "$WORK/b.yaml")
wait_state "$id" RUNNING 30
"$BIN/moectl" cancel "$id" >/dev/null
wait_state "$id" CANCELLED 30  # STOPPING until the fake ranks ended
for _ in $(seq 1 50); do
  busy=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="BUSY"))')
  [ "$busy" = 0 ] && break; sleep 0.2
done
[ "$busy" = 0 ] || fail "fake workers still busy after the cancel"
# Confined paths: the workers allow checkpoints only below $WORK. /etc is refused at submit (the
# controller knows the roots); a symbolic link out of $WORK passes the controller's lexical check and
# is refused by the worker, which resolves it: the job fails at once, without a restart.
make_job "$WORK/esc.yaml" esc 10 0 2 2
sed -i 's#checkpoint: {dir: [^,]*, interval_steps: 0}#checkpoint: {dir: /etc/moe-escape, interval_steps: 0}#' "$WORK/esc.yaml"
set +e; out=$("$BIN/moectl" submit -f "$WORK/esc.yaml" 2>&1); rc=$?; set -e
[ $rc -eq 6 ] && grep -q "spec.checkpoint.dir: /etc/moe-escape is outside this worker's checkpoint roots ($WORK)" <<<"$out" ||
  fail "a checkpoint dir under /etc: rc $rc, $out"
outside=$(mktemp -d /tmp/moe-outside.XXXXXX)
ln -s "$outside" "$WORK/link"
sed -i "s#dir: /etc/moe-escape#dir: $WORK/link/ck#" "$WORK/esc.yaml"
id=$("$BIN/moectl" submit -f "$WORK/esc.yaml") || { rm -rf "$outside"; fail "the lexically fine path was refused at submit"; }
wait_state "$id" FAILED 30
msg=$(job_field "$id" 'd.get("message","")')
[ "$(job_state "$id")" = FAILED ] && [ "$(job_field "$id" 'd.get("restarts",0)')" = 0 ] || fail "the escaping job: $(job_state "$id"), $msg"
grep -q "is outside this worker's checkpoint roots" <<<"$msg" || fail "the failure does not say why: $msg"
[ -e "$outside/ck" ] && fail "the worker wrote through the link"
rm -rf "$outside"
# Heartbeats: datagrams, acknowledged, so the streams carry none (each agent's first beats go both
# ways until its first ack).
u0=$(beats udp); s0=$(beats stream); sleep 3; u1=$(beats udp); s1=$(beats stream)
[ "${u1%.*}" -ge $(( ${u0%.*} + 8 )) ] && [ "${s1%.*}" = "${s0%.*}" ] ||
  fail "heartbeats over 3 s: udp $u0 -> $u1, stream $s0 -> $s1 (4 agents: about 12 datagrams, no stream beats)"
# Stopped past its lease (SIGSTOP, 7 s against the lease of 5) with its connections up: every device
# is LOST; resumed, its unacknowledged datagrams fall back to the streams, the controller tells each
# agent to register again, and all eight come back (a lost agent's heartbeats alone never revived it).
kill -STOP $FAKE
sleep 7
lost=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="LOST"))')
kill -CONT $FAKE
[ "$lost" = 8 ] || fail "$lost of 8 devices LOST after 7 s stopped (lease 5 s)"
wait_workers 8
grep -q "was declared lost.*register again" "$WORK/fake.log" || fail "the agents were not told to register again: $(tail -5 "$WORK/fake.log")"
# Fake agents sharing connections (--fake-agents-per-connection 2): four more agents on two.
before=$(established)
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name sh --rack rs --fake-step-seconds 0.02 --fake-workers 4 \
    --slots 2 --fake-agents-per-connection 2 --memory-gb 1000 --runtime-dir "$WORK/rt-sh" --data-root "$PWD" \
    --checkpoint-root "$WORK" >"$WORK/fake-shared.log" 2>&1 &
SHARED=$!
PIDS+=($SHARED)
wait_workers 16
after=$(established)
[ $((after - before)) -le 2 ] || fail "four agents at two a connection opened $((after - before)) connections"
kill -TERM $SHARED; wait $SHARED 2>/dev/null || true
set +e; out=$("$BIN/moe-worker" --controller "$MOE_CONTROLLER" --fake-step-seconds 1 --fake-agents-per-connection 2 2>&1); rc=$?; set -e
[ $rc -eq 2 ] && grep -q -- "--fake-agents-per-connection: needs --fake-workers over 1" <<<"$out" ||
  fail "--fake-agents-per-connection without --fake-workers: rc $rc, $out"
# The controller's own time per RPC: every submit above (the refused one too) is in SubmitJob's
# histogram, its +Inf bucket equals its count, and its sum is a time.
rpc=$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | grep '^moe_rpc_duration_seconds.*method="SubmitJob"')
n=$(sed -n 's/^moe_rpc_duration_seconds_count{method="SubmitJob"} //p' <<<"$rpc")
inf=$(sed -n 's/^moe_rpc_duration_seconds_bucket{method="SubmitJob",le="+Inf"} //p' <<<"$rpc")
sum=$(sed -n 's/^moe_rpc_duration_seconds_sum{method="SubmitJob"} //p' <<<"$rpc")
[ "${n%.*}" -ge 4 ] && [ "$inf" = "$n" ] && python3 -c "import sys; assert 0 < float(sys.argv[1]) < 60" "$sum" ||
  fail "moe_rpc_duration_seconds for SubmitJob after 4 submits: count '$n', +Inf '$inf', sum '$sum'"
# A controller that grants no UDP lease: every beat on the streams, no agent lost.
kill -TERM $CTL_PID; wait $CTL_PID 2>/dev/null || true
start_controller --no-udp-heartbeats
wait_workers 8
sleep 3
s0=$(beats stream); sleep 3; s1=$(beats stream)
[ "${s1%.*}" -ge $(( ${s0%.*} + 8 )) ] && [ -z "$(beats udp | grep -v '^0$')" ] ||
  fail "with --no-udp-heartbeats: stream $s0 -> $s1, udp $(beats udp)"
lost=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="LOST"))')
[ "$lost" = 0 ] || fail "$lost workers LOST with stream heartbeats"
# A controller gone for good: the agents retry, and live. A lone agent (its channel the process's
# only one) drops that channel at each connect refused; the stream that ended holds its last
# reference, and gRPC 1.51 freed its callback queue twice when that went on gRPC's own thread (an
# abort under ASan every time, "prior > 0" now and then without it).
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name solo --rack rs --fake-step-seconds 0.02 --slots 1 \
    --memory-gb 10 --runtime-dir "$WORK/rt-solo" --data-root "$PWD" --checkpoint-root "$WORK" >"$WORK/fake-solo.log" 2>&1 &
SOLO=$!
PIDS+=($SOLO)
wait_workers 9
"$BIN/moectl" drain fk-3 >/dev/null || fail "drain by the agent's name"
drained=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(" ".join(sorted(w["name"] for w in json.load(sys.stdin)["workers"] if w.get("drained"))))')
[ "$drained" = "fk-3/0 fk-3/1" ] || fail "draining the agent fk-3 drained: '$drained'"
kill -9 $CTL_PID; wait $CTL_PID 2>/dev/null || true
sleep 4  # about five refused connects each (a back-off from 0.2 s, doubling up to 1 s)
for p in $FAKE $SOLO; do
  kill -0 $p 2>/dev/null || fail "a fake worker died while the controller was away: $(tail -5 "$WORK/fake-solo.log" "$WORK/fake.log")"
done
grep -q "cannot reach the controller" "$WORK/fake-solo.log" || fail "the lone agent did not retry: $(tail -5 "$WORK/fake-solo.log")"
kill -TERM $FAKE $SOLO || fail "a fake worker was gone before its SIGTERM"
for _ in $(seq 1 50); do kill -0 $FAKE 2>/dev/null || kill -0 $SOLO 2>/dev/null || break; sleep 0.1; done
for p in $FAKE $SOLO; do
  kill -0 $p 2>/dev/null && fail "the fake workers did not stop on SIGTERM"
  wait $p || fail "a fake worker stopped by SIGTERM exited $?: $(tail -5 "$WORK/fake-solo.log" "$WORK/fake.log")"
done
echo "fake nodes: 4 agents x 2 devices in one process on 2 racks ($conns connections); a 4-rank job SUCCEEDED at step 30/30; cancel, drain by agent and SIGTERM work, agents outlive their controller; paths outside the roots refused; heartbeats by UDP ($u0 -> $u1 in 3 s), on the streams without it; $n submits timed by the controller"
