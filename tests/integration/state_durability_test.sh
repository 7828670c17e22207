#!/usr/bin/env bash
# Acknowledged means stored, and one controller per state directory:
#   1. a second controller on the same state directory exits with an error naming the holder's pid;
#   2. with the state directory's file system full, every RPC that changes state fails (submit,
#      cancel, drain) and changes nothing: after a restart the jobs are as they were, and once
#      there is room again the cancel works and survives a restart.
# The full disk is a real one where the test may mount a 2 MiB tmpfs (root, as in CI); elsewhere the
# store's test hook ($MOE_TEST_STORE_FULL_IF) stands in for it. The test says which it used.
source "$(dirname "$0")/lib.sh"
STATE="$WORK/state"
mkdir -p "$STATE"
FULL_MODE=hook
if [ "${MOE_TEST_FULL_MODE:-}" != hook ] && [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=2m moe-test-state "$STATE" 2>/dev/null; then
  FULL_MODE=tmpfs
  trap 'rc=$?; umount -l "$STATE" 2>/dev/null; (exit $rc); cleanup' EXIT
fi
export MOE_TEST_STORE_FULL_IF="$WORK/store-full"
echo "full disk: $FULL_MODE"
start_controller
start_worker w0 r0 n0
wait_workers 1

# 1. One controller per state directory.
set +e
timeout 10 "$BIN/moe-controller" --listen 127.0.0.1:$(free_port) --metrics-listen 127.0.0.1:$(free_port) \
  --state-dir "$STATE" >"$WORK/second.log" 2>&1
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a second controller started on the same state directory (rc $rc)"
grep -q "in use by another moe-controller (pid $CTL_PID" "$WORK/second.log" ||
  fail "the second controller's error does not name the holder: $(cat "$WORK/second.log")"
echo "second controller refused: $(tail -1 "$WORK/second.log")"

# 2. Full disk.
"$BIN/moectl" drain w0 >/dev/null  # jobs stay PENDING (feasible, not placed)
ids=()
for n in 1 2 3; do
  make_job "$WORK/j$n.yaml" full$n 100 0 1 1
  ids+=("$("$BIN/moectl" submit -f "$WORK/j$n.yaml")")
done
if [ $FULL_MODE = tmpfs ]; then
  dd if=/dev/zero of="$STATE/fill" bs=4k >/dev/null 2>&1 || true
  df -h "$STATE" | tail -1
else
  touch "$MOE_TEST_STORE_FULL_IF"
fi
make_job "$WORK/j4.yaml" full4 100 0 1 1
set +e
out=$("$BIN/moectl" submit -f "$WORK/j4.yaml" 2>&1); rc=$?
[ $rc -ne 0 ] || fail "a submit on a full disk was acknowledged: $out"
for id in "${ids[@]}"; do
  out=$("$BIN/moectl" cancel "$id" 2>&1); rc=$?
  [ $rc -ne 0 ] || fail "cancel of $id on a full disk was acknowledged: $out"
done
echo "cancel on a full disk: rc $rc, $out"
out=$("$BIN/moectl" undrain w0 2>&1); rc=$?
[ $rc -ne 0 ] || fail "undrain on a full disk was acknowledged: $out"
set -e
for id in "${ids[@]}"; do [ "$(job_state "$id")" = PENDING ] || fail "$id is $(job_state "$id") in memory"; done
"$BIN/moectl" get jobs >/dev/null || fail "get jobs fails on a full disk"
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
rm -f "$STATE/fill" "$MOE_TEST_STORE_FULL_IF"
start_controller
for id in "${ids[@]}"; do
  [ "$(job_state "$id")" = PENDING ] || fail "$id is $(job_state "$id") after the restart, not PENDING"
done
[ "$("$BIN/moectl" get jobs -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("jobs",[])))')" = 3 ] ||
  fail "the refused submit left a job behind"
"$BIN/moectl" get workers | grep -q DRAINED || fail "the refused undrain was applied"
"$BIN/moectl" cancel "${ids[0]}" | grep -q CANCELLED || fail "cancel with room again"
kill -9 "$CTL_PID"; wait "$CTL_PID" 2>/dev/null || true
start_controller
[ "$(job_state "${ids[0]}")" = CANCELLED ] || fail "the acknowledged cancel did not survive a restart"
echo "state durability holds ($FULL_MODE)"
