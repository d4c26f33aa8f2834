# pipetrain: the two commands a user needs are `make demo` and `make test`.
# Both install Debian's build dependencies first (idempotent; needs root or sudo), then
# the pinned PyTorch wheel (requirements-torch.txt) into the virtual environment .venv,
# whose LibTorch the build links and whose torch the tests' Python runs.

BUILD_DIR ?= build
JOBS ?= $(shell nproc)
DEPS_STAMP := $(BUILD_DIR)/.deps-installed
VENV ?= .venv
PYTHON := $(abspath $(VENV))/bin/python
TORCH_STAMP := $(VENV)/.torch-installed

.PHONY: all deps build demo test test-fast sanitize bench clean

all: build

# Packages the build and the tests need; see README "Dependencies".
# libgloo-dev for its headers only: the wheel's LibTorch holds gloo but not its headers.
DEBIAN_PACKAGES := cmake ninja-build g++ python3-venv python3-dev libgloo-dev libtcmalloc-minimal4 \
  nlohmann-json3-dev libcli11-dev zlib1g-dev googletest libgtest-dev libbenchmark-dev \
  dataset-fashion-mnist fortunes chromium

# Re-run when the package list above changes.
$(DEPS_STAMP): Makefile
	@./scripts/install-deps.sh $(DEBIAN_PACKAGES)
	@mkdir -p $(BUILD_DIR) && touch $@

# Re-run when the pin changes.
$(TORCH_STAMP): requirements-torch.txt $(DEPS_STAMP)
	@./scripts/install-torch.sh $(VENV) requirements-torch.txt
	@touch $@

deps: $(DEPS_STAMP) $(TORCH_STAMP)

$(BUILD_DIR)/build.ninja: $(DEPS_STAMP) $(TORCH_STAMP) CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPETRAIN_PYTHON=$(PYTHON)

build: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) sanitize

# The core library's tests and the readers' fuzzer again under AddressSanitizer and
# UndefinedBehaviorSanitizer, in a build of their own (no LibTorch: minutes, not tens),
# at -O1 with line tables only: enough for the sanitizers' reports, and it compiles in
# less of the 30 minutes a cold `make test` may take.
SANITIZE_DIR ?= $(BUILD_DIR)-sanitize
sanitize: $(DEPS_STAMP)
	cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPETRAIN_CORE_ONLY=ON \
	  -DPIPETRAIN_SANITIZE=ON -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1"
	cmake --build $(SANITIZE_DIR) -j $(JOBS)
	cd $(SANITIZE_DIR) && ctest --output-on-failure -j $(JOBS)

# Core tests only (no LibTorch): the inner loop, seconds.
test-fast: $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS) --target pipetrain_core_tests
	cd $(BUILD_DIR) && ctest --output-on-failure -L fast -j $(JOBS)

bench: build
	./bench/run_all.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR)
