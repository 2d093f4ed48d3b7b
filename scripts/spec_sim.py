"""Recorded greedy outputs of an edit task for scripts/spec_sim.c (what speculation would give): 16
functions from Python's standard library, each with "repeat this code with the function renamed",
answered greedily by `cobatch serve` (max 400 tokens); writes "P n ids" / "O n ids" lines (the prompt
as the chat template renders it, the output re-tokenized from its text).
usage: spec_sim.py BIN MODEL OUT   (needs httpx: tests/e2e's virtual environment has it)"""
import ast, inspect, sys
import httpx
import argparse, json, textwrap, string, random, statistics, shlex, difflib, csv  # sources to edit
from cbserve import serve

BIN, MODEL, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
funcs = []
for mod in (argparse, json, textwrap, string, random, statistics, shlex, difflib, csv):
    tree = ast.parse(inspect.getsource(mod))
    src = inspect.getsource(mod).splitlines()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and 12 <= node.end_lineno - node.lineno <= 40:
            funcs.append((node.name, "\n".join(src[node.lineno - 1:node.end_lineno])))
funcs = funcs[:16]

p, url = serve(BIN, MODEL, "--temp", "0", "--max-num-seqs", "4")
try:
    with open(OUT, "w") as f:
        for name, code in funcs:
            msgs = [{"role": "user", "content": f"Repeat this Python code exactly, but rename the function `{name}` "
                                                f"to `{name}_v2`:\n\n```python\n{code}\n```"}]
            prompt = httpx.post(url + "/apply-template", json={"messages": msgs}, timeout=60).json()["prompt"]
            r = httpx.post(url + "/v1/completions", timeout=600,
                           json={"prompt": prompt, "max_tokens": 400, "temperature": 0}).json()
            text = r["choices"][0]["text"]
            tok = lambda s, sp: httpx.post(url + "/tokenize", json={"content": s, "add_special": sp}).json()["tokens"]
            pi, oi = tok(prompt, True), tok(text, False)
            f.write(f"P {len(pi)} {' '.join(map(str, pi))}\nO {len(oi)} {' '.join(map(str, oi))}\n")
            print(f"{name}: prompt {len(pi)} tokens, output {len(oi)}", flush=True)
finally:
    p.terminate()
