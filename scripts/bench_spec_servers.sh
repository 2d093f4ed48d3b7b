#!/usr/bin/env bash
# Speculation beside llama-server: the `edit` workload (an agent rewriting a file it read; greedy)
# through `cobatch loadgen`, at 1, 4 and 16 clients, against cobatch serve with --spec off, ngram,
# ngram-own and ngram with each request's prediction sent, and llama-server without speculation and
# with its n-gram drafters (--spec-type ngram-simple, ngram-mod; -np = clients). A fresh server per
# run, the servers taking turns inside each round; prints each configuration's median over ROUNDS.
# usage: scripts/bench_spec_servers.sh      env: ROUNDS=3 CLIENTS="1 4 16" OUT=bench-results/spec
#        ONLY="cobatch-off llama-none ..." (a subset of the labels below)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-results/spec}"
BIN="${BIN:-build/cobatch}"
MODEL="${MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-$(nproc)}"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-1 4 16}"
LABELS="${ONLY:-cobatch-off cobatch-ngram cobatch-ngram-own cobatch-prediction llama-none llama-ngram-simple llama-ngram-mod}"
LLAMA_EXTRA=()
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then LLAMA_EXTRA=(--no-repack); fi # (compare_servers.sh)
LLAMA_SERVER="$(bash scripts/llama_server.sh | tail -n 1)"
PORT=18095
mkdir -p "$OUT"

prompts_for() { case "$1" in 1) echo 6 ;; 4) echo 8 ;; *) echo "$1" ;; esac; }

run_one() { # label clients round
    local label="$1" c="$2" r="$3" cmd lg=()
    case "$label" in
    cobatch-off) cmd=("$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --spec off) ;;
    cobatch-ngram) cmd=("$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --spec ngram) ;;
    cobatch-ngram-own) cmd=("$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --spec ngram-own) ;;
    cobatch-prediction) cmd=("$BIN" serve -m "$MODEL" --port $PORT -t "$THREADS" --spec ngram) lg=(--prediction) ;;
    llama-*)
        cmd=("$LLAMA_SERVER" -m "$MODEL" --port $PORT -t "$THREADS" -np "$c" -c $((2048 * c)) -fa on --no-webui
            "${LLAMA_EXTRA[@]}")
        [ "$label" != llama-none ] && cmd+=(--spec-type "${label#llama-}")
        ;;
    esac
    "${cmd[@]}" >"$OUT/$label-c$c-r$r.server.log" 2>&1 &
    local pid=$!
    for _ in $(seq 600); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.2; done
    "$BIN" loadgen -m "$MODEL" --url "http://127.0.0.1:$PORT" --endpoint /v1/chat/completions --workload edit \
        --num-prompts "$(prompts_for "$c")" --max-concurrency "$c" "${lg[@]}" --label "$label" \
        --json "$OUT/$label-c$c-r$r.json" >"$OUT/$label-c$c-r$r.md"
    [ "${label%%-*}" = cobatch ] && curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/$label-c$c-r$r.metrics" || true
    kill -TERM "$pid"
    wait "$pid" || true
    echo "== $label c$c r$r: $(tail -n 1 "$OUT/$label-c$c-r$r.md" | cut -d'|' -f3,7,10)" >&2
}

for r in $(seq "$ROUNDS"); do
    for c in $CLIENTS; do
        for label in $LABELS; do run_one "$label" "$c" "$r"; done
    done
done
python3 - "$OUT" "$ROUNDS" "$CLIENTS" "$LABELS" <<'EOF'
import json, statistics, sys
out, rounds, clients, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
print("| clients | server | out tok/s, median (runs) | x cobatch-off | TPOT mean ms | ITL p99 ms | drafts held / checked |")
print("|---:|---|---|---:|---:|---:|---|")
for c in clients:
    med = {}
    for lab in labels:
        runs = []
        for r in range(1, rounds + 1):
            try:
                runs.append((json.load(open(f"{out}/{lab}-c{c}-r{r}.json")), r))
            except OSError:
                pass
        if not runs:
            continue
        runs.sort(key=lambda x: x[0]["output_throughput"])
        m, mr = runs[(len(runs) - 1) // 2]
        med[lab] = m["output_throughput"]
        held = ""
        try:
            mt = {line.split("{")[0]: float(line.split()[-1]) for line in open(f"{out}/{lab}-c{c}-r{mr}.metrics")
                  if line.startswith("cobatch:spec_decode_num")}
            held = "%d / %d" % (mt.get("cobatch:spec_decode_num_accepted_tokens_total", 0),
                                mt.get("cobatch:spec_decode_num_draft_tokens_total", 0))
        except OSError:
            pass
        base = med.get("cobatch-off")
        print("| %s | %s | %.1f (%s) | %s | %.1f | %.1f | %s |" % (c, lab, m["output_throughput"],
              ", ".join("%.1f" % d["output_throughput"] for d, _ in runs), "%.2fx" % (m["output_throughput"] / base) if base else "",
              m["tpot_ms"]["mean"], m["itl_ms"]["p99"], held))
EOF
