#!/usr/bin/env bash
# Spares per rack (moe-controller --spares-per-rack, docs/operations.md) with real processes: a
# controller holding back one worker of each rack, two racks of three fake workers (moe-worker
# --fake-step-seconds), and moectl.
#   1. a negative --spares-per-rack is refused, naming the flag
#   2. an EP-2 job within one rack is placed in one rack; a second job finds that rack's third worker
#      held back and goes to the other rack
#   3. kill -9 the worker of the first job's rank 1: the restart takes that rack's spare, every rank
#      stays in the rack; moectl get racks and /metrics show the spare in use
source "$(dirname "$0")/lib.sh"
MOECTL="$BIN/moectl"

# 1. Refused.
rc=0; out=$("$BIN/moe-controller" --state-dir "$WORK/refused" --spares-per-rack -1 2>&1) || rc=$?
[ $rc -ne 0 ] && grep -q -- "--spares-per-rack" <<<"$out" || fail "--spares-per-rack -1: rc $rc, $out"

# 2. Placed around the spares.
start_controller --spares-per-rack 1 --lease-seconds 2 --restart-backoff-seconds 0
for n in 0 1 2; do
  for r in a b; do start_worker $r$n rack-$r node-$r$n --fake-step-seconds 0.05 --memory-gb 1000; done
done
wait_workers 6
# rack_row <rack>: its row of moectl get racks (RACK WORKERS IDLE BUSY DRAINING LOST SPARES SPARES-IN-USE)
rack_row() { "$MOECTL" get racks | awk -v r="$1" '$1 == r {print $2, $3, $4, $5, $6, $7, $8}'; }
"$MOECTL" get racks | head -1 | grep -q "^RACK  *WORKERS  *IDLE  *BUSY  *DRAINING  *LOST  *SPARES  *SPARES-IN-USE" ||
  fail "get racks header: $("$MOECTL" get racks)"
[ "$(rack_row rack-a)" = "3 3 0 0 0 1 0" ] || fail "rack-a before any job: $(rack_row rack-a)"
[ "$("$MOECTL" get racks -o name)" = $'rack/rack-a\nrack/rack-b' ] || fail "get racks -o name: $("$MOECTL" get racks -o name)"

make_job "$WORK/ep.yaml" ep 100000 0 2 2
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/ep.yaml"
ep=$("$MOECTL" submit -f "$WORK/ep.yaml")
wait_state "$ep" RUNNING 30
placement() { job_field "$1" '" ".join(p["rack"] + ":" + p["worker"] for p in d["placement"])'; }
first=$(placement "$ep")
rack=$(cut -d: -f1 <<<"$first")
[ "$(job_field "$ep" '" ".join(sorted({p["rack"] for p in d["placement"]}))')" = "$rack" ] ||
  fail "the EP group is split across racks: $first"
other=rack-a; [ "$rack" = rack-a ] && other=rack-b
make_job "$WORK/small.yaml" small 100000 0 1 1
sed -i 's/checkpoint: {dir: [^,]*, interval_steps: 0}/checkpoint: {interval_steps: 0}/' "$WORK/small.yaml"
small=$("$MOECTL" submit -f "$WORK/small.yaml")
wait_state "$small" RUNNING 30
[ "$(job_field "$small" 'd["placement"][0]["rack"]')" = "$other" ] ||
  fail "the second job took $rack's spare: $(placement "$small")"
[ "$(rack_row "$rack")" = "3 1 2 0 0 1 0" ] || fail "$rack with the EP job: $(rack_row "$rack")"

# 3. Rank 1's worker dies; the restart takes the spare of its rack.
victim=$(job_field "$ep" 'd["placement"][1]["worker"]')
kill -9 "${WORKER_PID[$victim]}"
for _ in $(seq 1 100); do
  [ "$(job_field "$ep" 'd.get("attempt", 0)')" = 2 ] && [ "$(job_state "$ep")" = RUNNING ] && break
  sleep 0.2
done
[ "$(job_state "$ep")" = RUNNING ] && [ "$(job_field "$ep" 'd.get("attempt", 0)')" = 2 ] ||
  fail "no second attempt running: $(job_state "$ep"), $(placement "$ep")"
second=$(placement "$ep")
[ "$(cut -d' ' -f1 <<<"$second")" = "$(cut -d' ' -f1 <<<"$first")" ] || fail "rank 0 moved: $first -> $second"
for p in $second; do [ "${p%%:*}" = "$rack" ] || fail "a rank left $rack: $first -> $second"; done
grep -q ":$victim\$" <<<"$second" && fail "rank 1 is still on the dead $victim: $second"
[ "$(rack_row "$rack")" = "3 0 2 0 1 0 1" ] || fail "$rack after the restart: $(rack_row "$rack") ($("$MOECTL" get racks))"
[ "$(rack_row "$other")" = "3 2 1 0 0 1 0" ] || fail "$other: $(rack_row "$other")"
gauge() {
  python3 - "$METRICS_PORT" "$1" "$2" <<'PY'
import sys, urllib.request
port, name, rack = sys.argv[1:]
for line in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode().splitlines():
    if line.startswith(f'{name}{{rack="{rack}"}} '):
        print(float(line.split()[-1]))
PY
}
for _ in $(seq 1 20); do [ "$(gauge moe_rack_spares_in_use "$rack")" = 1.0 ] && break; sleep 0.2; done
[ "$(gauge moe_rack_spares_in_use "$rack")" = 1.0 ] && [ "$(gauge moe_rack_spares "$rack")" = 0.0 ] ||
  fail "/metrics: moe_rack_spares_in_use $(gauge moe_rack_spares_in_use "$rack"), moe_rack_spares $(gauge moe_rack_spares "$rack")"
"$MOECTL" cancel --now "$ep" >/dev/null
"$MOECTL" cancel --now "$small" >/dev/null
echo "spares: $ep restarted in $rack on its spare ($first -> $second); $small went to $other; get racks and /metrics show 1 spare in use"
