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
# allocation. Then the controller with a backup host (deploy/slurm/moe-controllers-ha.sh, checked by
# bash -n and, where installed, shellcheck): three etcd members and two controllers on loopback, each run
# by the script as its own supervisor, TLS and tokens as a site would set them; moe-add-workers.sbatch
# through the script gives the agents of an allocation both addresses. kill -9 of the leader: the script
# starts the killed one again, a leader is back (the standby, or the restarted one if it campaigned
# first) with the other a standby naming it, and the agents follow to it; SIGTERM stops each supervisor
# with its process, and nothing is restarted.
# Everything started is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${MOE_BIN:?}
BIN=$(cd "$BIN" && pwd)
work=$(mktemp -d /tmp/moe-slurm-test.XXXXXX)
ha_pids=()
cleanup() {
  scancel --user=root >/dev/null 2>&1 || true
  # ... and gone, before Slurm stops: a step still ending then would leave its slurmstepd behind
  for _ in $(seq 1 20); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
  tests/slurm/local_slurm.sh stop "$work/slurm" >/dev/null 2>&1 || true
  pkill -f "moe-.*--state-dir $work" 2>/dev/null || true
  for p in "${ha_pids[@]}"; do kill "$p" 2>/dev/null || true; done   # moe-controllers-ha.sh's supervisors
  [ ${#ha_pids[@]} = 0 ] || wait "${ha_pids[@]}" 2>/dev/null || true
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
# ---- The controller with a backup host: deploy/slurm/moe-controllers-ha.sh ----
ha=$PWD/deploy/slurm/moe-controllers-ha.sh
bash -n "$ha" || fail "$ha does not parse"
if command -v shellcheck >/dev/null; then shellcheck "$ha" || fail "shellcheck finds fault with $ha"
else echo "slurm_test: LOUD: shellcheck is not installed: $ha only parsed (bash -n)"; fi
command -v etcd >/dev/null || [ -x /usr/bin/etcd ] || fail "LOUD: etcd is missing (Debian's etcd-server; scripts/install-deps.sh test installs it)"
hw=$work/ha
mkdir -p "$hw"
# Every member and controller on 127.0.0.1, so each with its own ports; a site gives each its own host.
members="" ; for n in e0 e1 e2; do members+="${members:+,}$n=127.0.0.1:$(free_port):$(free_port)"; done
pa=$(free_port) pb=$(free_port) ma=$(free_port) mb=$(free_port)
both=127.0.0.1:$pa,127.0.0.1:$pb
# What the site provides: a tokens file, and a certificate naming the hosts in MOE_CONTROLLERS (one CA).
(
  umask 077
  printf '%s admin ha-admin\n%s worker ha-workers\n' "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" >"$hw/tokens"
  awk '$2 == "worker" {print $1}' "$hw/tokens" >"$hw/worker-token"
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=moe ha test CA" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign -keyout "$hw/ca.key" -out "$hw/ca.crt"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=moe-controller \
    -keyout "$hw/controller.key" -out "$hw/controller.csr"
  printf '%s\n' basicConstraints=critical,CA:FALSE extendedKeyUsage=serverAuth subjectAltName=IP:127.0.0.1 >"$hw/controller.ext"
  openssl x509 -req -in "$hw/controller.csr" -CA "$hw/ca.crt" -CAkey "$hw/ca.key" -days 2 -set_serial 1 \
    -extfile "$hw/controller.ext" -out "$hw/controller.crt"
) >"$hw/openssl.log" 2>&1 || fail "openssl: $(cat "$hw/openssl.log")"
ha_env=(MOE_ETCD_MEMBERS="$members" MOE_ETCD_DATA="$hw/etcd" MOE_CONTROLLERS="$both" MOE_BIN="$BIN"
        MOE_CHECKPOINT_ROOT="$work/run/ha-checkpoints" MOE_LISTEN_HOST=127.0.0.1 MOE_TOKENS="$hw/tokens"
        MOE_TLS_CERT="$hw/controller.crt" MOE_TLS_KEY="$hw/controller.key" MOE_TLS_CA="$hw/ca.crt")
for n in e0 e1 e2; do
  env "${ha_env[@]}" "$ha" etcd "$n" >"$hw/etcd-$n.log" 2>&1 &
  ha_pids+=($!)
done
c0=$(grep -oP 'e0=127.0.0.1:\K[0-9]+' <<<"$members")
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$c0/health" 2>/dev/null | grep -q '"health":"true"' && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$c0/health" | grep -q '"health":"true"' || fail "the script's 3 etcd members formed no quorum: $(tail -3 "$hw/etcd-e0.log")"
env "${ha_env[@]}" MOE_METRICS_PORT="$ma" "$ha" controller "127.0.0.1:$pa" >"$hw/controller-a.log" 2>&1 &
sup_a=$!
env "${ha_env[@]}" MOE_METRICS_PORT="$mb" "$ha" controller "127.0.0.1:$pb" >"$hw/controller-b.log" 2>&1 &
sup_b=$!
ha_pids+=("$sup_a" "$sup_b")
readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz" 2>/dev/null || true; }
leader=""
for _ in $(seq 1 150); do
  ra=$(readyz "$ma") rb=$(readyz "$mb")
  if [ "$ra$rb" = 200503 ]; then leader=a; break; elif [ "$ra$rb" = 503200 ]; then leader=b; break; fi
  sleep 0.2
done
[ -n "$leader" ] || fail "no leader and standby among the script's controllers (readyz $ra, $rb): $(tail -3 "$hw/controller-a.log" "$hw/controller-b.log")"
hactl() { MOE_CONTROLLER=$both MOE_TOKEN=$(awk '$2 == "admin" {print $1}' "$hw/tokens") "$BIN/moectl" --tls-ca "$hw/ca.crt" --timeout 3 "$@"; }
# The workers of an allocation, through the script: moe-add-workers.sbatch with both addresses.
hjid=$(cd "$work/elsewhere" && env "${ha_env[@]}" MOE_WORKER_TOKEN_FILE="$hw/worker-token" MOE_SLOTS=1 \
       "$ha" add-workers --parsable --export=ALL,PATH="$BIN:$PATH" --nodes=2 --ntasks-per-node=1 -o "$hw/workers.txt") \
  || fail "moe-controllers-ha.sh add-workers: sbatch refused the job"
ha_workers() { hactl get workers 2>/dev/null | grep -cE ' (IDLE|BUSY) ' || true; }
for _ in $(seq 1 300); do [ "$(ha_workers)" = 2 ] && break; sleep 0.2; done
[ "$(ha_workers)" = 2 ] || fail "the 2 agents of moe-add-workers.sbatch did not register with the leader: $(tail -5 "$hw/workers.txt")"
given=$(pgrep -af "moe-worker .*--controller $both " | grep -cE "moe-worker-node[12]-$hjid" || true)
[ "$given" = 2 ] || fail "$given of 2 agents were given --controller $both: $(pgrep -af 'moe-worker ' | head -2)"
# kill -9 of the leader's moe-controller (its supervisor's child). Its lease runs out; then whichever
# campaigns first leads: the standby, or the killed one, which its supervisor starts again meanwhile.
if [ "$leader" = a ]; then lsup=$sup_a; else lsup=$sup_b; fi
lpid=$(pgrep -P "$lsup" -x moe-controller) || fail "no moe-controller under the leader's supervisor $lsup"
kill -9 "$lpid"
t0=$(date +%s%N)
for _ in $(seq 1 40); do kill -0 "$lpid" 2>/dev/null || break; sleep 0.05; done   # gone, and reaped
leader=""
for _ in $(seq 1 150); do
  ra=$(readyz "$ma") rb=$(readyz "$mb")
  if [ "$ra$rb" = 200503 ]; then leader=a; break; elif [ "$ra$rb" = 503200 ]; then leader=b; break; fi
  sleep 0.1
done
[ -n "$leader" ] || fail "no controller led within 15 s of kill -9 of the leader (readyz $ra, $rb)"
took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "exited 137; starting it again" "$hw/controller-a.log" "$hw/controller-b.log" \
  || fail "the killed controller's supervisor did not start it again: $(grep -h moe-controllers-ha "$hw"/controller-?.log)"
if [ "$leader" = a ]; then sm=$mb lp=$pa; else sm=$ma lp=$pb; fi
for _ in $(seq 1 50); do curl -s "http://127.0.0.1:$sm/readyz" 2>/dev/null | grep -q "the leader is 127.0.0.1:$lp" && break; sleep 0.2; done
curl -s "http://127.0.0.1:$sm/readyz" | grep -q "a standby; the leader is 127.0.0.1:$lp" \
  || fail "the other controller is not a standby naming the new leader $leader: $(curl -s "http://127.0.0.1:$sm/readyz")"
# The agents follow to the new leader (both addresses), and moectl with both reaches it.
for _ in $(seq 1 300); do [ "$(ha_workers)" = 2 ] && break; sleep 0.2; done
[ "$(ha_workers)" = 2 ] || fail "the agents did not come back to the new leader $leader: $(hactl get workers 2>&1 | tail -3)"
scancel "$hjid" 2>/dev/null || true
for _ in $(seq 1 120); do squeue -h -j "$hjid" 2>/dev/null | grep -q . || break; sleep 0.5; done
# SIGTERM: each supervisor stops its process and exits 0, restarting nothing.
kill -TERM "$sup_a" "$sup_b"
for p in "$sup_a" "$sup_b"; do wait "$p" || fail "a controller supervisor exited $? on SIGTERM"; done
grep -q "stopped (exit 0)" "$hw/controller-a.log" && grep -q "stopped (exit 0)" "$hw/controller-b.log" \
  || fail "a controller did not stop cleanly on its supervisor's SIGTERM: $(tail -2 "$hw/controller-a.log" "$hw/controller-b.log")"
pgrep -f "moe-controller .*--advertise-address 127.0.0.1:($pa|$pb)" >/dev/null && fail "a controller outlived its supervisor"
for p in "${ha_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
wait "${ha_pids[@]}" 2>/dev/null || true
ha_pids=()

echo "slurm: the controller served TLS under the allocation's CA (plaintext refused); Prometheus scraped the controller through its file_sd target; SIGTERM at step $step checkpointed step $ck and exited 75; the resubmission followed $id1 from step $first to SUCCEEDED (4 CPU workers in 2 blocks); moe-controllers-ha.sh: kill -9 of the leader, a leader again after ${took_ms} ms, the killed one started again by its supervisor, both agents followed"
