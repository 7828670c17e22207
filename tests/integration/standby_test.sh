#!/usr/bin/env bash
# A leader and a standby on one etcd (Debian's etcd-server, started here on loopback):
#   - the standby refuses every call with the leader's address, is not ready, and its
#     moe_controller_leader gauge is 0 (the leader's 1);
#   - moectl given both addresses reaches the leader whichever comes first;
#   - moectl admin step-down: the leader stops, the standby takes over with the job it was given,
#     the worker follows it (a list of addresses), and the stepped-down one reads "stepped down";
#   - bad --store values are clear errors, and step-down on the embedded SQLite store says why not.
source "$(dirname "$0")/lib.sh"
[ -x /usr/bin/etcd ] || fail "LOUD: /usr/bin/etcd is missing (Debian's etcd-server; scripts/install-deps.sh test installs it)"

# Bad input first: nothing started.
for bad in "etcd://" "etcd://h" "etcd://h:0" "mysql://h:1" "etcd://h:1/"; do
  set +e; out=$("$BIN/moe-controller" --store "$bad" --listen 127.0.0.1:$(free_port) 2>&1); rc=$?; set -e
  [ $rc -ne 0 ] || fail "--store $bad was accepted"
  grep -q -- "--store" <<<"$out" || fail "--store $bad: the error does not name --store: $out"
done
set +e; out=$("$BIN/moe-controller" --listen 127.0.0.1:$(free_port) 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && grep -q -- "--state-dir is required" <<<"$out" || fail "no --state-dir nor --store: $out"

client=$(free_port); peer=$(free_port)
bg /usr/bin/etcd --name t --data-dir "$WORK/etcd" --listen-client-urls http://127.0.0.1:$client \
  --advertise-client-urls http://127.0.0.1:$client --listen-peer-urls http://127.0.0.1:$peer \
  --initial-advertise-peer-urls http://127.0.0.1:$peer --initial-cluster t=http://127.0.0.1:$peer \
  --max-txn-ops 10000
STORE=etcd://127.0.0.1:$client/standby-test

# start_ha <name>: a controller on the etcd, ports in P_<name>, M_<name>
start_ha() {
  local name=$1 starts=${2:-1}
  eval "P_$name=\${P_$name:-\$(free_port)}; M_$name=\${M_$name:-\$(free_port)}"
  local p m; eval "p=\$P_$name; m=\$M_$name"
  "$BIN/moe-controller" --store "$STORE" --listen 127.0.0.1:$p --metrics-listen 127.0.0.1:$m \
    --leader-lease-seconds 2 --checkpoint-root "$WORK/ckpt" >"$WORK/controller-$name-$starts.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$name=$!"
}
wait_log() {  # wait_log FILE PATTERN SECONDS
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "$1 never said '$2'"
}
start_ha a; wait_log "$WORK/controller-a-1.log" "serving gRPC" 30
start_ha b; wait_log "$WORK/controller-b-1.log" "standby; the leader is 127.0.0.1:$P_a" 30

# The standby refuses with the leader's address; it is not ready; the gauges say who leads.
set +e; out=$(MOE_CONTROLLER=127.0.0.1:$P_b "$BIN/moectl" get jobs 2>&1); rc=$?; set -e
[ $rc -eq 5 ] || fail "moectl against the standby: exit $rc ($out)"
grep -q "is a standby" <<<"$out" && grep -q "the leader is at 127.0.0.1:$P_a" <<<"$out" || fail "the standby's refusal: $out"
code=$(curl -s -o "$WORK/readyz" -w '%{http_code}' http://127.0.0.1:$M_b/readyz)
[ "$code" = 503 ] && grep -q "standby" "$WORK/readyz" || fail "standby /readyz: $code $(cat "$WORK/readyz")"
[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$M_a/readyz)" = 200 ] || fail "the leader is not ready"
# (Read whole first: grep -q leaving early would cut curl's pipe, which pipefail counts.)
m=$(curl -s http://127.0.0.1:$M_a/metrics); grep -q '^moe_controller_leader 1' <<<"$m" || fail "leader gauge"
m=$(curl -s http://127.0.0.1:$M_b/metrics); grep -q '^moe_controller_leader 0' <<<"$m" || fail "standby gauge"

# Both addresses, the standby first: moectl finds the leader. A worker with both trains a job.
export MOE_CONTROLLER=127.0.0.1:$P_b,127.0.0.1:$P_a
start_worker w0 r0 n0
wait_workers 1
make_job "$WORK/job.yaml" ha 100000 20 1 1
id=$("$BIN/moectl" submit -f "$WORK/job.yaml")
wait_state "$id" RUNNING 60
attempt=$(job_field "$id" 'd.get("attempt")')

# Step down: a leaves, b leads with the job still running on its first attempt, the worker follows.
out=$("$BIN/moectl" admin step-down)
grep -q "stepped down" <<<"$out" || fail "step-down said: $out"
wait_log "$WORK/controller-b-1.log" "serving gRPC" 20
for _ in $(seq 1 100); do kill -0 "$PID_a" 2>/dev/null || break; sleep 0.1; done
kill -0 "$PID_a" 2>/dev/null && fail "the stepped-down controller is still running"
grep -q "lost the leadership: stepped down" "$WORK/controller-a-1.log" || fail "the ex-leader did not say it stepped down"
wait_workers 1
[ "$(job_state "$id")" = RUNNING ] || fail "the job is $(job_state "$id") after the step-down"
[ "$(job_field "$id" 'd.get("attempt")')" = "$attempt" ] || fail "the job restarted on the step-down"
step() { job_field "$id" 'int(d.get("last_metrics",{}).get("step",0))'; }
step0=$(step)
for _ in $(seq 1 150); do [ "$(step)" -gt "$step0" ] && break; sleep 0.2; done
[ "$(step)" -gt "$step0" ] || fail "the job stopped stepping under the new leader (step $step0)"

# The stepped-down controller comes back as a standby (as its supervisor would start it); SIGTERM stops
# a standby cleanly (exit 0).
start_ha a 2; wait_log "$WORK/controller-a-2.log" "standby; the leader is 127.0.0.1:$P_b" 30
kill -TERM "$PID_a"
rc=0; wait "$PID_a" || rc=$?
[ $rc -eq 0 ] || fail "a standby stopped by SIGTERM exited $rc"

# SIGTERM to the leader: it hands over on its way out (its lease revoked) and exits 0; the standby
# started again leads.
start_ha a 3; wait_log "$WORK/controller-a-3.log" "standby; the leader is 127.0.0.1:$P_b" 30
kill -TERM "$PID_b"
rc=0; wait "$PID_b" || rc=$?
[ $rc -eq 0 ] || fail "the leader stopped by SIGTERM exited $rc"
wait_log "$WORK/controller-a-3.log" "serving gRPC" 20

# The embedded store has no standby: step-down says why.
"$BIN/moe-controller" --listen 127.0.0.1:$(free_port) --state-dir "$WORK/sqlite" --metrics-listen 127.0.0.1:$(free_port) \
  >"$WORK/sqlite.log" 2>&1 &
PIDS+=($!)
wait_log "$WORK/sqlite.log" "serving gRPC" 30
sq=$(grep -o "serving gRPC on [0-9.:]*" "$WORK/sqlite.log" | awk '{print $4}')
set +e; out=$(MOE_CONTROLLER=$sq "$BIN/moectl" admin step-down 2>&1); rc=$?; set -e
[ $rc -eq 6 ] && grep -q "no standby" <<<"$out" || fail "step-down on SQLite: exit $rc: $out"
echo "PASS standby_test"
