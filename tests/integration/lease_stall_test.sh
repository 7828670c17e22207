#!/usr/bin/env bash
# The controller's own slowness never costs a worker its lease, and reads never wait for the disk:
#   1. a slow store (every commit sleeps 500 ms: the $MOE_TEST_STORE_COMMIT_DELAY_MS hook) while ten
#      submits arrive at once and jobs run: the submits share commits (moe_store_writes_total over
#      moe_store_batches_total), GetJob and ListJobs answer in well under one commit's time while
#      commits are under way, every job succeeds, and no lease of the 12 fake workers (3 s) expires;
#   2. the controller stopped by SIGSTOP for 8 s (over two leases) and resumed: no lease expires, the
#      running job keeps its attempt.
source "$(dirname "$0")/lib.sh"
MOE_TEST_STORE_COMMIT_DELAY_MS=500 start_controller --lease-seconds 3
CTL_LOG="$WORK/controller-1.log"
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name fk --rack rk --fake-step-seconds 0.05 --fake-workers 12 \
    --fake-rack-size 4 --memory-gb 1000 --runtime-dir "$WORK/rt" --data-root "$PWD" --checkpoint-root "$WORK" >"$WORK/fake.log" 2>&1 &
PIDS+=($!)
wait_workers 12
metric() { curl -s "http://127.0.0.1:$METRICS_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
for n in $(seq 1 10); do
  make_job "$WORK/j$n.yaml" slow$n 20 0 1 1
  sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/j$n.yaml"
done
b0=$(metric moe_store_batches_total); w0=$(metric moe_store_writes_total)
SUBMITS=()
for n in $(seq 1 10); do "$BIN/moectl" submit -f "$WORK/j$n.yaml" >"$WORK/id$n" & SUBMITS+=($!); done
# Reads while those commits are under way: each well under one commit (500 ms).
/usr/bin/python3 - "$MOE_CONTROLLER" <<'PY' || fail "reads waited for the store (above)"
import os, sys, time
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
p = g.pb()
ch = g.channel(sys.argv[1])
worst, ids = 0.0, []
t_end = time.time() + 4
while time.time() < t_end:
    t = time.perf_counter()
    r = g.unary(ch, "/moe.v1.JobService/ListJobs", p.js.ListJobsRequest(page_size=100), p.js.ListJobsResponse)
    worst = max(worst, time.perf_counter() - t)
    for j in r.jobs[:3]:
        t = time.perf_counter()
        g.unary(ch, "/moe.v1.JobService/GetJob", p.js.GetJobRequest(id=j.id), p.job.Job)
        worst = max(worst, time.perf_counter() - t)
    time.sleep(0.05)
print(f"slowest read while commits took 500 ms each: {worst * 1000:.0f} ms")
assert worst < 0.25, f"a read took {worst * 1000:.0f} ms: it waited for a commit"
PY
for p in "${SUBMITS[@]}"; do wait "$p" || fail "a submit failed under the slow store"; done
sleep 0.5  # the figures are published every tick
b1=$(metric moe_store_batches_total); w1=$(metric moe_store_writes_total)
echo "while submitting: $((w1 - w0)) writes in $((b1 - b0)) commits"
[ $((w1 - w0)) -ge 10 ] && [ $(( (w1 - w0) * 10 )) -ge $(( (b1 - b0) * 15 )) ] || fail "the submits did not share commits: $((w1 - w0)) writes in $((b1 - b0))"
for n in $(seq 1 10); do wait_state "$(cat "$WORK/id$n")" SUCCEEDED 90; done
if grep -q "lease expired" "$CTL_LOG"; then grep "lease expired" "$CTL_LOG" | head -3; fail "a lease expired under a slow store"; fi
echo "slow store: reads unaffected, submits batched, all 10 jobs succeeded, no lease expired"
# 2. SIGSTOP over two leases.
make_job "$WORK/long.yaml" long 100000 0 2 2
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/long.yaml"
id=$("$BIN/moectl" submit -f "$WORK/long.yaml")
wait_state "$id" RUNNING 30
kill -STOP "$CTL_PID"
sleep 8
kill -CONT "$CTL_PID"
sleep 3
wait_workers 12
if grep -q "lease expired" "$CTL_LOG"; then grep "lease expired" "$CTL_LOG" | head -3; fail "a lease expired after the controller's own stall"; fi
grep -q "did not tick for" "$CTL_LOG" || fail "the controller did not notice its stall"
[ "$(job_state "$id")" = RUNNING ] && [ "$(job_field "$id" 'd.get("attempt")')" = 1 ] ||
  fail "the running job was disturbed: $(job_state "$id"), attempt $(job_field "$id" 'd.get("attempt")')"
echo "stopped for 8 s with 3 s leases: $(grep -o 'did not tick for [0-9.]* s' "$CTL_LOG" | tail -1), no lease expired, the job kept attempt 1"
echo "lease stall test holds"
