#!/usr/bin/env bash
# make test-asan / make test-tsan: the tree built with sanitizers in its own folder (build-asan,
# build-tsan; CUDA off: no GPU runs here), then its tests with the sanitizers' reports fatal.
#   scripts/sanitize.sh address   ASan + UBSan: the unit and integration tests
#   scripts/sanitize.sh thread    TSan: the tests of our threaded code (controller, worker, communicators)
#   scripts/sanitize.sh address --quick   ASan + UBSan over the control plane's and the parsers' unit
#                                 tests only, building just those (a quick check while editing; .ci/run
#                                 runs the whole address run)
# Suppressions (third-party internals only, each explained): tests/sanitizers/{lsan,tsan}.supp.
set -euo pipefail
kind=${1:?usage: scripts/sanitize.sh address|thread [--quick]}
quick=${2:-}
cd "$(dirname "$0")/.."
root=$PWD
case "$kind" in
  address) dir=build-asan ;;  # measured on the 2-core machine: build 9 min, tests about 4 min
  thread) dir=build-tsan ;;
  *) echo "sanitize.sh: expected address or thread, got '$kind'" >&2; exit 2 ;;
esac
scripts/install-deps.sh test
# ASan: -O1 without -g (the 2-core CI builds this tree whole; UBSan's reports carry their file and
# line anyway, ASan's stack frames their function names: MOE_RELEASE_FLAGS="-O1 -g1" to see lines).
# TSan: -O1 -g1 (its reports need the lines of both accesses). Neither is -O2: the sanitizers' checks
# cost the optimiser most of its time.
flags="-O1"
[ "$kind" = thread ] && flags="-O1 -g1"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_RELEASE_FLAGS="$flags" \
    -DMOE_CUDA=OFF -DMOE_BENCH=OFF -DMOE_SANITIZE="$kind" >/dev/null
fi
quick_tests=(write_path_test yaml_test job_spec_test job_spec_schema_test schema_test kv_protocol_test rank_end_test planner_test
  controller_test scheduler_test state_store_test job_manager_test worker_registry_test rendezvous_store_test
  metrics_aggregator_test net_policy_test)
# TSan runs the threaded code's tests only: it builds those and the binaries they start (the whole
# tree under TSan took 26 min on 2 cores, these about half of it).
tsan_tests=(write_path_test controller_test job_manager_test worker_registry_test rendezvous_store_test metrics_aggregator_test
  state_store_test process_group_test collectives_test alltoall_test rank_process_test)
tsan_scripts=(worker_identity_test state_durability_test fake_worker_test)
start=$SECONDS
if [ "$quick" = --quick ]; then
  cmake --build "$dir" --target "${quick_tests[@]}"
elif [ "$kind" = thread ]; then
  cmake --build "$dir" --target "${tsan_tests[@]}" moe-controller moe-worker moectl moe-train
else
  cmake --build "$dir"
fi
echo "sanitize: $kind build took $((SECONDS - start)) s"
[ "$quick" = --quick ] || [ "$kind" = thread ] || [ -f data/fortunes.idx ] || scripts/prepare-data.sh "$dir"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="suppressions=$root/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1"
start=$SECONDS
# Left out under ASan, loudly: the tests that train for minutes (the engine runs 5-10x slower
# instrumented, past their timeouts and the timing the straggler test injects). Their code runs under
# ASan in the unit tests (model_gradcheck_test, the kernels', the communicators').
# Also left out: the loopback tests whose bounds are the issues' contracts in seconds (queues_test:
# a share within 30 s; elastic_test: W = 2 within 30 s). Instrumented and beside each other under -j2
# they pass or miss those bounds by chance (elastic_test failed so in CI on 2026-12-01, and passed
# alone in 80 s); their scheduling code runs under ASan in controller_test (QueueTest, the elastic cases).
# Also out: the end-to-end runs added in wave 3 that train jobs through moe-train (security_test,
# model_interop_test: their checks run instrumented in confined_dir_test, ownership_test,
# hf_interop_test, generation_test) and the rehearsals of the whole device check (minutes even
# uninstrumented; their pieces are unit tests here), and async_checkpoint_test (five short trainings;
# the asynchronous saver's copy, background write and agreed commit run instrumented in
# checkpoint_test): CI's 45 minutes cannot hold them instrumented. And lifecycle_test (185 s
# instrumented from a clean clone, its cancel case's steps 10 s each; the lifecycle's controller side
# runs instrumented in controller_test and queue_scheduler_test, its rank's stop in moe_train_cli_test's
# uninstrumented run).
slow='^(lifecycle_test|control_plane_test|straggler_test|balance_test|moe_train_cli_test|distributed_test|scaleout_test|memory_test|evaluation_test|reference_model_test|queues_test|elastic_test|security_test|model_interop_test|gpu_check_rehearsal_test|gpu_bench_rehearsal|async_checkpoint_test)$'
if [ "$quick" = --quick ]; then
  (cd "$dir" && ctest --output-on-failure --timeout 600 -R "^($(IFS='|'; echo "${quick_tests[*]}"))\$")
elif [ "$kind" = address ]; then
  echo "sanitize: NOT run under ASan (training too slow instrumented; make test runs them): $slow"
  (cd "$dir" && ctest --output-on-failure -j2 -L 'unit|integration' -E "$slow" ${MOE_SANITIZE_CTEST:-})
else
  (cd "$dir" && ctest --output-on-failure -R "^($(IFS='|'; echo "${tsan_tests[*]}|${tsan_scripts[*]}"))\$" \
     ${MOE_SANITIZE_CTEST:-})
fi
echo "sanitize: $kind tests took $((SECONDS - start)) s"
