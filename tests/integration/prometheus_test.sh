#!/usr/bin/env bash
# The real Prometheus (Debian's package) on loopback scrapes a controller while a real CPU job
# trains; then every PromQL expression of the shipped Grafana dashboards runs through Prometheus'
# HTTP API and must return data. Also: every metric the docs promise is on /metrics (the checkpoint,
# queue and finished-jobs series with their labels, no series labelled `job`), a join with a DCGM-style
# exporter's series, and a /metrics port already taken is a clear start-up error.
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || fail "prometheus is missing (apt install prometheus)"
SRC=${MOE_SOURCE_DIR:-.}

# A taken metrics port: the controller says so and exits.
# The blocker binds a port of its choosing and says which (a port picked first and bound later can be
# taken meanwhile by a test running beside this one); the controller gets a time limit, so a mistake
# here fails the test instead of serving until ctest's timeout.
python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); open('$WORK/blocker','w').write(str(s.getsockname()[1])); time.sleep(30)" &
PIDS+=($!)
for _ in $(seq 1 50); do [ -s "$WORK/blocker" ] && break; sleep 0.1; done
blocker=$(cat "$WORK/blocker")
set +e
out=$(timeout 20 "$BIN/moe-controller" --listen 127.0.0.1:$(free_port) --metrics-listen 127.0.0.1:$blocker --state-dir "$WORK/s0" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q -- "--metrics-listen 127.0.0.1:$blocker: cannot serve /metrics there" <<<"$out" || fail "taken port: rc $rc, $out"

# Two queues of one cohort: the job's queue (quota 1) borrows the other's idle quota for its second
# rank, so every moe_queue_* series has a value to check.
cat >"$WORK/queues.yaml" <<'Q'
queues:
  - {name: train, cohort: shared, quota: {cpu: 1}}
  - {name: lend, cohort: shared, quota: {cpu: 2}}
default_queue: train
Q
# Planned step times: the job dashboard's plan panel has data.
start_controller --plan-cluster local --queues "$WORK/queues.yaml"
for n in 0 1; do start_worker w$n rack-a n$n; done
wait_workers 2
make_job "$WORK/job.yaml" prom 100000 25  # checkpoints: moe_job_checkpoint_* have values
# With a validation split and frequent evaluation, so the dashboard's validation panel has data too.
sed -i 's/global_batch_size: 16}/global_batch_size: 16, split: "95,5,0"}/; s/log_interval: 10}/log_interval: 10, eval_interval: 20, eval_batches: 1}/' "$WORK/job.yaml"
grep -q "eval_interval: 20" "$WORK/job.yaml" || fail "the job file did not take the evaluation settings"
id=$("$BIN/moectl" submit -f "$WORK/job.yaml")
wait_state "$id" RUNNING 60

# A DCGM-style exporter (a static page with dcgm-exporter's metric and labels: Hostname, gpu,
# modelName) for the join below: the real exporter needs a GPU.
mkdir -p "$WORK/dcgm"
cat >"$WORK/dcgm/metrics" <<'D'
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",device="nvidia0",modelName="Synthetic H200",Hostname="n0"} 42
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000001",device="nvidia0",modelName="Synthetic H200",Hostname="n1"} 37
D
DCGM_PORT=$(free_port)
python3 -m http.server "$DCGM_PORT" --bind 127.0.0.1 --directory "$WORK/dcgm" >"$WORK/dcgm.log" 2>&1 &
PIDS+=($!)

# Prometheus with the shipped rules, scraping every second.
PROM_PORT=$(free_port)
mkdir -p "$WORK/prom"
cp "$SRC"/deploy/prometheus/*_rules.yml "$WORK/prom/"
cat >"$WORK/prom/prometheus.yml" <<CONF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [recording_rules.yml, alert_rules.yml]
scrape_configs:
  - job_name: moe-controller
    static_configs: [{targets: ['127.0.0.1:$METRICS_PORT']}]
  - job_name: dcgm
    static_configs: [{targets: ['127.0.0.1:$DCGM_PORT']}]
CONF
promtool check config "$WORK/prom/prometheus.yml" >/dev/null
prometheus --config.file="$WORK/prom/prometheus.yml" --storage.tsdb.path="$WORK/prom/data" \
  --web.listen-address=127.0.0.1:$PROM_PORT >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PROM_PORT/-/ready" >/dev/null || fail "prometheus did not start"

# Every promised metric is exposed.
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt"
for m in moe_job_model_flops_total moe_job_tflops_per_device moe_job_mfu_ratio moe_job_tokens_total \
         moe_job_step_duration_seconds_bucket moe_job_loss moe_job_grad_norm moe_job_learning_rate \
         moe_job_alltoall_seconds_total moe_job_compute_seconds_total moe_job_expert_load_imbalance_ratio \
         moe_job_state moe_job_restarts_total moe_rank_step_duration_seconds moe_job_straggler moe_workers \
         moe_scheduler_queue_length moe_scheduler_decision_duration_seconds_bucket moe_build_info moe_rank_tflops \
         moe_job_step_seconds moe_job_planned_step_seconds; do
  grep -q "^$m" "$WORK/metrics.txt" || fail "/metrics lacks $m"
done
grep -q "moe_rank_step_duration_seconds{.*rack=\"rack-a\"" "$WORK/metrics.txt" || fail "rank series without the rack label"
# The job id is the label job_id: `job` is Prometheus's target label, which no series may carry.
grep -q "^moe_job_loss{job_id=\"$id\"}" "$WORK/metrics.txt" || fail "moe_job_loss without job_id=\"$id\""
if grep -E '^moe_(job|rank)_' "$WORK/metrics.txt" | grep -E '[{,]job="'; then fail "series above carry the label job"; fi

# Enough history for the rate()s and quantiles.
sleep 45
python3 "$SRC/deploy/grafana/extract_queries.py" "$SRC"/deploy/grafana/dashboards/*.json >"$WORK/queries.jsonl"
python3 - "$WORK/queries.jsonl" "$PROM_PORT" "$id" <<'PY'
import json, sys, urllib.parse, urllib.request
queries, port, job = sys.argv[1], sys.argv[2], sys.argv[3]
bad, n = [], 0
for line in open(queries):
    expr = json.loads(line)
    q = (expr.replace("$job_id", job).replace("$rack", ".*").replace("$__rate_interval", "1m")
             .replace("$__interval", "1m").replace("$__range", "5m"))
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        r = json.load(urllib.request.urlopen(url, timeout=10))
    except Exception as e:  # HTTP 400 for a query that does not parse
        bad.append((q, f"error: {e}"))
        continue
    n += 1
    if r.get("status") != "success":
        bad.append((q, r.get("error")))
    elif not r["data"]["result"]:
        bad.append((q, "no data"))
for q, why in bad:
    print(f"  {why}: {q}")
if bad:
    sys.exit(f"{len(bad)} of {n} dashboard queries failed")
print(f"prometheus: all {n} dashboard queries returned data")
PY
# The series of issue #34 on the live controller, with their labels: the job's checkpoint (it saves
# every 25 steps), its queue's quota, usage and borrowing, the finished-jobs counter.
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics2.txt"
for s in "moe_job_checkpoint_age_seconds{job_id=\"$id\"} " "moe_job_checkpoint_save_seconds{job_id=\"$id\"} " \
         'moe_queue_quota{device="cpu",queue="train"} 1' 'moe_queue_usage{device="cpu",queue="train"} 2' \
         'moe_queue_borrowed{device="cpu",queue="train"} 1' 'moe_queue_pending_jobs{queue="train"} 0' \
         'moe_queue_quota{device="cpu",queue="lend"} 2' 'moe_queue_usage{device="cpu",queue="lend"} 0' \
         'moe_jobs_finished_total{state="SUCCEEDED"} 0' 'moe_jobs_finished_total{state="CANCELLED"} 0'; do
  grep -qF "$s" "$WORK/metrics2.txt" || fail "/metrics lacks $s"
done
ckpt=$(sed -n "s/^moe_job_checkpoint_step{job_id=\"$id\"} //p" "$WORK/metrics2.txt")
[ "${ckpt:-0}" -ge 25 ] || fail "moe_job_checkpoint_step of $id is '${ckpt}', not a checkpoint's step"
# promtool's format and lint checks, with no finding (the page is all ours: no exposer_* series).
out=$(promtool check metrics <"$WORK/metrics2.txt" 2>&1) || fail "promtool check metrics: $out"
# The join with DCGM's labels on the real Prometheus: each rank's series gets its host's GPU model.
# The result keeps both job (the scrape job, no honor_labels) and job_id (the training job).
python3 - "$PROM_PORT" "$id" <<'PY'
import json, sys, urllib.parse, urllib.request
port, job_id = sys.argv[1], sys.argv[2]
q = (f'moe_rank_tflops{{job_id="{job_id}"}} * on (node) group_left (modelName) '
     '(0 * max by (node, modelName) (label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.*)")) + 1)')
r = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=10))
got = sorted((m["metric"].get("node"), m["metric"].get("modelName"), m["metric"].get("job"), m["metric"].get("job_id"))
             for m in r["data"]["result"])
want = [(n, "Synthetic H200", "moe-controller", job_id) for n in ("n0", "n1")]
if got != want:
    sys.exit(f"the DCGM join gave {got}, not {want}")
print("prometheus: moe_rank_tflops joins DCGM's series on node")
PY
# The recording rules evaluate too.
for rule in 'job:moe_step_duration_seconds:p95_1m' 'rack:moe_tflops:sum' 'job:moe_alltoall_share:ratio_1m'; do
  curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/query?query=$rule" | python3 -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if r["data"]["result"] else 1)' \
    || fail "recording rule $rule has no data"
done
"$BIN/moectl" cancel "$id" >/dev/null
wait_state "$id" CANCELLED 60
# The page to a file first: grep -q leaving early would SIGPIPE curl and fail the pipeline (pipefail).
cancelled_counted() {
  curl -sf -o "$WORK/after-cancel.prom" "http://127.0.0.1:$METRICS_PORT/metrics" &&
    grep -qF 'moe_jobs_finished_total{state="CANCELLED"} 1' "$WORK/after-cancel.prom"
}
for _ in $(seq 1 30); do
  cancelled_counted && break
  sleep 0.2
done
cancelled_counted \
  || fail "moe_jobs_finished_total{state=\"CANCELLED\"} is not 1 after the cancel"
echo "prometheus: metrics exposed, dashboards' queries answered, recording rules evaluated"
