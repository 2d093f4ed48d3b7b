#!/usr/bin/env bash
# Reproduces the tables of BENCHMARKS.md (tens of minutes on 2 cores). Each command's Markdown
# goes to $OUT/NAME.md, its JSON to $OUT/NAME.json, its trace to $OUT/NAME.trace.tsv.
# usage: scripts/benchmarks.sh [NAME...]   (no names: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-results}"
BIN="${BIN:-build/cobatch}"
mkdir -p "$OUT"
run() { # name, bench flags...
    local name="$1"
    shift
    if [ -n "${ONLY:-}" ] && ! grep -qw "$name" <<<"$ONLY"; then return 0; fi
    echo "== $name: cobatch bench $*" >&2
    "$BIN" bench "$@" --json "$OUT/$name.json" --trace "$OUT/$name.trace.tsv" >"$OUT/$name.md" 2>"$OUT/$name.err"
    grep -E "^\| |^workload|median" "$OUT/$name.md" "$OUT/$name.err" >&2 || true
}
ONLY="${*:-}"
run decode-heavy --workload decode-heavy --modes sequential,static,continuous --prefill-chunks 256 --repeat 3
run mixed-chunks --workload mixed --modes continuous --prefill-chunks none,64,128,256 --repeat 3
run mixed-modes --workload mixed --modes sequential,static,continuous --prefill-chunks none --repeat 3
run long16 --workload long16 --modes sequential,static,continuous --prefill-chunks none,128,256,512 --repeat 3
