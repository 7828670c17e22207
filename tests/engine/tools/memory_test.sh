#!/usr/bin/env bash
# Memory accounting, measured against predicted (moe-train --describe, common/memory_model.h):
#  1. the engine's measured step peak (metrics memory_peak_bytes, from the tensors' allocation counters)
#     is within 10% of --describe's estimate for pipeline rank 0 at W=1, PP2, ZeRO-1 DP2 (fp32) and
#     ZeRO-1 DP2 with bf16 compute copies (the fp32 master in shards) on tiny; and at `small`, seq 4096;
#  2. at `small` (two of its layers: the peak is per layer, the run half as long) with seq_length 4096 and micro batch 1, flash-style attention's activation peak is at
#     most 1/3 of the materialised path's (training.attention: materialized keeps the [B, H, S, S]
#     probabilities); selective recompute lowers the peak further with bitwise-equal losses;
#  3. --describe of DeepSeek-V3 671B in Megatron's GB200 layout (PP8 VPP4 EP32, 256 ranks) prints a
#     per-rank peak under 186 GB; with DP x EP only it says why the layout cannot fit.
set -euo pipefail
bin=${MOE_BIN:?}/moe-train
source tests/engine/tools/lib.sh memory
# measured_vs_estimate <name> <nproc> [flags]: trains 3 steps, compares rank 0's peak with the estimate.
measured_vs_estimate() {
  local name=$1 n=$2
  shift 2
  "$bin" --config "$work/$name.yaml" --nproc "$n" --steps 3 --metrics-out "$work/$name.jsonl" "$@" 2>"$work/$name.log" ||
    { tail -20 "$work/$name.log"; fail "$name"; }
  "$bin" --describe --config "$work/$name.yaml" "$@" >"$work/$name.describe" || fail "$name: --describe"
  python3 - "$work/$name.jsonl" "$work/$name.describe" "$name" <<'PY'
import json, re, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
measured = max(r["memory_peak_bytes"] for r in runs)
units = {"MB": 1e6, "GB": 1e9}
row = next(l for l in open(sys.argv[2]) if re.match(r"^\s+0\s", l))
cells = re.findall(r"([\d.]+) (MB|GB)", row)
estimate = float(cells[-1][0]) * units[cells[-1][1]]  # the row's total
err = abs(estimate - measured) / measured
at_peak = runs[-1]["memory_at_peak"]
assert measured > 0 and at_peak["weights"] > 0 and at_peak["activations"] > 0, at_peak
print(f"{sys.argv[3]}: measured peak {measured / 1e6:.1f} MB, --describe {estimate / 1e6:.1f} MB ({err:.1%} off)")
assert err <= 0.10, f"{sys.argv[3]}: the estimate is {err:.1%} off the measured peak"
PY
}

# 1. Estimates against measurements on tiny.
job "$work/w1.yaml" "world_size: 1, expert_parallel: 1"
job "$work/pp2.yaml" "world_size: 2, expert_parallel: 1, pipeline_parallel: 2"
job "$work/zero2.yaml" "world_size: 2, expert_parallel: 1" "s/grad_clip: 1.0}/grad_clip: 1.0, distributed: true}/"
cp "$work/zero2.yaml" "$work/zero2-bf16.yaml"
measured_vs_estimate w1 1
measured_vs_estimate pp2 2
measured_vs_estimate zero2 2
measured_vs_estimate zero2-bf16 2 --precision bf16

# 2. small at seq 4096, micro batch 1: flash against materialised attention, and recompute.
small() {  # small <file> [training extra]
  cat >"$1" <<EOF
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: small-4k}
spec:
  model: {preset: small, num_layers: 2}
  parallelism: {world_size: 1, expert_parallel: 1}
  data: {source: synthetic, seq_length: 4096, micro_batch_size: 1, global_batch_size: 1}
  training: {steps: 1, seed: 1${2:-}}
  resources: {device: cpu}
EOF
}
small "$work/flash.yaml"
small "$work/materialized.yaml" ", attention: materialized"
small "$work/recompute.yaml" ", recompute: [core_attn, mlp, moe_act]"
for name in flash materialized recompute; do
  "$bin" --config "$work/$name.yaml" --steps 1 --metrics-out "$work/$name.jsonl" 2>"$work/$name.log" ||
    { tail -20 "$work/$name.log"; fail "small $name"; }
done
"$bin" --describe --config "$work/flash.yaml" >"$work/flash.describe"
python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
r = {n: json.loads(open(f"{w}/{n}.jsonl").readline()) for n in ("flash", "materialized", "recompute")}
act = {n: r[n]["memory_at_peak"]["activations"] for n in r}
peak = {n: r[n]["memory_peak_bytes"] for n in r}
for n in r:
    print(f"small seq 4096 {n}: peak {peak[n] / 1e6:.0f} MB, activations at the peak {act[n] / 1e6:.0f} MB, loss {r[n]['loss']!r}")
