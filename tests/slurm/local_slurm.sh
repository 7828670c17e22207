#!/usr/bin/env bash
# A real Slurm on loopback for tests and benchmarks: munged, slurmctld and two slurmd (node1, node2:
# the multiple-slurmd mode of Debian's slurm-wlm) with a generated slurm.conf and a tree topology of
# two leaf switches ("blocks": Slurm 22.05 has no topology/block, the tree's leaves play that role).
#
#   tests/slurm/local_slurm.sh start DIR     prints the SLURM_CONF to export
#   tests/slurm/local_slurm.sh stop DIR
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

stop() {
  for f in "$dir"/slurmd.node*.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  sleep 0.5
  for f in "$dir"/slurmd.node*.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  pkill -9 -f "slurmstepd.*$dir" 2>/dev/null || true
  return 0
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
for b in munged slurmctld slurmd sbatch; do
  command -v $b >/dev/null || { echo "local_slurm: $b is missing (apt install slurm-wlm munge)" >&2; exit 1; }
done
mkdir -p "$dir"/{munge,state,spool,log}
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"
ctl=$(port); p1=$(port); p2=$(port)
cpus=$(nproc)
cat >"$dir/slurm.conf" <<CONF
ClusterName=moetest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
TopologyPlugin=topology/tree
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MessageTimeout=30
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p1 CPUs=$cpus RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$p2 CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
cat >"$dir/topology.conf" <<TOPO
SwitchName=block1 Nodes=node1
SwitchName=block2 Nodes=node2
SwitchName=spine Switches=block[1-2]
TOPO
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF" -N node1
slurmd -f "$SLURM_CONF" -N node2
for _ in $(seq 1 150); do
  idle=$(sinfo -h -o '%T %D' 2>/dev/null | awk '$1 ~ /^idle/ {n += $2} END {print n+0}')
  [ "$idle" = 2 ] && { echo "$SLURM_CONF"; exit 0; }
  sleep 0.2
done
echo "local_slurm: nodes did not become idle:" >&2
sinfo >&2 || true
tail -20 "$dir"/log/*.log >&2 || true
stop
exit 1
