#!/usr/bin/env bash
# The measured pipeline bubble against 1F1B's ideal (p-1)/(m+p-1), for PP 2 and 4 (W = PP, EP 1, DP 1)
# at m = 2, 4 and 8 micro-batches per step: examples/tiny.yaml on synthetic tokens, trained for a few
# steps with `moe-train --nproc P --pipeline-parallel P --threads 1`. The measured figure is the step
# metric pipeline_bubble (the fraction of the step a rank waits in the pipeline's point-to-point
# exchanges, averaged over ranks), its mean over the steps after the first (which warms up).
#
# On a machine with fewer cores than ranks (PP 4 on 2 cores) the ranks time-share the cores, so a rank
# also "waits" while its peer is descheduled: the measured bubble is then inflated by oversubscription
# and is an upper bound, not the schedule's own bubble.
#
#   bench/pipeline_bubble_bench.sh [build-dir] [steps] [seq_length] [micro_batch_size]
set -euo pipefail
build=${1:-build}
steps=${2:-4}
seq=${3:-128}
mbs=${4:-2}
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/moe-bench-bubble.XXXXXX)
trap 'rm -rf "$work"' EXIT

job() {  # job <file> <pp> <micro-batches>
  sed "s|data: {path: data/fortunes, seq_length: 256, micro_batch_size: 8, global_batch_size: 16}|data: {source: synthetic, seq_length: $seq, micro_batch_size: $mbs, global_batch_size: $(($3 * mbs))}|;
       s/world_size: 2, expert_parallel: 2/world_size: $2, expert_parallel: 1, pipeline_parallel: $2, timeout_seconds: 120/;
       s/log_interval: 10/log_interval: 1/" examples/tiny.yaml >"$1"
  grep -q "source: synthetic" "$1" || { echo "pipeline_bubble_bench: examples/tiny.yaml changed; fix the sed" >&2; exit 1; }
}

cores=$(nproc)
for pp in 2 4; do
  for m in 2 4 8; do
    name=pp${pp}_m$m
    job "$work/$name.yaml" "$pp" "$m"
    "$build/bin/moe-train" --config "$work/$name.yaml" --nproc "$pp" --pipeline-parallel "$pp" --threads 1 \
      --steps $((steps + 1)) --metrics-out "$work/$name.jsonl" 2>"$work/$name.log" ||
      { tail -30 "$work/$name.log"; exit 1; }
    grep -o "ideal bubble [0-9.e-]*" "$work/$name.log" | head -1 >"$work/$name.ideal"
    grep -o "pipeline: .*: [^;]*" "$work/$name.log" | head -1 | sed 's/.*: //' >"$work/$name.stages"
  done
done

python3 - "$work" "$cores" "$seq" "$mbs" <<'PY'
import json, statistics, sys
work, cores, seq, mbs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"pipeline bubble, tiny preset (4 layers + MTP), {mbs} x {seq} tokens per micro-batch, 1F1B, "
      f"1 thread per rank, {cores} cores")
print(f"{'PP':>3} {'m':>3} {'measured':>9} {'ideal':>7} {'logged':>8} {'step s':>7}  ranks/cores")
for pp in (2, 4):
    for m in (2, 4, 8):
        name = f"pp{pp}_m{m}"
        rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
        rows = [r for r in rows if r["step"] > 1]  # step 1 warms up
        measured = statistics.mean(r["pipeline_bubble"] for r in rows)
        step = statistics.median(r["step_seconds"] for r in rows)
        ideal = (pp - 1) / (m + pp - 1)
        logged = open(f"{work}/{name}.ideal").read().split()[-1]
        note = "oversubscribed: inflated" if pp > cores else ""
        stages = open(f"{work}/{name}.stages").read().strip()
        print(f"{pp:>3} {m:>3} {measured:>9.3f} {ideal:>7.3f} {logged:>8} {step:>7.3f}  {pp}/{cores} stages {stages} {note}")
        print(f"RESULT pipeline_bubble_pp{pp}_m{m}_measured_over_ideal {measured / ideal:.3f}")
print("measured: mean over steps 2.. of the step metric pipeline_bubble (time in point-to-point waits /")
print("step time, averaged over ranks); ideal: (p-1)/(m+p-1); logged: the training log's 'ideal bubble'.")
print("The ideal assumes equal stages; the stages (Megatron letters: E embedding, t block, m MTP depth,")
print("L loss) are not equal in work: the faster stages wait for the slowest every micro-batch, a floor")
print("the ideal does not have and that does not shrink as m grows.")
if any(pp > cores for pp in (2, 4)):
    print(f"With more ranks than cores ({cores}) the ranks time-share the CPU, so a rank also waits while its")
    print("peer is descheduled: those rows overstate the schedule's bubble.")
PY
