#!/usr/bin/env bash
# What an operator bills and alerts by is true: a preempted job's throughput leaves /metrics within
# one scrape and moectl top's rack figure is the running job's alone; its stop checkpoint becomes
# its checkpoint_step; a dataset missing on the worker fails the job at once (FAILED, 0 restarts,
# the reason); `moectl watch` and `events -w` outlive a controller restart and print the job's end;
# moectl reads its connection from a config file ($MOE_CONFIG) and names a key it does not know.
source "$(dirname "$0")/lib.sh"
cd "${MOE_SOURCE_DIR:?}"
[ -f data/fortunes.idx ] || fail "data/fortunes is not prepared (make data)"
start_controller --restart-backoff-seconds 1
start_worker w0 r0 n0
start_worker w1 r0 n1
wait_workers 2
metric() { curl -s "127.0.0.1:$METRICS_PORT/metrics" | grep -E "^$1\{[^}]*$2" || true; }

# 1. Preemption: the low job's throughput series go at once; top's rack figure is the high job's;
#    then a drain requeues the high job, and its series go as well.
make_job "$WORK/low.yaml" low 100000 100000  # no periodic checkpoint: its stop checkpoint is the one
make_job "$WORK/high.yaml" high 100000 100000
sed -i 's/priority: 0/priority: 100/' "$WORK/high.yaml"
lo=$("$BIN/moectl" submit -f "$WORK/low.yaml")
wait_state "$lo" RUNNING 60
for _ in $(seq 1 150); do [ -n "$(metric moe_rank_tflops "$lo")" ] && break; sleep 0.2; done
[ -n "$(metric moe_rank_flops_per_second "$lo")" ] || fail "no moe_rank_flops_per_second for a running job"
[ -n "$(metric moe_job_info "job_id=\"$lo\"")" ] || fail "no moe_job_info for the job"
hi=$("$BIN/moectl" submit -f "$WORK/high.yaml")
wait_state "$lo" PREEMPTED 60
left=$(metric 'moe_(rank_tflops|rank_flops_per_second|job_tflops_per_device|job_device_flops_per_second|job_mfu_ratio)' "$lo")
[ -z "$left" ] || fail "the preempted job's throughput series are still exported: $left"
wait_state "$hi" RUNNING 60
for _ in $(seq 1 150); do [ -n "$(metric moe_rank_tflops "$hi")" ] && break; sleep 0.2; done
top=$("$BIN/moectl" top --once)
python3 - "$top" "$lo" "$hi" <<'PY' || fail "moectl top:
$top"
import sys
screen, lo, hi = sys.argv[1:]
jobs, racks = screen.split("RACKS")
row = {l.split()[0]: l.split() for l in jobs.splitlines() if l.split() and l.split()[0] in (lo, hi)}
assert row[lo][3] == "-", f"the preempted job shows TFLOP/s {row[lo][3]}"
r0 = [l.split() for l in racks.splitlines() if l.split()[:1] == ["r0"]][0]
want = 2 * float(row[hi][3])
# Both figures are printed rounded (to the same last digit): the rack's sum and the job's per-device
# mean each carry half a unit of it, the doubled mean twice that. A slow (instrumented) run's tiny
# figures are mostly rounding.
unit = 10 ** -len(row[hi][3].partition(".")[2])
assert abs(float(r0[-1]) - want) <= 1.5 * unit + 0.01 * want, f"rack r0 {r0[-1]}, the running job's 2 ranks {want}"
PY
for _ in $(seq 1 50); do
  ck=$(job_field "$lo" 'int(d.get("checkpoint_step", 0))'); [ "$ck" -gt 0 ] && break; sleep 0.2
done
[ "$ck" -gt 0 ] || fail "the preempted job's stop checkpoint is not its checkpoint_step ($ck)"
# A drain requeues the running job (RESTARTING, waiting for a second worker): its series go too, and
# top counts nothing for the rack.
"$BIN/moectl" drain w1 --wait --wait-seconds 60 >/dev/null || fail "drain --wait w1"
wait_state "$hi" RESTARTING 30
left=$(metric 'moe_(rank_tflops|rank_flops_per_second|job_tflops_per_device|job_device_flops_per_second)' "$hi")
[ -z "$left" ] || fail "a requeued job's throughput series are still exported: $left"
"$BIN/moectl" top --once | python3 -c '
import sys
racks = sys.stdin.read().split("RACKS")[1]
r0 = [l.split() for l in racks.splitlines() if l.split()[:1] == ["r0"]][0]
assert float(r0[-1]) == 0, f"rack r0 at {r0[-1]} TFLOP/s with nothing running"' || fail "moectl top counts a requeued job"
"$BIN/moectl" cancel "$hi" "$lo" >/dev/null
wait_state "$hi" CANCELLED 60
wait_state "$lo" CANCELLED 60
"$BIN/moectl" undrain w1 >/dev/null || fail "undrain w1"
metric moe_queue_admission_wait_seconds_count 'queue="default"' | grep -q . ||
  fail "no admission wait histogram for the default queue"

