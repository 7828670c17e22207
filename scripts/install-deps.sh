#!/usr/bin/env bash
# Installs the Debian packages a target needs, only those missing. Idempotent, quiet, and quick when
# everything is already there (one dpkg-query). Usage: scripts/install-deps.sh [build|test|demo|bench]
#
#   build  compilers' companions and the libraries the whole tree links against
#   test   build + the real programs the tests start (Prometheus/promtool, Slurm, munge, sqlite3, openssl:
#          the Slurm batch script's per-allocation CA) and Debian's CPU PyTorch (the independent
#          DeepSeek-V3 reference, tests/reference/)
#   demo   build + the corpus (Debian's fortunes)
#   bench  test + demo
set -euo pipefail
target=${1:-build}

build_pkgs=(cmake ninja-build ccache pkg-config g++ make python3
  libopenblas-openmp-dev libgrpc++-dev libssl-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libsqlite3-dev libgloo-dev libsentencepiece-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libspdlog-dev fortunes pmccabe clang-format
  libgoogle-perftools-dev  # tcmalloc, the controller's allocator (controller/CMakeLists.txt)
  python3-pip)  # pip download: the cuDNN frontend's and CUTLASS's headers (scripts/fetch-gpu-headers.sh)
fuzz_pkgs=(clang libclang-rt-14-dev)  # make fuzz: libFuzzer is clang's
test_pkgs=(sqlite3 prometheus slurm-wlm munge curl openssl python3-torch python3-numpy
  python3-grpcio python3-protobuf python3-yaml  # the Python gRPC clients of the trust tests (/usr/bin/python3)
  python3-venv  # the deploy validators' pinned PyPI environments (scripts/pyvenv.sh)
  etcd-server  # the controller's etcd store and its standby (etcd_store_test, bench/failover.py)
  clang)  # tests/sanitizers/thread_safety_test.sh: clang's -Wthread-safety on the annotated locks

case "$target" in
  build|demo) pkgs=("${build_pkgs[@]}") ;;
  test|bench) pkgs=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  fuzz) pkgs=("${build_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
  *) echo "install-deps.sh: unknown target '$target' (expected build, test, demo, bench or fuzz)" >&2; exit 2 ;;
esac

missing=()
# dpkg-query prints "install ok installed" per installed package; anything else is missing.
status=$(dpkg-query -W -f='${Package} ${Status}\n' "${pkgs[@]}" 2>/dev/null || true)
for p in "${pkgs[@]}"; do
  grep -q "^$p install ok installed$" <<<"$status" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists only when they are missing or older than a day.
lists=/var/lib/apt/lists
if [ -z "$(find "$lists" -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  "${sudo_cmd[@]}" apt-get update -qq >/dev/null
fi
# Services from these packages (munge, slurmctld, prometheus) must not start on install: the tests
# start their own instances on loopback. policy-rc.d tells invoke-rc.d to leave them alone.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
  "${sudo_cmd[@]}" chmod +x "$policy"; created_policy=1
fi
trap '[ $created_policy = 1 ] && "${sudo_cmd[@]}" rm -f "$policy"' EXIT
if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/moe-install-deps.log 2>&1; then
  echo "install-deps: apt-get install failed; last lines of /tmp/moe-install-deps.log:" >&2
  tail -20 /tmp/moe-install-deps.log >&2
  exit 1
fi
echo "install-deps: done"
