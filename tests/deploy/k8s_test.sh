#!/usr/bin/env bash
# The Kubernetes manifests: every overlay under deploy/k8s/overlays renders with `kubectl kustomize`, and
# every rendered object validates against a schema: the built-in kinds (Deployment, Service, Job, a
# JobSet's child Jobs, ConfigMap, PriorityClass, ...) against Kubernetes 1.32's and 1.37's JSON schemas as the PyPI
# package kubernetes-validate ships them, strict (an unknown field is an error), and the custom resources
# (ComputeDomain, JobSet, Kueue's Topology, ResourceFlavor, ClusterQueue, LocalQueue, the Prometheus
# Operator's ServiceMonitor, PodMonitor, PrometheusRule, cert-manager's Issuer and Certificate) against
# validate_k8s's own schemas; plus what no
# schema says (validate_k8s.py names the modules): references, DRA claims, probes on every long-running
# container, Guaranteed QoS everywhere, /dev/shm inside the memory limit, the node agents' flags and grace
# periods, each pool's queue chain, admission (covered resources, quota, topology level) and size, the
# monitors' release label, TLS (cert-manager's chain resolves; the controller serves TLS only, from a
# Certificate's Secret naming its Service; every agent and moectl trusts the CA, mounted alone), the
# network (every --listen, --metrics-listen, --health-listen on the pod's own IP, never 0.0.0.0; the
# NetworkPolicies admit the controller's gRPC port from every agent and moectl pod by the labels their
# templates carry, the agents each other's TCP, Prometheus' namespace the ports the monitors scrape), the
# controller's store (one replica on SQLite; on etcd, leader-only readiness and no startup probe a standby
# fails; the etcd members' flags, names, quorum, budget and who reaches them). An overlay may also have to
# CONTAIN things (requires_of below: a pool with the queue label and, on GB300, a topology request on the
# NVLink domain; its ComputeDomain and RDMA; the ServiceMonitor, PrometheusRule and dashboards; for ha, 2
# controllers or more on --store etcd://, ready = leading, and a 3-member etcd StatefulSet with
# --max-txn-ops). An overlay's extra pools (joins_of) are
# rendered with it and checked together: several pools join one controller. The ha overlay is rendered
# twice more, as its kustomization.yaml says it may be used: on the gb300-nvl72 overlay instead of
# cpu-demo, and on an existing etcd (its etcd.yaml dropped, --store changed). Then the validator is shown
# broken renders and must reject each one (a validator that passes everything would pass the overlays too).
# Needs kubectl and python3 with venv (Debian's python3-venv). The validator runs in a virtual environment
# of the packages pinned in tests/deploy/requirements-k8s.txt, made by scripts/pyvenv.sh on first use in
# $MOE_PY_CACHE (default ~/.cache/moe-py): that one step needs PyPI; later runs are offline.
#   tests/deploy/k8s_test.sh [OVERLAY_DIR...]     (default: every deploy/k8s/overlays/*)
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v kubectl >/dev/null || { echo "FAIL: kubectl is missing (it renders the kustomizations)" >&2; exit 1; }
venv=$(scripts/pyvenv.sh tests/deploy/requirements-k8s.txt) || { echo "FAIL: no Python environment for the validator (scripts/pyvenv.sh above)" >&2; exit 1; }

# What an overlay's render must contain, beyond being valid (validate_k8s.py --require), by directory
# name; OVERLAY+POOL: the overlay with an extra pool (joins_of) beside it.
common="--require=monitoring --require=dashboards"
requires_of() {
  case "$(basename "$1")" in
    *+*) echo "$(requires_of "${1%%+*}") $(join_requires_of "${1%%+*}/${1#*+}")" ;;
    cpu-demo) echo "--require=pool:JobSet/moe-pool $common" ;;
    gb300-nvl72) echo "--require=pool:JobSet/moe-pool:nvidia.com/gpu.clique --require=compute-domain:JobSet/moe-pool" \
      "--require=rdma:JobSet/moe-pool $common" ;;
    # The ha overlay (on cpu-demo), and its variants below: on gb300-nvl72, and on an existing etcd.
    ha) echo "$(requires_of cpu-demo) --require=ha --require=etcd:StatefulSet/moe-etcd" ;;
    ha-on-gb300-nvl72) echo "$(requires_of gb300-nvl72) --require=ha --require=etcd:StatefulSet/moe-etcd" ;;
    ha-existing-etcd) echo "$(requires_of cpu-demo) --require=ha" ;;
    *) echo "$common" ;;
  esac
}
# Pools applied beside an overlay (their own kustomization in a subdirectory), and what they add.
joins_of() { case "$(basename "$1")" in gb300-nvl72) echo extra-pool ;; esac; }
join_requires_of() {
  case "$1" in
    gb300-nvl72/extra-pool) echo "--require=pool:JobSet/moe-pool-extra:nvidia.com/gpu.clique --require=compute-domain:JobSet/moe-pool-extra" ;;
  esac
}

