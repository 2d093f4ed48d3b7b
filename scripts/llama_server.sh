#!/usr/bin/env bash
# Builds llama.cpp's own llama-server from the same pinned tree, as a benchmark opponent only
# (never part of cobatch's build). Prints the binary's path as the last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(bash "$here/llama.sh" | tail -n 1)" # makes sure the pinned source is there
dir="$(dirname "$prefix")"
bin="$dir/server-build/bin/llama-server"
if [ ! -x "$bin" ]; then
    echo "cobatch: building llama-server (benchmark opponent) in $dir/server-build" >&2
    gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    cmake -S "$dir/src" -B "$dir/server-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON >"$dir/server-configure.log" 2>&1
    cmake --build "$dir/server-build" --target llama-server -j "$(nproc)" >"$dir/server-build.log" 2>&1
fi
echo "$bin"
