# Shared by the engine's script tests: a scratch directory removed at exit (with any process still
# using it), fail, and `job`, the demo job (examples/tiny.yaml) made small for tests.
# Usage: source tests/engine/tools/lib.sh <name>   (then $work is the scratch directory)
work=$(mktemp -d "/tmp/moe-$1-test.XXXXXX")
cleanup() { pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# job <file> <parallelism fields> [extra sed]: tiny at seq 64, micro batch 4, the given layout
# (from $JOB_TEMPLATE, examples/tiny.yaml by default).
job() {
  sed "s/seq_length: 256, micro_batch_size: 8/seq_length: 64, micro_batch_size: 4/;
       s/world_size: 2, expert_parallel: 2/$2, timeout_seconds: 30/;
       ${3:-}" "${JOB_TEMPLATE:-examples/tiny.yaml}" >"$1"
}
