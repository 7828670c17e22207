#!/bin/sh
# moe-pool-member COMMAND [ARG...]: runs a node agent (moe-worker ...) as a member of a worker pool, the
# pod of a Kubernetes Job (a JobSet's child Job, admitted by Kueue). Installed in the image as
# /usr/local/bin/moe-pool-member; the pools' manifests run `moe-pool-member /usr/local/bin/moe-worker ...`.
#
# Why: moe-worker exits 0 after a clean leave (SIGTERM: its ranks checkpoint, their jobs requeue). A Job
# counts a pod that exits 0 as its index completed for good: when Kueue suspends the pool (deleting every
# pod: SIGTERM) and later resumes it, the Job would not start those agents again, and the pool would come
# back empty. So a pool member never ends with 0:
#   - SIGTERM (or SIGINT) is forwarded to the agent, which leaves cleanly; then this exits 143 (128 + 15),
#     which the pools' podFailurePolicy ignores (Ignore: not counted against the retries).
#   - the agent ending by itself with status N != 0: exits N (a crash: counted, the pod replaced).
#   - the agent ending by itself with 0: exits 1 (not counted as done: replaced like a crash).
# The agent runs as a child (not exec'd) so that its status can be changed; this shell is PID 1 of the
# container and passes the signal on.
set -u
[ $# -ge 1 ] || { echo "usage: moe-pool-member COMMAND [ARG...]" >&2; exit 2; }

stopping=0
child=
# shellcheck disable=SC2317  # run by the trap
forward() {
  stopping=1
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
}
trap forward TERM INT

"$@" &
child=$!
# A SIGTERM that came before $! was known (the agent had just started, the trap found no child) is
# passed on now; without this the member waited forever for an agent that was never told (seen under
# load in pool_member_test).
[ "$stopping" = 1 ] && kill -TERM "$child" 2>/dev/null
# `wait` returns early (status > 128) when a trapped signal arrives; wait again until the agent has
# really ended. kill -0 still finds an ended but unreaped child, so the loop cannot miss its status.
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break
done

if [ "$stopping" = 1 ]; then
  echo "moe-pool-member: $1 left after SIGTERM (status $status); exiting 143 so the Job does not count this agent done" >&2
  exit 143
fi
if [ "$status" = 0 ]; then
  echo "moe-pool-member: $1 ended by itself with status 0; exiting 1 so the Job replaces it instead of counting it done" >&2
  exit 1
fi
exit "$status"
