#!/usr/bin/env bash
# deploy/docker/moe-pool-member.sh, the pools' container entry (a pool member never ends with 0, or the
# Job would count that agent done and not start it again when Kueue resumes the pool): run with a fake
# agent under the shells an image may have as /bin/sh (dash, Ubuntu's; bash), it must
#   - forward SIGTERM to the agent, wait for it to finish leaving, then exit 143;
#   - pass an agent's own non-zero status through, and turn its own 0 into 1;
#   - refuse to run without a command (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
script=deploy/docker/moe-pool-member.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "FAIL: $*" >&2; failed=1; }

# The fake agent: on SIGTERM it takes a second to "checkpoint", writes $tmp/left, exits 0 (as moe-worker
# does after a clean leave); with an exit status as argument it ends by itself with it.
cat >"$tmp/agent" <<'AGENT'
#!/bin/sh
trap 'sleep 1; echo left >"$DIR/left"; exit 0' TERM
echo "$$" >"$DIR/pid"
[ $# -eq 0 ] || exit "$1"
while :; do sleep 0.1; done
AGENT
chmod +x "$tmp/agent"
export DIR=$tmp

for sh in dash bash; do
  command -v "$sh" >/dev/null || { echo "   (no $sh here: skipped)"; continue; }
  rm -f "$tmp/left" "$tmp/pid"
  "$sh" "$script" "$tmp/agent" 2>"$tmp/log" & pid=$!
  for _ in $(seq 50); do [ -s "$tmp/pid" ] && break; sleep 0.1; done
  [ -s "$tmp/pid" ] || fail "$sh: the agent did not start"
  kill -TERM "$pid"
  rc=0; wait "$pid" || rc=$?
  [ "$rc" = 143 ] || fail "$sh: SIGTERM: exit $rc, expected 143 ($(cat "$tmp/log"))"
  [ -s "$tmp/left" ] || fail "$sh: SIGTERM: exited before the agent had left (no $tmp/left)"
  kill -0 "$(cat "$tmp/pid")" 2>/dev/null && fail "$sh: SIGTERM: the agent still runs"
  for want in "3 3" "0 1"; do
    # shellcheck disable=SC2086  # split on purpose
    set -- $want
    rc=0; "$sh" "$script" "$tmp/agent" "$1" 2>/dev/null || rc=$?
    [ "$rc" = "$2" ] || fail "$sh: an agent ending by itself with $1: exit $rc, expected $2"
  done
  rc=0; "$sh" "$script" 2>/dev/null || rc=$?
  [ "$rc" = 2 ] || fail "$sh: no command: exit $rc, expected 2"
  echo "   $sh: SIGTERM forwarded and waited for (143), own status passed (3), own 0 made 1, usage (2)"
done
[ "$failed" = 0 ] || exit 1
echo "moe-pool-member: a pool member never ends with 0"
