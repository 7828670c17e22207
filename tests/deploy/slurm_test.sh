#!/usr/bin/env bash
# deploy/slurm on a real Slurm (Debian's slurm-wlm and munge, installed by `make test`): slurmctld and
# two slurmd on loopback with a generated slurm.conf and a topology of two blocks; the sbatch script
# starts a controller and CPU workers, submits a tiny job (W = 4, EP 2: one EP group per block) and
# watches it to SUCCEEDED; the racks come from Slurm's topology. Everything started is stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${MOE_BIN:?}
work=$(mktemp -d /tmp/moe-slurm-test.XXXXXX)
cleanup() {
  scancel --user=root >/dev/null 2>&1 || true
  tests/slurm/local_slurm.sh stop "$work/slurm" >/dev/null 2>&1 || true
  pkill -f "moe-.*--state-dir $work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$work"/run/*.log "$work"/out.txt; do [ -f "$f" ] && { echo "== $f" >&2; tail -20 "$f" >&2; }; done; exit 1; }
export SLURM_CONF=$(tests/slurm/local_slurm.sh start "$work/slurm")
sed 's/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 4/; s/steps: 400, seed/steps: 20, seed/;
     s/world_size: 2, expert_parallel: 2/world_size: 4, expert_parallel: 2/' examples/tiny.yaml >"$work/job.yaml"
sed -i "s#path: data/fortunes#path: $PWD/data/fortunes#" "$work/job.yaml"
mkdir -p "$work/run"
MOE_BIN=$(cd "$BIN" && pwd) MOE_WORK=$work/run MOE_DEVICE=cpu MOE_PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("",0));print(s.getsockname()[1])') \
MOE_METRICS_PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("",0));print(s.getsockname()[1])') \
  timeout 600 sbatch --wait --nodes=2 --ntasks-per-node=2 -o "$work/out.txt" deploy/slurm/moe-job.sbatch "$work/job.yaml" >/dev/null \
  || fail "the sbatch job failed"
grep -q "SUCCEEDED" "$work/out.txt" || fail "no SUCCEEDED in the batch output"
grep -q "rack block1" "$work/out.txt" && grep -q "rack block2" "$work/out.txt" || fail "the racks did not come from Slurm's topology"
echo "slurm: sbatch ran the controller and 4 CPU workers in 2 blocks; the job SUCCEEDED"
