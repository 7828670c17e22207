#!/usr/bin/env bash
# The Kubernetes manifests: every overlay under deploy/k8s/overlays renders with `kubectl kustomize`, and
# every rendered object validates against the Kubernetes OpenAPI schemas bundled in the npm packages
# kubernetes-models / @kubernetes-models/prometheus-operator (offline once installed), plus cross-object
# checks (selectors, referenced ConfigMaps/Secrets/PVCs/ServiceAccounts, resources, probe ports): see
# validate_k8s.mjs. The pinned packages are installed on first use into $MOE_NPM_CACHE
# (default ~/.cache/moe-npm); that one step needs the npm registry.
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

overlays=("$@")
[ ${#overlays[@]} -gt 0 ] || overlays=(deploy/k8s/overlays/*/)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
for o in "${overlays[@]}"; do
  o=${o%/}
  echo "== $o"
  if ! kubectl kustomize "$o" >"$tmp/rendered.yaml"; then echo "FAIL: $o does not render" >&2; failed=1; continue; fi
  node tests/deploy/validate_k8s.mjs "$tmp/rendered.yaml" || { echo "FAIL: $o" >&2; failed=1; }
done
[ "$failed" = 0 ] || exit 1
echo "k8s manifests: ${#overlays[@]} overlays render and validate"