assert act["flash"] * 3 <= act["materialized"], f"flash activations {act['flash']} > 1/3 of materialised {act['materialized']}"
assert peak["flash"] < peak["materialized"], "flash should lower the whole peak too"
assert peak["recompute"] < peak["flash"], f"recompute peak {peak['recompute']} not below {peak['flash']}"
assert r["recompute"]["loss"] == r["flash"]["loss"], "recompute must not change the loss (bitwise)"
rel = abs(r["materialized"]["loss"] - r["flash"]["loss"]) / r["flash"]["loss"]
assert rel <= 1e-5, f"materialised attention's loss differs by {rel:.1e}"
row = next(l for l in open(f"{w}/flash.describe") if re.match(r"^\s+0\s", l))
value, unit = re.findall(r"([\d.]+) (MB|GB)", row)[-1]
est = float(value) * {"MB": 1e6, "GB": 1e9}[unit]
err = abs(est - peak["flash"]) / peak["flash"]
print(f"small seq 4096: --describe {est / 1e6:.0f} MB against the measured {peak['flash'] / 1e6:.0f} MB ({err:.1%} off); "
      f"flash/materialised activations {act['flash'] / act['materialized']:.2f}, whole peak {peak['flash'] / peak['materialized']:.2f}")
assert err <= 0.10, f"--describe is {err:.1%} off at small seq 4096"
PY

# 3. DeepSeek-V3 671B in Megatron's GB200 layout, and with DP x EP only.
cat >"$work/gb200.yaml" <<'EOF'
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: dsv3-gb200}
spec:
  model: {preset: deepseek-v3-671b}
  parallelism: {world_size: 256, pipeline_parallel: 8, virtual_pipeline: 4, expert_parallel: 32}
  data: {source: synthetic, seq_length: 4096, micro_batch_size: 1, global_batch_size: 2048}
  training: {steps: 10, recompute: [mlp, mla_up_proj]}
  optimizer: {moments_dtype: bf16}
  resources: {device: cuda}
EOF
sed 's/pipeline_parallel: 8, virtual_pipeline: 4, //; s/moments_dtype: bf16}/moments_dtype: bf16, distributed: false}/' \
  "$work/gb200.yaml" >"$work/dpep.yaml"
"$bin" --describe --config "$work/gb200.yaml" >"$work/gb200.txt" || fail "--describe gb200"
"$bin" --describe --config "$work/dpep.yaml" >"$work/dpep.txt" || fail "--describe DP x EP"
# The capacity a cuda job is judged against comes from a planner cluster profile (gb200-nvl72 by default).
"$bin" --describe --config "$work/gb200.yaml" --cluster h100 >"$work/h100.txt" || fail "--describe --cluster h100"
grep -q "of 80.0 GB" "$work/h100.txt" || fail "--cluster h100 should judge against 80 GB: $(grep -i fit "$work/h100.txt")"
grep -q "186.0 GB per device" "$work/gb200.txt" || fail "the default capacity should be a GB200's 186 GB: $(grep -i fit "$work/gb200.txt")"
if out=$("$bin" --describe --config "$work/gb200.yaml" --cluster gb201 2>&1); then fail "an unknown --cluster was accepted"; fi
[[ "$out" == *"--cluster"*"gb200-nvl72"* ]] || fail "an unknown --cluster should list the known ones: $out"
python3 - "$work/gb200.txt" "$work/dpep.txt" <<'PY'
import re, sys
gb = open(sys.argv[1]).read()
m = re.search(r"memory per rank \(estimate\): peak ([\d.]+) GB on pipeline rank (\d+)", gb)
assert m, gb
assert float(m.group(1)) < 186, f"671B GB200 layout: {m.group(1)} GB per rank"
assert len(re.findall(r"^\s+\d+\s", gb, re.M)) == 8, "a row per pipeline rank"
assert "fits in 186.0 GB" in gb, gb
print(f"671B, PP8 VPP4 EP32 on 256 ranks: peak {m.group(1)} GB on pipeline rank {m.group(2)}")
dp = open(sys.argv[2]).read()
assert "does not fit" in dp and "optimizer.distributed: true" in dp and "pipeline_parallel > 1" in dp, dp
print("671B, DP x EP only: " + next(l for l in dp.splitlines() if l.startswith("does not fit"))[:110] + "...")
PY
echo "memory: estimates match the measured peaks; flash attention and recompute cut the activations"
