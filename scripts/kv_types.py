#!/usr/bin/env python3
"""What each KV cache type costs and gives: its KV memory, its speed (cobatch bench, decode-heavy and
mixed, the same build taking turns), and its drift from f16 (the prompt log-probabilities of a fixed
text, and whether greedy answers stay the same), through a real `cobatch serve`.

usage: kv_types.py BUILD/cobatch MODEL [--types f16,q8_0,q5_1,q4_0] [--repeat 3]
Prints one Markdown table; the raw figures go to kv_types.json."""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TEXT = ("The history of the printing press begins in the fifteenth century when movable type changed how "
        "books were made. Before that time every copy of a text was written by hand, which was slow and "
        "expensive. Printers in many cities soon set up workshops, and the price of books fell quickly. "
        "Scholars could compare the same edition of a work, news spread faster, and reading became common "
        "among merchants and craftsmen. Over the next centuries presses grew larger and faster, steam power "
        "replaced human muscle, and newspapers reached millions of readers every morning across the world.")
ASKS = ["What is the capital of France?", "Name three colors.", "Why is the sky blue?",
        "Write a haiku about the sea.", "What is 12 times 7?", "List four fruits.", "Who wrote Hamlet?",
        "Explain rain to a child.", "Describe a cat in one sentence.", "What is a prime number?",
        "Give two uses of salt.", "How do plants make food?", "What does a compass do?",
        "Name a famous painter.", "Why do we sleep?", "What is the largest ocean?"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def serve(binary, model, t):
    """Starts a server with cache type t (K and V); returns (process, port, KV GB from its log)."""
    port = free_port()
    log = tempfile.TemporaryFile()
    p = subprocess.Popen([binary, "serve", "-m", model, "--port", str(port), "-ctk", t, "-ctv", t],
                         stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except OSError:
            if p.poll() is not None:
                log.seek(0)
                sys.exit(f"cobatch serve -ctk {t} failed: {log.read().decode()[-2000:]}")
            time.sleep(0.2)
    log.seek(0)
    m = re.search(r"KV: .*?\(([0-9.]+) GB", log.read().decode())
    return p, port, float(m.group(1)) if m else None


def drift_figures(binary, model, t):
    p, port, gb = serve(binary, model, t)
    try:
        lp = post(port, "/v1/completions", {"prompt": TEXT, "max_tokens": 0, "echo": True, "logprobs": 0})
        logprobs = lp["choices"][0]["logprobs"]["token_logprobs"]
        answers = [post(port, "/v1/completions", {"prompt": a, "max_tokens": 64, "temperature": 0,
                                                  "logprobs": 0})["choices"][0]["logprobs"]["tokens"] for a in ASKS]
    finally:
        p.terminate()
        p.wait()
    return {"kv_gb": gb, "logprobs": logprobs, "answers": answers}


def bench(binary, model, t, workload):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([binary, "bench", "-m", model, "--workload", workload, "--modes", "continuous",
                        "--no-ceiling", "-ctk", t, "-ctv", t, "--json", f.name],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = json.load(open(f.name))["configurations"][0]["result"]
    return r["output_throughput"], r["total_token_throughput"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--types", default="f16,q8_0,q5_1,q4_0")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    types = a.types.split(",")
    if types[0] != "f16":
        types.insert(0, "f16")
    drift = {t: drift_figures(a.binary, a.model, t) for t in types}
    speed = {t: {"decode-heavy": [], "mixed": []} for t in types}
    for _ in range(a.repeat):  # the types take turns, round after round
        for w in ("decode-heavy", "mixed"):
            for t in types:
                speed[t][w].append(bench(a.binary, a.model, t, w))
    ref = drift["f16"]
    print("| K and V | KV memory | decode-heavy out tok/s | mixed total tok/s | prompt log-prob. "
          "difference, mean / max | greedy answers the same | tokens before the first difference |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for t in types:
        d = drift[t]
        diffs = [abs(x - y) for x, y in zip(d["logprobs"][1:], ref["logprobs"][1:])]
        same = sum(x == y for x, y in zip(d["answers"], ref["answers"]))
        agree = 0
        for x, y in zip(d["answers"], ref["answers"]):
            k = 0
            while k < min(len(x), len(y)) and x[k] == y[k]:
                k += 1
            agree += k
        dh = statistics.median(s[0] for s in speed[t]["decode-heavy"])
        mx = statistics.median(s[1] for s in speed[t]["mixed"])
        base_dh = statistics.median(s[0] for s in speed["f16"]["decode-heavy"])
        base_mx = statistics.median(s[1] for s in speed["f16"]["mixed"])
        print(f"| {t} | {d['kv_gb']:.2f} GB ({d['kv_gb'] / ref['kv_gb']:.2f}x) | {dh:.1f} ({dh / base_dh:.2f}x) | "
              f"{mx:.1f} ({mx / base_mx:.2f}x) | {statistics.mean(diffs):.4f} / {max(diffs):.3f} | "
              f"{same} of {len(ASKS)} | {agree} of {sum(len(y) for y in ref['answers'])} |")
    json.dump({"drift": drift, "speed": speed}, open("kv_types.json", "w"))


if __name__ == "__main__":
    main()
