#!/usr/bin/env bash
# Security and durability, second pass (docs/operations.md, "Paths, ownership and fencing"), each a
# real attack on loopback:
#   1. paths: a NUL in checkpoint.dir or data.path is refused at submit and by the rank; a worker
#      without roots refuses /etc/...; a data path equal to its root is refused (its .bin is a sibling);
#      "x/../shared", a finished job's directory and a link to it the controller can see are refused
#      at submit, a link it cannot see (made after the submit) by the rank (its owner marker); a
#      symbolic link swapped in after the rank opened its directory does not redirect a save;
#   2. one controller per state: deleting every file in the state directory does not let a second
#      controller start; a controller of a lower epoch is refused by the workers;
#   3. fencing: a rank whose worker was stopped (SIGSTOP) while its job moved on commits and deletes
#      nothing once it runs again;
#   4. memory at placement: a job too big for any worker, submitted before any registered, never
#      starts and says why;
#   5. bounds: hostile registrations are refused or bounded, and ListWorkers still answers, in pages;
#   6. moectl logs of rank output with ESC, OSC and C1 sequences prints them escaped (--raw: as they
#      are); a line over the log limit is cut with a marker.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c 'import grpc, google.protobuf' 2>/dev/null ||
  fail "/usr/bin/python3 lacks grpc or protobuf (scripts/install-deps.sh test installs python3-grpcio)"
command -v sqlite3 >/dev/null || fail "sqlite3 is missing (scripts/install-deps.sh test installs it)"
export MOE_SOURCE_DIR=${MOE_SOURCE_DIR:-$PWD} BIN
SRC=$MOE_SOURCE_DIR
start_controller --lease-seconds 3 --restart-backoff-seconds 1
start_worker w0 r0 n0
start_worker w1 r0 n1
wait_workers 2
msg_of() { job_field "$1" "d.get('message','')"; }
# job <name> <steps> <interval> [ckpt dir] [data path]: a one-rank job
job() {
  make_job "$WORK/$1.yaml" "$1" "$2" "$3" 1 1
  [ -n "${4:-}" ] && sed -i "s#dir: $WORK/ckpt-$1#dir: $4#" "$WORK/$1.yaml"
  [ -n "${5:-}" ] && sed -i "s#path: data/fortunes#path: $5#" "$WORK/$1.yaml"
  echo "$WORK/$1.yaml"
}

# 1a. A NUL (or any control character) in a path: refused at submit, naming the field.
$PY - "$MOE_CONTROLLER" <<'PY' || fail "NUL paths (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
p = g.pb()
ch = g.channel(sys.argv[1])
for field, spec in [("spec.checkpoint.dir", dict(checkpoint=p.job.CheckpointSpec(dir="/etc/moe-evil\0/../../tmp/x"))),
                    ("spec.data.path", dict(data=p.job.DataSpec(path="/etc/passwd\0/../data/fortunes")))]:
    job = p.job.TrainingJob(api_version="moe/v1", kind="TrainingJob", metadata=p.job.Metadata(name="nul"),
                            spec=p.job.JobSpec(model=p.job.ModelSpec(preset="tiny"), **spec))
    try:
        g.unary(ch, "/moe.v1.JobService/SubmitJob", p.js.SubmitJobRequest(job=job), p.job.Job)
        raise SystemExit(f"a NUL in {field} was accepted")
    except g.grpc.RpcError as e:
        assert e.code().name == "INVALID_ARGUMENT" and field in e.details() and "0x00" in e.details(), e.details()
        print(f"NUL in {field}: {e.details()}")
