#!/usr/bin/env python3
"""What POST /v1/embeddings costs and gives, through a real `cobatch serve`:

1. throughput: N sentence inputs (8-30 tokens) one request after another (each its own pass), as one
   request of N inputs, and from 16 clients of one input a request (the engine batches requests);
2. generation beside embeddings: `cobatch loadgen` (random, 64 prompt tokens, --gen-output output
   tokens, --gen-prompts requests, 8 clients) alone, then with 2 clients sending embedding requests of
   8 inputs all along, at the default share (--embeddings-share 0.25) and unbounded (1): ITL p50 / p99
   and output tok/s of the generation, inputs/s of the embeddings;
3. memory: the server's resident memory after a chat and an embedding request, with and without
   --no-embeddings.

Each configuration runs on a fresh server, the configurations taking turns, --repeat times; the
tables show medians. Prints Markdown; every figure goes to --json.

usage: bench_embeddings.py BUILD/cobatch MODEL [--repeat 3] [--inputs 256] [--gen-prompts 16]
       [--gen-output 64] [--json FILE] [-- serve flags]"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

WORDS = ("the a small large old new red quiet busy bright cat dog river city market doctor teacher train "
         "garden window storm letter song bridge mountain school kitchen ship forest road village lamp "
         "runs sleeps opens carries finds watches builds paints follows answers near under across behind "
         "before after every morning slowly today again").split()


def sentences(n, seed=1):
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(6, 24))).capitalize() + "." for _ in range(n)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=900):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


class Server:
    def __init__(self, binary, model, flags):
        self.port = free_port()
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen([binary, "serve", "-m", model, "--port", str(self.port), *flags],
                                  stdout=subprocess.DEVNULL, stderr=self.log)
        for _ in range(1200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except OSError:
                if self.p.poll() is not None:
                    self.log.seek(0)
                    sys.exit(f"cobatch serve {' '.join(flags)} failed: {self.log.read().decode()[-2000:]}")
                time.sleep(0.2)
        sys.exit("cobatch serve did not start")

    def rss_mb(self):
        """Resident and peak resident memory (VmRSS, VmHWM) in MB."""
        fields = dict(line.split(":", 1) for line in open(f"/proc/{self.p.pid}/status"))
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024

    def stop(self):
        self.p.terminate()
        self.p.wait(120)


def embed(port, inputs):
    return post(port, "/v1/embeddings", {"input": inputs, "model": "m"})


def throughput(port, texts):
    """inputs/s: one at a time, one request of all, 16 clients of one input each."""
    embed(port, texts[:8])  # warm up
    out = {}
    t = time.monotonic()
    for x in texts:
        embed(port, x)
    out["one_at_a_time"] = len(texts) / (time.monotonic() - t)
    t = time.monotonic()
    r = embed(port, texts)
    out["one_request"] = len(texts) / (time.monotonic() - t)
    out["tokens"] = r["usage"]["prompt_tokens"]
    queue, lock = list(texts), threading.Lock()

    def client():
        while True:
            with lock:
                if not queue:
                    return
                x = queue.pop()
            embed(port, x)
    t = time.monotonic()
    cs = [threading.Thread(target=client) for _ in range(16)]
    for c in cs:
        c.start()
    for c in cs:
        c.join()
    out["sixteen_clients"] = len(texts) / (time.monotonic() - t)
    return out


def beside(binary, model, port, texts, with_embeddings, json_path, a):
    """loadgen's generation, with embedding clients running all along when asked."""
    stop, done_inputs = threading.Event(), [0]

    def embedder(k):
        i = k
        while not stop.is_set():
            batch = [texts[(i + j) % len(texts)] for j in range(8)]
            embed(port, batch)
            done_inputs[0] += len(batch)
            i += 8
    cs = [threading.Thread(target=embedder, args=(k * 64,)) for k in range(2)] if with_embeddings else []
    for c in cs:
        c.start()
    t = time.monotonic()
    subprocess.run([binary, "loadgen", "--url", f"http://127.0.0.1:{port}", "-m", model, "--workload", "random",
                    "--random-input-len", "64", "--random-output-len", str(a.gen_output), "--num-prompts",
                    str(a.gen_prompts),
                    "--max-concurrency", "8", "--json", json_path], check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    stop.set()
    for c in cs:
        c.join()
    g = json.load(open(json_path))
    return {"itl_p50": g["itl_ms"]["p50"], "itl_p99": g["itl_ms"]["p99"], "itl_max": g["itl_ms"]["max"],
            "out_tok_s": g["output_throughput"], "embd_inputs_s": done_inputs[0] / wall, "failed": g["failed"]}


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--gen-prompts", type=int, default=16)
    ap.add_argument("--gen-output", type=int, default=64)
    ap.add_argument("--json", default="bench_embeddings.json")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    a.flags = argv[cut + 1:]  # more cobatch serve flags
    texts = sentences(a.inputs)
    configs = [("generation alone", ["--no-embeddings"], False),
               ("beside embeddings, share 0.25 (default)", [], True),
               ("beside embeddings, share 1 (no bound)", ["--embeddings-share", "1"], True)]
    res = {"throughput": [], "beside": {c[0]: [] for c in configs}, "memory": {"on": [], "off": []}}
    tmp = tempfile.mkdtemp(prefix="bench-embd-")
    for rnd in range(a.repeat):
        s = Server(a.binary, a.model, a.flags)
        res["throughput"].append(throughput(s.port, texts))
        s.stop()
        for name, flags, with_embd in configs:
            s = Server(a.binary, a.model, [*flags, *a.flags])
            res["beside"][name].append(beside(a.binary, a.model, s.port, texts, with_embd,
                                              os.path.join(tmp, f"loadgen-{rnd}.json"), a))
            s.stop()
        for key, flags in (("on", []), ("off", ["--no-embeddings"])):
            s = Server(a.binary, a.model, [*flags, *a.flags])
            post(s.port, "/v1/completions", {"prompt": "Hello", "max_tokens": 8})
            if key == "on":
                embed(s.port, texts[:64])
            res["memory"][key].append(s.rss_mb())
            s.stop()
        print(f"round {rnd + 1} of {a.repeat} done", file=sys.stderr)
    json.dump(res, open(a.json, "w"), indent=1)

    t = res["throughput"]
    one = med(t, "one_at_a_time")
    print(f"{a.inputs} inputs ({t[0]['tokens']} tokens), medians of {a.repeat}:\n")
    print("| how they come | inputs/s | vs one at a time |\n|---|---:|---:|")
    for key, label in (("one_at_a_time", "one request after another, one input each"),
                       ("one_request", f"one request of {a.inputs} inputs"),
                       ("sixteen_clients", "16 clients, one input a request")):
        print(f"| {label} | {med(t, key):.1f} | {med(t, key) / one:.2f}x |")
    print(f"\n| generation (loadgen random 64/{a.gen_output}, {a.gen_prompts} requests, 8 clients) | ITL p50 ms "
          "| ITL p99 ms | output tok/s "
          "| embedding inputs/s beside |\n|---|---:|---:|---:|---:|")
    base = res["beside"][configs[0][0]]
    for name, _, with_embd in configs:
        rows = res["beside"][name]
        print(f"| {name} | {med(rows, 'itl_p50'):.1f} | {med(rows, 'itl_p99'):.1f} | {med(rows, 'out_tok_s'):.1f} "
              f"({med(rows, 'out_tok_s') / med(base, 'out_tok_s'):.2f}x) | "
              f"{med(rows, 'embd_inputs_s'):.1f} |" if with_embd else
              f"| {name} | {med(rows, 'itl_p50'):.1f} | {med(rows, 'itl_p99'):.1f} | {med(rows, 'out_tok_s'):.1f} | - |")
    on = [m[0] for m in res["memory"]["on"]]
    off = [m[0] for m in res["memory"]["off"]]
    print(f"\nresident memory after a chat and an embedding request: {statistics.median(on):.0f} MB, "
          f"--no-embeddings {statistics.median(off):.0f} MB (the context: "
          f"{statistics.median(on) - statistics.median(off):.0f} MB)")


if __name__ == "__main__":
    main()
