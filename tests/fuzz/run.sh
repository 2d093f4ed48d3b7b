#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan) into BUILD_DIR and runs each on a copy of
# its seed corpus (tests/fuzz/corpus/NAME): for SECONDS each (default 20), or with --runs N for N
# executions each (the long run recorded in RELIABILITY.md). A crash, a leak, an abort on a broken
# invariant or a 10 s input fails the run; the input is kept in BUILD_DIR/artifacts.
# usage: run.sh BUILD_DIR [SECONDS | --runs N] [NAME ...]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$1"
shift
limit=(-max_total_time="${1:-20}")
if [ "${1:-}" = "--runs" ]; then limit=(-runs="$2"); shift; fi
[ $# -gt 0 ] && shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(openai embeddings anthropic responses dialects http batch workload textout grammar chat)
cc="$(command -v clang-14 || command -v clang)" || { echo "fuzz: clang is missing (scripts/deps.sh installs it)" >&2; exit 1; }
cxx="$(command -v clang++-14 || command -v clang++)" || { echo "fuzz: clang++ is missing (scripts/deps.sh installs it)" >&2; exit 1; }
CC="$cc" CXX="$cxx" cmake -S "$root" -B "$build" -G Ninja -DCOBATCH_FUZZ=ON >/dev/null || exit 1
cmake --build "$build" >/dev/null || { cmake --build "$build"; exit 1; }
mkdir -p "$build/artifacts"
fail=0
for t in "${names[@]}"; do
    work="$(mktemp -d)"
    cp "$here/corpus/$t/"* "$work/"
    log="$build/fuzz_$t.log"
    "$build/fuzz_$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" "$work" >"$log" 2>&1
    rc=$?
    runs="$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')"
    secs="$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*')"
    if [ $rc -eq 0 ]; then
        echo "ok   fuzz_$t: ${runs:-?} executions in ${secs:-?} s, corpus $(ls "$work" | wc -l) inputs, no crash"
    else
        fail=1
        echo "FAIL fuzz_$t (exit $rc): input in $build/artifacts/"
        grep -E "ERROR|SUMMARY|#[0-9]+ .* in " "$log" | head -20
    fi
    rm -rf "$work"
done
exit $fail