PY
# ... and by the rank itself (a spec that reached it another way).
printf '{"apiVersion":"moe/v1","kind":"TrainingJob","metadata":{"name":"nul"},"spec":{"model":{"preset":"tiny"},"data":{"source":"synthetic"},"checkpoint":{"dir":"%s/a\\u0000/../b"},"training":{"steps":1}}}' "$WORK" >"$WORK/nul.json"
set +e
out=$("$BIN/moe-train" --config "$WORK/nul.json" --checkpoint-root "$WORK" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "spec.checkpoint.dir: a control character" <<<"$out" || fail "the rank took a NUL path (rc $rc): $out"
[ ! -e "$WORK/a" ] || fail "the rank wrote below the NUL"
echo "the rank refuses a NUL path: rc $rc"

# 1b. A worker started without roots confines jobs to its runtime directory: /etc is refused.
"$BIN/moectl" drain w0 >/dev/null && "$BIN/moectl" drain w1 >/dev/null
"$BIN/moe-worker" --controller "$MOE_CONTROLLER" --name bare --rack r0 --node bare --threads 1 --slots 1 \
    --runtime-dir "$WORK/rt-bare" >"$WORK/worker-bare.log" 2>&1 &
PIDS+=($!)
wait_workers 1
evil=/etc/moe-evil-$$
set +e
out=$("$BIN/moectl" submit -f "$(job etc 5 0 "$evil")" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "spec.checkpoint.dir: $evil is outside" <<<"$out" || fail "/etc accepted at submit: $out"
echo "refused at submit (no live worker allows it): $out"
# A worker that allows anything (said loudly in its log) makes the controller let it through; the
# rootless worker that gets it refuses it.
start_worker open r0 open --data-root / --checkpoint-root /
wait_workers 2
grep -q "checkpoint-root /: jobs may read or write anywhere" "$WORK/worker-open.log" || fail "no warning for --checkpoint-root /"
"$BIN/moectl" drain open >/dev/null
id=$("$BIN/moectl" submit -f "$(job etc 5 0 "$evil")")
wait_state "$id" FAILED 60
grep -q "spec.checkpoint.dir: $evil is outside this worker's checkpoint roots ($WORK/rt-bare/checkpoints" <<<"$(msg_of "$id")" ||
  fail "no roots, /etc: $(msg_of "$id")"
[ ! -e "$evil" ] || fail "$evil was written"
grep -q "checkpoints below $WORK/rt-bare/checkpoints" "$WORK/worker-bare.log" || fail "the default roots are not logged"
echo "worker without roots: $(msg_of "$id")"
# 1c. data.path equal to a data root: the dataset's files (R.bin) would lie beside the root.
mkdir -p "$WORK/dr"
"$BIN/moectl" drain bare >/dev/null
start_worker dr r0 dr --data-root "$WORK/dr" --checkpoint-root "$WORK"
wait_workers 1
id=$("$BIN/moectl" submit -f "$(job root 5 0 "" "$WORK/dr")")
wait_state "$id" FAILED 60
grep -q "spec.data.path: $WORK/dr.bin is outside this worker's data roots" <<<"$(msg_of "$id")" || fail "R as data path: $(msg_of "$id")"
echo "data path equal to its root: $(msg_of "$id")"
"$BIN/moectl" drain dr >/dev/null
"$BIN/moectl" undrain w0 >/dev/null

# 1d. One checkpoint directory per job for its whole life.
mkdir -p "$WORK/c"
a=$("$BIN/moectl" submit -f "$(job owner 4 2 "$WORK/c/shared")")
wait_state "$a" SUCCEEDED 120
grep -q "\"job\": \"$a\"" "$WORK/c/shared/.moe-owner.json" || fail "no owner marker: $(cat "$WORK/c/shared/.moe-owner.json")"
set +e
out=$("$BIN/moectl" submit -f "$(job other 4 2 "$WORK/c/x/../shared")" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "finished job $a" <<<"$out" || fail "x/../shared of a finished job was accepted: $out"
echo "x/../shared refused at submit: $out"
ln -s shared "$WORK/c/link"  # a link the controller can see: resolved, refused at submit
set +e
out=$("$BIN/moectl" submit -f "$(job seen 4 2 "$WORK/c/link")" 2>&1); rc=$?
set -e
[ $rc -ne 0 ] && grep -q "finished job $a" <<<"$out" || fail "a visible link to a finished job's directory was accepted: $out"
echo "visible link refused at submit: $out"
# Links the controller cannot see (another mount of a shared file system): made here after the
# submit, before placement (w0 drained meanwhile), so only the rank can catch them.
"$BIN/moectl" drain w0 >/dev/null
id=$("$BIN/moectl" submit -f "$(job linked 4 2 "$WORK/c/later")")
ln -s shared "$WORK/c/later"  # stays below the root: the rank follows it and finds the owner's marker
"$BIN/moectl" undrain w0 >/dev/null
wait_state "$id" FAILED 60
grep -q "belongs to job $a" <<<"$(msg_of "$id")" || fail "a symlink to another job's directory: $(msg_of "$id")"
echo "symbolic link to another job's directory refused by the rank: $(msg_of "$id")"
"$BIN/moectl" drain w0 >/dev/null
id=$("$BIN/moectl" submit -f "$(job abslinked 4 2 "$WORK/c/abslater")")
ln -s "$WORK/c/shared" "$WORK/c/abslater"  # an absolute link is never followed beneath a root
"$BIN/moectl" undrain w0 >/dev/null
wait_state "$id" FAILED 60
grep -q "leaves the root" <<<"$(msg_of "$id")" || fail "an absolute symlink: $(msg_of "$id")"
[ "$(ls "$WORK/c/shared" | grep -c '^step_')" = 2 ] || fail "the refused job touched the owner's checkpoints"

# 1e. A symbolic link swapped in after the rank opened its directory does not redirect its saves.
mkdir -p "$WORK/sw" "$WORK/evil"
"$BIN/moe-train" --config "$(job swap 40 2 "$WORK/sw/job")" --checkpoint-root "$WORK/sw" --data-root "$SRC" --threads 1 \
    --inject-step-delay 0.15 --job-id swap-1 --job-name swap --attempt 1 >"$WORK/swap.log" 2>&1 &
tp=$!
for _ in $(seq 1 300); do [ -d "$WORK/sw/job/step_00000002" ] && break; sleep 0.1; done
[ -d "$WORK/sw/job/step_00000002" ] || fail "no first checkpoint: $(tail -3 "$WORK/swap.log")"
mv "$WORK/sw/job" "$WORK/sw/moved" && ln -s "$WORK/evil" "$WORK/sw/job"
wait $tp || fail "the run with a swapped directory failed: $(tail -3 "$WORK/swap.log")"
[ -z "$(ls -A "$WORK/evil")" ] || fail "a save went through the swapped-in link: $(ls "$WORK/evil")"
[ -d "$WORK/sw/moved/step_00000040" ] || fail "the saves did not land in the directory opened: $(ls "$WORK/sw/moved")"
echo "swapped-in link: the saves stayed in the directory the rank opened ($(ls "$WORK/sw/moved" | grep -c '^step_') checkpoints)"

# 3. Fencing: w0 stops (SIGSTOP) while its rank trains; the job moves to w1 (attempt 2); when w0 and
#    its rank run again, the stale rank commits, prunes and records nothing.
"$BIN/moectl" undrain w1 >/dev/null
make_job "$WORK/fence.yaml" fence 60 2 1 1
sed -i "s#interval_steps: 2}#interval_steps: 2, keep_last: 3}#" "$WORK/fence.yaml"
"$BIN/moectl" drain w1 >/dev/null
id=$("$BIN/moectl" submit -f "$WORK/fence.yaml")
wait_state "$id" RUNNING 60
for _ in $(seq 1 300); do ls "$WORK/ckpt-fence" 2>/dev/null | grep -q '^step_' && break; sleep 0.1; done
"$BIN/moectl" undrain w1 >/dev/null
kill -STOP "${WORKER_PID[w0]}"
for _ in $(seq 1 300); do [ "$(job_field "$id" 'd.get("attempt",0)')" = 2 ] && break; sleep 0.1; done
[ "$(job_field "$id" 'd.get("attempt",0)')" = 2 ] || fail "the job did not move off the stopped worker"
for _ in $(seq 1 300); do grep -q '"attempt": 2' "$WORK/ckpt-fence/.moe-owner.json" 2>/dev/null && break; sleep 0.1; done
# Attempt 2 has written a checkpoint of its own before the stale rank wakes (not a fixed wait).
for _ in $(seq 1 600); do
  grep -lsE '"writer": ?"[^"]*attempt 2' "$WORK"/ckpt-fence/step_*/MANIFEST.json >/dev/null 2>&1 && break; sleep 0.1
done
kill -CONT "${WORKER_PID[w0]}"
wait_state "$id" SUCCEEDED 180
$PY - "$WORK/ckpt-fence" <<'PY' || fail "fencing (above)"
import json, os, sys
d = sys.argv[1]
steps = {}
for n in sorted(os.listdir(d)):
    if n.startswith("step_") and len(n) == 13:
        steps[int(n[5:])] = json.load(open(os.path.join(d, n, "MANIFEST.json"))).get("writer", "")
assert steps and all("attempt 2" in w for w in steps.values()), f"checkpoints after the move: {steps}"
assert max(steps) == 60, f"the last checkpoint is {max(steps)}"
print(f"fencing: the kept checkpoints {sorted(steps)} are all attempt 2's")
PY
grep -rq "fenced" "$WORK"/rt-w0/logs/ || fail "the stale rank did not say it was fenced: $(tail -5 "$WORK"/rt-w0/logs/*/*.log)"
echo "stale rank: $(grep -rh 'fenced' "$WORK"/rt-w0/logs/ | head -1 | cut -c1-200)"

# 5. Bounds: a registration over the metadata bound is refused; many bulky ones still list, in pages.
WORKER_TOKEN="" $PY - "$MOE_CONTROLLER" <<'PY' || fail "registration bounds (above)"
import os, sys
sys.path.insert(0, os.path.join(os.environ["MOE_SOURCE_DIR"], "tests/integration"))
import moe_grpc as g
p = g.pb()
addr = sys.argv[1]
big = p.ws.Register(name="hostile", rack="r9", node="hostile", device="cpu", address="127.0.0.1",
                    data_roots=["/" + "d" * 1000 + str(i) for i in range(8)],
                    checkpoint_roots=["/" + "c" * 1000 + str(i) for i in range(8)])
w = g.FakeWorker(addr, "", "hostile", register=big)
assert w.wait_end(5) == "INVALID_ARGUMENT", w.status
print("oversized registration:", w.details)
import time
def bulky(i):
    reg = p.ws.Register(name=f"bulky{i:03d}", rack="r9", node=f"bulky{i:03d}", device="cpu", address="127.0.0.1",
                        data_roots=["/" + "d" * 900 + str(k) for k in range(3)], host_id="h" * 500)
    return g.FakeWorker(addr, "", reg.name, register=reg)
fakes = {i: bulky(i) for i in range(300)}
# Until each is registered (a loaded machine's registration gate may refuse some of a herd with
# UNAVAILABLE and a retry hint: those register again), within one deadline, not a wait per worker.
waiting, deadline = set(fakes), time.time() + 180
while waiting and time.time() < deadline:
    for i in sorted(waiting):
        f = fakes[i]
        if f.next("registered", 0.05) is not None:
            waiting.discard(i)
        elif f.done.is_set() and f.status == "UNAVAILABLE":
            fakes[i] = bulky(i)
assert not waiting, "bulky workers not registered: %d, e.g. %s" % (len(waiting), fakes[min(waiting)].status)
print("300 bulky workers registered")
import subprocess, json
out = subprocess.run([os.environ["BIN"] + "/moectl", "get", "workers", "-o", "json"], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
names = [w["name"] for w in json.loads(out.stdout)["workers"]]
assert sum(n.startswith("bulky") for n in names) == 300, len(names)
page = g.unary(g.channel(addr), "/moe.v1.JobService/ListWorkers", p.js.ListWorkersRequest(page_size=100), p.js.ListWorkersResponse)
assert len(page.workers) == 100 and page.next_page_token, "no paging"
print(f"moectl get workers lists all {len(names)}; pages of 100 carry a token")
PY

# 6. Rank output with escape sequences: moectl logs prints them escaped, --raw as they are.
cat >"$WORK/noisy-trainer" <<'SH'
#!/usr/bin/env bash
printf 'plain line\n'
printf 'clear \033[2J then title \033]0;pwned\007 then csi \302\233 31m done\n'
head -c 2200000 /dev/zero | tr '\0' 'x'; printf '\n'
printf 'after the long line\n'
# A rank's reports and final record (fd 3, common/rank_end.h): the controller believes a success only
# after the last step and with the final checkpoint.
printf '{"step":1,"total_steps":2}\n{"step":2,"total_steps":2}\n' >&3
printf '{"end":true,"code":"OK","class":"none","exit_code":0,"message":"","checkpoint_step":2}\n' >&3
SH
chmod +x "$WORK/noisy-trainer"
"$BIN/moectl" drain w0 >/dev/null && "$BIN/moectl" drain w1 >/dev/null
start_worker noisy r0 noisy --trainer "$WORK/noisy-trainer"
wait_workers 1
id=$("$BIN/moectl" submit -f "$(job noisy 2 0)")
wait_state "$id" SUCCEEDED 60
"$BIN/moectl" logs "$id" >"$WORK/logs.txt"
"$BIN/moectl" logs "$id" --raw >"$WORK/logs-raw.txt"
! grep -q $'\033' "$WORK/logs.txt" && ! grep -q $'\302\233' "$WORK/logs.txt" || fail "raw escapes reached the terminal"
grep -qF 'clear \x1b[2J then title \x1b]0;pwned\x07 then csi \u009b 31m done' "$WORK/logs.txt" || fail "escapes not shown: $(sed -n 2p "$WORK/logs.txt")"
grep -q $'\033\[2J' "$WORK/logs-raw.txt" || fail "--raw did not keep the bytes"
grep -q "more bytes cut from this line" "$WORK/logs.txt" && grep -q "after the long line" "$WORK/logs.txt" ||
  fail "the long line stopped the log: $(tail -c 300 "$WORK/logs.txt")"
echo "moectl logs: escapes shown as text, --raw keeps them, a 2.2 MB line cut with a marker"

# 2a. One controller per state directory, whatever file is deleted.
rm -rf "$WORK"/state/*  # the default checkpoint root (state/checkpoints) too
set +e
timeout 10 "$BIN/moe-controller" --listen 127.0.0.1:$(free_port) --metrics-listen 127.0.0.1:$(free_port) \
  --state-dir "$WORK/state" >"$WORK/second.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "in use by another moe-controller (pid $CTL_PID)" "$WORK/second.log" ||
  fail "a second controller started after the state's files were deleted (rc $rc): $(cat "$WORK/second.log")"
echo "state files deleted, second controller refused: $(tail -1 "$WORK/second.log")"

# 2b. A controller of a lower epoch is refused by the workers: a copy of the state, its epoch wound
#     back, comes up at the controller's address after the workers have seen a later one.
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
start_controller_on() { "$BIN/moe-controller" --listen 127.0.0.1:$GRPC_PORT --metrics-listen 127.0.0.1:$METRICS_PORT \
                          --state-dir "$1" --lease-seconds 3 >"$WORK/ctl-$2.log" 2>&1 & CTL_PID=$!; PIDS+=($CTL_PID); }
start_controller --lease-seconds 3   # the state's files were deleted: a new state, epoch 1
mkdir -p "$WORK/stale"
sqlite3 "$WORK/state/controller.db" ".backup '$WORK/stale/controller.db'"
sqlite3 "$WORK/stale/controller.db" "UPDATE meta SET value = 0 WHERE key = 'epoch'"
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
regs=$(grep -c "registered with the controller" "$WORK/worker-w1.log")
start_controller --lease-seconds 3   # the same state again: epoch 2, which the workers see
for _ in $(seq 1 100); do [ "$(grep -c "registered with the controller" "$WORK/worker-w1.log")" -gt "$regs" ] && break; sleep 0.1; done
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
start_controller_on "$WORK/stale" stale  # takes epoch 1 from its copy; the workers have seen more
for _ in $(seq 1 100); do grep -q "from a controller of epoch 1" "$WORK/worker-w1.log" && break; sleep 0.1; done
grep -q "refusing its registration from a controller of epoch 1" "$WORK/worker-w1.log" ||
  fail "a worker took a stale controller: $(tail -3 "$WORK/worker-w1.log")"
echo "stale controller refused by the workers: $(grep -m1 'from a controller of epoch 1' "$WORK/worker-w1.log" | cut -c1-160)"
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true

# 4. Memory at placement: before any worker, then with workers too small, the job waits and says why.
rm -rf "$WORK/state-mem"
GRPC_PORT=$(free_port) METRICS_PORT=$(free_port)  # a new address: the workers above do not come to it
export MOE_CONTROLLER=127.0.0.1:$GRPC_PORT
start_controller_on "$WORK/state-mem" mem
for _ in $(seq 1 100); do "$BIN/moectl" get jobs >/dev/null 2>&1 && break; sleep 0.1; done
make_job "$WORK/huge.yaml" huge 5 0 1 1
sed -i 's/model: {preset: tiny}/model: {preset: tiny, hidden_size: 16384, num_heads: 128}/' "$WORK/huge.yaml"
id=$("$BIN/moectl" submit -f "$WORK/huge.yaml")
start_worker small r0 small --memory-gb 1
wait_workers 1
# The scheduling passes after the worker joined have judged the job: its reason names the worker's
# memory (a condition, not a fixed wait), and it is still PENDING.
for _ in $(seq 1 200); do
  why=$(job_field "$id" "d.get('waiting_reason', d.get('waitingReason', ''))")
  grep -q "lack the .* GB a rank needs" <<<"$why" && break; sleep 0.1
done
[ "$(job_state "$id")" = PENDING ] || fail "the too-big job is $(job_state "$id")"
why=$(job_field "$id" "d.get('waiting_reason', d.get('waitingReason', ''))")
grep -q "lack the .* GB a rank needs" <<<"$why" || fail "the too-big job does not say why it waits: $why"
echo "too big for every worker: PENDING, $why"
echo "security holds"
