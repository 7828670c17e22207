#!/usr/bin/env bash
# Builds the MoE Orchestrator image (deploy/docker/Dockerfile) for linux/amd64 and linux/arm64 (Grace:
# GB200/GB300 NVL72 trays) under one tag, with docker buildx. Prints what it will run, then runs it.
# Without --push the result stays in the builder's cache (a multi-platform image cannot be loaded into
# the local docker image store of the classic engine): the build is checked, nothing is published.
#   deploy/docker/build-multiarch.sh --tag REGISTRY/moe-orchestrator:VERSION [--push] [--platforms LIST]
#                                    [--builder NAME] [--dry-run] [-- EXTRA BUILDX ARGS...]
# e.g.  deploy/docker/build-multiarch.sh --tag registry.example.com/moe/moe-orchestrator:0.1.0 --push
#       deploy/docker/build-multiarch.sh --tag t --platforms linux/arm64 -- --build-arg CUDA_ARCHS="90;100;103"
# Needs docker with the buildx plugin, and a builder that can build both platforms: either one node per
# architecture (fast; docker buildx create --name moe --platform linux/amd64 ... then
# docker buildx create --append --name moe --platform linux/arm64 <an arm64 docker endpoint>), or one
# node with QEMU emulation for the other architecture (docker run --privileged --rm tonistiigi/binfmt
# --install arm64, or amd64 on an arm64 host), which works but compiles the CUDA kernels under emulation:
# expect hours rather than minutes. docs/deploy-kubernetes.md, "Build and push the image".
set -euo pipefail
cd "$(dirname "$0")/../.."

tag="" push=0 dry=0 builder="" platforms="linux/amd64,linux/arm64"
extra=()
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --tag=*) tag=${1#--tag=}; shift ;;
    --push) push=1; shift ;;
    --platforms) platforms=${2:?--platforms needs a value}; shift 2 ;;
    --platforms=*) platforms=${1#--platforms=}; shift ;;
    --builder) builder=${2:?--builder needs a value}; shift 2 ;;
    --builder=*) builder=${1#--builder=}; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "build-multiarch.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$tag" ] || { echo "build-multiarch.sh: --tag REGISTRY/NAME:VERSION is required" >&2; usage >&2; exit 2; }

cmd=(docker buildx build)
[ -z "$builder" ] || cmd+=(--builder "$builder")
cmd+=(--platform "$platforms" -f deploy/docker/Dockerfile -t "$tag")
if [ "$push" = 1 ]; then cmd+=(--push); fi
cmd+=("${extra[@]}" .)

echo "image:     $tag"
echo "platforms: $platforms (CUDA targets: amd64 90;100;103, arm64 100;103, unless --build-arg CUDA_ARCHS=...)"
if [ "$push" = 1 ]; then echo "push:      yes ($tag, with both platforms under it)"; else echo "push:      no (--push publishes; without it the image stays in the builder's cache)"; fi
printf 'command:  '; printf ' %q' "${cmd[@]}"; echo
[ "$dry" = 0 ] || exit 0

command -v docker >/dev/null || { echo "build-multiarch.sh: docker is not installed" >&2; exit 1; }
docker buildx version >/dev/null 2>&1 || { echo "build-multiarch.sh: docker buildx is missing (install the docker-buildx plugin)" >&2; exit 1; }
# The builder must offer every platform asked for (the default "docker" builder usually offers only the host's).
# `buildx inspect` prints one "Platforms:" line per node, "*" marking those a node was created with.
if ! avail=$(set -o pipefail; docker buildx inspect ${builder:+"$builder"} --bootstrap 2>/dev/null | sed -n 's/^Platforms: *//p' | tr '\n' ',' | tr -d ' *' | sed 's/,,*/,/g; s/,$//'); then
  echo "build-multiarch.sh: cannot inspect the buildx builder ${builder:-(current)}" >&2; exit 1
fi
missing=()
IFS=, read -ra want <<<"$platforms"
for p in "${want[@]}"; do
  case ",$avail," in *",$p,"*|*",$p/"*) ;; *) missing+=("$p") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-multiarch.sh: builder ${builder:-(current)} cannot build ${missing[*]} (it offers: ${avail:-nothing})." >&2
  echo "  Create one that can: docker buildx create --use --name moe (plus --append nodes or QEMU binfmt, above)." >&2
  exit 1
fi
exec "${cmd[@]}"
