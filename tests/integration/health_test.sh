#!/usr/bin/env bash
# What probes and Prometheus ask of the services, on loopback with the real programs:
# - the controller's gRPC health service (grpc.health.v1.Health/Check, a real grpcio client) answers
#   SERVING, and its metrics port answers GET /healthz and /readyz with 200;
# - a node agent (moe-worker --health-listen) started before its controller is alive but not ready
#   (503 naming why) and becomes ready once registered; its /metrics carries moe_agent_* with agent,
#   node and rack labels and process_*; both /metrics pass `promtool check metrics`' format checks;
# - after SIGTERM the agent leaves and its endpoint goes away with it.
source "$(dirname "$0")/lib.sh"

code() { curl -s -o "$WORK/body" -w '%{http_code}' "http://127.0.0.1:$1$2" || true; }
HP=$(free_port)
# The agent first: its controller is not up yet.
GRPC_PORT=$(free_port)
export MOE_CONTROLLER=127.0.0.1:$GRPC_PORT
start_worker n0 r0 n0 --slots 2 --health-listen 127.0.0.1:$HP
for _ in $(seq 50); do [ "$(code $HP /healthz)" = 200 ] && break; sleep 0.1; done
[ "$(code $HP /healthz)" = 200 ] || fail "the agent's /healthz did not answer 200"
[ "$(code $HP /readyz)" = 503 ] || fail "the agent is ready with no controller: $(cat "$WORK/body")"
grep -q "not registered" "$WORK/body" || fail "the agent's 503 does not say why: $(cat "$WORK/body")"

start_controller
for _ in $(seq 100); do [ "$(code $HP /readyz)" = 200 ] && break; sleep 0.1; done
[ "$(code $HP /readyz)" = 200 ] || fail "the agent did not become ready after its controller started: $(cat "$WORK/body")"
for p in /healthz /readyz; do
  [ "$(code $METRICS_PORT $p)" = 200 ] || fail "the controller's $p answered $(cat "$WORK/body")"
done
# HEAD is answered too, without a body.
[ "$(curl -s -I -o /dev/null -w '%{http_code}' http://127.0.0.1:$METRICS_PORT/healthz)" = 200 ] || fail "HEAD /healthz"
# /metrics beside the probes on the same port.
[ "$(code $METRICS_PORT /metrics)" = 200 ] && grep -q '^moe_build_info' "$WORK/body" || fail "the controller's /metrics went missing"

/usr/bin/python3 - "$GRPC_PORT" <<'PY' || fail "grpc.health.v1.Health/Check did not answer SERVING"
import sys, grpc
ch = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
check = ch.unary_unary("/grpc.health.v1.Health/Check",
                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
r = check(b"", timeout=5)  # HealthCheckRequest{service: ""}; the reply's field 1 is the status
assert r == b"\x08\x01", f"HealthCheckResponse {r!r} (SERVING is b'\\x08\\x01')"
print("gRPC health: SERVING")
PY

m=$(curl -sf http://127.0.0.1:$HP/metrics) || fail "no /metrics on the agent's health port"
for s in moe_agent_registered moe_agent_devices moe_agent_ranks_running moe_agent_registrations_total; do
  echo "$m" | grep -q "^$s{agent=\"n0\",node=\"n0\",rack=\"r0\"}" || fail "no $s{agent,node,rack} on the agent's /metrics"
done
echo "$m" | grep -q '^moe_agent_registered{.*} 1$' || fail "moe_agent_registered is not 1"
echo "$m" | grep -q '^moe_agent_devices{.*} 2$' || fail "moe_agent_devices is not 2 (--slots 2)"
for port in $HP $METRICS_PORT; do
  page=$(curl -sf http://127.0.0.1:$port/metrics)
  for s in process_cpu_seconds_total process_resident_memory_bytes process_open_fds process_start_time_seconds; do
    echo "$page" | grep -q "^$s " || fail "no $s on :$port/metrics"
  done
  # promtool's format and lint checks (non-zero on a malformed page or any lint finding).
  out=$(echo "$page" | promtool check metrics 2>&1) || fail "promtool check metrics on :$port: $out"
done

# A clean stop: the endpoint goes with the agent.
kill -TERM "${WORKER_PID[n0]}"
for _ in $(seq 100); do kill -0 "${WORKER_PID[n0]}" 2>/dev/null || break; sleep 0.1; done
kill -0 "${WORKER_PID[n0]}" 2>/dev/null && fail "the agent did not stop on SIGTERM"
[ "$(code $HP /healthz)" = 000 ] || fail "the agent's health port still answers after it stopped"
# :PORT binds the node's --address, not every interface.
HP2=$(free_port)
start_worker n1 r0 n1 --health-listen ":$HP2" --address 127.0.0.1
for _ in $(seq 100); do [ "$(code $HP2 /healthz)" = 200 ] && break; sleep 0.1; done
[ "$(code $HP2 /healthz)" = 200 ] || fail "--health-listen :PORT does not serve on the node's address"
# Bound to 127.0.0.1 alone, another loopback address (the whole 127/8 reaches lo) is refused; on
# 0.0.0.0 it would answer.
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.2:$HP2/healthz" || true)" = 000 ] ||
  fail "--health-listen :$HP2 answers on 127.0.0.2: bound to every interface, not --address"
echo "health_test: gRPC health SERVING; controller and agent /healthz, /readyz and /metrics as probes expect"
