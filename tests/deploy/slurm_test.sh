#!/usr/bin/env bash
# deploy/slurm on a real Slurm (Debian's slurm-wlm and munge, installed by `make test`): slurmctld and
# two slurmd on loopback with a generated slurm.conf and a topology of two blocks. The sbatch script
# starts a controller and CPU workers, submits a tiny job (W = 4, EP 2: one EP group per block) and
# follows it. Mid-run the batch shell gets SIGTERM, as `#SBATCH --signal=B:TERM@300` sends it before the
# time limit (here `scancel --signal=TERM --batch`, at a step this test picks: Slurm's own timer fires up
# to a minute early). The script must stop cleanly: the ranks checkpoint at their next step, the
# controller keeps its state, the batch job exits 75. Resubmitted with the same MOE_WORK, the script
# must follow the same job (no second one), which resumes from that checkpoint with no restart used and
# SUCCEEDS with its racks from Slurm's topology. Meanwhile a real Prometheus, started here and told
# only a file_sd directory, finds the controller through the target file the batch script writes there
# (MOE_PROMETHEUS_SD_DIR) and scrapes it; the file goes when the allocation ends. The controller serves
# TLS only, under a CA the batch script made for its allocation: moectl with that CA gets through, one
# without it does not, the agents were given it, the keys are the owner's alone, the CA's key is gone
# once it signed, the certificate names the address the agents dial, and nothing of it outlives the
# allocation. Everything started is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${MOE_BIN:?}
BIN=$(cd "$BIN" && pwd)
work=$(mktemp -d /tmp/moe-slurm-test.XXXXXX)
cleanup() {
  scancel --user=root >/dev/null 2>&1 || true
  tests/slurm/local_slurm.sh stop "$work/slurm" >/dev/null 2>&1 || true
  pkill -f "moe-.*--state-dir $work" 2>/dev/null || true
  [ -n "${prom_pid:-}" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null || true
  [ -n "${MOE_KEEP_WORK:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/run/*.log "$work"/out*.txt; do [ -f "$f" ] && { echo "== $f" >&2; tail -25 "$f" >&2; }; done
  exit 1
}
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("",0));print(s.getsockname()[1])'; }
export SLURM_CONF=$(tests/slurm/local_slurm.sh start "$work/slurm")
sed 's/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 4/; s/steps: 400, seed/steps: 40, seed/;
     s/world_size: 2, expert_parallel: 2/world_size: 4, expert_parallel: 2/' examples/tiny.yaml >"$work/job.yaml"
sed -i "s#path: data/fortunes#path: $PWD/data/fortunes#" "$work/job.yaml"
grep -q "steps: 40," "$work/job.yaml" || fail "examples/tiny.yaml changed shape: this test's sed no longer applies"
mkdir -p "$work/run" "$work/elsewhere"
port=$(free_port)
export MOE_BIN=$BIN MOE_WORK=$work/run MOE_DEVICE=cpu MOE_PORT=$port MOE_METRICS_PORT=$(free_port)
# The workers' stop grace comes from the batch script's environment (checked on their command lines).
export MOE_STOP_GRACE_SECONDS=45
# The resubmission by hand (sbatch again with the same MOE_WORK) is what this test follows: no requeue
# (the script's default, MOE_REQUEUE=1, would run the same batch job again by itself).
export MOE_REQUEUE=0
# Confined paths, as a real site would set them: the job reads data/ and checkpoints below MOE_WORK.
export MOE_DATA_ROOTS=$PWD/data MOE_CHECKPOINT_ROOTS=$work/run
# Prometheus watches a file_sd directory (and knows nothing else of this allocation). The two slurmd
# of this test share one host, so the agents' health port (one per node) is off here: health_test
# covers it.
export MOE_PROMETHEUS_SD_DIR=$work/sd MOE_AGENT_METRICS_PORT=0
prom_port=$(free_port)
mkdir -p "$work/prom" "$work/sd"
printf '%s\n' "global: {scrape_interval: 1s, evaluation_interval: 1s}" "scrape_configs:" \
  "  - job_name: moe-slurm" "    file_sd_configs: [{files: ['$work/sd/*.json'], refresh_interval: 1s}]" \
  >"$work/prom/prometheus.yml"
prometheus --config.file="$work/prom/prometheus.yml" --storage.tsdb.path="$work/prom/data" \
  --web.listen-address=127.0.0.1:$prom_port >"$work/run-prometheus.log" 2>&1 &
prom_pid=$!
promq() { curl -sf "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")'; }
script=$PWD/deploy/slurm/moe-job.sbatch
grep -q '^#SBATCH --signal=B:TERM@600' "$script" || fail "moe-job.sbatch does not ask for SIGTERM before its time limit"
# Submitted from another directory: the script must find its helper and binaries by itself.
jid=$(cd "$work/elsewhere" && env -u MOE_BIN sbatch --parsable --export=ALL,PATH=$BIN:$PATH --nodes=2 --ntasks-per-node=2 \
      -o "$work/out1.txt" "$script" "$work/job.yaml") || fail "sbatch refused the job"
# moectl as a user of this allocation's controller runs it: its admin token, and the allocation's CA.
tls=$work/run/tls
plain_ctl() { MOE_CONTROLLER=127.0.0.1:$port MOE_TOKEN=$(head -1 "$work/run/tokens" 2>/dev/null | cut -d' ' -f1) "$BIN/moectl" --timeout 3 "$@"; }
ctl() { plain_ctl --tls-ca "$tls/ca.crt" "$@"; }
step=0
for _ in $(seq 1 600); do
  step=$(ctl get jobs -o json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(max([int(j.get("last_metrics", {}).get("step", 0)) for j in d.get("jobs", [])] or [0]))' 2>/dev/null || echo 0)
  [ "$step" -ge 8 ] && break
  squeue -h -j "$jid" 2>/dev/null | grep -q . || fail "the batch job ended before step 8"
  sleep 0.5
done
[ "$step" -ge 8 ] || fail "the job did not reach step 8"
[ "$step" -lt 40 ] || fail "the job finished before the signal could be tested"
# One node agent per node (two CPU slots each, from --ntasks-per-node=2): two agents, four workers.
graced=$(pgrep -af "moe-worker .*--slots 2 .*--stop-grace-seconds 45" | grep -c "$work/run" || true)
[ "$graced" = 2 ] || fail "MOE_STOP_GRACE_SECONDS=45 reached $graced of 2 node agents (--slots 2): $(pgrep -af 'moe-worker ' | head -2)"
workers=$(ctl get workers -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workers"]))')
[ "$workers" = 4 ] || fail "two node agents of two slots should list 4 workers, not $workers"
# TLS as shipped: the tokens and heartbeat keys never cross the network in clear.
grep -q -- '--allow-cleartext-tokens' "$script" && fail "moe-job.sbatch still runs the controller with --allow-cleartext-tokens"
grep -qE "serving gRPC on 0\.0\.0\.0:$port \(TLS\), tokens required" "$work/run/controller.log" \
  || fail "the controller does not say it serves TLS: $(grep 'serving gRPC' "$work/run/controller.log")"
plain_ctl get workers >/dev/null 2>&1 && fail "moectl without the allocation's CA (plaintext) got an answer from the controller"
tls_agents=$(pgrep -af "moe-worker .*--tls-ca $tls/ca.crt" | grep -c "$work/run" || true)
[ "$tls_agents" = 2 ] || fail "$tls_agents of 2 node agents were given --tls-ca $tls/ca.crt: $(pgrep -af 'moe-worker ' | head -2)"
[ "$(stat -c %a "$tls")" = 700 ] || fail "$tls has mode $(stat -c %a "$tls"), not 700"
[ "$(stat -c %a "$tls/controller.key")" = 600 ] || fail "the controller's key has mode $(stat -c %a "$tls/controller.key"), not 600"
[ -e "$tls/ca.key" ] && fail "the allocation CA's key is still there after signing the controller's certificate"
openssl verify -CAfile "$tls/ca.crt" "$tls/controller.crt" >/dev/null || fail "the controller's certificate is not the allocation CA's"
openssl x509 -in "$tls/controller.crt" -noout -ext subjectAltName | grep -q 'IP Address:127.0.0.1' \
  || fail "the controller's certificate does not name 127.0.0.1, the NodeAddr the agents dial: $(openssl x509 -in "$tls/controller.crt" -noout -ext subjectAltName)"
# The batch script's target file, taken now (the job must not end before its SIGTERM below; the file
# goes with the allocation): checked, with Prometheus's scrapes of it, after the stop.
sd=$work/sd/moe-$jid.json
cp "$sd" "$work/sd-taken.json" 2>/dev/null || fail "no Prometheus target file $sd while the allocation ran"
scancel --signal=TERM --batch "$jid"
for _ in $(seq 1 240); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.5; done
squeue -h -j "$jid" 2>/dev/null | grep -q . && fail "the batch job did not stop within 120 s of its SIGTERM"
grep -q "stopped before the end; resubmit" "$work/out1.txt" || fail "no clean stop in the first batch output"
exit1=$(scontrol show job "$jid" 2>/dev/null | grep -oP 'ExitCode=\K[0-9]+' | head -1 || true)
[ -z "$exit1" ] || [ "$exit1" = 75 ] || fail "the stopped batch job exited $exit1, not 75"
ck=$( (ls -d "$work"/run/checkpoints/*/step_* 2>/dev/null || true) | sed 's/.*step_0*//' | sort -n | tail -1)
[ -n "$ck" ] && [ "$ck" -ge 8 ] || fail "no checkpoint at or after step 8 (newest: ${ck:-none}) after the stop"
id1=$(grep -oP 'moe-job: following \K\S+' "$work/out1.txt" | head -1)
[ -f "$sd" ] && fail "the target file $sd outlived its allocation"
[ -e "$tls" ] && fail "the allocation's TLS keys ($tls) outlived it"
python3 - "$work/sd-taken.json" "$MOE_METRICS_PORT" "$jid" <<'PY' || fail "the target file did not name the controller's metrics endpoint: $(cat "$work/sd-taken.json")"
import json, sys
groups = json.load(open(sys.argv[1]))
want = f"127.0.0.1:{sys.argv[2]}"
assert any(want in g["targets"] and g["labels"] == {"slurm_job_id": sys.argv[3], "component": "controller"}
           for g in groups), groups
PY
# Prometheus found the controller through that file alone and scraped it while it ran (the samples
# stay in its database after the target went).
scraped=""
for _ in $(seq 1 20); do
  scraped=$(promq "max_over_time(moe_build_info{component=\"controller\",slurm_job_id=\"$jid\"}[10m])" 2>/dev/null || true)
  [ "$scraped" = 1 ] && break
  sleep 0.5
done
[ "$scraped" = 1 ] || fail "Prometheus never scraped the controller through $sd ($(tail -3 "$work/run-prometheus.log"))"

# The resubmission: same MOE_WORK, so the same controller state; the same job must carry on.
(cd "$work/elsewhere" && timeout 600 sbatch --wait --export=ALL,PATH=$BIN:$PATH --nodes=2 --ntasks-per-node=2 \
   -o "$work/out2.txt" "$script" "$work/job.yaml" >/dev/null) || fail "the resubmitted batch job failed"
grep -q "resuming the controller state" "$work/out2.txt" || fail "the resubmission did not reuse the controller state"
id2=$(grep -oP 'moe-job: following \K\S+' "$work/out2.txt" | head -1)
[ -n "$id1" ] && [ "$id1" = "$id2" ] || fail "the resubmission followed '$id2', not the stopped job '$id1'"
grep -q "SUCCEEDED" "$work/out2.txt" || fail "no SUCCEEDED in the second batch output"
# Where the second batch job's ranks resumed: their own log line (the watch may start after the first
# steps of the resumed attempt, whose agents reconnect and are placed before the script submits).
resumed=$(grep -oP 'resumed from \S+/step_0*\K[0-9]+' "$work/run/workers.log" | sort -u)
[ "$resumed" = "$ck" ] || fail "the resumed ranks started from step(s) '${resumed:-none}', not the checkpoint of step $ck"
first=$(grep -oP '^step \K[0-9]+(?=/40)' "$work/out2.txt" | head -1)
[ -n "$first" ] && [ "$first" -gt "$ck" ] || fail "the second batch job's watch showed step ${first:-?} first, not one after step $ck"
grep -q " 0 restart(s)" "$work/out2.txt" || fail "the clean stop used a restart: $(grep summary: "$work/out2.txt")"
grep -q "rack block1" "$work/out2.txt" && grep -q "rack block2" "$work/out2.txt" || fail "the racks did not come from Slurm's topology"
echo "slurm: the controller served TLS under the allocation's CA (plaintext refused); Prometheus scraped the controller through its file_sd target; SIGTERM at step $step checkpointed step $ck and exited 75; the resubmission followed $id1 from step $first to SUCCEEDED (4 CPU workers in 2 blocks)"
