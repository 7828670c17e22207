#!/usr/bin/env bash
# One Slurm task per node = one moe-worker, the node agent (run by srun --ntasks-per-node=1 from
# moe-job.sbatch or moe-add-workers.sbatch). Devices: the node's GPUs given to the task (every GPU
# in CUDA_VISIBLE_DEVICES, as cuda:0 ... cuda:N-1 inside the task: --devices 0-(N-1)), else a CPU node
# of MOE_SLOTS slots (ranks at once; default 1). The controller lists each device as a worker
# <node>/<index> (the node's name alone for one device).
# Rack: from NVML's fabric info on GPU nodes (the worker reads it itself), else from Slurm's topology:
# the block (topology/block, Slurm 23.11+) or the leaf switch (topology/tree) holding this node.
set -euo pipefail
bin=${MOE_BIN:?MOE_BIN: the directory of the moe binaries}
node=${SLURMD_NODENAME:-$(hostname -s)}
device=${MOE_DEVICE:-auto}
if [ "$device" = auto ]; then
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "${CUDA_VISIBLE_DEVICES}" != "NoDevFiles" ]; then device=gpu; else device=cpu; fi
fi
if [ "$device" = gpu ]; then
  IFS=, read -ra gpus <<<"${CUDA_VISIBLE_DEVICES:-}"
  [ ${#gpus[@]} -gt 0 ] || { echo "moe-worker-task: MOE_DEVICE=gpu but no CUDA_VISIBLE_DEVICES (ask for --gpus-per-node)" >&2; exit 2; }
  device_args=(--devices "0-$(( ${#gpus[@]} - 1 ))")
else
  device=cpu
  device_args=(--slots "${MOE_SLOTS:-1}")
fi
rack=${MOE_RACK:-}
if [ -z "$rack" ]; then
  topo=$(scontrol show topology "$node" 2>/dev/null || true)
  rack=$(grep -oP 'BlockName=\K\S+' <<<"$topo" | head -1 || true)
  [ -n "$rack" ] || rack=$(grep -P 'Level=0' <<<"$topo" | grep -oP 'SwitchName=\K\S+' | head -1 || true)
fi
# The address peers reach this rank at: the node's address as Slurm knows it.
addr=${MOE_ADDRESS:-$(scontrol show node "$node" 2>/dev/null | grep -oP 'NodeAddr=\K\S+' | head -1 || true)}
[ -n "$addr" ] || addr=$(hostname -i | awk '{print $1}')
args=(--controller "${MOE_CONTROLLER:?}" "${device_args[@]}" --node "$node" --name "$node"
      --address "$addr" --runtime-dir "${TMPDIR:-/tmp}/moe-worker-$node-${SLURM_JOB_ID:-0}")
# On GPU nodes NVML's NVLink domain wins; Slurm's topology is the fallback (MOE_RACK is read after NVML).
if [ -n "$rack" ]; then
  if [ "$device" = cpu ]; then args+=(--rack "$rack"); else export MOE_RACK=$rack; fi
fi
[ -n "${MOE_WORKER_THREADS:-}" ] && args+=(--threads "$MOE_WORKER_THREADS")
# /healthz, /readyz and /metrics of this agent (moe-job.sbatch lists it in its Prometheus target file).
[ "${MOE_AGENT_METRICS_PORT:-0}" != 0 ] && args+=(--health-listen "0.0.0.0:$MOE_AGENT_METRICS_PORT")
# How long a leaving agent (SIGTERM before the time limit) waits for its ranks to checkpoint and stop:
# a 671B step takes 70-250 s and its checkpoint write more; moe-job.sbatch's --signal lead covers it.
args+=(--stop-grace-seconds "${MOE_STOP_GRACE_SECONDS:-480}")
# Confined paths (colon-separated lists): a job's data and checkpoints must lie below these.
IFS=: read -ra roots <<<"${MOE_DATA_ROOTS:-}"; for r in "${roots[@]}"; do [ -n "$r" ] && args+=(--data-root "$r"); done
IFS=: read -ra roots <<<"${MOE_CHECKPOINT_ROOTS:-}"; for r in "${roots[@]}"; do [ -n "$r" ] && args+=(--checkpoint-root "$r"); done
# The worker role's token (an admin token is not a worker credential): moe-job.sbatch writes it.
[ -n "${MOE_WORKER_TOKEN_FILE:-}" ] && args+=(--token-file "$MOE_WORKER_TOKEN_FILE")
# TLS to the controller, so that the token and the heartbeat key it grants never cross the network in
# clear: MOE_TLS_CA is the CA of the controller's certificate (moe-job.sbatch sets it to its allocation's
# CA; for a controller of your own, set it before moe-add-workers.sbatch). MOE_TLS_CERT and MOE_TLS_KEY:
# a client certificate for a controller that asks for one (--tls-client-ca).
[ -n "${MOE_TLS_CA:-}" ] && args+=(--tls-ca "$MOE_TLS_CA")
[ -n "${MOE_TLS_CERT:-}" ] && args+=(--tls-cert "$MOE_TLS_CERT" --tls-key "${MOE_TLS_KEY:?MOE_TLS_KEY: the key of MOE_TLS_CERT}")
exec "$bin/moe-worker" "${args[@]}"
