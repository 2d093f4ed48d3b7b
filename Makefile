# The two commands of the README:
#   make run    build everything (fetching what is missing) and run the main job on the default model
#   make test   build everything and run every test
BUILD ?= build
CMAKE_FLAGS ?=
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all deps model model-swa build run test test-sanitize test-tsan test-rpc format format-check clean

all: build

deps:
	@bash scripts/deps.sh

model: deps
	@bash scripts/model.sh

# A real sliding-window model (Gemma 3 270M) for the tests that need one.
model-swa: deps
	@bash scripts/model.sh swa

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(GEN) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $$(nproc)

run: build model
	./$(BUILD)/cobatch run --chat --system "You are a helpful assistant." -p "What is the capital of France? Answer in one sentence." -n 64 --stats
	./$(BUILD)/cobatch bench

# Every test three times: the release build, our code under AddressSanitizer + UBSan (leaks too),
# then under ThreadSanitizer.
test: build model model-swa format-check
	ctest --test-dir $(BUILD) --output-on-failure --timeout 1500
	$(MAKE) --no-print-directory test-sanitize
	$(MAKE) --no-print-directory test-tsan
	$(MAKE) --no-print-directory test-rpc

test-sanitize: deps model model-swa
	cmake -S . -B $(BUILD)-asan $(GEN) -DCOBATCH_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build $(BUILD)-asan -j $$(nproc)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir $(BUILD)-asan --output-on-failure --timeout 1500

# ThreadSanitizer links llama.cpp as shared libraries (built once more, cached): its code is not
# instrumented, and ignore_noninstrumented_modules keeps its OpenMP threads, whose barriers TSan
# cannot see, from being reported against each other.
test-tsan: deps model model-swa
	cmake -S . -B $(BUILD)-tsan $(GEN) -DCOBATCH_TSAN=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)
	cmake --build $(BUILD)-tsan -j $$(nproc)
	TSAN_OPTIONS=ignore_noninstrumented_modules=1:halt_on_error=1:second_deadlock_stack=1 \
	  ctest --test-dir $(BUILD)-tsan --output-on-failure --timeout 1500

# llama.cpp's RPC backend (built once more, cached): the model's layers on a ggml-rpc-server on
# loopback, outputs as local. Only the cobatch binary and that test.
test-rpc: deps model
	cmake -S . -B $(BUILD)-rpc $(GEN) -DCOBATCH_RPC=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD)-rpc -j $$(nproc) --target cobatch
	ctest --test-dir $(BUILD)-rpc --output-on-failure --timeout 300 -L rpc

# House rule: clang-format checked (.clang-format). `make format` rewrites the files.
SOURCES = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format-check: deps
	clang-format --dry-run --Werror $(SOURCES)

format:
	clang-format -i $(SOURCES)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-rpc
