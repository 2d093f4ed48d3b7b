#!/usr/bin/env bash
# Fetches and builds the pinned llama.cpp as static libraries (libllama, ggml, and `common`: chat
# templates, tool-call formats, JSON schema to grammar), cached outside the clone.
# Prints the install prefix (for CMAKE_PREFIX_PATH) as the last line of stdout; logs go to stderr.
#   LLAMA_CPP_DIR=/path/to/tree   use an existing source tree instead of the pinned bundle
#   COBATCH_CUDA=1                build ggml with CUDA (GGML_CUDA=ON)
#   COBATCH_RPC=1                 build ggml's RPC backend (GGML_RPC=ON) and its server, installed as
#                                 bin/ggml-rpc-server (a model split across hosts: README)
#   COBATCH_LLAMA_SHARED=1        shared libraries instead (the ThreadSanitizer build: code outside the
#                                 instrumented binary is then told apart and ignored)
#   COBATCH_CACHE=dir             cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/cobatch)
set -euo pipefail
PIN_PKG="node-llama-cpp@3.22.1"
PIN_COMMIT="de3ff815ea7d559ee917f063901b8986f038abc6"
CACHE="${COBATCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cobatch}"
cuda="${COBATCH_CUDA:-0}"
shared="${COBATCH_LLAMA_SHARED:-0}"
rpc="${COBATCH_RPC:-0}"
log() { echo "cobatch setup: $*" >&2; }

if [ -n "${LLAMA_CPP_DIR:-}" ]; then
  src="$(cd "$LLAMA_CPP_DIR" && pwd)"
  commit="$(git -C "$src" rev-parse HEAD 2>/dev/null || echo local)"
else
  commit="$PIN_COMMIT"
fi
# ggml's AVX512-FP16 kernels (chosen by -march=native where the CPU has them: Intel Sapphire Rapids
# and later) add and multiply f16 vectors 128 elements a step and leave the rest to a scalar loop:
# a head of 64 values (SmolLM2's, Llama 3.2 1B's, Qwen2.5 0.5B's) runs wholly scalar in flash
# attention's dot products and its V sums, which decode 4x slower at 700 tokens of context than at
# 76 there, and their sums are f16. Without them ggml widens f16 to f32 16 lanes at a time (AVX-512F),
# as on every other host. The variant has a folder of its own, so no cache built before is reused.
fp16_flags=""
native="$("${CC:-cc}" -march=native -dM -E - </dev/null 2>/dev/null || true)" # whole: grep -q's early exit fails a pipe
if [[ "$native" == *__AVX512FP16__* ]]; then
  fp16_flags="-mno-avx512fp16"
fi
suffix=""; [ -n "$fp16_flags" ] && suffix="-nofp16"
[ "$cuda" = 1 ] && suffix="$suffix-cuda"; [ "$rpc" = 1 ] && suffix="$suffix-rpc"; [ "$shared" = 1 ] && suffix="$suffix-shared"
dir="$CACHE/llama.cpp-$commit$suffix"
prefix="$dir/install"
ext=a; [ "$shared" = 1 ] && ext=so
complete() { [ -f "$prefix/.complete" ] && [ -f "$prefix/lib/libllama-common.$ext" ] && [ -f "$prefix/include/llama-cpp.h" ] &&
  { [ "$rpc" = 0 ] || [ -x "$prefix/bin/ggml-rpc-server" ]; }; } # common came later: rebuild
# llama.cpp's grammar header (src/llama-grammar.h): cobatch counts a grammar's parse states, which
# the public API cannot say. Copied into caches made before it was needed; a fresh build installs it.
internal() {
  [ -f "$prefix/include/internal/llama-grammar.h" ] && return 0
  local from="${LLAMA_CPP_DIR:-$CACHE/llama.cpp-$commit/src}/src/llama-grammar.h"
  [ -f "$from" ] || return 1
  mkdir -p "$prefix/include/internal" && cp "$from" "$prefix/include/internal/"
}
if complete && internal; then
  echo "$prefix"; exit 0
fi
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
if complete && internal; then echo "$prefix"; exit 0; fi

