#!/bin/bash
# moectl plan from the outside (docs/planning.md): offline (no controller anywhere), the table, -o json,
# --set, --switch, --sweep, placement (--ep-domains) and clear errors with the usage exit code.
source "$(dirname "$0")/lib.sh"
export MOE_CONTROLLER=127.0.0.1:1  # nothing listens: plan must not need it
cat >"$WORK/job.yaml" <<'YAML'
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: dsv3}
spec:
  model: {preset: deepseek-v3-671b}
  parallelism: {world_size: 256, pipeline_parallel: 2, virtual_pipeline: 8, expert_parallel: 32}
  data: {path: data/fortunes, seq_length: 4096, micro_batch_size: 1, global_batch_size: 2048}
  training: {steps: 100}
  resources: {device: cuda, precision: fp8}
YAML
plan() { "$BIN/moectl" plan -f "$WORK/job.yaml" --cluster gb300-nvl72 --software megatron-2026 "$@"; }

plan >"$WORK/table.txt" || fail "moectl plan failed"
for want in "memory: " "step time:" "routed experts" "all-to-all in domain" "pipeline bubble" "TFLOP/s per GPU" "GPU-hours"; do
  grep -q "$want" "$WORK/table.txt" || fail "the table lacks '$want': $(cat "$WORK/table.txt")"
done

plan -o json >"$WORK/packed.json" || fail "-o json failed"
plan -o json --ep-domains 2 >"$WORK/split.json" || fail "--ep-domains 2 failed"
plan -o json --set parallelism.expert_parallel=64 >"$WORK/ep64.json" || fail "--set failed"
plan -o json --switch dispatcher=nccl >"$WORK/nccl.json" || fail "--switch failed"
python3 - "$WORK" <<'PY' || fail "the JSON plans disagree with what they should show"
import json, sys
d = sys.argv[1]
p, s, e, n = (json.load(open(f"{d}/{k}.json")) for k in ("packed", "split", "ep64", "nccl"))
comp = lambda plan, name: next(c["seconds"] for c in plan["components"] if c["name"] == name)
assert 0.85 <= p["tflops_per_gpu"] / 1648 <= 1.15, p["tflops_per_gpu"]
assert p["memory"]["fits"] in (True, False) and len(p["memory"]["ranks"]) == 2
assert abs(sum(c["seconds"] for c in p["components"]) - p["step_seconds"]) < 1e-5 * p["step_seconds"]
assert s["tflops_per_gpu"] < p["tflops_per_gpu"] and comp(s, "all-to-all across domains") > comp(p, "all-to-all across domains") == 0
assert "EP64" in e["layout"] and e["rows_per_expert"] == 2 * p["rows_per_expert"]
assert n["tflops_per_gpu"] < p["tflops_per_gpu"]
print(f"plan: {p['tflops_per_gpu']:.0f} TFLOP/s/GPU packed, {s['tflops_per_gpu']:.0f} with EP over 2 racks", flush=True)
PY

plan --sweep 5 >"$WORK/sweep.txt" || fail "--sweep failed"
[ "$(grep -c ' fits$' "$WORK/sweep.txt")" = 5 ] || fail "the sweep's best 5 should fit: $(cat "$WORK/sweep.txt")"

# Bad input: exit 6 (refused) or 3 (not found), a sentence naming what is wrong, nothing on stdout.
set +e
out=$("$BIN/moectl" plan -f "$WORK/job.yaml" --cluster gb300 2>&1 >/dev/null); rc=$?
[ $rc -ne 0 ] && [[ "$out" == *"gb300-nvl72"* ]] || fail "an unknown cluster should list the known ones (rc $rc): $out"
out=$(plan --switch host.lunch_us=3 2>&1 >/dev/null); rc=$?
[ $rc = 6 ] && [[ "$out" == *"launch_us"* ]] || fail "a misspelt switch should suggest the field (rc $rc): $out"
out=$(plan --set parallelism.expert_parallel=3 2>&1 >/dev/null); rc=$?
[ $rc = 6 ] && [[ "$out" == *"expert_parallel"* ]] || fail "a bad layout should name the field (rc $rc): $out"
out=$(plan --racks 2 2>&1 >/dev/null); rc=$?
[ $rc = 6 ] && [[ "$out" == *"--racks"* ]] || fail "too few racks should say so (rc $rc): $out"
echo "plan_cli_test passed"
