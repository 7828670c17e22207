#!/usr/bin/env bash
# A long-lived controller with a backup host, for a Slurm cluster: moe-controller on a primary and a
# backup host (the Slurm head nodes, say), both on one etcd (--store etcd://...). One leads; the other
# stands by, refuses every call with the leader's address, and takes over within --leader-lease-seconds
# (3 s) when the leader's process or host is gone. Each is started again by its supervisor when it exits
# (a leader that lost its lease, or was told `moectl admin step-down`, exits), and comes back a standby.
# The node agents of every allocation (moe-add-workers.sbatch, or moe-job.sbatch with MOE_CONTROLLER)
# get both addresses and go to whichever leads.
#
#   moe-controllers-ha.sh etcd [NAME]            one etcd member (of MOE_ETCD_MEMBERS; default: this host's)
#   moe-controllers-ha.sh controller [HOST:PORT] moe-controller (of MOE_CONTROLLERS; default: this host's)
#   moe-controllers-ha.sh add-workers [SBATCH OPTIONS...]
#                                                sbatch moe-add-workers.sbatch, the agents given
#                                                --controller primary:port,backup:port
#
# `etcd` and `controller` run in the foreground, each its own supervisor: the process is started again
# whenever it exits (after 1 s, longer while it keeps exiting at once), until this script gets SIGTERM or
# SIGINT, which it passes on and then exits 0. Run them from systemd (units below) or any other
# supervisor of your site's; the loop makes a restart not depend on it.
#
# Hosts: etcd on three hosts (a quorum of 2 outlives any one: the two controller hosts and a third, the
# slurmdbd host for instance), the controller on two. Or an existing etcd (v3.4 or later, with the flags
# below): set MOE_STORE and run no `etcd` here.
#
# Environment (one file, the same on every host, e.g. /etc/moe/ha.env read by the units):
#   MOE_CONTROLLERS     primary:port,backup:port: the controllers as the agents and moectl dial them
#                       (each one's --advertise-address, named in a standby's refusals)
#   MOE_ETCD_MEMBERS    NAME=HOST[:CLIENT_PORT[:PEER_PORT]],... the etcd members (ports 2379, 2380)
#   MOE_STORE           default etcd://HOST:CLIENT_PORT,.../moe of MOE_ETCD_MEMBERS; an existing etcd's
#                       client endpoints otherwise (plain HTTP: the controller's etcd client has no TLS)
#   MOE_CHECKPOINT_ROOT the checkpoints of jobs that name no directory: shared with every node
#   MOE_TOKENS          the tokens file (default /etc/moe/tokens), mode 0600 or 0640, on both hosts
#   MOE_TLS_CERT, MOE_TLS_KEY  this host's serving certificate and key: beyond loopback the controller
#                       serves tokens over TLS only. The certificate must name the host as MOE_CONTROLLERS
#                       does (gRPC checks the name dialled); one certificate naming both hosts will do.
#   MOE_TLS_CA          the CA of those certificates, for the agents (add-workers) and moectl
#   MOE_BIN             the binaries (default: where moe-controller is on PATH, else build/bin of this
#                       repository); MOE_ETCD the etcd binary (default: etcd on PATH, /usr/bin/etcd)
#   MOE_ETCD_DATA       the members' data, a local disk, not NFS (default /var/lib/moe-etcd: <dir>/NAME)
#   MOE_LISTEN_HOST     the controller's listening address (default 0.0.0.0); MOE_METRICS_PORT (9400)
#   MOE_LEADER_LEASE_SECONDS  (default 3; 2 to 60)
# and for add-workers what moe-add-workers.sbatch reads: MOE_WORKER_TOKEN_FILE (or MOE_TOKEN), MOE_TLS_CA.
#
# systemd, on each host that runs one (User= an account that owns MOE_ETCD_DATA and reads the tokens
# and the key; Debian's etcd-server package starts an etcd.service of its own on 2379: disable it):
#   # /etc/systemd/system/moe-etcd.service
#   [Unit]
#   Description=MoE Orchestrator: an etcd member of the controllers' store
#   Wants=network-online.target
#   After=network-online.target
#   [Service]
#   EnvironmentFile=/etc/moe/ha.env
#   ExecStart=/opt/moe/deploy/slurm/moe-controllers-ha.sh etcd
#   User=moe
#   Restart=on-failure
#   [Install]
#   WantedBy=multi-user.target
#
#   # /etc/systemd/system/moe-controller.service
#   [Unit]
#   Description=MoE Orchestrator: controller (a leader or its standby)
#   Wants=network-online.target
#   After=network-online.target moe-etcd.service
#   [Service]
#   EnvironmentFile=/etc/moe/ha.env
#   ExecStart=/opt/moe/deploy/slurm/moe-controllers-ha.sh controller
#   User=moe
#   Restart=on-failure
#   [Install]
#   WantedBy=multi-user.target
#
# Then the workers of an allocation, and moectl, with both addresses:
#   MOE_WORKER_TOKEN_FILE=~/.moe/worker-token MOE_TLS_CA=/etc/moe/ca.crt \
#     moe-controllers-ha.sh add-workers --nodes=4 --gpus-per-node=4
#   MOE_CONTROLLER=primary:50051,backup:50051 moectl --tls-ca /etc/moe/ca.crt get workers
# A planned handover (maintenance of the leader's host): moectl admin step-down.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
me=moe-controllers-ha
die() { echo "$me: $*" >&2; exit 2; }

