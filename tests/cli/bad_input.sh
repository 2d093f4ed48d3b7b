#!/usr/bin/env bash
# Bad input to the CLI: each case must exit non-zero (never by a signal) with a clear message.
# usage: bad_input.sh BUILD/cobatch MODEL
set -u
bin="$1"
model="$2"
source "$(dirname "$0")/lib.sh"
long="$(python3 -c 'print("word " * 3000)')"
expect "empty prompt" 2 "prompt is empty" "$bin" run -m "$model" -p ""
expect "no prompt" 2 "no prompt" "$bin" run -m "$model"
expect "prompt longer than the context" 1 "context holds" "$bin" run -m "$model" -c 512 -p "$long"
expect "missing model file" 1 "cannot read model file" "$bin" run -m /nonexistent/model.gguf -p hi
expect "not a model" 1 "failed to load model" "$bin" run -m "$0" -p hi
expect "unknown flag" 2 "unknown option '--bogus'" "$bin" run -m "$model" -p hi --bogus
expect "bad number" 2 "--max-num-seqs takes a count from 1 to 256 or 'auto'" "$bin" run -m "$model" -p hi --max-num-seqs abc
expect "zero sequences" 2 "--max-num-seqs takes a count from 1 to 256 or 'auto'" "$bin" run -m "$model" -p hi --max-num-seqs 0
expect "memory-centric split" 1 "needs the unified KV layout" "$bin" run -m "$model" -p hi --max-num-seqs auto --kv-layout split
expect "negative swap space" 2 "--swap-space takes a number" "$bin" run -m "$model" -p hi --swap-space -1
expect "negative cache ram" 2 "--cache-ram takes a number" "$bin" run -m "$model" -p hi --cache-ram -1
expect "host tier in the unified layout" 1 "cache_ram (the prefix cache's host-memory tier) needs the split KV layout" \
    "$bin" run -m "$model" -p hi --cache-ram 1 --kv-layout unified
# a build without the RPC backend says so; one with it, that nobody answers on port 1
expect "--rpc nobody serves" 1 "--rpc: " "$bin" run -m "$model" -p hi --rpc 127.0.0.1:1
expect "zero max tokens" 2 "-n takes a whole number" "$bin" run -m "$model" -p hi -n 0
expect "bad temperature" 2 "--temp takes a number" "$bin" run -m "$model" -p hi --temp -1
expect "bad mode" 2 "--mode is continuous, static or sequential (got 'fast')" "$bin" run -m "$model" -p hi --mode fast
expect "bad flash attention" 2 "--flash-attn is on, off or auto (got 'maybe')" "$bin" run -m "$model" -p hi --flash-attn maybe
expect "bad KV cache type" 2 "--cache-type-k is auto, f16, f32, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1 (got 'q3')" \
    "$bin" run -m "$model" -p hi --cache-type-k q3
expect "quantized V without flash attention" 1 "cache_type_v q4_0: a quantized V cache needs flash attention" \
    "$bin" run -m "$model" -p hi -ctv q4_0 --flash-attn off
check "run with a q8_0 cache" '"$bin" run -m "$model" -p hi -n 4 -ctk q8_0 -ctv q8_0 >/dev/null'
expect "bad repack" 2 "--repack is auto, on or off (got 'amx')" "$bin" run -m "$model" -p hi --repack amx
expect "unknown limit" 2 "--limit takes NAME=N" "$bin" run -m "$model" -p hi --limit depth=3
expect "zero limit" 2 "--limit takes NAME=N" "$bin" run -m "$model" -p hi --limit grammar-states=0
# the start-up line names the weights' buffers and the mode; no AMX unless forced
check "run --no-repack says so" '"$bin" run -m "$model" -p hi -n 2 --no-repack 2>&1 >/dev/null | grep -q "weights in CPU_Mapped (--repack off)"'
check "run: no AMX by default" '"$bin" run -m "$model" -p hi -n 2 2>&1 >/dev/null | grep -q "weights in [A-Za-z_,]* (--repack auto)" &&
  ! "$bin" run -m "$model" -p hi -n 2 2>&1 >/dev/null | grep -q "weights in [A-Za-z_,]*AMX"'
expect "flag without value" 2 "needs a value" "$bin" run -m "$model" -p hi --top-k
expect "flag=value, bad value" 2 "--temp takes a number" "$bin" run -m "$model" -p hi --temp=-1
expect "flag=value on a switch" 2 "takes no value" "$bin" run -m "$model" -p hi --stats=1
expect "pacing out of range" 2 "--step-pacing takes a share from 0.05 to 16 or 'off' (got '0')" "$bin" serve -m "$model" --step-pacing 0
expect "serve: empty api key" 2 "--api-key needs a value that is not empty" "$bin" serve -m "$model" --api-key=
expect "serve: empty model name" 2 "--served-model-name needs a value" "$bin" serve -m "$model" --served-model-name ""
expect "unknown command" 2 "unknown command" "$bin" frobnicate
expect "budget below seqs" 1 "must be at least max_num_seqs" "$bin" run -m "$model" -p hi --max-num-seqs 8 --max-num-batched-tokens 4
finish
