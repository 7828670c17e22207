#!/usr/bin/env bash
# moe-train from the outside: flags and job files that are wrong get clear errors naming the field
# and a usage exit code (2); a short run on the fortunes corpus writes every metrics key; stopping at
# a step and resuming gives the same losses as one straight run, bitwise.
set -euo pipefail
bin=${MOE_BIN:?}/moe-train
work=$(mktemp -d /tmp/moe-train-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_error() {  # expect_error <exit code> <text> <args...>
  local code=$1 text=$2; shift 2
  set +e; out=$("$bin" "$@" 2>&1); rc=$?; set -e
  [ "$rc" = "$code" ] || fail "exit $rc (wanted $code) for: $* -> $out"
  grep -qF -- "$text" <<<"$out" || fail "no '$text' in: $out"
}

expect_error 2 "--config: missing" --steps 3
expect_error 2 "unknown flag --stpes" --config examples/tiny.yaml --stpes 3
expect_error 2 "--steps: expected an integer, got 'many'" --config examples/tiny.yaml --steps many
expect_error 1 "cannot read job file" --config "$work/nope.yaml"
sed 's/top_k: 2/top_k: 2/; s/{preset: tiny}/{preset: tiny, moe: {top_k: 12}}/' examples/tiny.yaml >"$work/bad.yaml"
expect_error 2 "spec.model.moe.top_k: 12 exceeds num_experts = 8" --config "$work/bad.yaml"
sed 's/{preset: tiny}/{preset: tiny, hiden_size: 64}/' examples/tiny.yaml >"$work/typo.yaml"
expect_error 2 "spec.model.hiden_size: unknown field (did you mean 'hidden_size'?)" --config "$work/typo.yaml"
sed "s#path: data/fortunes#path: $work/missing#" examples/tiny.yaml >"$work/nodata.yaml"
# A missing dataset cannot run as specified: exit 4, permanent (a restart would fail the same way).
expect_error 4 "make data" --config "$work/nodata.yaml" --steps 1
"$bin" --help | grep -q -- "--checkpoint-interval" || fail "--help lists no flags"
expect_error 2 "--precision: 'fp16' is not fp32, bf16 or fp8" --config examples/tiny.yaml --precision fp16
expect_error 2 "--device: 'tpu:0' is not cpu, cuda or cuda:N" --config examples/tiny.yaml --device tpu:0
if ! command -v nvidia-smi >/dev/null; then
  # No GPU here: a CUDA device is a job that cannot run on this machine (exit 4), said plainly.
  # (a build without CUDA kernels says that instead: the same exit code, the same "cannot run here")
  probe=$("$bin" --config examples/tiny.yaml --nproc 1 --device cuda:0 --steps 1 2>&1 || true)
  if grep -q "has no CUDA kernels" <<<"$probe"; then
    expect_error 4 "device cuda:0: this build of the engine has no CUDA kernels" --config examples/tiny.yaml --nproc 1 --device cuda:0 --steps 1
  else
    expect_error 4 "device cuda:0: this machine has no usable CUDA device" --config examples/tiny.yaml --nproc 1 --device cuda:0 --steps 1
  fi
fi

# A short real run: seq 64 keeps it quick.
sed 's/seq_length: 256/seq_length: 64/' examples/tiny.yaml >"$work/job.yaml"
# Mixed precision on the CPU (bf16 activations, fp32 master weights) trains and says so.
"$bin" --config "$work/job.yaml" --steps 3 --precision bf16 2>"$work/bf16.log" || { cat "$work/bf16.log"; fail "bf16 run failed"; }
grep -q "| cpu, bf16" "$work/bf16.log" || fail "the bf16 run's summary does not name its precision: $(tail -1 "$work/bf16.log")"
"$bin" --config "$work/job.yaml" --steps 12 --checkpoint-dir "$work/a" --checkpoint-interval 6 --metrics-out "$work/a.jsonl" 2>"$work/a.log" \
  || { cat "$work/a.log"; fail "straight run failed"; }
grep -q "iteration       12/      12" "$work/a.log" || fail "no Megatron-style iteration line"
grep -q "summary: steps 1-12" "$work/a.log" || fail "no summary line"
"$bin" --config "$work/job.yaml" --steps 6 --checkpoint-dir "$work/b" --metrics-out "$work/b1.jsonl" 2>/dev/null || fail "first half failed"
"$bin" --config "$work/job.yaml" --steps 12 --checkpoint-dir "$work/b" --resume --metrics-out "$work/b2.jsonl" 2>"$work/b2.log" || fail "resume failed"
grep -q "resumed from" "$work/b2.log" || fail "the resumed run does not say where it resumed from"
python3 - "$work/a.jsonl" "$work/b2.jsonl" <<'PY'
import json, sys
need = {"step", "loss", "lr", "grad_norm", "step_seconds", "tokens_per_second", "tflops_per_device", "mfu",
        "expert_load_imbalance", "alltoall_seconds", "compute_seconds"}
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
missing = need - set(a[-1])
assert not missing, f"metrics keys missing: {missing}"
assert [r["step"] for r in a] == list(range(1, 13)), "straight run steps"
assert [r["step"] for r in b] == list(range(7, 13)), f"resumed steps {[r['step'] for r in b]}"
for r in b:
    s = a[r["step"] - 1]
    assert r["loss"] == s["loss"], f"step {r['step']}: {r['loss']} != {s['loss']}"
    assert r["grad_norm"] == s["grad_norm"], f"step {r['step']} grad norm differs"
assert 0 < a[-1]["mfu"] < 1.5 and a[-1]["tflops_per_device"] > 0
PY
# Damage the newest checkpoint: the next resume falls back to the previous one and says so.
printf 'garbage' | dd of="$work/a/step_00000012/shard_00000.bin" bs=1 seek=4000 conv=notrunc status=none
"$bin" --config "$work/job.yaml" --steps 12 --checkpoint-dir "$work/a" --resume 2>"$work/c.log" || { cat "$work/c.log"; fail "resume after damage failed"; }
grep -q "is damaged and is skipped" "$work/c.log" || fail "damage not reported: $(cat "$work/c.log")"
grep -q "resumed from .*step_00000006" "$work/c.log" || fail "did not fall back to step 6"
# SIGTERM during initialisation (here: rank 0 of 2 waiting for a peer that never comes) stops the rank
# at once with the "stopped" code, not after the rendezvous timeout.
mkdir -p "$work/rdzv"
"$bin" --config examples/tiny.yaml --rank 0 --world-size 2 --rendezvous "file://$work/rdzv" >"$work/init.log" 2>&1 &
pid=$!
sleep 1.5
t0=$(date +%s.%N)
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
took=$(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$t0")
[ "$rc" = 3 ] || fail "SIGTERM during initialisation: exit $rc, not 3 (stopped): $(tail -3 "$work/init.log")"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 2 else 1)" "$took" || fail "SIGTERM during initialisation took $took s"
# SIGTERM in a step that does not end in time (here: 60 s injected into every step) stops the rank
# within 2 s of its deadline (max(1.5 s, 2 x the longest of the last four steps)) all the same, with the "stopped" code.
"$bin" --config "$work/job.yaml" --steps 5 --inject-step-delay 60 >"$work/long.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -q "model FLOPs per step" "$work/long.log" && break; sleep 0.1; done
sleep 1.5  # in step 1 now
t0=$(date +%s.%N)
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
t1=$(date +%s.%N)
long=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$t1")
[ "$rc" = 3 ] || fail "SIGTERM in a long step: exit $rc, not 3: $(tail -3 "$work/long.log")"
grep -q "stopping now: the step did not end within" "$work/long.log" || fail "no watchdog message: $(tail -3 "$work/long.log")"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 2 else 1)" "$long" || fail "SIGTERM in a long step took $long s"
# Out of memory at initialisation (a model far too large for a 6 GB address space) is a permanent
# failure (exit 4: a restart would hit it again), said as such, not an abort.
cat >"$work/big.yaml" <<'YAML'
apiVersion: moe/v1
kind: TrainingJob
metadata: {name: big}
spec:
  model: {preset: tiny, hidden_size: 4096, dense_ffn_hidden: 262144}
  data: {source: synthetic, seq_length: 16, micro_batch_size: 1, global_batch_size: 1}
  training: {steps: 2}
YAML
set +e; (ulimit -v 6000000; exec "$bin" --config "$work/big.yaml") >"$work/oom.log" 2>&1; rc=$?; set -e
[ "$rc" = 4 ] && grep -q "FAILED_PRECONDITION: out of memory at initialisation" "$work/oom.log" ||
  fail "out of memory at initialisation: exit $rc, $(tail -2 "$work/oom.log")"
echo "moe-train CLI: errors, metrics, resume and fallback hold; SIGTERM in initialisation: exit 3 in $took s; in a long step: $long s"