# 2. A dataset that is not on the worker (its directory missing below a data root): FAILED at
#    once, no restart spent, the path named.
make_job "$WORK/nodata.yaml" nodata 10 100 1 1
sed -i 's#path: data/fortunes#path: no-such-dir/fortunes#' "$WORK/nodata.yaml"
nd=$("$BIN/moectl" submit -f "$WORK/nodata.yaml")
for _ in $(seq 1 150); do s=$(job_state "$nd"); [ "$s" = FAILED ] && break; sleep 0.2; done
[ "$s" = FAILED ] || fail "a job whose dataset is missing is $s, not FAILED"
[ "$(job_field "$nd" 'd.get("restarts", 0)')" = 0 ] || fail "it spent restarts before failing"
job_field "$nd" 'd.get("message","")' | grep -q "no-such-dir" || fail "the reason does not name the path: $(job_field "$nd" 'd.get("message","")')"

# 3. watch and events -w survive a controller restart and print the job's end.
make_job "$WORK/watched.yaml" watched 100000 100000
j=$("$BIN/moectl" submit -f "$WORK/watched.yaml")
wait_state "$j" RUNNING 60
"$BIN/moectl" watch "$j" --reconnect-seconds 60 >"$WORK/watch.out" 2>"$WORK/watch.err" & wp=$!; PIDS+=($wp)
"$BIN/moectl" events "$j" -w --interval 0.5 --reconnect-seconds 60 >"$WORK/events.out" 2>"$WORK/events.err" & ep=$!; PIDS+=($ep)
sleep 2
kill -TERM "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
sleep 2
start_controller --restart-backoff-seconds 1
sleep 4
kill -0 $wp 2>/dev/null || fail "moectl watch exited when the controller restarted: $(cat "$WORK/watch.err")"
kill -0 $ep 2>/dev/null || fail "moectl events -w exited when the controller restarted: $(cat "$WORK/events.err")"
wait_state "$j" RUNNING 60
"$BIN/moectl" cancel "$j" >/dev/null
for p in $wp $ep; do for _ in $(seq 1 150); do kill -0 $p 2>/dev/null || break; sleep 0.2; done; done
kill -0 $wp 2>/dev/null && fail "the watch did not end with the job"
grep -q "$j CANCELLED" "$WORK/watch.out" || fail "the watch did not print the job's end: $(tail -3 "$WORK/watch.out")"
grep -q "reconnected" "$WORK/watch.err" || fail "the watch did not say it reconnected: $(cat "$WORK/watch.err")"
grep -q "Cancelled" "$WORK/events.out" || fail "events -w did not print the Cancelled event: $(tail -3 "$WORK/events.out")"
[ "$(grep -c ' Submitted ' "$WORK/events.out")" = 1 ] || fail "events -w printed an event twice after reconnecting"

# 4. The connection from a config file; an unknown key named.
printf 'controller: %s\ntimeout: 5\n' "$MOE_CONTROLLER" >"$WORK/moectl.yaml"
( unset MOE_CONTROLLER; MOE_CONFIG="$WORK/moectl.yaml" "$BIN/moectl" get job "$j" -o name ) | grep -q "job/$j" ||
  fail "moectl did not take the controller from \$MOE_CONFIG"
printf 'controler: x\n' >"$WORK/bad.yaml"
set +e; err=$(MOE_CONFIG="$WORK/bad.yaml" "$BIN/moectl" get jobs 2>&1); rc=$?; set -e
[ $rc != 0 ] && grep -q "controler: unknown key" <<<"$err" || fail "a misspelt config key: rc $rc, $err"
echo "operator truth: preempted series gone and top's rack = the running job's, stop checkpoint $ck recorded, missing dataset FAILED at once, watch and events -w survived a restart, config file read"
