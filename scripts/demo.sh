#!/usr/bin/env bash
# The demo: a controller and two CPU workers in one rack on loopback, the embedded default job
# (examples/tiny.yaml: a DeepSeek-V3-style MoE, W = 2 with expert parallelism 2) submitted with moectl
# and watched live to the end, a summary, samples of text from the trained model, then everything
# shut down cleanly.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
bin=$build/bin
work=$(mktemp -d /tmp/moe-demo.XXXXXX)
pids=()
ok=0
finish() {
  for p in "${pids[@]:-}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do wait "$p" 2>/dev/null || true; done
  if [ $ok = 1 ]; then rm -rf "$work"; else echo "logs kept in $work" >&2; fi
}
trap finish EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
grpc=$(port); metrics=$(port)
export MOE_CONTROLLER=127.0.0.1:$grpc

echo "== starting the controller on $MOE_CONTROLLER (Prometheus metrics at http://127.0.0.1:$metrics/metrics)"
"$bin/moe-controller" --listen "$MOE_CONTROLLER" --metrics-listen 127.0.0.1:$metrics --state-dir "$work/state" \
    --checkpoint-root "$work/checkpoints" >"$work/controller.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "serving gRPC" "$work/controller.log" && break; sleep 0.1; done
grep -q "serving gRPC" "$work/controller.log" || { cat "$work/controller.log"; exit 1; }
mkdir -p "$work/checkpoints"
echo "== starting the node agent of node0 in rack r0: two CPU slots (one core each), listed as node0-cpu/0 and /1"
"$bin/moe-worker" --controller "$MOE_CONTROLLER" --slots 2 --rack r0 --node node0 --threads 1 \
    --runtime-dir "$work/worker0" --data-root "$PWD" --checkpoint-root "$work/checkpoints" \
    >"$work/worker0.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  [ "$("$bin/moectl" get workers 2>/dev/null | grep -c IDLE)" = 2 ] && break
  sleep 0.1
done
"$bin/moectl" get workers
echo "== submitting examples/tiny.yaml"
id=$("$bin/moectl" submit -f examples/tiny.yaml)
echo "job $id"
"$bin/moectl" watch "$id"
echo
"$bin/moectl" describe job "$id" | sed -n '/^Placement/,$p'
echo "== three samples from the trained model (moe-generate --checkpoint; docs/operations.md)"
for seed in 1 2 3; do
  "$bin/moe-generate" --checkpoint "$work/checkpoints/$id" --prompt "The " --seed $seed --max-tokens 64
done
ok=1
echo "== done: shutting down the workers and the controller"