# This host's names and addresses, one a line: to find its entry in MOE_ETCD_MEMBERS or MOE_CONTROLLERS.
own_names() {
  hostname 2>/dev/null || true
  hostname -s 2>/dev/null || true
  hostname -f 2>/dev/null || true
  hostname -I 2>/dev/null | tr ' ' '\n' || true
}

# pick WHAT GIVEN ENTRY...: the entry named GIVEN (an etcd member's NAME, a controller's HOST:PORT), or
# else the one whose host is this host; exactly one.
pick() {
  local what=$1 given=$2 e host found=() names
  shift 2
  if [ -n "$given" ]; then
    for e in "$@"; do
      if [ "${e%%=*}" = "$given" ] || [ "$e" = "$given" ]; then found+=("$e"); fi
    done
    [ ${#found[@]} = 1 ] || die "$given is not one of the $what ($*)"
  else
    names=$(own_names)
    for e in "$@"; do
      host=${e#*=}; host=${host%%:*}
      grep -qxF -- "$host" <<<"$names" && found+=("$e")
    done
    [ ${#found[@]} = 1 ] || die "${#found[@]} of the $what ($*) are this host ($(echo "$names" | sort -u | paste -sd' ')): name one"
  fi
  echo "${found[0]}"
}

# The etcd members: "NAME HOST CLIENT_PORT PEER_PORT" lines.
members() {
  local e name rest host client peer list=()
  [ -n "${MOE_ETCD_MEMBERS:-}" ] || die "MOE_ETCD_MEMBERS is not set (NAME=HOST[:CLIENT_PORT[:PEER_PORT]],...)"
  IFS=, read -ra list <<<"$MOE_ETCD_MEMBERS"
  for e in "${list[@]}"; do
    [[ $e == *=* ]] || die "MOE_ETCD_MEMBERS: $e is not NAME=HOST[:CLIENT_PORT[:PEER_PORT]]"
    name=${e%%=*} rest=${e#*=}
    IFS=: read -r host client peer <<<"$rest"
    echo "$name $host ${client:-2379} ${peer:-2380}"
  done
}

store() {
  if [ -n "${MOE_STORE:-}" ]; then echo "$MOE_STORE"; return; fi
  echo "etcd://$(members | awk '{print $2 ":" $3}' | paste -sd, -)/moe"
}

# supervise NAME COMMAND...: runs COMMAND, and again whenever it exits, until SIGTERM or SIGINT (passed on
# to it). A restart waits 1 s, doubling up to 30 s while the command keeps exiting within 10 s of its start.
supervise() {
  local name=$1 child="" stopping=0 rc started delay=1
  shift
  trap 'stopping=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true' TERM INT
  while :; do
    started=$SECONDS
    "$@" &
    child=$!
    echo "$me: $name started (pid $child)"
    # wait returns early when a signal is trapped: wait until the child is really gone
    while :; do
      rc=0; wait "$child" || rc=$?
      kill -0 "$child" 2>/dev/null || break
    done
    child=""
    if [ "$stopping" = 1 ]; then echo "$me: $name stopped (exit $rc)"; exit 0; fi
    if [ $((SECONDS - started)) -ge 10 ]; then delay=1; fi
    echo "$me: $name exited $rc; starting it again in ${delay} s"
    sleep "$delay" &
    wait $! || kill $! 2>/dev/null || true
    [ "$stopping" = 0 ] || { echo "$me: $name stopped"; exit 0; }
    delay=$((delay * 2 > 30 ? 30 : delay * 2))
  done
}

run_etcd() {
  local given=${1:-} line name host client peer ip initial etcd data clients
  local all=()
  mapfile -t all < <(members | awk '{print $1 "=" $2 ":" $3 ":" $4}')
  line=$(pick "etcd members in MOE_ETCD_MEMBERS" "$given" "${all[@]}")
  name=${line%%=*}
  IFS=: read -r host client peer <<<"${line#*=}"
  initial=$(members | awk '{print $1 "=http://" $2 ":" $4}' | paste -sd, -)
  etcd=${MOE_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
  [ -x "$etcd" ] || die "no etcd at $etcd (Debian: apt install etcd-server; or set MOE_ETCD)"
  # etcd listens on addresses, not names: the member's address as this host resolves its name.
  if [[ $host =~ ^[0-9.]+$ ]]; then ip=$host; else ip=$(getent ahostsv4 "$host" | awk 'NR == 1 {print $1}'); fi
  [ -n "$ip" ] || die "cannot resolve $host to an IPv4 address"
  clients=http://$ip:$client
  [ "$ip" = 127.0.0.1 ] || clients+=,http://127.0.0.1:$client   # etcdctl on the host itself
  data=${MOE_ETCD_DATA:-/var/lib/moe-etcd}/$name
  mkdir -p "$(dirname "$data")"
  # The --initial-* flags count at the first start only (an empty data directory); later starts rejoin
  # from the data. A scheduling pass of the controller is one transaction: --max-txn-ops,
  # --max-request-bytes. The controller never compacts: auto-compaction keeps an hour of history.
  supervise "etcd member $name" "$etcd" --name "$name" --data-dir "$data" \
    --listen-client-urls "$clients" --advertise-client-urls "http://$host:$client" \
    --listen-peer-urls "http://$ip:$peer" --initial-advertise-peer-urls "http://$host:$peer" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token moe-etcd \
    --max-txn-ops 10000 --max-request-bytes 33554432 \
    --auto-compaction-mode periodic --auto-compaction-retention 1h --snapshot-count 10000
}

binaries() {
  if [ -z "${MOE_BIN:-}" ]; then
    if command -v moe-controller >/dev/null; then MOE_BIN=$(dirname "$(command -v moe-controller)")
    else MOE_BIN=$(cd "$here/../.." && pwd)/build/bin; fi
  fi
  [ -x "$MOE_BIN/moe-controller" ] || die "no moe-controller in $MOE_BIN (set MOE_BIN)"
}

run_controller() {
  local given=${1:-} self port args=() list=()
  [ -n "${MOE_CONTROLLERS:-}" ] || die "MOE_CONTROLLERS is not set (primary:port,backup:port)"
  [ -n "${MOE_CHECKPOINT_ROOT:-}" ] || die "MOE_CHECKPOINT_ROOT is not set (a directory every node shares)"
  binaries
  IFS=, read -ra list <<<"$MOE_CONTROLLERS"
  self=$(pick "controllers in MOE_CONTROLLERS" "$given" "${list[@]}")
  port=${self##*:}
  args=(--store "$(store)" --listen "${MOE_LISTEN_HOST:-0.0.0.0}:$port" --advertise-address "$self"
        --metrics-listen "0.0.0.0:${MOE_METRICS_PORT:-9400}" --allow-remote-metrics
        --leader-lease-seconds "${MOE_LEADER_LEASE_SECONDS:-3}" --checkpoint-root "$MOE_CHECKPOINT_ROOT")
  local tokens=${MOE_TOKENS:-/etc/moe/tokens}
  [ -f "$tokens" ] && args+=(--tokens "$tokens")
  # Beyond loopback, tokens travel only inside TLS: moe-controller itself refuses to start otherwise.
  if [ -n "${MOE_TLS_CERT:-}" ]; then args+=(--tls-cert "$MOE_TLS_CERT" --tls-key "${MOE_TLS_KEY:?MOE_TLS_KEY: the key of MOE_TLS_CERT}"); fi
  supervise "moe-controller $self" "$MOE_BIN/moe-controller" "${args[@]}"
}

add_workers() {
  [ -n "${MOE_CONTROLLERS:-}" ] || die "MOE_CONTROLLERS is not set (primary:port,backup:port)"
  [ -x "$here/moe-add-workers.sbatch" ] || die "no moe-add-workers.sbatch next to $0"
  MOE_CONTROLLER=$MOE_CONTROLLERS exec sbatch "$@" "$here/moe-add-workers.sbatch"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  etcd) run_etcd "$@" ;;
  controller) run_controller "$@" ;;
  add-workers) add_workers "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
