# Shared by the integration tests: real processes on loopback, started here and always stopped.
set -euo pipefail
BIN=${MOE_BIN:?set MOE_BIN to the bin directory of the build}
WORK=$(mktemp -d /tmp/moe-it.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  # Give them a moment to shut down cleanly, then make sure.
  for _ in $(seq 1 30); do
    alive=0
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pkill -9 -f -- "--config $WORK/" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "---- logs ($WORK) ----" >&2
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "== $f" >&2; tail -25 "$f" >&2; }; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
bg() { "$@" & PIDS+=($!); }

# start_controller <extra flags...>: sets CTL_PID, GRPC_PORT, METRICS_PORT, MOE_CONTROLLER
start_controller() {
  GRPC_PORT=${GRPC_PORT:-$(free_port)}
  METRICS_PORT=${METRICS_PORT:-$(free_port)}
  CTL_STARTS=$(( ${CTL_STARTS:-0} + 1 ))
  local log="$WORK/controller-$CTL_STARTS.log"
  "$BIN/moe-controller" --listen 127.0.0.1:$GRPC_PORT --metrics-listen 127.0.0.1:$METRICS_PORT \
      --state-dir "$WORK/state" "$@" >"$log" 2>&1 &
  CTL_PID=$!
  PIDS+=($CTL_PID)
  export MOE_CONTROLLER=127.0.0.1:$GRPC_PORT
  for _ in $(seq 1 100); do grep -q "serving gRPC" "$log" 2>/dev/null && return 0; sleep 0.1; done
  fail "the controller did not start"
}

# start_worker <name> <rack> <node> <extra flags...>: sets WORKER_PID[<name>]
declare -A WORKER_PID
# The worker's roots (a worker confines a job's paths to them): the source tree (data/fortunes) and
# the test's own directory (checkpoints), unless the caller passes its own --data-root/--checkpoint-root.
start_worker() {
  local name=$1 rack=$2 node=$3; shift 3
  local roots=()
  [[ " $* " == *" --data-root "* ]] || roots+=(--data-root "${MOE_SOURCE_DIR:-$PWD}" --data-root "$WORK")
  [[ " $* " == *" --checkpoint-root "* ]] || roots+=(--checkpoint-root "$WORK")
  # One slot each unless a test asks for more (a CPU agent's default is its cores over --threads).
  [[ " $* " == *" --slots "* || " $* " == *" --devices "* || " $* " == *" --device cuda"* || " $* " == *" --fake-"* ]] || roots+=(--slots 1)
  "$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name "$name" --rack "$rack" --node "$node" --threads 1 \
      --runtime-dir "$WORK/rt-$name" "${roots[@]}" "$@" >"$WORK/worker-$name.log" 2>&1 &
  WORKER_PID[$name]=$!
  PIDS+=($!)
}

# wait_workers <n>: until n workers are registered and alive
wait_workers() {
  for _ in $(seq 1 100); do
    [ "$("$BIN/moectl" get workers -o json 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin).get("workers",[]) if w.get("state") in ("IDLE","BUSY")))' 2>/dev/null)" = "$1" ] && return 0
    sleep 0.1
  done
  fail "$1 workers did not register"
}

job_state() { "$BIN/moectl" get job "$1" -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin).get("state",""))' 2>/dev/null || true; }
job_field() { "$BIN/moectl" get job "$1" -o json | python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$2"; }

# wait_state <id> <state> <seconds>
wait_state() {
  local id=$1 want=$2 t=$3 s=""
  for _ in $(seq 1 $((t * 5))); do
    s=$(job_state "$id")
    [ "$s" = "$want" ] && return 0
    case "$s" in SUCCEEDED|FAILED|CANCELLED|TIMEOUT) [ "$s" != "$want" ] && fail "job $id ended $s while waiting for $want";; esac
    sleep 0.2
  done
  fail "job $id is $s, not $want, after ${t}s"
}

# make_job <file> <name> <steps> <ckpt interval> [world] [ep]: the tiny example, short sequences
make_job() {
  local file=$1 name=$2 steps=$3 interval=$4 world=${5:-2} ep=${6:-2}
  sed "s/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 4/;
       s/steps: 400, seed/steps: $steps, seed/;
       s/name: tiny-dsv3/name: $name/;
       s/world_size: 2, expert_parallel: 2/world_size: $world, expert_parallel: $ep, timeout_seconds: 20/;
       s#checkpoint: {interval_steps: 50}.*#checkpoint: {dir: $WORK/ckpt-$name, interval_steps: $interval}#" \
      "${MOE_SOURCE_DIR:-.}/examples/tiny.yaml" >"$file"
}
