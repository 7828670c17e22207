#!/usr/bin/env bash
# The demo: trains the embedded default job (examples/tiny.yaml) on this machine's CPU with live
# progress, and ends with a summary.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
ckpt=$(mktemp -d /tmp/moe-demo-ckpt.XXXXXX)
trap 'rm -rf "$ckpt"' EXIT
echo "== moe demo: training the tiny DeepSeek-V3-style MoE on the fortunes corpus (CPU) =="
"$build/bin/moe-train" --config examples/tiny.yaml --checkpoint-dir "$ckpt" --metrics-out "$ckpt/metrics.jsonl"
