#!/usr/bin/env bash
# Fake workers (moe-worker --fake-step-seconds, what bench/load.py loads the controller with): eight in
# one process on racks of four register under their own names; jobs run to SUCCEEDED with the synthetic
# steps their spec asks for; a cancel stops a fake rank; SIGTERM stops them all.
source "$(dirname "$0")/lib.sh"
start_controller
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name fk --rack rk --fake-step-seconds 0.02 --fake-workers 8 \
    --fake-rack-size 4 --memory-gb 1000 --runtime-dir "$WORK/rt" >"$WORK/fake.log" 2>&1 &
FAKE=$!
PIDS+=($FAKE)
wait_workers 8
racks=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sorted({w["rack"] for w in json.load(sys.stdin)["workers"]}))')
[ "$racks" = "['rk-0', 'rk-1']" ] || fail "racks of four: $racks"
make_job "$WORK/a.yaml" a 30 0 4 4
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/a.yaml"
id=$("$BIN/moectl" submit -f "$WORK/a.yaml")
"$BIN/moectl" watch "$id" >"$WORK/watch.txt" || { cat "$WORK/watch.txt"; fail "the fake job did not succeed"; }
grep -q "step 30/30" "$WORK/watch.txt" || { cat "$WORK/watch.txt"; fail "no step 30/30 in the watch"; }
make_job "$WORK/b.yaml" b 100000 0 2 2
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/b.yaml"
id=$("$BIN/moectl" submit -f "$WORK/b.yaml")
wait_state "$id" RUNNING 30
"$BIN/moectl" cancel "$id" >/dev/null
[ "$(job_state "$id")" = CANCELLED ] || fail "cancel: $(job_state "$id")"
for _ in $(seq 1 50); do
  busy=$("$BIN/moectl" get workers -o json | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w.get("state")=="BUSY"))')
  [ "$busy" = 0 ] && break; sleep 0.2
done
[ "$busy" = 0 ] || fail "fake workers still busy after the cancel"
kill -TERM $FAKE
for _ in $(seq 1 50); do kill -0 $FAKE 2>/dev/null || break; sleep 0.1; done
kill -0 $FAKE 2>/dev/null && fail "the fake workers did not stop on SIGTERM"
echo "fake workers: 8 in one process on 2 racks; a 4-rank job SUCCEEDED at step 30/30; cancel and SIGTERM stop them"
