#!/usr/bin/env bash
# Defaults that work together: a controller and two node agents started with no root flags, from the
# source tree, run examples/tiny.yaml as it is (it names no checkpoint directory). The controller puts
# the job's checkpoints below its default root (<state-dir>/checkpoints); the agents, on default
# roots, accept that root because it is mounted on their machine (Registered.checkpoint_root and
# their answer), and read data/fortunes from the directory they were started in. Before, the first
# submit was refused (the controller's root was not among the agents' <runtime-dir>/checkpoints).
# (An agent on another machine, where the root is not mounted: controller_test
# ACheckpointRootCountsWhereItIsMounted.)
source "$(dirname "$0")/lib.sh"
cd "${MOE_SOURCE_DIR:?}"
[ -f data/fortunes.idx ] || fail "data/fortunes is not prepared (make data)"
start_controller
for n in n0 n1; do
  unset MOE_DATA_ROOT MOE_CHECKPOINT_ROOT
  bg "$BIN/moe-worker" --controller "$MOE_CONTROLLER" --device cpu --rack r0 --node "$n" --threads 1 --slots 1 \
    --runtime-dir "$WORK/rt-$n" >"$WORK/worker-$n.log" 2>&1
done
wait_workers 2
job=$("$BIN/moectl" submit -f examples/tiny.yaml 2>"$WORK/submit.err") || fail "default flags: tiny refused: $(cat "$WORK/submit.err")"
wait_state "$job" RUNNING 60
dir=$(job_field "$job" 'd["spec"]["spec"]["checkpoint"]["dir"]' 2>/dev/null || true)
[ "$dir" = "$WORK/state/checkpoints/$job" ] || fail "the job's checkpoint directory is '$dir', not the controller's default root's"
step=0
for _ in $(seq 1 300); do
  step=$(job_field "$job" 'int(d.get("last_metrics",{}).get("step",0))' 2>/dev/null || echo 0)
  [ "$step" -ge 2 ] && break; sleep 0.2
done
[ "$step" -ge 2 ] || fail "the job did not train (step $step after 60 s)"
"$BIN/moectl" cancel "$job" >/dev/null
wait_state "$job" CANCELLED 60
ls -d "$WORK/state/checkpoints/$job"/step_* >/dev/null 2>&1 || fail "no checkpoint was written below $WORK/state/checkpoints/$job"
grep -q "checkpoint root $WORK/state/checkpoints is mounted here" "$WORK/worker-n0.log" || fail "the agent did not say it took the controller's root"
echo "default flags: tiny ran, its stop checkpoint in $(ls -d "$WORK/state/checkpoints/$job"/step_* | head -1)"

