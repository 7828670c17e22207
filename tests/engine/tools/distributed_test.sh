#!/usr/bin/env bash
# Distributed training over Gloo with real processes (moe-train --nproc):
#  1. equivalence: for the same global batch and seed, W=2 (EP2) and W=4 (DP2 x EP2) give the same
#     per-step losses as W=1 for 20 steps, within 1e-5 relative; the gradient reduction overlapped
#     with the backward in small spans equals one reduction after it, bitwise;
#  2. sharded checkpoints: W=2 stopped at step 6 and resumed equals W=2 straight; the same checkpoint
#     resumes at W=4 (DP2 x EP2) within 1e-5; a checkpoint of another model shape is refused clearly;
#  3. failures: a rank killed with SIGKILL, or hung with SIGSTOP, makes the others fail within the job's
#     timeout with an error naming the step and the collective.
set -euo pipefail
bin=${MOE_BIN:?}/moe-train
work=$(mktemp -d /tmp/moe-dist-test.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill -9 "$p" 2>/dev/null || true; done; pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

job() {  # job <world> <ep> <file> [extra sed]
  sed "s/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 4/;
       s/world_size: 2, expert_parallel: 2/world_size: $1, expert_parallel: $2, timeout_seconds: 8/;
       ${4:-}" examples/tiny.yaml >"$3"
}

# 1. Equivalence.
job 1 1 "$work/w1.yaml"; job 2 2 "$work/w2.yaml"; job 4 2 "$work/w4.yaml"
"$bin" --config "$work/w1.yaml" --steps 20 --metrics-out "$work/w1.jsonl" 2>"$work/w1.log" || { cat "$work/w1.log"; fail "W=1"; }
"$bin" --config "$work/w2.yaml" --nproc 2 --steps 20 --metrics-out "$work/w2.jsonl" 2>"$work/w2.log" || { cat "$work/w2.log"; fail "W=2"; }
"$bin" --config "$work/w4.yaml" --nproc 4 --steps 20 --metrics-out "$work/w4.jsonl" 2>"$work/w4.log" || { cat "$work/w4.log"; fail "W=4"; }
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
runs = {n: [json.loads(l) for l in open(f"{w}/w{n}.jsonl")] for n in (1, 2, 4)}
for n in (1, 2, 4):
    assert [r["step"] for r in runs[n]] == list(range(1, 21)), f"W={n} steps"
worst = 0
for n in (2, 4):
    for a, b in zip(runs[1], runs[n]):
        rel = abs(a["loss"] - b["loss"]) / abs(a["loss"])
        worst = max(worst, rel)
        assert rel <= 1e-5, f"W={n} step {a['step']}: loss {b['loss']} vs {a['loss']} (rel {rel:.2e})"
for r in runs[2]:
    assert r["alltoall_seconds"] > 0 and r["compute_seconds"] > 0, "a2a/compute split missing"
print(f"equivalence: W=2 (EP2) and W=4 (DP2xEP2) match W=1 over 20 steps; worst relative difference {worst:.1e}")
PY
grep -q "all-to-all: " "$work/w2.log" || fail "no all-to-all share in the log line"
# The gradient reduction overlapped with the backward in spans of 4 KB (dozens, most started by the
# backward) against one reduction after it (grad_bucket_mb 0): ZeRO's reduce-scatter sums each element
# over the ranks in rank order either way, so the losses are the same, bitwise.
job 4 2 "$work/w4o.yaml" "s/timeout_seconds: 8/timeout_seconds: 8, grad_bucket_mb: 0.004/"
job 4 2 "$work/w4n.yaml" "s/timeout_seconds: 8/timeout_seconds: 8, grad_bucket_mb: 0/"
"$bin" --config "$work/w4o.yaml" --nproc 4 --steps 8 --metrics-out "$work/w4o.jsonl" 2>"$work/w4o.log" || { cat "$work/w4o.log"; fail "W=4 overlapped"; }
"$bin" --config "$work/w4n.yaml" --nproc 4 --steps 8 --metrics-out "$work/w4n.jsonl" 2>"$work/w4n.log" || { cat "$work/w4n.log"; fail "W=4 not overlapped"; }
grep -q "gradient reduction: [0-9]* spans" "$work/w4o.log" || { cat "$work/w4o.log"; fail "no span count in the overlapped run's log"; }
python3 - "$work/w4o.jsonl" "$work/w4n.jsonl" <<'PY'
import json, sys
a, b = ([r["loss"] for r in map(json.loads, open(f))] for f in sys.argv[1:3])
assert len(a) == len(b) == 8 and a == b, f"overlapped {a} vs {b}"
print("overlap: W=4 with the reduction in 4 KB spans during the backward equals one reduction after it, bitwise")
PY

# 2. Sharded checkpoints at W=2.
"$bin" --config "$work/w2.yaml" --nproc 2 --steps 12 --checkpoint-dir "$work/s" --checkpoint-interval 6 --metrics-out "$work/s.jsonl" 2>/dev/null || fail "W=2 straight"
ls "$work/s/step_00000006/shard_00000.bin" "$work/s/step_00000006/shard_00000.bin" "$work/s/step_00000006/shard_00001.bin" >/dev/null || fail "shards missing"
"$bin" --config "$work/w2.yaml" --nproc 2 --steps 6 --checkpoint-dir "$work/r" --metrics-out /dev/null 2>/dev/null || fail "W=2 first half"
"$bin" --config "$work/w2.yaml" --nproc 2 --steps 12 --checkpoint-dir "$work/r" --resume --metrics-out "$work/r.jsonl" 2>/dev/null || fail "W=2 resume"
python3 - "$work/s.jsonl" "$work/r.jsonl" <<'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(b) == list(range(7, 13)), sorted(b)
bad = [s for s in b if a[s] != b[s]]
assert not bad, f"resumed W=2 differs at steps {bad}"
print("sharded checkpoints: W=2 resumed from step 6 equals W=2 straight, bitwise")
PY
mkdir -p "$work/r4" && cp -r "$work/r/step_00000006" "$work/r4/"  # the first half's checkpoint only
"$bin" --config "$work/w4.yaml" --nproc 4 --steps 12 --checkpoint-dir "$work/r4" --resume --metrics-out "$work/r4.jsonl" 2>"$work/r4.log" ||
  { cat "$work/r4.log"; fail "resuming the W=2 checkpoint at W=4"; }
python3 - "$work/s.jsonl" "$work/r4.jsonl" <<'PY'
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(b) == list(range(7, 13)), sorted(b)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in b)
assert worst <= 1e-5, f"W=2 checkpoint resumed at W=4 differs: worst relative {worst:.2e}"
print(f"layouts: the W=2 checkpoint resumed at W=4 matches W=2 straight within {worst:.1e}")
PY
job 4 2 "$work/other.yaml" "s/preset: tiny}/preset: tiny, hidden_size: 64}/"
set +e
out=$("$bin" --config "$work/other.yaml" --nproc 4 --steps 12 --checkpoint-dir "$work/r" --resume 2>&1); rc=$?
set -e
[ $rc -ne 0 ] || fail "resuming a checkpoint of another model shape should fail"
grep -q "another model shape" <<<"$out" || fail "unclear model refusal: $out"

