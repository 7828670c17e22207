#!/usr/bin/env bash
# Step time of the `small` preset at W=2 (EP 2, two processes on this machine, Gloo over loopback)
# against W=1, for the same global batch, measured in one run. Ratio = t(W=2) / t(W=1): on one
# machine W=2 shares the same cores, so the ratio shows what the all-to-all and gradient all-reduce
# add on top of the same arithmetic (1.0 would be free communication).
#   bench/ep_scaling_bench.sh [build-dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-5}
work=$(mktemp -d /tmp/moe-bench-ep.XXXXXX)
trap 'rm -rf "$work"' EXIT
for w in 1 2; do
  ep=$w
  cat >"$work/w$w.yaml" <<YAML
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: small-w$w}
spec:
  model: {preset: small}
  parallelism: {world_size: $w, expert_parallel: $ep, timeout_seconds: 300}
  data: {source: synthetic, seq_length: 512, micro_batch_size: 2, global_batch_size: 4}
  training: {steps: $((steps + 1)), log_interval: 1000}
YAML
done
"$build/bin/moe-train" --config "$work/w1.yaml" --metrics-out "$work/w1.jsonl" 2>"$work/w1.log" || { cat "$work/w1.log"; exit 1; }
"$build/bin/moe-train" --config "$work/w2.yaml" --nproc 2 --metrics-out "$work/w2.jsonl" 2>"$work/w2.log" || { cat "$work/w2.log"; exit 1; }
python3 - "$work" <<'PY'
import json, statistics, sys
w = sys.argv[1]
def load(n):
    rows = [json.loads(l) for l in open(f"{w}/w{n}.jsonl")][1:]   # the first step warms up
    return (statistics.median(r["step_seconds"] for r in rows), statistics.median(r["alltoall_seconds"] for r in rows),
            statistics.median(r["grad_sync_seconds"] for r in rows), statistics.median(r["compute_seconds"] for r in rows))
t1, _, s1, c1 = load(1)
t2, a2, s2, c2 = load(2)
print("step time at small (4 x 512 tokens per step, synthetic data), one machine")
print(f"  W=1             {t1:.3f} s")
print(f"  W=2 (EP 2)      {t2:.3f} s: compute {c2:.3f} s, all-to-all {a2:.3f} s ({a2/t2:.0%}), gradient all-reduce {s2:.3f} s ({s2/t2:.0%})")
print(f"RESULT ep2_over_w1_step_time_ratio {t2/t1:.3f}")
PY
