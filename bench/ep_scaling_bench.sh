#!/usr/bin/env bash
# Step time of the `small` preset at W=2 (EP 2, two processes on this machine, Gloo over loopback)
# against W=1, for the same global batch, measured in one run. Ratio = t(W=2) / t(W=1): on one
# machine W=2 shares the same cores, so the ratio shows what the all-to-all and gradient all-reduce
# add on top of the same arithmetic (1.0 would be free communication).
# Next to each measurement: what `moectl plan --cluster local` (this machine, probed by moe-probe in
# the same run, just before the training) predicts for the same job; the planner's goal is within 25 %.
# Then the f64 gradient reduction's own rate between the same two ranks (moe-bench-alltoall: the
# all-reduce and reduce-scatter of 256 MiB of f64 sums, about the small preset's dense gradients,
# against the token all-to-all's wire rate of the same run).
# Run it alone: a build beside it slows the probe and the training differently.
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
for w in 1 2; do
  # The probe (what --cluster local runs) with longer windows: best-of over 2 s resists the neighbours' noise.
  "$build/bin/moe-probe" --ranks "$w" --seconds 2 >"$work/local$w.yaml" 2>/dev/null || { echo "moe-probe failed"; exit 1; }
  "$build/bin/moectl" plan -f "$work/w$w.yaml" --cluster "$work/local$w.yaml" -o json >"$work/plan$w.json" 2>"$work/plan$w.log" || { cat "$work/plan$w.log"; exit 1; }
  nproc=(); [ "$w" = 1 ] || nproc=(--nproc "$w")
  "$build/bin/moe-train" --config "$work/w$w.yaml" "${nproc[@]}" --metrics-out "$work/w$w.jsonl" 2>"$work/w$w.log" || { cat "$work/w$w.log"; exit 1; }
done
"$build/bin/moe-bench-alltoall" --iters 3 --reduce-mb 256 >"$work/reduce.log" 2>&1 || { cat "$work/reduce.log"; exit 1; }
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
print()
print("moectl plan --cluster local (software ours-cpu) against the measured median step:")
for n, t in ((1, t1), (2, t2)):
    p = json.load(open(f"{w}/plan{n}.json"))
    parts = ", ".join(f"{c['name']} {c['seconds']:.2f}" for c in p["components"] if c["seconds"] >= 0.005)
    print(f"  W={n}: predicted {p['step_seconds']:.3f} s ({parts}); measured {t:.3f} s")
    print(f"RESULT plan_over_measured_step_w{n} {p['step_seconds']/t:.3f} (goal 0.75-1.25)")
PY
echo
echo "the f64 gradient reductions between the two ranks (moe-bench-alltoall --reduce-mb 256):"
sed -n '/^f64 gradient reductions/,$p' "$work/reduce.log"