if [ -z "${LLAMA_CPP_DIR:-}" ]; then
  base="$CACHE/llama.cpp-$commit" # the source is shared by every variant of the build
  mkdir -p "$base"
  [ "$base" = "$dir" ] || { exec 8>"$base/.lock"; flock 8; }
  src="$base/src"
  if [ ! -d "$src/.git" ] || [ "$(git -C "$src" rev-parse HEAD 2>/dev/null)" != "$PIN_COMMIT" ]; then
    log "fetching llama.cpp from npm package $PIN_PKG (llama/gitRelease.bundle)"
    tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "$PIN_PKG" >/dev/null)
    tar -xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle
    rm -rf "$src"
    git clone -q "$tmp/package/llama/gitRelease.bundle" "$src" 2>/dev/null
    got="$(git -C "$src" rev-parse HEAD)"
    if [ "$got" != "$PIN_COMMIT" ]; then
      log "ERROR: bundle commit is $got, expected $PIN_COMMIT"; exit 1
    fi
    log "llama.cpp commit $got verified"
  fi
fi

[ -z "${LLAMA_CPP_DIR:-}" ] && [ "$base" != "$dir" ] && ln -sfn "$src" "$dir/src" # the sources beside every variant
log "building llama.cpp ($commit$suffix) into $dir (a few minutes, once)"
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
cmake -S "$src" -B "$dir/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=$([ "$shared" = 1 ] && echo ON || echo OFF) \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=$([ "$rpc" = 1 ] && echo ON || echo OFF) -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_COMMON=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DGGML_CUDA=$([ "$cuda" = 1 ] && echo ON || echo OFF) \
  -DGGML_RPC=$([ "$rpc" = 1 ] && echo ON || echo OFF) -DCMAKE_C_FLAGS="${CFLAGS:-} $fp16_flags" -DCMAKE_CXX_FLAGS="${CXXFLAGS:-} $fp16_flags" \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_PREFIX="$prefix" >"$dir/configure.log" 2>&1 \
  || { log "ERROR: llama.cpp configure failed, see $dir/configure.log"; tail -20 "$dir/configure.log" >&2; exit 1; }
targets=(llama llama-common); [ "$rpc" = 1 ] && targets+=(ggml-rpc-server) # only what cobatch links or runs
cmake --build "$dir/build" --target "${targets[@]}" -j "$(nproc)" >"$dir/build.log" 2>&1 \
  || { log "ERROR: llama.cpp build failed, see $dir/build.log"; tail -20 "$dir/build.log" >&2; exit 1; }
# Install by hand: the tree's own install rule wants every target built (apps included).
rm -rf "$prefix"; mkdir -p "$prefix/include" "$prefix/lib"
cp "$src"/include/*.h "$src"/ggml/include/*.h "$prefix/include/"
# common's headers (and the JSON library they include) for src/runtime's one C++ file
(cd "$src" && find common vendor/nlohmann -name '*.h' -o -name '*.hpp') | while read -r h; do
  mkdir -p "$prefix/include/$(dirname "$h")"; cp "$src/$h" "$prefix/include/$h"
done
mkdir -p "$prefix/include/internal"; cp "$src/src/llama-grammar.h" "$prefix/include/internal/"
find "$dir/build" -name "lib*.$ext*" -exec cp -P {} "$prefix/lib/" \;
find "$dir/build" -name "lib*.a" -exec cp -P {} "$prefix/lib/" \; # common and its parts are static
for lib in libllama.$ext libggml.$ext libggml-base.$ext libggml-cpu.$ext libllama-common.$ext libllama-common-base.a; do
  [ -f "$prefix/lib/$lib" ] || { log "ERROR: $lib was not built"; exit 1; }
done
if [ "$rpc" = 1 ]; then
  mkdir -p "$prefix/bin"
  cp "$dir/build/bin/ggml-rpc-server" "$prefix/bin/" || { log "ERROR: ggml-rpc-server was not built"; exit 1; }
  [ -f "$prefix/lib/libggml-rpc.$ext" ] || { log "ERROR: libggml-rpc.$ext was not built"; exit 1; }
fi
echo "$fp16_flags" > "$prefix/.flags" # the compiler flags beyond the tree's own (CMakeLists.txt reads them)
echo "$commit" > "$prefix/.complete"
log "llama.cpp ready at $prefix"
echo "$prefix"
