#!/usr/bin/env bash
# Prefix sharing on BatchLLM's shared-prefix workload: no sharing vs the online prefix
# cache (cobatch bench), and the offline batch runner (cobatch batch) on the same requests.
# llama-server's side: LOADGEN_ARGS="--sharing-degree 16 --num-prompts 16" scripts/compare_servers.sh shared-prefix
# Results go to $OUT (default bench-results/prefix). Tens of minutes on 2 cores.
# usage: scripts/prefix_benchmarks.sh [online|prefix-len|batch ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-results/prefix}"
BIN="${BIN:-build/cobatch}"
N="${N:-16}" # requests per run
mkdir -p "$OUT"
want() { [ -z "${ONLY:-}" ] || grep -qw "$1" <<<"$ONLY"; }
ONLY="${*:-}"
bench() { # name, flags...
    local name="$1"
    shift
    echo "== $name: cobatch bench $*" >&2
    "$BIN" bench --workload shared-prefix --num-prompts "$N" --modes continuous --no-ceiling "$@" \
        --json "$OUT/$name.json" --trace "$OUT/$name.trace.tsv" >"$OUT/$name.md" 2>"$OUT/$name.err"
    grep -E "^\| |^workload" "$OUT/$name.md" >&2 || true
}
if want online; then
    for s in 1 4 16; do
        bench "online-s$s" --sharing-degree "$s" --prefix-caching off,on
    done
fi
if want prefix-len; then
    for p in 250 500; do
        bench "online-p$p" --sharing-degree 16 --prefix-len "$p" --prefix-caching off,on
    done
fi
if want batch; then
    for s in 4 16; do
        "$BIN" bench --workload shared-prefix --num-prompts "$N" --sharing-degree "$s" --write-batch "$OUT/job-s$s.jsonl"
        for how in "grouped" "plain --no-prefix-grouping --no-prefix-caching"; do
            read -r label flags <<<"$how"
            rm -f "$OUT/batch-s$s-$label.out.jsonl"
            echo "== batch s=$s $label" >&2
            # shellcheck disable=SC2086
            "$BIN" batch -i "$OUT/job-s$s.jsonl" -o "$OUT/batch-s$s-$label.out.jsonl" --no-progress $flags \
                --json "$OUT/batch-s$s-$label.json" 2>"$OUT/batch-s$s-$label.err"
            tail -n 12 "$OUT/batch-s$s-$label.err" >&2
        done
    done
fi