# 3. Failures. A long run; once it is training, rank 1 dies (or hangs); rank 0 must fail in time.
failure_case() {  # failure_case <signal> <expected text>
  local sig=$1 text=$2 log="$work/fail-$1.log"
  "$bin" --config "$work/w2.yaml" --nproc 2 --steps 100000 --metrics-out "$work/f.jsonl" >"$log" 2>&1 &
  local launcher=$!
  pids+=("$launcher")
  for _ in $(seq 1 300); do [ -s "$work/f.jsonl" ] && [ "$(wc -l <"$work/f.jsonl")" -ge 3 ] && break; sleep 0.1; done
  [ "$(wc -l <"$work/f.jsonl")" -ge 3 ] || { cat "$log"; fail "the run did not start"; }
  local victim
  victim=$(pgrep -f -- "--config $work/w2.yaml.*--rank 1 " | head -1)
  [ -n "$victim" ] || fail "rank 1 not found"
  local t0=$SECONDS killed_at
  killed_at=$(date +%s.%N)
  kill -"$sig" "$victim"
  set +e
  wait "$launcher"; local rc=$?
  set -e
  local took=$((SECONDS - t0))
  [ "$sig" = STOP ] && kill -9 "$victim" 2>/dev/null || true
  [ $rc -ne 0 ] || fail "the launcher succeeded although rank 1 got SIG$sig"
  grep -E "rank0\].*training failed: .*step [0-9]+" "$log" >/dev/null || { cat "$log"; fail "rank 0's error does not name the step"; }
  grep -E "rank0\].*training failed: .*(all_to_all|all_reduce|reduce_scatter|all_gather|barrier|broadcast|send|recv)" "$log" >/dev/null || { cat "$log"; fail "rank 0's error does not name the collective"; }
  grep -q "$text" "$log" || { cat "$log"; fail "expected '$text' after SIG$sig"; }
  # When rank 0 reported: its log line's clock time against the moment of the signal.
  local stamp rank0_after
  stamp=$(grep -E "^E[0-9]{4} [0-9:.]+ rank0\] training failed" "$log" | head -1 | awk '{print $2}')
  rank0_after=$(python3 -c "import sys,datetime as d; k=float(sys.argv[1]); t=d.datetime.fromtimestamp(k); h,m,s=sys.argv[2].split(':'); e=t.replace(hour=int(h),minute=int(m),second=0,microsecond=0).timestamp()+float(s); print(f'{e-k:.1f}')" "$killed_at" "$stamp")
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 8 + 5 else 1)" "$rank0_after" || fail "rank 0 took ${rank0_after}s to fail (timeout 8 s)"
  [ $took -le 30 ] || fail "the launcher took ${took}s to end the job"
  echo "failure: SIG$sig on rank 1 -> rank 0 failed after ${rank0_after}s, job ended after ${took}s: $(grep -o 'training failed: .*' "$log" | head -1 | cut -c1-150)"
  rm -f "$work/f.jsonl"
}
failure_case KILL "a peer failed"
failure_case STOP "timed out after 8 s"
echo "distributed: equivalence, sharded resume and failure handling hold"
