#!/usr/bin/env bash
# Submit -> first training step on the control plane (controller + one CPU worker on loopback), side by
# side with sbatch -> job start on a local Slurm (Debian's slurm-wlm, started here), in one run.
# Medians of N tries each; the ratio is ours over Slurm's.
#   bench/control_plane_bench.sh [build-dir] [tries]
set -euo pipefail
build=${1:-build}
tries=${2:-5}
cd "$(dirname "$0")/.."
bin=$build/bin
work=$(mktemp -d /tmp/moe-bench-cp.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done
  tests/slurm/local_slurm.sh stop "$work/slurm" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }

# Slurm: sbatch of a script that records when it starts.
export SLURM_CONF=$(tests/slurm/local_slurm.sh start "$work/slurm")
printf '#!/bin/bash\ndate +%%s.%%N > "$1"\n' >"$work/start.sh"
slurm=()
for i in $(seq 1 "$tries"); do
  t0=$(now)
  sbatch -Q -o /dev/null "$work/start.sh" "$work/slurm-$i" >/dev/null
  for _ in $(seq 1 600); do [ -s "$work/slurm-$i" ] && break; sleep 0.02; done
  slurm+=("$(python3 -c "print(float(open('$work/slurm-$i').read()) - $t0)")")
done
tests/slurm/local_slurm.sh stop "$work/slurm" >/dev/null

# MoE Orchestrator: submit a one-rank job and wait for its first step.
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
export MOE_CONTROLLER=127.0.0.1:$(port)
"$bin/moe-controller" --listen "$MOE_CONTROLLER" --metrics-listen 127.0.0.1:$(port) --state-dir "$work/state" >"$work/ctl.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "serving gRPC" "$work/ctl.log" && break; sleep 0.1; done
"$bin/moe-worker" --rack r0 --node n0 --runtime-dir "$work/rt" >"$work/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do "$bin/moectl" get workers 2>/dev/null | grep -q IDLE && break; sleep 0.1; done
sed 's/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 8/; s/steps: 400, seed/steps: 3, seed/;
     s/world_size: 2, expert_parallel: 2/world_size: 1, expert_parallel: 1/' examples/tiny.yaml >"$work/job.yaml"
moe_start=(); moe_done=()
for i in $(seq 1 "$tries"); do
  t0=$(now)
  id=$("$bin/moectl" submit -f "$work/job.yaml")
  "$bin/moectl" watch "$id" -o json >"$work/watch-$i.jsonl"
  read -r start done < <(python3 - "$work/watch-$i.jsonl" "$t0" <<'PY'
import datetime, json, sys
t0 = float(sys.argv[2])
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "metrics" in r:
        m = r["metrics"]  # moectl's object form: times are RFC 3339 (docs/operations.md)
        t = datetime.datetime.fromisoformat(m["time"].replace("Z", "+00:00")).timestamp()
        print(t - float(m.get("step_seconds", 0)) - t0, t - t0)
        break
PY
)
  moe_start+=("$start"); moe_done+=("$done")
done
python3 - "${slurm[*]}" "${moe_start[*]}" "${moe_done[*]}" <<'PY'
import statistics, sys
slurm, start, done = ([float(x) for x in a.split()] for a in sys.argv[1:4])
s, m, d = statistics.median(slurm), statistics.median(start), statistics.median(done)
print(f"median of {len(slurm)} tries, on loopback")
print(f"  sbatch -> job script starts (Slurm {'22.05'})        {s*1e3:8.0f} ms")
print(f"  moectl submit -> first step starts (our control plane) {m*1e3:8.0f} ms")
print(f"  moectl submit -> first step done                     {d*1e3:8.0f} ms")
print(f"RESULT submit_to_first_step_ms {m*1e3:.0f}")
print(f"RESULT sbatch_to_start_ms {s*1e3:.0f}")
print(f"RESULT submit_to_first_step_over_sbatch_ratio {m/s:.2f}")
PY
