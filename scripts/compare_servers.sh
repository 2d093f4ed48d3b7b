#!/usr/bin/env bash
# cobatch serve vs llama.cpp's llama-server on the same model, threads and workloads, measured by
# `cobatch loadgen`. Results go to $OUT (default bench-results/servers). Takes tens of minutes.
# usage: scripts/compare_servers.sh [WORKLOAD...]   (default: mixed decode-heavy)
# env: CONC="1 4 16 32" (closed-loop concurrencies), RATES="0.5 1 2" (open-loop Poisson request
#      rates, each run after the concurrencies), LOADGEN_ARGS="--sharing-degree 16" (workload
#      flags), LLAMA_CTX=16384 (llama-server's total context: -np 16 splits it),
#      ONLY_SERVERS="cobatch ...", COBATCH_ARGS="--kv-layout unified" (extra flags for cobatch serve),
#      LLAMA_ARGS="-fa off" (extra flags for llama-server; a later flag overrides an earlier one).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-results/servers}"
BIN="${BIN:-build/cobatch}"
MODEL="${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-$(nproc)}"
CONC="${CONC-16}"
RATES="${RATES:-}"
LLAMA_CTX="${LLAMA_CTX:-16384}"
read -r -a LOADGEN_EXTRA <<<"${LOADGEN_ARGS:-}"
read -r -a COBATCH_EXTRA <<<"${COBATCH_ARGS:-}"
read -r -a LLAMA_EXTRA <<<"${LLAMA_ARGS:-}"
# On a host with AMX, ggml's AMX kernels segfault in llama-server (cobatch leaves them out by
# itself): llama-server gets --no-repack there, first, so LLAMA_ARGS may still say otherwise.
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then LLAMA_EXTRA=(--no-repack "${LLAMA_EXTRA[@]}"); fi
LLAMA_SERVER="$(bash scripts/llama_server.sh | tail -n 1)"
mkdir -p "$OUT"
workloads=("${@:-mixed decode-heavy}")
read -r -a workloads <<<"${workloads[*]}"

wait_port() { # url
    for _ in $(seq 600); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done
    echo "server at $1 did not come up" >&2
    return 1
}

# A fresh server for every (workload, arrival) run: both servers keep prompt caches (cobatch's
# prefix cache, llama-server's per-slot prompts), and the same seeded workload run twice would hit
# what the previous run left behind. The servers take turns on each (workload, arrival), so the
# two sides of a comparison run minutes apart on a host whose speed drifts, and a chain cut short
# leaves whole pairs.
server_cmd() { # label -> sets PORT and CMD
    case "$1" in
    cobatch) PORT=18080 CMD=("$BIN" serve -m "$MODEL" --port 18080 --threads "$THREADS" "${COBATCH_EXTRA[@]}") ;;
    llama-server-np16) PORT=18081 CMD=("$LLAMA_SERVER" -m "$MODEL" --port 18081 -t "$THREADS" -np 16 -c "$LLAMA_CTX" -fa on --no-webui "${LLAMA_EXTRA[@]}") ;;
    llama-server-np16-kvu) PORT=18082 CMD=("$LLAMA_SERVER" -m "$MODEL" --port 18082 -t "$THREADS" -np 16 -c "$LLAMA_CTX" -kvu -fa on --no-webui "${LLAMA_EXTRA[@]}") ;;
    esac
}

run_one() { # label, workload, arrival (cN or rR)
    local label="$1" wl="$2" a="$3"
    server_cmd "$label"
    local how=(--max-concurrency "${a#c}")
    [ "${a:0:1}" = r ] && how=(--request-rate "${a#r}")
    "${CMD[@]}" >"$OUT/$label-$wl-$a.server.log" 2>&1 &
    local pid=$!
    wait_port "http://127.0.0.1:$PORT"
    echo "== $label $wl ${how[*]}" >&2
    "$BIN" loadgen -m "$MODEL" --url "http://127.0.0.1:$PORT" --workload "$wl" "${how[@]}" \
        "${LOADGEN_EXTRA[@]}" --label "$label" --json "$OUT/$label-$wl-$a.json" | tee "$OUT/$label-$wl-$a.md" | tail -n 1 >&2
    kill -TERM "$pid"
    wait "$pid" || true
}

arrivals=()
for c in $CONC; do arrivals+=("c$c"); done
for r in $RATES; do arrivals+=("r$r"); done
for wl in "${workloads[@]}"; do
    for a in "${arrivals[@]}"; do
        for label in cobatch llama-server-np16 llama-server-np16-kvu; do
            if [ -n "${ONLY_SERVERS:-}" ] && ! grep -qw -- "$label" <<<"$ONLY_SERVERS"; then continue; fi
            run_one "$label" "$wl" "$a"
        done
    done
done
