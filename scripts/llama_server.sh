#!/usr/bin/env bash
# Builds llama.cpp's own llama-server from the same pinned tree, as a benchmark opponent only
# (never part of cobatch's build). Prints the binary's path as the last line.
#   LLAMA_SERVER_CFLAGS="..."  extra compiler flags (a variant of its own, in server-build-<flags>):
#                              "-mno-avx512fp16" builds the ggml that cobatch links on a host with
#                              AVX512-FP16 (scripts/llama.sh); by default llama-server is built as its
#                              users build it, -march=native alone
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(bash "$here/llama.sh" | tail -n 1)" # makes sure the pinned source is there
commit="$(cat "$prefix/.complete")"
base="$(dirname "$(dirname "$prefix")")/llama.cpp-$commit" # the source every variant shares
flags="${LLAMA_SERVER_CFLAGS:-}"
build="$base/server-build"; [ -n "$flags" ] && build="$build-$(echo "$flags" | tr -c 'a-zA-Z0-9\n' '_')"
bin="$build/bin/llama-server"
if [ ! -x "$bin" ]; then
    echo "cobatch: building llama-server (benchmark opponent) in $build" >&2
    gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    cmake -S "$base/src" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="${CFLAGS:-} $flags" -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $flags" \
        >"$build.configure.log" 2>&1
    cmake --build "$build" --target llama-server -j "$(nproc)" >"$build.log" 2>&1
fi
echo "$bin"
