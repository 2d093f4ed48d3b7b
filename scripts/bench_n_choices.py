"""n choices against n separate requests through `cobatch serve` (BENCHMARKS.md, "n choices share
one prefill"): one request with n=8 and eight concurrent requests of the same ~476-token prompt
(a fresh prompt each run, so nothing is cached before), with the prefix cache on and off; wall time
and the prompt tokens the cache supplied. Needs httpx (the e2e venv has it):
    ~/.cache/cobatch/e2e-*/venv/bin/python scripts/bench_n_choices.py [build/cobatch] [MODEL]"""
import json, os, subprocess, sys, tempfile, time, threading, statistics
import httpx
import cbserve
BIN = sys.argv[1] if len(sys.argv) > 1 else "build/cobatch"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "models/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = ("The history of the printing press begins in the fifteenth century when movable type changed how books "
          "were made. Before that time every copy of a text was written by hand, which was slow and expensive. ") * 12 + "Summary:"


def run(url, mode, tag=""):
    body = {"prompt": tag + PROMPT, "max_tokens": 32, "temperature": 1.0, "seed": 3, "ignore_eos": True}
    m0 = cbserve.metrics(url); t0 = time.time()
    if mode == "n8":
        r = httpx.post(url + "/v1/completions", json={**body, "n": 8}, timeout=600).json()
        assert len(r["choices"]) == 8, r
    else:
        ths = [threading.Thread(target=lambda i=i: httpx.post(url + "/v1/completions", json={**body, "seed": 3 + i},
                                                              timeout=600).raise_for_status()) for i in range(8)]
        [t.start() for t in ths]; [t.join() for t in ths]
    wall = time.time() - t0; m1 = cbserve.metrics(url)
    q = m1["cobatch:prefix_cache_queries_total"] - m0["cobatch:prefix_cache_queries_total"]
    h = m1["cobatch:prefix_cache_hits_total"] - m0["cobatch:prefix_cache_hits_total"]
    return wall, h

res = {}
for cfg, args in [("cache", ()), ("nocache", ("--no-prefix-caching",))]:
    p, url = cbserve.serve(BIN, MODEL, *args)
    try:
        n_prompt = httpx.post(url + "/tokenize", json={"prompt": PROMPT}).json()["count"]
        httpx.post(url + "/v1/completions", json={"prompt": "warm", "max_tokens": 2})
        for rep in range(3):
            for mode in (["n8", "sep"] if rep % 2 == 0 else ["sep", "n8"]):
                httpx.post(url + "/v1/completions", json={"prompt": "flush", "max_tokens": 1})
                w, h = run(url, mode, f"Copy {rep} ({mode}). ")
                res.setdefault((cfg, mode), []).append((w, h))
                print(cfg, mode, rep, "%.2f s" % w, "hits", h, "prompt", n_prompt, flush=True)
    finally:
        p.terminate(); p.wait()
for k, v in res.items():
    print(k, "median wall %.2f" % statistics.median(x[0] for x in v), "hits", [x[1] for x in v])
