"""What the long lane costs and gives (BENCHMARKS.md, 'Context per request'): for each server
configuration, resident memory after a request; eight short streamed completions (64 tokens,
ignore_eos) alone, their median inter-token latency; the same eight beside one long prompt
(LONG tokens, 8 generated), their median and p90 ITL and the long request's time.
usage: bench_long_lane.py BUILD/cobatch MODEL [LONG]   (run on a quiet machine)"""
import json, statistics, sys, threading, time
import httpx
from cbserve import serve, stream_gaps

BIN, MODEL = sys.argv[1], sys.argv[2]
LONG = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
CONFIGS = [("defaults (streams of 1024 + long lane of 8192)", []),
           ("--long-lane 0 (streams of 1024 only)", ["--long-lane", "0"]),
           ("--kv-layout unified -c 8192", ["--kv-layout", "unified", "-c", "8192"])]


def stream_itl(url, out):
    body = {"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True, "temperature": 0}
    out.extend(stream_gaps(url, body, timeout=600))


def shorts(url):
    gaps, lists = [], [[] for _ in range(8)]
    ts = [threading.Thread(target=stream_itl, args=(url, lists[i])) for i in range(8)]
    for t in ts: t.start()
    for t in ts: t.join()
    for g in lists: gaps.extend(g)
    gaps.sort()
    return statistics.median(gaps) * 1000, gaps[int(len(gaps) * 0.9)] * 1000


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


for name, args in CONFIGS:
    p, url = serve(BIN, MODEL, *args)
    try:
        httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
        mem = rss(p.pid)
        ids = httpx.post(url + "/tokenize", json={"content": "The river runs past the old mill. " * (LONG // 6 + 10),
                                                  "add_special_tokens": False}, timeout=60).json()["tokens"][:LONG]
        alone = shorts(url)
        box = {}

        def long_one():
            t = time.time()
            r = httpx.post(url + "/v1/completions", json={"prompt": ids, "max_tokens": 8, "temperature": 0},
                           timeout=900)
            box["s"], box["status"] = time.time() - t, r.status_code

        lt = threading.Thread(target=long_one)
        lt.start()
        time.sleep(0.5)
        beside = shorts(url)
        lt.join()
        long_s = f"{box['s']:.1f} s" if box["status"] == 200 else f"refused ({box['status']})"
        print(json.dumps({"config": name, "rss_mb": mem, "itl_alone_ms": [round(x, 1) for x in alone],
                          "itl_beside_long_ms": [round(x, 1) for x in beside], "long": long_s}), flush=True)
    finally:
        p.kill()
        p.wait()
