"""What a grammar costs per generated token (BENCHMARKS.md, "Structured output: what a grammar
costs"): 16 concurrent streamed completions through `cobatch serve`, each 64 tokens (ignore_eos),
unconstrained; constrained by a permissive grammar (letters and punctuation: most tokens the model
picks pass the check); constrained by a JSON schema (most tokens refused, so the row is masked);
and 8 + 8 mixed, where the unconstrained half shows what the other half's grammars cost it (with
ignore_eos a finished JSON leaves only the end token allowed, so every further token is refused and
masked: the worst case; "stopping" ends the constrained requests when their JSON is complete). Per
request TPOT = (last token - first token) / (tokens - 1), from the stream; median over requests,
then over 3 rounds taking turns. Needs httpx (the e2e venv has it):
    ~/.cache/cobatch/e2e-*/venv/bin/python scripts/bench_grammar.py [build/cobatch] [MODEL]"""
import json, os, statistics, subprocess, sys, tempfile, threading, time
import httpx
import cbserve
BIN = sys.argv[1] if len(sys.argv) > 1 else "build/cobatch"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "models/SmolLM2-135M-Instruct.Q4_1.gguf"
LETTERS = "root ::= [a-zA-Z ,.'\\n]*"
SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"}},
    "required": ["name", "count"], "additionalProperties": False}}}, "required": ["items"],
    "additionalProperties": False}


def one(url, i, kind, out):
    body = {"prompt": f"List {i + 3} things found in a kitchen, with counts:", "max_tokens": 64, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if kind == "schema_stop":  # as a real client: the request ends when its JSON is complete
        body["ignore_eos"] = False
    if kind == "letters":
        body["grammar"] = LETTERS
    elif kind.startswith("schema"):
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "k", "schema": SCHEMA}}
    times, n = [], 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                n = d["usage"]["completion_tokens"]
            elif d["choices"] and d["choices"][0]["text"]:
                times.append(time.time())
    if n > 1 and len(times) > 1:
        out.append((kind, (times[-1] - times[0]) / (n - 1) * 1000))


def round_(url, kinds):
    out = []
    ths = [threading.Thread(target=one, args=(url, i, k, out)) for i, k in enumerate(kinds)]
    [t.start() for t in ths]; [t.join() for t in ths]
    return out


p, url = cbserve.serve(BIN, MODEL)
runs = {"plain x16": ["plain"] * 16, "letters grammar x16": ["letters"] * 16, "json schema x16": ["schema"] * 16,
        "8 plain + 8 schema": ["plain", "schema"] * 8, "8 plain + 8 schema, stopping": ["plain", "schema_stop"] * 8}
res = {}
try:
    httpx.post(url + "/v1/completions", json={"prompt": "warm", "max_tokens": 2})
    for rep in range(3):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for name in order:
            out = round_(url, runs[name])
            for kind in set(k for k, _ in out):
                med = statistics.median(t for k, t in out if k == kind)
                res.setdefault((name, kind), []).append(med)
                print(rep, name, kind, "TPOT median %.1f ms" % med, flush=True)
finally:
    p.terminate(); p.wait()
for (name, kind), v in res.items():
    print(f"{name:22s} {kind:8s} TPOT median of rounds {statistics.median(v):.1f} ms  rounds {['%.1f' % x for x in v]}")
