#!/usr/bin/env bash
# A model split across hosts, on loopback: llama.cpp's ggml-rpc-server on 127.0.0.1 runs every
# layer, cobatch keeps the embeddings and the sampling. Greedy outputs are the local ones (one
# request, a batch of eight decoding together, and the layers split over two servers), and the bad
# ways to name a server are refused.
# usage: rpc.sh BUILD/cobatch MODEL GGML-RPC-SERVER   (a build with -DCOBATCH_RPC=ON)
set -u
bin="$1"
model="$2"
server="$3"
dir="$(mktemp -d)"
srv=""
trap 'kill $srv 2>/dev/null; rm -rf "$dir"' EXIT
source "$(dirname "$0")/lib.sh"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start() { # port, log: a server, waited for until it listens
    "$server" -H 127.0.0.1 -p "$1" -t 1 >"$2" 2>&1 &
    srv="$srv $!"
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null && break
        sleep 0.1
    done
}
port="$(free_port)"
port2="$(free_port)"
while [ "$port2" = "$port" ]; do port2="$(free_port)"; done
start "$port" "$dir/server.log"
start "$port2" "$dir/server2.log"
rpc=(--rpc "127.0.0.1:$port")
flags=(-m "$model" -t 1 -c 1024)

# one request at a time: the same greedy text
for p in "The capital of France is" "List three colours:" "def fib(n):"; do
    "$bin" run "${flags[@]}" -p "$p" -n 24 >"$dir/local.txt" 2>"$dir/local.err"
    "$bin" run "${flags[@]}" "${rpc[@]}" --verbose -p "$p" -n 24 >"$dir/rpc.txt" 2>"$dir/rpc.err"
    check "run '$p': the same greedy output over RPC" 'cmp -s "$dir/local.txt" "$dir/rpc.txt" && [ -s "$dir/rpc.txt" ]'
    check "run '$p': the layers were on the RPC server" 'grep -q "assigned to device RPC0" "$dir/rpc.err"'
done

# the layers split over two servers (two hosts): still the same text
"$bin" run "${flags[@]}" --rpc "127.0.0.1:$port,127.0.0.1:$port2" --verbose -p "The capital of France is" -n 24 \
    >"$dir/two.txt" 2>"$dir/two.err"
"$bin" run "${flags[@]}" -p "The capital of France is" -n 24 >"$dir/local.txt" 2>/dev/null
check "two servers: the same greedy output" 'cmp -s "$dir/local.txt" "$dir/two.txt"'
check "two servers: each holds layers" 'grep -q "assigned to device RPC0" "$dir/two.err" && grep -q "assigned to device RPC1" "$dir/two.err"'

# eight requests decoding together (one batch shape both ways): the same outputs
python3 - "$dir/job.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        body = {"prompt": f"Question {i}: what is {i} plus {i + 1}? Answer:", "max_tokens": 16, "temperature": 0}
        f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
PY
texts() { python3 -c 'import json, sys
rows = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["custom_id"])
for r in rows: print(r["custom_id"], json.dumps(r["response"]["body"]["choices"][0]["text"]))' "$1"; }
"$bin" batch "${flags[@]}" --max-num-seqs 8 --no-progress -i "$dir/job.jsonl" -o "$dir/local.jsonl" 2>"$dir/b1.err"
"$bin" batch "${flags[@]}" "${rpc[@]}" --max-num-seqs 8 --no-progress -i "$dir/job.jsonl" -o "$dir/rpc.jsonl" 2>"$dir/b2.err"
texts "$dir/local.jsonl" >"$dir/local.out" 2>&1
texts "$dir/rpc.jsonl" >"$dir/rpc.out" 2>&1
check "batch of 8: the same greedy outputs over RPC" '[ "$(wc -l <"$dir/rpc.out")" -eq 8 ] && cmp -s "$dir/local.out" "$dir/rpc.out"'
[ "$fail" -eq 0 ] || { diff "$dir/local.out" "$dir/rpc.out"; cat "$dir/b2.err"; }

# bad ways to name a server: a clear message and exit 1 before ggml sees them (a listener that is
# not a ggml-rpc-server is beyond this: ggml's handshake aborts the process)
closed="$(free_port)"
expect "--rpc to a port nobody listens on" 1 "no RPC server answers at 127.0.0.1:$closed" \
    "$bin" run "${flags[@]}" --rpc "127.0.0.1:$closed" -p hi -n 1
expect "--rpc without a port" 1 "is not HOST:PORT" "$bin" run "${flags[@]}" --rpc 127.0.0.1 -p hi -n 1
expect "--rpc with a bad port" 1 "is not HOST:PORT" "$bin" run "${flags[@]}" --rpc "127.0.0.1:99999" -p hi -n 1
expect "--rpc with an empty entry" 1 "HOST:PORT" "$bin" run "${flags[@]}" --rpc "127.0.0.1:$port,," -p hi -n 1
expect "--rpc with a server listed twice" 1 "already listed" \
    "$bin" run "${flags[@]}" --rpc "127.0.0.1:$port,127.0.0.1:$port" -p hi -n 1
expect "--rpc with one server under two names" 1 "already listed" \
    "$bin" run "${flags[@]}" --rpc "127.0.0.1:$port,localhost:$port" -p hi -n 1
expect "--rpc with an IPv6 address" 1 "not IPv6" "$bin" run "${flags[@]}" --rpc "[::1]:$port" -p hi -n 1
expect "--rpc with a bare IPv6 address" 1 "not IPv6" "$bin" run "${flags[@]}" --rpc "::1:$port" -p hi -n 1
finish
