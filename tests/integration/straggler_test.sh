#!/usr/bin/env bash
# One slow rank (its worker injects a delay into every step) is flagged as the straggler: on
# /metrics, as an event, in moectl describe and in moectl top.
source "$(dirname "$0")/lib.sh"
start_controller --straggler-window 3
start_worker fast0 r0 n0
start_worker fast1 r0 n1
start_worker slow r0 n2 --inject-step-delay 0.4
wait_workers 3
make_job "$WORK/job.yaml" strag 100000 0 3 1
sed -i 's/global_batch_size: 16/global_batch_size: 12/' "$WORK/job.yaml"
id=$("$BIN/moectl" submit -f "$WORK/job.yaml")
wait_state "$id" RUNNING 60
slow_rank=$(job_field "$id" '[p["rank"] for p in d["placement"] if p["worker"]=="slow"][0]')
for _ in $(seq 1 150); do
  "$BIN/moectl" describe job "$id" | grep -q "Straggler" && break
  sleep 0.2
done
"$BIN/moectl" describe job "$id" >"$WORK/describe.txt"
grep -q "Straggler .*rank $slow_rank on slow" "$WORK/describe.txt" || fail "no Straggler event for rank $slow_rank: $(cat "$WORK/describe.txt")"
grep -q "stragglers: rank $slow_rank" "$WORK/describe.txt" || fail "describe does not list the straggler"
# To a file first: grep -q leaving early would SIGPIPE curl and fail the pipeline (pipefail).
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt" || fail "/metrics did not answer"
grep -q "moe_job_straggler{job_id=\"$id\",rank=\"$slow_rank\"} 1" "$WORK/metrics.txt" || fail "the straggler gauge is not 1"
for r in 0 1 2; do
  [ $r = $slow_rank ] && continue
  grep -q "moe_job_straggler{job_id=\"$id\",rank=\"$r\"} 0" "$WORK/metrics.txt" || fail "rank $r flagged too"
done
"$BIN/moectl" top --once | grep -E "^$id .* $slow_rank\$" >/dev/null || fail "top does not show the straggler: $("$BIN/moectl" top --once)"
"$BIN/moectl" cancel "$id" >/dev/null
echo "straggler: rank $slow_rank flagged on /metrics, as an event, in describe and in top"
