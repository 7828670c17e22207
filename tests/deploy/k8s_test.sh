#!/usr/bin/env bash
# The Kubernetes manifests: every overlay under deploy/k8s/overlays renders with `kubectl kustomize`, and
# every rendered object validates against the Kubernetes OpenAPI schemas bundled in the npm packages
# kubernetes-models / @kubernetes-models/prometheus-operator (offline once installed) or, for the NVIDIA
# DRA driver's ComputeDomain that they lack, against validate_k8s.mjs's own schema; plus cross-object
# checks (selectors, referenced ConfigMaps/Secrets/PVCs/ServiceAccounts, resources, probe ports, DRA
# claims against the rendered ComputeDomains, RDMA and IPC_LOCK, Multus annotations, PodMonitors): see
# validate_k8s.mjs. An overlay may also have to CONTAIN things (requires_of below: the GPU overlay's
# ComputeDomain claimed by the workers, its RDMA setup, a PodMonitor with honorLabels). Then the
# validator is shown broken renders of the GPU overlay and must reject each one (a validator that
# passes everything would pass the overlays too). The pinned packages are installed on first use into
# $MOE_NPM_CACHE (default ~/.cache/moe-npm); that one step needs the npm registry.
#   tests/deploy/k8s_test.sh [OVERLAY_DIR...]     (default: every deploy/k8s/overlays/*)
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v kubectl >/dev/null || { echo "FAIL: kubectl is missing (it renders the kustomizations)" >&2; exit 1; }
command -v node >/dev/null || { echo "FAIL: node is missing (Node.js 20+ runs the validator)" >&2; exit 1; }

cache="${MOE_NPM_CACHE:-$HOME/.cache/moe-npm}"
pkgs=(kubernetes-models@5.1.0 @kubernetes-models/prometheus-operator@6.0.0 yaml@2.9.1)
stamp="$cache/.installed-$(printf '%s\n' "${pkgs[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  command -v npm >/dev/null || { echo "FAIL: npm is missing (to install ${pkgs[*]})" >&2; exit 1; }
  mkdir -p "$cache"
  echo "installing ${pkgs[*]} into $cache"
  # --engine-strict off: the packages declare node >= 22 but work on Node 20 (this test runs them on 20).
  npm install --prefix "$cache" --no-audit --no-fund --no-save --loglevel=error "${pkgs[@]}" >&2
  touch "$stamp"
fi
export MOE_K8S_NODE_MODULES="$cache/node_modules"

# What an overlay's render must contain, beyond being valid (validate_k8s.mjs --require), by directory name.
requires_of() {
  case "$(basename "$1")" in
    gb300-nvl72) echo "--require=compute-domain:DaemonSet/moe-worker --require=rdma:DaemonSet/moe-worker --require=podmonitor-honor-labels" ;;
  esac
}

overlays=("$@")
[ ${#overlays[@]} -gt 0 ] || overlays=(deploy/k8s/overlays/*/)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
for o in "${overlays[@]}"; do
  o=${o%/}
  echo "== $o"
  out="$tmp/$(basename "$o").yaml"
  if ! kubectl kustomize "$o" >"$out"; then echo "FAIL: $o does not render" >&2; failed=1; continue; fi
  # shellcheck disable=SC2046  # the --require words split on purpose
  node tests/deploy/validate_k8s.mjs $(requires_of "$o") "$out" || { echo "FAIL: $o" >&2; failed=1; }
done

# The validator against broken renders of the GPU overlay: each mutation below must change the render
# and make the validator fail with the message named. Run when the gb300-nvl72 overlay was rendered.
gpu="$tmp/gb300-nvl72.yaml"
if [ -s "$gpu" ]; then
  echo "== broken gb300-nvl72 renders (each must be rejected)"
  # drop_kind KIND: the render without its KIND documents.
  drop_kind() { awk -v k="$1" 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } $0 !~ ("(^|\n)kind: " k "(\n|$)")' "$gpu"; }
  nbad=0
  reject() {   # reject NAME EXPECTED-MESSAGE < mutated render
    local name=$1 want=$2 log="$tmp/mutant.log"
    cat >"$tmp/mutant.yaml"
    if cmp -s "$gpu" "$tmp/mutant.yaml"; then echo "FAIL: mutation '$name' changed nothing (the overlay changed: update it)" >&2; failed=1; return; fi
    # shellcheck disable=SC2046
    if node tests/deploy/validate_k8s.mjs $(requires_of gb300-nvl72) "$tmp/mutant.yaml" >"$log" 2>&1; then
      echo "FAIL: mutation '$name' passed the validator" >&2; failed=1
    elif ! grep -qF -- "$want" "$log"; then
      echo "FAIL: mutation '$name' failed, but without '$want':" >&2; cat "$log" >&2; failed=1
    else
      nbad=$((nbad + 1)); echo "   rejected: $name"
    fi
  }
  # (reject reads the mutant from a redirection, not a pipe: a pipe would run it in a subshell and lose
  # its verdict.)
  reject "pod claim names a misspelt template" "is neither the channel template of a rendered ComputeDomain" \
    < <(sed -E 's/(resourceClaimTemplateName: .*[^ ])$/\1-misspelt/' "$gpu")
  reject "misspelt resourceClaimTemplateName key" "unknown field resourceClaimTemplateNam" \
    < <(sed 's/resourceClaimTemplateName:/resourceClaimTemplateNam:/' "$gpu")
  reject "a container claims an undeclared claim" "is not among the pod's resourceClaims" \
    < <(sed '0,/- name: imex-channel$/s//- name: imex-chanel/' "$gpu")
  reject "no ComputeDomain" "the render has no ComputeDomain" < <(drop_kind ComputeDomain)
  reject "numNodes a string" "spec.numNodes must be integer" < <(sed -E 's/numNodes: ([0-9]+)/numNodes: "\1"/' "$gpu")
  reject "numNodes misspelt" "spec.numNode: unknown field" < <(sed 's/numNodes:/numNode:/' "$gpu")
  reject "RDMA without IPC_LOCK" "lacks IPC_LOCK" < <(sed 's/- IPC_LOCK/- NET_RAW/' "$gpu")
  reject "no Multus networks" "no k8s.v1.cni.cncf.io/networks annotation" < <(sed '/k8s.v1.cni.cncf.io\/networks/d' "$gpu")
  reject "PodMonitor without honorLabels" "lacks honorLabels: true" < <(sed 's/honorLabels: true/honorLabels: false/' "$gpu")
  reject "no PodMonitor" "the render has no PodMonitor" < <(drop_kind PodMonitor)
  # shellcheck disable=SC2016  # $(MOE_NODE) is literal text in the render
  reject "two workers with one --name" "the same --name=" < <(sed 's/--name=$(MOE_NODE)-gpu2/--name=$(MOE_NODE)-gpu1/' "$gpu")
  echo "   $nbad of 11 broken renders rejected"
fi
[ "$failed" = 0 ] || exit 1
echo "k8s manifests: ${#overlays[@]} overlays render and validate"