overlays=("$@")
[ ${#overlays[@]} -gt 0 ] || overlays=(deploy/k8s/overlays/*/)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
validate() { "$venv/bin/python" tests/deploy/validate_k8s.py "$@"; }
for o in "${overlays[@]}"; do
  o=${o%/}; n=$(basename "$o")
  echo "== $o"
  out="$tmp/$n.yaml"
  if ! kubectl kustomize "$o" >"$out"; then echo "FAIL: $o does not render" >&2; failed=1; continue; fi
  # shellcheck disable=SC2046  # the --require words split on purpose
  validate $(requires_of "$o") "$out" || { echo "FAIL: $o" >&2; failed=1; }
  for j in $(joins_of "$o"); do
    echo "== $o + $o/$j (a second pool joining the same controller)"
    if ! kubectl kustomize "$o/$j" >"$tmp/$n-$j.yaml"; then echo "FAIL: $o/$j does not render" >&2; failed=1; continue; fi
    cat "$out" - "$tmp/$n-$j.yaml" <<<'---' >"$tmp/$n+$j.yaml"
    # shellcheck disable=SC2046
    validate $(requires_of "$n+$j") "$tmp/$n+$j.yaml" || { echo "FAIL: $o with $o/$j" >&2; failed=1; }
  done
done

# The ha overlay as its kustomization.yaml says to use it otherwise, each a copy in $tmp whose resources
# name the overlays by a path relative to the copy (kustomize refuses absolute ones), the seds applied
# after that: ha_variant NAME SED-OF-KUSTOMIZATION [SED-OF-ARGS-PATCH]. Each sed must change its file
# (else the overlay changed: update it here).
ha_variant() {
  local name=$1 kust=$2 args=${3:-} d="$tmp/$1" o=deploy/k8s/overlays/ha
  echo "== $o as $name"
  mkdir -p "$d" && cp "$o"/*.yaml "$d/"
  sed "s#^  - \.\./cpu-demo\$#  - $(realpath --relative-to="$d" deploy/k8s/overlays)/cpu-demo#" "$o/kustomization.yaml" >"$d/moved.yaml"
  sed "$kust" "$d/moved.yaml" >"$d/kustomization.yaml"
  [ -z "$args" ] || sed -i "$args" "$d/patch-controller-args.yaml"
  if cmp -s "$d/moved.yaml" "$d/kustomization.yaml" || { [ -n "$args" ] && cmp -s "$o/patch-controller-args.yaml" "$d/patch-controller-args.yaml"; }; then
    echo "FAIL: $name: the edits its kustomization.yaml describes no longer apply (the overlay changed: update ha_variant)" >&2; failed=1; return
  fi
  if ! kubectl kustomize "$d" >"$tmp/$name.yaml"; then echo "FAIL: $o as $name does not render" >&2; failed=1; return; fi
  # shellcheck disable=SC2046
  validate $(requires_of "$name") "$tmp/$name.yaml" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; echo "FAIL: $o as $name" >&2; failed=1; return; }
  cat "$tmp/$name.log"
}
if [ -s "$tmp/ha.yaml" ]; then
  ha_variant ha-on-gb300-nvl72 's#/cpu-demo$#/gb300-nvl72#'
  ha_variant ha-existing-etcd '/^  - etcd.yaml /d' \
    's#--store=etcd://moe-etcd-0.moe-etcd:2379,moe-etcd-1.moe-etcd:2379,moe-etcd-2.moe-etcd:2379/moe$#--store=etcd://etcd-a.example:2379,etcd-b.example:2379,etcd-c.example:2379/moe#'
  if [ -s "$tmp/ha-existing-etcd.yaml" ]; then
    grep -q 'kind: StatefulSet' "$tmp/ha-existing-etcd.yaml" && { echo "FAIL: ha-existing-etcd still renders an etcd StatefulSet" >&2; failed=1; }
    grep -q 'etcd-a.example:2379 is not rendered here: an etcd outside this render' "$tmp/ha-existing-etcd.log" \
      || { echo "FAIL: ha-existing-etcd: the validator did not take etcd-a.example for an etcd outside the render" >&2; failed=1; }
  fi
fi

# The validator against broken renders: each mutation must change the render and make the validator fail
# with the message named. Run for the overlays that were rendered.
nbad=0 nmut=0
reject() {   # reject OVERLAY NAME EXPECTED-MESSAGE < mutated render of OVERLAY
  local base="$tmp/$1.yaml" name=$2 want=$3 log="$tmp/mutant.log"
  nmut=$((nmut + 1))
  cat >"$tmp/mutant.yaml"
  if cmp -s "$base" "$tmp/mutant.yaml"; then echo "FAIL: mutation '$name' changed nothing (the overlay changed: update it)" >&2; failed=1; return; fi
  # shellcheck disable=SC2046
  if validate $(requires_of "$1") "$tmp/mutant.yaml" >"$log" 2>&1; then
    echo "FAIL: mutation '$name' passed the validator" >&2; failed=1
  elif ! grep -qF -- "$want" "$log"; then
    echo "FAIL: mutation '$name' failed, but without '$want':" >&2; cat "$log" >&2; failed=1
  else
    nbad=$((nbad + 1)); echo "   rejected: $name"
  fi
}
# (reject reads the mutant from a redirection, not a pipe: a pipe would run it in a subshell and lose
# its verdict.)
# drop_kind OVERLAY KIND: the render without its KIND documents. in_kind OVERLAY KIND SED: SED applied
# to the KIND documents only. perl0 OVERLAY EXPR: a substitution across lines.
drop_kind() { awk -v k="$2" 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } $0 !~ ("(^|\n)kind: " k "(\n|$)")' "$tmp/$1.yaml"; }
in_kind() { sed "/^kind: $2\$/,/^---\$/{ $3
}" "$tmp/$1.yaml"; }
perl0() { perl -0pe "$2" "$tmp/$1.yaml"; }

# The manifests' $(POD_IP) (Kubernetes expands it), as text in the mutations' patterns.
# shellcheck disable=SC2016
pod_ip='$(POD_IP)'

gpu="gb300-nvl72"
if [ -s "$tmp/$gpu.yaml" ]; then
  echo "== broken $gpu renders (each must be rejected)"
  g="$tmp/$gpu.yaml"
  # DRA, RDMA, Multus (as before the pools)
  reject $gpu "pod claim names a misspelt template" "is neither the channel template of a rendered ComputeDomain" < <(sed -E 's/(resourceClaimTemplateName: .*[^ ])$/\1-misspelt/' "$g")
  reject $gpu "misspelt resourceClaimTemplateName key" "unknown field resourceClaimTemplateNam" < <(sed 's/resourceClaimTemplateName:/resourceClaimTemplateNam:/' "$g")
  reject $gpu "a container claims an undeclared claim" "is not among the pod's resourceClaims" < <(sed '0,/- name: imex-channel$/s//- name: imex-chanel/' "$g")
  reject $gpu "no ComputeDomain" "the render has no ComputeDomain" < <(drop_kind $gpu ComputeDomain)
  reject $gpu "numNodes a string" "spec.numNodes must be integer" < <(sed -E 's/numNodes: ([0-9]+)/numNodes: "\1"/' "$g")
  reject $gpu "numNodes misspelt" "spec.numNode: unknown field" < <(sed 's/numNodes:/numNode:/' "$g")
  reject $gpu "RDMA without IPC_LOCK" "lacks IPC_LOCK" < <(sed 's/- IPC_LOCK/- NET_RAW/' "$g")
  reject $gpu "no Multus networks" "no k8s.v1.cni.cncf.io/networks annotation" < <(sed '/k8s.v1.cni.cncf.io\/networks/d' "$g")
  # the built-in kinds against Kubernetes' schemas (strict: unknown fields too), the Operator's against ours
  reject $gpu "a Deployment field misspelt" "Deployment/moe-controller: spec.replica: unknown field" < <(in_kind $gpu Deployment 's/^  replicas: 1$/  replica: 1/')
  reject $gpu "a Deployment's replicas a word" "spec.replicas must be integer, not string" < <(in_kind $gpu Deployment 's/^  replicas: 1$/  replicas: "two"/')
  reject $gpu "a container port a string" "ports[2].containerPort must be integer, not string" < <(in_kind $gpu Deployment 's/containerPort: 9400$/containerPort: "9400"/')
  reject $gpu "a PodMonitor port a number" "spec.podMetricsEndpoints[0].port must be string, not integer" < <(in_kind $gpu PodMonitor 's/port: health$/port: 9400/')
  reject $gpu "a PodMonitor interval not a duration" "spec.podMetricsEndpoints[0].interval \"30sec\" must match" < <(in_kind $gpu PodMonitor 's/interval: 30s$/interval: 30sec/')
  # the pool: schema, Kueue, size
  reject $gpu "JobSet replicas misspelt" "spec.replicatedJobs[0].replica: unknown field" < <(sed 's/^    replicas: /    replica: /' "$g")
  reject $gpu "a Job spec key misspelt" "template.spec.backoffLimitPerIndx: unknown field" < <(sed 's/backoffLimitPerIndex:/backoffLimitPerIndx:/' "$g")
  reject $gpu "the pool without the queue-name label" "has no kueue.x-k8s.io/queue-name label" < <(in_kind $gpu JobSet '/kueue.x-k8s.io\/queue-name:/d')
  reject $gpu "the pool without a topology request" "has no Kueue topology request on nvidia.com/gpu.clique" < <(sed 's/podset-slice-required-topology:/podset-slice-requird-topology:/; s/podset-preferred-topology:/podset-preferd-topology:/' "$g")
  reject $gpu "a slice that is not one rack" "not the Job's parallelism 18" < <(sed 's/podset-slice-size: "18"/podset-slice-size: "9"/' "$g")
  reject $gpu "numNodes not racks x trays" "numNodes 18, but" < <(sed 's/numNodes: 36/numNodes: 18/' "$g")
  reject $gpu "a LocalQueue misspelt" "spec.clusterQueu: unknown field" < <(sed 's/clusterQueue: moe-gb300/clusterQueu: moe-gb300/' "$g")
  reject $gpu "a ClusterQueue quota not a quantity" "must be a quantity" < <(sed 's/nominalQuota: "144"/nominalQuota: lots/' "$g")
  reject $gpu "a ResourceFlavor misspelt" "spec.topologyNam: unknown field" < <(sed 's/topologyName:/topologyNam:/' "$g")
  reject $gpu "a Topology misspelt" "nodeLable: unknown field" < <(sed '0,/- nodeLabel:/s//- nodeLable:/' "$g")
  reject $gpu "a Topology of Kueue v0.13" "no such apiVersion/kind" < <(perl0 $gpu 's#kueue.x-k8s.io/v1beta2\nkind: Topology#kueue.x-k8s.io/v1alpha1\nkind: Topology#')
  reject $gpu "a cluster-scoped object with a namespace" "cluster-scoped, but has namespace moe" < <(perl0 $gpu 's#(kind: ClusterQueue\nmetadata:\n(  .*\n)*?  name: moe-gb300\n)#$1  namespace: moe\n#')
  reject $gpu "a quota short of the pool" "more than any flavor's nominalQuota" < <(sed 's/nominalQuota: "144"/nominalQuota: "72"/' "$g")
  reject $gpu "a resource the queue does not cover" "which ClusterQueue moe-gb300 does not cover" < <(sed 's#rdma/rdma_shared_device_a: 1#rdma/rdma_other: 1#' "$g")
  # the agent
  reject $gpu "an agent per device" "--device (one agent per device)" < <(sed 's/--devices=all/--device=cuda:0/' "$g")
  reject $gpu "no --memory-gb" "no --memory-gb" < <(sed '/--memory-gb=/d' "$g")
  reject $gpu "readiness not /readyz" "readinessProbe is not GET /readyz" < <(in_kind $gpu JobSet 's#path: /readyz#path: /healthz#')
  reject $gpu "a grace period short of a stop" "does not exceed --stop-grace-seconds 540 + the longest step 251" < <(sed 's/terminationGracePeriodSeconds: 900/terminationGracePeriodSeconds: 600/' "$g")
  reject $gpu "moe-worker run directly in a Job" "without /usr/local/bin/moe-pool-member" < <(sed 's#- /usr/local/bin/moe-pool-member#- /usr/local/bin/moe-worker-only#' "$g")
  reject $gpu "exit 143 counted" "does not Ignore exit code 143" < <(sed 's/- 143$/- 137/' "$g")
  # probes, QoS, /dev/shm
  reject $gpu "a container without liveness" "container worker: no livenessProbe" < <(in_kind $gpu JobSet 's/livenessProbe:/livenesProbe:/')
  reject $gpu "a container without readiness" "container controller: no readinessProbe" < <(in_kind $gpu Deployment 's/readinessProbe:/readinesProbe:/')
  reject $gpu "Burstable: cpu limit below the request" "cpu request 128 != limit 64: not Guaranteed QoS" < <(sed '0,/cpu: "128"/s//cpu: "64"/' "$g")
  reject $gpu "/dev/shm beyond the memory limit" "do not fit inside the containers' memory limits" < <(sed 's/sizeLimit: 64Gi/sizeLimit: 800Gi/' "$g")
  reject $gpu "a pod without a priority class" "no priorityClassName" < <(sed '/priorityClassName: moe-worker-pool/d' "$g")
  # monitoring
  # The job id is the controller's job_id label: honorLabels is not needed and would let exposed labels
  # override the Operator's job/instance.
  reject $gpu "ServiceMonitor with honorLabels" "with honorLabels: true" < <(in_kind $gpu ServiceMonitor 's/^\( *\)- interval: 15s$/\1- honorLabels: true\n\1  interval: 15s/')
  reject $gpu "no ServiceMonitor" "no ServiceMonitor or PodMonitor of moe-controller" < <(drop_kind $gpu ServiceMonitor)
  reject $gpu "no PrometheusRule" "the render has no PrometheusRule" < <(drop_kind $gpu PrometheusRule)
  reject $gpu "a ServiceMonitor without the release label" "ServiceMonitor/moe-controller: no release label" < <(in_kind $gpu ServiceMonitor '/release: /d')
  # TLS (cert-manager): the chain resolves, the controller serves TLS only, every agent trusts its CA
  reject $gpu "the controller with --allow-cleartext-tokens again" "--allow-cleartext-tokens: the bearer tokens" < <(in_kind $gpu Deployment 's/^\( *\)- --allow-remote-metrics$/&\n\1- --allow-cleartext-tokens/')
  reject $gpu "a Certificate whose issuerRef names no Issuer" "issuerRef names Issuer moe-ca-misspelt, which is not rendered" < <(in_kind $gpu Certificate 's/^    name: moe-ca$/    name: moe-ca-misspelt/')
  reject $gpu "a CA Issuer on a Secret that is no CA's" "is no rendered CA Certificate's Secret" < <(in_kind $gpu Issuer 's/secretName: moe-ca$/secretName: moe-controller-tls/')
  reject $gpu "an agent without --tls-ca" "no --tls-ca: the agent would speak plaintext" < <(in_kind $gpu JobSet '/- --tls-ca=/d')
  reject $gpu "agents that mount the controller's key" "would see the controller's private key" < <(perl0 $gpu 's/(secret:\n\s*defaultMode: 292\n)\s*items:\n\s*- key: ca.crt\n\s*path: ca.crt\n/$1/')
  reject $gpu "a certificate without the Service's name" "dnsNames lack moe-controller.moe.svc:" < <(sed '/^  - moe-controller.moe.svc$/d' "$g")
  reject $gpu "a gRPC probe on the TLS port" "startupProbe is a gRPC probe" < <(perl0 $gpu 's/(startupProbe:\n\s*failureThreshold: 60\n)(\s*)httpGet:\n\s*path: \/readyz\n\s*port: metrics\n/$1$2grpc:\n$2  port: 50051\n/')
  reject $gpu "a Certificate's isCA a string" "spec.isCA must be boolean, not string" < <(sed 's/isCA: true/isCA: "true"/' "$g")
  reject $gpu "an Issuer field misspelt" "spec.selfSign: unknown field" < <(sed 's/selfSigned: {}/selfSign: {}/' "$g")
  # the network: every listener on the pod's own IP; the NetworkPolicies admit the controller's clients, the ranks
  # and Prometheus by the labels the pods really carry
  reject $gpu "the controller on 0.0.0.0 again" "--listen=0.0.0.0:50051 binds 0.0.0.0, every interface" < <(sed "s/--listen=$pod_ip:50051/--listen=0.0.0.0:50051/" "$g")
  reject $gpu "an agent's health port on [::]" "--health-listen=[::]:9401 binds [::], every interface" < <(sed "s/--health-listen=$pod_ip:9401/--health-listen=[::]:9401/" "$g")
  reject $gpu "POD_IP from the node's address" "POD_IP comes from status.hostIP, not status.podIP" < <(in_kind $gpu Deployment 's/fieldPath: status.podIP/fieldPath: status.hostIP/')
  reject $gpu "a probe aimed at 127.0.0.1" "readinessProbe.httpGet.host 127.0.0.1: the kubelet would probe that address" < <(perl0 $gpu 's/(readinessProbe:\n(\s+)failureThreshold: 2\n\s+httpGet:\n)/$1$2  host: 127.0.0.1\n/')
  reject $gpu "no NetworkPolicy" "Deployment/moe-controller: no NetworkPolicy in namespace moe selects its pods" < <(drop_kind $gpu NetworkPolicy)
  reject $gpu "the policy admits agents by a label they lack" "no NetworkPolicy admits TCP 50051 (the gRPC port) from JobSet/moe-pool replicatedJob rack's pods" < <(in_kind $gpu NetworkPolicy 's/app.kubernetes.io\/name: moe-worker$/app.kubernetes.io\/name: moe-agent/')
  reject $gpu "the agents' pod label renamed" "admits TCP 50051 (the gRPC port) from JobSet/moe-pool replicatedJob rack's pods (app.kubernetes.io/component=worker, app.kubernetes.io/name=moe-agent" < <(sed 's/^              app.kubernetes.io\/name: moe-worker$/              app.kubernetes.io\/name: moe-agent/' "$g")
  reject $gpu "the heartbeats' UDP not admitted" "no NetworkPolicy admits UDP 50051 (the gRPC port)" < <(perl0 $gpu 's/\n    - port: 50051\n      protocol: UDP//')
  reject $gpu "the ranks' TCP between agents on one port" "no NetworkPolicy admits TCP on every port from JobSet/moe-pool" < <(perl0 $gpu 's/\n    ports:\n    - protocol: TCP\n/\n    ports:\n    - protocol: TCP\n      port: 9401\n/')
  reject $gpu "metrics not admitted from Prometheus' namespace" "ServiceMonitor/moe-controller scrapes port 9400 of Deployment/moe-controller's pods, but no NetworkPolicy admits" < <(perl0 $gpu 's/metadata.name: monitoring(\n    ports:\n    - port: 9400)/metadata.name: moe$1/')
fi
both=$gpu+extra-pool
if [ -s "$tmp/$both.yaml" ]; then
  echo "== broken $gpu with its extra pool (each must be rejected)"
  reject $both "two pools named alike" "JobSet/moe-pool: rendered twice" < <(sed 's/name: moe-pool-extra$/name: moe-pool/' "$tmp/$both.yaml")
  reject $both "two pools on one IMEX channel template" "is also ComputeDomain/moe-workers's" < <(sed 's/moe-workers-extra-imex-channel/moe-workers-imex-channel/' "$tmp/$both.yaml")
  reject $both "the extra pool's agents relabelled" "admits TCP 50051 (the gRPC port) from JobSet/moe-pool-extra replicatedJob rack's pods" < <(perl -0pe 's#(name: moe-pool-extra\n(.*\n)*?              app.kubernetes.io/name: )moe-worker\n#${1}moe-agent\n#' "$tmp/$both.yaml")
  reject $both "the extra pool on another image" "more than one moe-orchestrator image" < <(perl -0pe 's#(name: moe-pool-extra\n(.*\n)*?\s+image: ghcr.io/example/moe-orchestrator):0.1.0#$1:0.2.0#' "$tmp/$both.yaml")
fi
cpu="cpu-demo"
if [ -s "$tmp/$cpu.yaml" ]; then
  echo "== broken $cpu renders (each must be rejected)"
  c="$tmp/$cpu.yaml"
  reject $cpu "an init container not Guaranteed" "container wait-for-controller: cpu request 100m != limit 200m" < <(perl0 $cpu 's/(initContainers:.*?limits:\s*\n\s*cpu: )100m/${1}200m/s')
  reject $cpu "a probe on an init container" "init container wait-for-controller: livenessProbe" < <(perl0 $cpu 's/(initContainers:\n(\s*)- )/$1livenessProbe: {exec: {command: [true]}}\n$2  /')
  reject $cpu "CPU agents that may share a node" "without a required pod anti-affinity on kubernetes.io/hostname" < <(sed 's#topologyKey: kubernetes.io/hostname#topologyKey: topology.kubernetes.io/zone#' "$c")
  reject $cpu "ranks beyond the memory limit" "> the memory limit 6Gi" < <(sed 's/--memory-gb=2/--memory-gb=3/' "$c")
  reject $cpu "a quota short of the demo pool" "more than any flavor's nominalQuota" < <(sed 's/nominalQuota: "4"/nominalQuota: "1"/' "$c")
  reject $cpu "moectl without --tls-ca" "without --tls-ca: moectl would speak plaintext" < <(sed 's#moectl --tls-ca /etc/moe/tls/ca.crt submit#moectl submit#' "$c")
  reject $cpu "the submit Job not admitted to the controller" "no NetworkPolicy admits TCP 50051 (the gRPC port) from Job/moe-submit-demo's pods" < <(in_kind $cpu NetworkPolicy 's/- moe-submit-demo$/- moe-submit/')
  reject $cpu "a CPU agent's health port with no host" "--health-listen=:9401 binds no host, every interface" < <(sed "s/--health-listen=$pod_ip:9401/--health-listen=:9401/" "$c")
  reject $cpu "two controllers on the SQLite store" "2 replicas of a controller on the embedded SQLite store" < <(in_kind $cpu Deployment 's/^  replicas: 1$/  replicas: 2/')
  reject $cpu "agents in a DaemonSet again" "node agents outside a Job" < <(cat "$c"; printf '%s\n' '---' 'apiVersion: apps/v1' 'kind: DaemonSet' \
    'metadata: {name: moe-worker, namespace: moe}' 'spec:' '  selector: {matchLabels: {app: w}}' '  template:' '    metadata: {labels: {app: w}}' \
    '    spec: {containers: [{name: w, image: x, command: [/usr/local/bin/moe-worker]}]}')
fi
ha="ha"
if [ -s "$tmp/$ha.yaml" ]; then
  echo "== broken $ha renders (each must be rejected)"
  h="$tmp/$ha.yaml"
  # shellcheck disable=SC2016
  pod_name='$(POD_NAME)'
  # the controllers: a leader and a standby on etcd, ready = leading
  reject $ha "one controller" "Deployment/moe-controller has 1 replica(s), not 2 or more" < <(in_kind $ha Deployment 's/^  replicas: 2$/  replicas: 1/')
  reject $ha "the controllers back on SQLite" "2 replicas of a controller on the embedded SQLite store" < <(sed 's#- --store=etcd://.*#- --state-dir=/var/lib/moe#' "$h")
  reject $ha "a misspelt --store" "--store=etc://" < <(sed 's#- --store=etcd://#- --store=etc://#' "$h")
  reject $ha "readiness that a standby passes" "with a readinessProbe that is not GET /readyz" < <(in_kind $ha Deployment 's#path: /readyz#path: /healthz#')
  reject $ha "the base's startup probe on /readyz" "with startupProbe GET /readyz: a standby is never ready" < <(perl0 $ha 's#(startupProbe:\n\s*failureThreshold: 60\n\s*httpGet:\n\s*path: )/healthz#${1}/readyz#')
  reject $ha "leader and standby on one node" "Deployment/moe-controller without a required pod anti-affinity" < <(in_kind $ha Deployment 's#topologyKey: kubernetes.io/hostname#topologyKey: topology.kubernetes.io/zone#')
  reject $ha "a lease etcd cannot grant" "--leader-lease-seconds=1: expected 2 to 60" < <(sed 's/--leader-lease-seconds=3/--leader-lease-seconds=1/' "$h")
  reject $ha "a wildcard advertised" "--advertise-address=0.0.0.0:50051: a wildcard" < <(sed "s/--advertise-address=$pod_ip:50051/--advertise-address=0.0.0.0:50051/" "$h")
  # the controllers' --store against the members
  reject $ha "--store names a member that is not" "moe-etcd-3 is no pod of StatefulSet/moe-etcd" < <(sed 's#moe-etcd-2.moe-etcd:2379/moe#moe-etcd-3.moe-etcd:2379/moe#' "$h")
  reject $ha "--store names 2 of the 3 members" "--store names 2 of the 3 members of StatefulSet/moe-etcd" < <(sed 's#,moe-etcd-2.moe-etcd:2379/moe#/moe#' "$h")
  reject $ha "--store on the peer port" "members serve clients on 2379" < <(sed 's#--store=etcd://moe-etcd-0.moe-etcd:2379,#--store=etcd://moe-etcd-0.moe-etcd:2380,#' "$h")
  reject $ha "--store on a misspelt Service" "is none of the rendered etcd's members" < <(sed 's#--store=etcd://moe-etcd-0.moe-etcd:2379,#--store=etcd://moe-etcd-0.moe-ectd:2379,#' "$h")
  reject $ha "controllers not admitted to etcd" "no NetworkPolicy admits TCP 2379 (etcd's client port) from Deployment/moe-controller's pods" < <(perl0 $ha 's#(app.kubernetes.io/name: )moe-controller(\n\s+ports:\n\s+- port: 2379\n)#${1}moectl$2#')
  # the members
  reject $ha "one etcd member" "StatefulSet/moe-etcd has 1 member(s), not 3 or more" < <(in_kind $ha StatefulSet 's/^  replicas: 3$/  replicas: 1/')
  reject $ha "four etcd members" "4 etcd members: an even count" < <(in_kind $ha StatefulSet 's/^  replicas: 3$/  replicas: 4/')
  reject $ha "etcd without --max-txn-ops" "--max-txn-ops unset, not 10000 or more" < <(sed '/- --max-txn-ops=/d' "$h")
  reject $ha "etcd's default --max-txn-ops" "--max-txn-ops 128, not 10000 or more" < <(sed 's/--max-txn-ops=10000/--max-txn-ops=128/' "$h")
  reject $ha "etcd's default --max-request-bytes" "--max-request-bytes 1572864, not 33554432 or more" < <(sed 's/--max-request-bytes=33554432/--max-request-bytes=1572864/' "$h")
  reject $ha "etcd never compacted" "no --auto-compaction-retention" < <(sed '/- --auto-compaction-retention=/d' "$h")
  reject $ha "members started in order" "podManagementPolicy is not Parallel" < <(sed 's/podManagementPolicy: Parallel/podManagementPolicy: OrderedReady/' "$h")
  reject $ha "members' names only once ready" "publishNotReadyAddresses is not true" < <(sed '/publishNotReadyAddresses: true/d' "$h")
  reject $ha "three members of one name" "each member needs its own name" < <(sed "s/--name=$pod_name/--name=moe-etcd/" "$h")
  reject $ha "a member left out of --initial-cluster" "--initial-cluster names moe-etcd-0, moe-etcd-1, not the 3 pods" < <(sed 's#,moe-etcd-2=http://moe-etcd-2.moe-etcd:2380##' "$h")
  reject $ha "a peer URL --initial-cluster does not have" "etcd refuses to start on the mismatch" < <(sed "s#--initial-advertise-peer-urls=http://$pod_name.moe-etcd:2380#--initial-advertise-peer-urls=http://$pod_name.moe-etcd:2390#" "$h")
  reject $ha "etcd on 0.0.0.0" "--listen-client-urls=0.0.0.0:2379 binds 0.0.0.0" < <(sed "s#--listen-client-urls=http://$pod_ip:2379#--listen-client-urls=http://0.0.0.0:2379#" "$h")
  reject $ha "members not admitted to each other" "no NetworkPolicy admits TCP 2380 (the peer port) between its members" < <(in_kind $ha NetworkPolicy 's/port: 2380$/port: 2381/')
  reject $ha "a budget below the quorum" "keeps 1 of 3 etcd members available, below the quorum of 2" < <(in_kind $ha PodDisruptionBudget 's/minAvailable: 2$/minAvailable: 1/')
  reject $ha "no budget for the members" "StatefulSet/moe-etcd: no PodDisruptionBudget selects its pods" < <(in_kind $ha PodDisruptionBudget 's/name: moe-etcd$/name: moe-etcd-x/')
  reject $ha "members on one node" "StatefulSet/moe-etcd without a required pod anti-affinity" < <(in_kind $ha StatefulSet 's#topologyKey: kubernetes.io/hostname#topologyKey: topology.kubernetes.io/zone#')
  reject $ha "a member's volume misspelt" "container etcd: volumeMount data has no volume" < <(in_kind $ha StatefulSet 's/^      name: data$/      name: etcd-data/')
fi
[ "$nmut" = 0 ] || echo "   $nbad of $nmut broken renders rejected"
[ "$failed" = 0 ] || exit 1
variants=$(find "$tmp" -maxdepth 1 -name 'ha-*.yaml' | wc -l)
echo "k8s manifests: ${#overlays[@]} overlays render and validate$([ "$variants" = 0 ] || echo " (and $variants variants of ha)")"
