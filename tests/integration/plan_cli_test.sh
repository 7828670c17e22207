#!/bin/bash
# moectl plan from the outside (docs/planning.md): offline (no controller anywhere), the table, -o json,
# --set, --switch, --sweep, placement (--ep-domains), --gpus (the global batch kept; --scale-batch),
# --tensor-parallel, the all-to-all per cluster, the MFU's peak, --mtbf-hours (checkpoint advice) and
# clear errors with the usage exit code; then the local profile (moe-probe) and a live job planned on
# the racks it holds (moectl plan JOB), with the controller's planned step time in the job record,
# moectl describe and /metrics.
source "$(dirname "$0")/lib.sh"
export MOE_CONTROLLER=127.0.0.1:1  # nothing listens: offline plan must not need it
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

ex="${MOE_SOURCE_DIR:-.}/examples/deepseek-v3-671b.yaml"
# --gpus keeps the global batch (exactly where the layout runs it, else the nearest, said);
# --scale-batch keeps the batch per replica instead; --scale-batch alone is refused.
g=$("$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --gpus 2560 2>/dev/null | grep '^gpus:')
[[ "$g" == *"global batch 15360 sequences kept"* ]] || fail "--gpus 2560 should keep the global batch: $g"
g=$("$BIN/moectl" plan -f "$ex" --cluster h100 --gpus 2048 2>/dev/null | grep '^gpus:')
[[ "$g" == *"global batch 15360 -> 16384 sequences, the nearest"*"1536 and 2560 GPUs keep 15360"* ]] || fail "--gpus 2048 on h100: $g"
g=$("$BIN/moectl" plan -f "$ex" --cluster h100 --gpus 2048 --scale-batch 2>/dev/null | grep '^gpus:')
[[ "$g" == *"global batch 15360 -> 122880 sequences (480 per data-parallel replica, kept: --scale-batch)"* ]] || fail "--scale-batch: $g"
"$BIN/moectl" plan -f "$ex" --cluster h100 --scale-batch >/dev/null 2>&1 && fail "--scale-batch without --gpus should be refused"
# The in-domain all-to-all is priced on each cluster's own link (NVLink 5 against NVLink 4).
a2a() { "$BIN/moectl" plan -f "$ex" --cluster "$1" 2>/dev/null | grep -i 'all-to-all in domain' | awk '{print $4}'; }
a=$(a2a gb300-nvl72); b=$(a2a h100)
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || fail "the in-domain all-to-all is the same on gb300-nvl72 and h100 ($a s, $b s)"
echo "all-to-all in domain: gb300-nvl72 $a s, h100 $b s"
# Tensor parallelism: planned and marked as what this engine does not run; the MFU's peak is said.
"$BIN/moectl" plan -f "$ex" --cluster h100 --tensor-parallel 2 >"$WORK/tp.txt" 2>/dev/null
grep -q "^layout: TP2 PP8 VPP4 EP32 DP16 MBS1" "$WORK/tp.txt" || fail "--tensor-parallel 2: $(grep '^layout' "$WORK/tp.txt")"
grep -q "^tensor parallelism: needs tensor parallelism (TP2), which software ours does not run" "$WORK/tp.txt" \
  && grep -q "tensor-parallel collectives" "$WORK/tp.txt" || fail "a TP layout should say ours cannot run it: $(head -4 "$WORK/tp.txt")"
grep -q "^mfu peak: 989 TFLOP/s, h100's dense bf16 peak" "$WORK/tp.txt" || fail "no mfu peak line: $(grep -A1 '^throughput' "$WORK/tp.txt")"
"$BIN/moectl" plan -f "$ex" --cluster h100 --tensor-parallel 3 >/dev/null 2>&1 && fail "--tensor-parallel 3 (not dividing the heads) should be refused"

# Checkpoint advice (docs/planning.md, "Checkpoint advice"): the 671B example on 16,384 GB300s with the
# public per-GPU MTBF prints the Young-Daly interval and the goodput it predicts; -o json carries them.
# The batch per replica kept (--scale-batch), as the advice's examples in docs/planning.md run it.
big() { "$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --gpus 16384 --scale-batch --mtbf-hours 50000 "$@"; }
plan16k=$(big 2>&1); rc=$?
[ $rc = 0 ] || fail "plan at 16384 GPUs failed (rc $rc): $plan16k"
grep -q '^ *checkpoint interval:' <<<"$plan16k" || fail "no checkpoint interval line: $plan16k"
grep -q '^ *goodput:' <<<"$plan16k" || fail "no goodput line: $plan16k"
grep -qE '^checkpoint interval: every [0-9]+ steps? \(.*Young-Daly sqrt\(2 x .* system MTBF = 50000 h per GPU / 16384 GPUs' <<<"$plan16k" \
  || fail "the interval line lacks its inputs: $(echo "$plan16k" | grep '^checkpoint interval')"
grep -qE '^goodput: 0\.[0-9]{3} \(checkpoint stalls [0-9.]+ %, redone work [0-9.]+ %, restarts [0-9.]+ %\)' <<<"$plan16k" \
  || fail "the goodput line: $(echo "$plan16k" | grep '^goodput')"
grep -q "^gpus: scaled to 16384 GPUs by data parallelism: DP 32 -> 2048" <<<"$plan16k" || fail "no scaling line: $plan16k"
echo "$plan16k" | sed -n '/^gpus:/,$p'
big -o json >"$WORK/16k.json" && big -o json --checkpoint-save sync >"$WORK/16k-sync.json" \
  && "$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --gpus 1024 --scale-batch --mtbf-hours 50000 -o json >"$WORK/1k.json" \
  || fail "-o json with --gpus/--mtbf-hours failed"
python3 - "$WORK" <<'PY' || fail "the JSON checkpoint advice is wrong"
import json, math, sys
d = sys.argv[1]
a, s, k = (json.load(open(f"{d}/{n}.json")) for n in ("16k", "16k-sync", "1k"))
assert a["world_size"] == 16384 and "DP2048" in a["layout"], a["layout"]
c = a["checkpoint"]
assert c["save"] == "async" and s["checkpoint"]["save"] == "sync"
assert abs(c["system_mtbf_seconds"] - 50000 * 3600 / 16384) < 1e-3, c
assert abs(c["young_daly_seconds"] - math.sqrt(2 * c["stall_seconds"] * c["system_mtbf_seconds"])) < 1e-6 * c["young_daly_seconds"]
assert c["interval_steps"] >= 1 and abs(c["interval_seconds"] - c["interval_steps"] * c["step_seconds"]) < 1e-6 * c["interval_seconds"]
assert abs(c["goodput"] - (1 - c["stall_share"] - c["redo_share"] - c["restart_share"])) < 1e-9
assert 0 < s["checkpoint"]["goodput"] < c["goodput"] < k["checkpoint"]["goodput"] < 1, (s["checkpoint"]["goodput"], c["goodput"], k["checkpoint"]["goodput"])
PY
plain=$("$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72) || fail "plan of $ex failed"
grep -q "^checkpoint interval:" <<<"$plain" && fail "no --mtbf-hours should give no advice"
out=$("$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --gpus 100000 2>&1 >/dev/null); rc=$?
[ $rc = 6 ] && [[ "$out" == *"--gpus 100000"*"99840 and 100096"* ]] || fail "--gpus not a multiple of PP x EP should be refused naming it (rc $rc): $out"
for bad in 0 -5 nan; do
  out=$("$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --mtbf-hours=$bad 2>&1 >/dev/null); rc=$?
  [ $rc != 0 ] && [[ "$out" == *"--mtbf-hours"* ]] || fail "--mtbf-hours $bad should be refused naming it (rc $rc): $out"
done
out=$("$BIN/moectl" plan -f "$ex" --cluster gb300-nvl72 --gpus=0 2>&1 >/dev/null); rc=$?
[ $rc != 0 ] && [[ "$out" == *"--gpus"* ]] || fail "--gpus 0 should be refused naming it (rc $rc): $out"

# The local profile (moe-probe, this machine) and the CPU software profile.
"$BIN/moe-probe" --ranks 2 --seconds 0.3 >"$WORK/local.yaml" 2>/dev/null || fail "moe-probe failed"
grep -q "^device: cpu" "$WORK/local.yaml" && grep -q "^peak_bf16_tflops: " "$WORK/local.yaml" || fail "moe-probe: $(cat "$WORK/local.yaml")"
make_job "$WORK/tiny.yaml" live 100000 0
sed -i 's/expert_group_within: rack/expert_group_within: any/' "$WORK/tiny.yaml"
grep -q "expert_group_within: any" "$WORK/tiny.yaml" || fail "the job file lacks placement.expert_group_within"
"$BIN/moectl" plan -f "$WORK/tiny.yaml" --cluster "$WORK/local.yaml" >"$WORK/local.txt" || fail "plan on local.yaml failed"
grep -q "software ours-cpu, fp32" "$WORK/local.txt" || fail "a cpu cluster should default to ours-cpu: $(head -3 "$WORK/local.txt")"
out=$("$BIN/moe-probe" --ranks 0 2>&1 >/dev/null) && fail "moe-probe --ranks 0 should be refused"
[[ "$out" == *"--ranks"* ]] || fail "moe-probe --ranks 0: $out"

# Live: a controller that plans every attempt (--plan-cluster local), two workers in two racks, a job
# allowed to span them; moectl plan JOB uses the racks its ranks hold and shows what crossing costs.
start_controller --plan-cluster local
start_worker w0 r0 n0
start_worker w1 r1 n1
wait_workers 2
id=$("$BIN/moectl" submit -f "$WORK/tiny.yaml")
wait_state "$id" RUNNING 60
"$BIN/moectl" plan "$id" >"$WORK/live.txt" || fail "moectl plan $id failed"
grep -q "expert-parallel groups span 2 domain(s) of the job's 2" "$WORK/live.txt" || fail "live plan: $(cat "$WORK/live.txt")"
grep -q "grew: all-to-all across domains" "$WORK/live.txt" || fail "live plan shows no grown component: $(cat "$WORK/live.txt")"
sed -n '/^placement:/,$p' "$WORK/live.txt"
"$BIN/moectl" plan "$id" -o json | python3 -c '
import json, sys
p = json.load(sys.stdin)
assert p["ep_domains"] == 2 and p["all_in_one_rack"]["ep_domains"] == 1, p
assert p["step_seconds"] > p["all_in_one_rack"]["step_seconds"], (p["step_seconds"], p["all_in_one_rack"]["step_seconds"])
' || fail "live plan JSON"
planned=$(job_field "$id" "d.get('planned_step_seconds', 0)")
python3 -c "import sys; assert float(sys.argv[1]) > 0" "$planned" || fail "the job record has no planned step time ($planned)"
for _ in $(seq 1 150); do "$BIN/moectl" describe job "$id" | grep -q "planned step" && break; sleep 0.2; done
"$BIN/moectl" describe job "$id" | grep -E "planned step [0-9.]+ s \(local / ours-cpu, 2 domain\(s\), EP groups over 2\): measured / planned [0-9.]+" \
  || fail "describe shows no measured / planned ratio: $("$BIN/moectl" describe job "$id")"
# Once the job has reported a step, its plan states the MFU against the run's own peak too.
"$BIN/moectl" plan "$id" >"$WORK/live2.txt" 2>/dev/null || fail "moectl plan $id failed"
grep -q "^mfu peak: .*; the run counts its MFU against [0-9.]* TFLOP/s (.*): this plan's" "$WORK/live2.txt" \
  && grep -q "of the run's own peak" "$WORK/live2.txt" || fail "the live plan does not use the run's peak: $(grep -A1 '^throughput' "$WORK/live2.txt")"
grep -E "^(throughput|mfu peak):" "$WORK/live2.txt"
# To a file first: grep -q leaving early would SIGPIPE curl and fail the pipeline (pipefail).
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt" || fail "/metrics did not answer"
grep -q "^moe_job_planned_step_seconds{job_id=\"$id\"}" "$WORK/metrics.txt" || fail "/metrics lacks the planned step"
out=$("$BIN/moectl" plan does-not-exist 2>&1 >/dev/null); rc=$?
[ $rc = 3 ] || fail "plan of an unknown job: rc $rc, $out"
# A layout that does not fit exits 7 and lists the layouts of the same devices that do; with no
# --software the answer names the profile it rests on and whether it is calibrated.
rc=0
"$BIN/moectl" plan -f "$ex" --cluster h100 >"$WORK/nofit.txt" 2>"$WORK/nofit.err" || rc=$?
[ $rc = 7 ] || fail "a plan that does not fit exited $rc, not 7"
grep -q "does not fit" "$WORK/nofit.txt" || fail "no 'does not fit' verdict: $(head -4 "$WORK/nofit.txt")"
grep -q "nearest layouts of the same 256 devices that do" "$WORK/nofit.err" || fail "no fitting layouts offered: $(cat "$WORK/nofit.err")"
[ "$(grep -c ' fits$' "$WORK/nofit.err")" -ge 1 ] || fail "the offered layouts do not fit: $(cat "$WORK/nofit.err")"
grep -q "software profile ours (the cluster's default.*NOT calibrated" "$WORK/nofit.err" || fail "the default profile is not named with its calibration: $(cat "$WORK/nofit.err")"
# The GB300 record's own layout (TP1 PP2 VPP8 EP32, MXFP8, MBS 1, GBS 2048 on 256 GPUs) fits on the
# record's stack, with its habits said, within 15 % of the announced 1,648 TFLOP/s.
sed -e 's/pipeline_parallel: 8, virtual_pipeline: 4/pipeline_parallel: 2, virtual_pipeline: 8/' \
    -e 's/global_batch_size: 15360/global_batch_size: 2048/' -e '/batch_ramp/d' \
    -e 's/moments_dtype: bf16/moments_dtype: fp32/' -e 's/, recompute: \[mlp, mla_up_proj\]//' \
    -e 's/resources: {device: cuda}/resources: {device: cuda, precision: fp8}/' \
    "$ex" >"$WORK/gb300.yaml"
grep -q "pipeline_parallel: 2, virtual_pipeline: 8" "$WORK/gb300.yaml" && grep -q "precision: fp8" "$WORK/gb300.yaml" \
  || fail "examples/deepseek-v3-671b.yaml changed shape: this test's sed no longer applies"
"$BIN/moectl" plan -f "$WORK/gb300.yaml" --cluster gb300-nvl72 --software megatron-2026 >"$WORK/gb300.txt" 2>&1 \
  || fail "the GB300 record's layout does not fit: $(grep -m1 memory "$WORK/gb300.txt")"
grep -q "^software habits: AdamW moments in bf16, recompute moe_act+mlp" "$WORK/gb300.txt" || fail "the stack's habits are not said: $(head -4 "$WORK/gb300.txt")"
tflops=$(grep -oP '^throughput: \K[0-9]+' "$WORK/gb300.txt")
python3 -c "import sys; t = float(sys.argv[1]); sys.exit(0 if abs(t / 1648 - 1) <= 0.15 else 1)" "$tflops" \
  || fail "the GB300 record's layout plans at $tflops TFLOP/s, not within 15 % of 1,648"
"$BIN/moectl" cancel "$id" >/dev/null
echo "plan_cli_test passed"
