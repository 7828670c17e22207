# MoE Orchestrator: the two commands are `make demo` and `make test` (README.md).
# Every target installs the Debian packages it needs first (scripts/install-deps.sh, quick when all
# are there), configures once with CMake + Ninja (+ ccache), and builds incrementally.
SHELL := /bin/bash
BUILD ?= build
BUILD_TYPE ?= Release
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all build configure data demo test test-unit test-asan test-asan-quick test-tsan fuzz chaos bench gpu-check gpu-check-rehearsal gpu-perf gpu-perf-rehearsal gpu-bundle clean format format-check lint help

all: build

help:
	@echo "make build   build every binary into $(BUILD)/bin"
	@echo "make data    prepare the fortunes corpus (data/fortunes.bin/.idx)"
	@echo "make demo    controller, CPU workers, a real training job, live progress"
	@echo "make test    the whole test suite (unit, integration, e2e; gpu tests skip loudly without a GPU)"
	@echo "make bench   the benchmarks in bench/ (ratios against the machine's own ceilings)"
	@echo "make lint    no function outside tests/ and bench/ over 100 lines or complexity 30 (pmccabe)"
	@echo "make format-check  every C++/CUDA source as clang-format 14 leaves it (make format fixes them)"
	@echo "make test-asan  the unit and integration tests under AddressSanitizer + UBSan (build-asan)"
	@echo "make test-tsan  the threaded code's tests under ThreadSanitizer (build-tsan)"
	@echo "make chaos   the full chaos run: 8 kills, a hang, a storage outage and a clean SIGTERM through one job (tests/chaos)"
	@echo "make gpu-perf    the GPU measurement on this machine's GPU (tests/gpu/perf.sh; gpu-perf-rehearsal: on the CPU at toy sizes)"
	@echo "make gpu-bundle  the GPU check's binaries for sm_90, built here with the CUDA toolkit alone, in gpu-bundle/ (tests/gpu/check.sh --prebuilt gpu-bundle)"
	@echo "make fuzz    every libFuzzer target for a minute (FUZZ_SECONDS), after replaying its regressions (build-fuzz)"

configure:
	@scripts/install-deps.sh build
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null || exit 1; \
	fi

build: configure
	@cmake --build $(BUILD)

data: build
	@scripts/prepare-data.sh $(BUILD)

demo:
	@scripts/install-deps.sh demo
	@$(MAKE) --no-print-directory data
	@scripts/demo.sh $(BUILD)

test:
	@scripts/install-deps.sh test
	@$(MAKE) --no-print-directory data
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 -j2 $(CTEST_FLAGS); rc=$$?; \
	  if ! nvidia-smi >/dev/null 2>&1; then \
	    echo "NOTE: the tests labelled gpu ($$(ctest -N -L gpu | grep -c 'Test *#')) were SKIPPED: no GPU on this machine."; \
	    echo "      They run with tests/gpu/check.sh (make gpu-check) on a GPU machine; docs/benchmarks.md says when they last did."; \
	  fi; exit $$rc

test-asan:
	@scripts/sanitize.sh address

test-asan-quick:
	@scripts/sanitize.sh address --quick

test-tsan:
	@scripts/sanitize.sh thread

FUZZ_SECONDS ?= 60
fuzz:
	@scripts/fuzz.sh $(FUZZ_SECONDS)

CHAOS_FLAGS ?=
chaos:
	@scripts/install-deps.sh test
	@$(MAKE) --no-print-directory data
	@python3 tests/chaos/chaos.py --profile full --bin $(BUILD)/bin $(CHAOS_FLAGS)

test-unit: build
	@cd $(BUILD) && ctest --output-on-failure -L unit $(CTEST_FLAGS)

bench:
	@scripts/install-deps.sh bench
	@$(MAKE) --no-print-directory data
	@scripts/bench.sh $(BUILD)

gpu-check:
	@tests/gpu/check.sh

# The same script on this CPU machine (the binaries of make build; see tests/gpu/check.sh --rehearsal).
gpu-check-rehearsal: build
	@tests/gpu/check.sh --rehearsal --build-dir $(BUILD)

# The GPU measurement (tests/gpu/perf.sh: the DeepSeek-V3-width slice against the card and against
# PyTorch, where its time goes), and the same on this CPU machine at toy sizes.
gpu-perf:
	@tests/gpu/perf.sh

gpu-perf-rehearsal: build
	@tests/gpu/perf.sh --rehearsal --build-dir $(BUILD)

# The GPU check's binaries, built here (CUDA toolkit, CMake, Ninja; no GPU), for a GPU machine:
# copy gpu-bundle/ there with the tree and run tests/gpu/check.sh --prebuilt gpu-bundle.
GPU_ARCH ?= 90
gpu-bundle:
	@tests/gpu/bundle.sh --arch $(GPU_ARCH) --build-dir $(BUILD)-gpu-bundle --out gpu-bundle

lint:
	@scripts/install-deps.sh build
	@scripts/lint.sh

format-check:
	@scripts/install-deps.sh build
	@scripts/format-check.sh

format:
	@git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
