"""Prompt log-probabilities and the prefix cache (BENCHMARKS.md, "Prompt log-probabilities and the
prefix cache"): a loglikelihood job the way lm-evaluation-harness sends it (8 contexts of ~400
tokens, 4 short continuations each, one request holding the 32 token-id prompts, echo, logprobs 1,
max_tokens 0) against the same 32 prompts without echo (max_tokens 1, so the prefix cache serves
each context's later prompts). The difference is what a request that wants its prompt's rows gives
up by computing them instead of taking cached cells. Fresh contexts each run. Needs httpx (the e2e
venv has it):
    ~/.cache/cobatch/e2e-*/venv/bin/python scripts/bench_echo_cache.py [build/cobatch] [MODEL]"""
import os, statistics, subprocess, sys, tempfile, time
import httpx
import cbserve
BIN = sys.argv[1] if len(sys.argv) > 1 else "build/cobatch"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ("The river rose slowly through the night, and by morning the low fields near the village were under "
        "water. Farmers moved their animals to the hills while the children watched from the bridge. ") * 9
CONTS = [" The water went down.", " It rained again.", " Nobody noticed.", " The bridge held."]


def tok(url, text):
    return httpx.post(url + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]


def run(url, echo, tag):
    prompts = [tok(url, f"Story {tag}-{i}. " + TEXT + c) for i in range(8) for c in CONTS]
    body = {"prompt": prompts, "temperature": 0}
    body.update({"echo": True, "logprobs": 1, "max_tokens": 0} if echo else {"max_tokens": 1})
    m0 = cbserve.metrics(url); t0 = time.time()
    r = httpx.post(url + "/v1/completions", json=body, timeout=900)
    wall = time.time() - t0; m1 = cbserve.metrics(url)
    assert r.status_code == 200 and len(r.json()["choices"]) == 32, r.text[:300]
    hits = m1["cobatch:prefix_cache_hits_total"] - m0["cobatch:prefix_cache_hits_total"]
    return wall, sum(len(p) for p in prompts), hits


p, url = cbserve.serve(BIN, MODEL)
res = {}
try:
    httpx.post(url + "/v1/completions", json={"prompt": "warm", "max_tokens": 2})
    for rep in range(3):
        for echo in ([True, False] if rep % 2 == 0 else [False, True]):
            w, n, h = run(url, echo, f"{rep}{int(echo)}")
            res.setdefault(echo, []).append((w, n, h))
            print("echo" if echo else "plain", rep, "%.2f s" % w, "prompt tokens", n, "from the cache", h, flush=True)
finally:
    p.terminate(); p.wait()
for echo, v in res.items():
    print("echo+logprobs, max_tokens 0" if echo else "no echo, max_tokens 1", "median wall %.2f s" %
          statistics.median(x[0] for x in v), "prompt tokens", v[0][1], "cached", [x[2] for x in v])
