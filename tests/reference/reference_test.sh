#!/usr/bin/env bash
# The engine against the independent PyTorch DeepSeek-V3 (tests/reference/README.md): a tiny MLA + MoE
# + MTP (D = 2) model with groups and the bias; logits, main and MTP losses, the balance loss, routing
# and every weight's gradient compared
#   - in float64 (relative difference <= 1e-9) and float32 (<= 1e-4), at initialisation;
#   - in float64 with YaRN applying;
#   - in float64 after 5 training steps of the engine (checkpoint, export, reload).
set -euo pipefail
build=${MOE_BUILD:-build}
py=/usr/bin/python3
"$py" -c 'import torch, numpy' 2>/dev/null || { echo "FAIL: /usr/bin/python3 lacks torch/numpy (scripts/install-deps.sh test installs python3-torch)" >&2; exit 1; }
work=$(mktemp -d /tmp/moe-reference.XXXXXX)
trap 'rm -rf "$work"' EXIT
run() {  # run NAME DTYPE [engine_dump args...]
  local name=$1 dtype=$2; shift 2
  "$build/tests/engine_dump" --out "$work/$name" --dtype "$dtype" "$@"
  echo "== $name ($dtype)"
  "$py" tests/reference/compare.py "$work/$name" --dtype "$([ "$dtype" = f64 ] && echo float64 || echo float32)"
}
run init_f64 f64
run init_f32 f32
run yarn_f64 f64 --yarn
run trained_f64 f64 --train-steps 5
echo "reference: all comparisons within tolerance"
