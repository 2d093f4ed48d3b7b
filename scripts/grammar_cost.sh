#!/usr/bin/env bash
# What a grammar costs per token, ours against llama.cpp's own sampler (scripts/grammar_cost.c): the
# JSON, C and arithmetic grammars of the pinned llama.cpp tree with outputs they take, and two hostile
# grammars (ten nested loops; a stack that unfolds through 120 levels at one character). llama.cpp's
# side is stopped after 20 s. Needs a release build in build/.
# usage: scripts/grammar_cost.sh [MODEL]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
L="$(ls -d "$HOME"/.cache/cobatch/llama.cpp-*[0-9a-f] | head -1)"
work="$(mktemp -d)"
g++ -O2 -x c "$root/scripts/grammar_cost.c" -x none -I"$L/install/include" -o "$work/grammar_cost" \
    "$root"/build/libcobatch_engine.a "$root"/build/libcobatch_util.a "$root"/build/libcobatch_core.a \
    "$L"/install/lib/libllama-common.a "$L"/install/lib/libllama-common-base.a "$L"/install/lib/libllama.a \
    "$L"/install/lib/libggml.a "$L"/install/lib/libggml-cpu.a "$L"/install/lib/libggml-base.a -lgomp -lm -lpthread || exit 1
python3 - "$L/src/grammars" "$work" <<'PY'
import json, sys
src, out = sys.argv[1], sys.argv[2]
doc = json.dumps({"name": "Ada Lovelace", "age": 36, "tags": ["math", "engine", {"deep": [1, 2, 3.5e3]}], "ok": True,
                  "note": "a \"quoted\" string, with unicode \u00e9 and more text"}, indent=1)
unfold = "".join(f'r{i} ::= "x" r{i + 1} n\n' for i in range(120)) + 'r120 ::= "y"\nroot ::= r0\nn ::= ""' + \
    "".join(f' | "{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{i % 10}"' for i in range(1000)) + "\n"
cases = {"json": (open(f"{src}/json.gbnf").read(), doc),
         "c": (open(f"{src}/c.gbnf").read(), "int main(){int a = 1;while(a<10){a = a+1;}return a;}"),
         "arithmetic": (open(f"{src}/arithmetic.gbnf").read(), "(1+2)*3-4/5"),
         "nested-loops": ("root ::= [a-z ]++++++++++*", "hello world and more"),
         "unfold-120": (unfold, "x" * 120 + "yab0")}
for name, (g, o) in cases.items():
    open(f"{out}/{name}", "wb").write(g.encode() + b"\0" + o.encode())
PY
for c in json c arithmetic nested-loops unfold-120; do
    echo "== $c"
    "$work/grammar_cost" "$model" "$work/$c" | tail -2
    LLAMA=1 timeout 20 "$work/grammar_cost" "$model" "$work/$c" | tail -1 || echo "llama.cpp: stopped after 20 s"
done
rm -rf "$work"
