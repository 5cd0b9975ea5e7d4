# Sluice: the two commands a new user needs are `make demo` and `make test`.
# Both install the Debian packages first (scripts/install-deps.sh, a no-op when present).
#   make build    Release build into build/ (SANITIZE=address,undefined or thread: build-<san>/)
#   make test     build, then every test (ctest: C++ unit, integration and process tests)
#   make demo     build, generate data, show the per-op table, then a prep stall and the
#                 speed-up when `--policy sluice` offloads to a worker (testbed as root)
#   make bench    the benchmarks of docs/BENCHMARKS.md
SHELL := /bin/bash
JOBS ?= $(shell nproc)
SANITIZE ?=
BUILD_TYPE ?= Release
ifeq ($(SANITIZE),)
BUILD_DIR ?= build
else
BUILD_DIR ?= build-$(subst $(comma),-,$(SANITIZE))
BUILD_TYPE := RelWithDebInfo
endif
comma := ,
SLUICE := $(BUILD_DIR)/bin/sluice
PYTHON := /usr/bin/python3

.PHONY: all deps configure build test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSLUICE_SANITIZE=$(SANITIZE) > $(BUILD_DIR).configure.log 2>&1 \
	  || { cat $(BUILD_DIR).configure.log; exit 1; }

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

demo: build
	@scripts/demo.sh $(SLUICE)

bench: build
	@scripts/bench.sh $(SLUICE)

clean:
	rm -rf build build-* *.configure.log
