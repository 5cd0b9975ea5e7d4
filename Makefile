# Sluice: the two commands a new user needs are `make demo` and `make test`.
# Both install the Debian packages first (scripts/install-deps.sh, a no-op when present).
#   make build    Release build into build/ (SANITIZE=address,undefined or thread: build-<san>/)
#   make test     build, then every test (ctest: C++ unit, integration and process tests)
#   make demo     build, generate data, show the per-op table, then a prep stall and the
#                 speed-up when `--policy sluice` offloads to a worker (testbed as root)
#   make bench    the benchmarks of docs/BENCHMARKS.md
#   make test-asan / test-tsan   the tests under ASan+UBSan / TSan (docs/testing.md)
#   make fuzz     the libFuzzer targets of fuzz/, FUZZ_SECONDS each (docs/fuzzing.md)
SHELL := /bin/bash
JOBS ?= $(shell nproc)
SANITIZE ?=
BUILD_TYPE ?= Release
# Sanitizer builds use clang (docs/testing.md says why), at -O1 (CMakeLists.txt sets the
# RelWithDebInfo flags of a sanitizer build); an address build also carries
# the fuzz targets (SLUICE_FUZZ), so `make test-asan` and `make fuzz` share build-address-undefined/.
SAN_CXX ?= clang++-14
ifeq ($(SANITIZE),)
BUILD_DIR ?= build
CMAKE_EXTRA :=
else
BUILD_DIR ?= build-$(subst $(comma),-,$(SANITIZE))
BUILD_TYPE := RelWithDebInfo
CMAKE_EXTRA := -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
  -DSLUICE_FUZZ=$(if $(findstring address,$(SANITIZE)),ON,OFF)
endif
comma := ,
SLUICE := $(BUILD_DIR)/bin/sluice
PYTHON := /usr/bin/python3
# TARGETS: build only these (default: everything); CTEST_ARGS: more ctest arguments.
TARGETS ?=
CTEST_ARGS ?=

# The sanitizer runs of CI (docs/testing.md says what runs where and why). Only the test
# binaries a run needs are built; the Python tests are left out (the extension module would
# need the sanitizer runtime preloaded into python3), and so are the timing tests (label
# serial), which measure speed, and the deployment checks (label deploy), which check files.
ASAN_TARGETS := sluice sluice_core_test sluice_ops_test sluice_pipeline_test sluice_rpc_test \
  sluice_policy_test sluice_runtime_test sluice_cli_test sluice_integration_test
TSAN_TARGETS := sluice_core_test sluice_pipeline_test sluice_rpc_test sluice_runtime_test
SAN_SUPP := $(CURDIR)/scripts/sanitizers
ASAN_ENV := ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_string_checks=1 \
  LSAN_OPTIONS=suppressions=$(SAN_SUPP)/lsan.supp:print_suppressions=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(SAN_SUPP)/tsan.supp

FUZZ_SANITIZE := address,undefined
FUZZ_DIR := build-address-undefined
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=

.PHONY: all deps configure build test test-asan test-tsan fuzz-build fuzz demo bench clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSLUICE_SANITIZE=$(SANITIZE) $(CMAKE_EXTRA) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) $(if $(TARGETS),--target $(TARGETS))

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600 $(CTEST_ARGS)

test-asan:
	@$(ASAN_ENV) $(MAKE) --no-print-directory test SANITIZE=address,undefined \
	  TARGETS="$(ASAN_TARGETS)" CTEST_ARGS="-LE 'python|serial|deploy' -E _NOT_BUILT"

test-tsan:
	@$(TSAN_ENV) $(MAKE) --no-print-directory test SANITIZE=thread \
	  TARGETS="$(TSAN_TARGETS)" CTEST_ARGS="-L 'core|pipeline|rpc|runtime'"

fuzz-build:
	@$(MAKE) --no-print-directory build SANITIZE=$(FUZZ_SANITIZE) TARGETS=sluice_fuzz

fuzz: fuzz-build
	@scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

demo: build
	@scripts/demo.sh $(SLUICE)

bench: build
	@scripts/bench.sh $(SLUICE)

clean:
	rm -rf build build-* *.configure.log
