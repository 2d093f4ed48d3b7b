"""The long lane's pause (README, 'Context per request'; RELIABILITY.md): four short streams
(200 tokens, ignore_eos) beside N long prompts (LONG tokens each, 32 generated) that run in the
long lane, for each server binary given, servers taking turns, ROUNDS rounds. Per binary, medians
over the rounds: the short streams' median, p99 and largest gap between tokens; the longest step
and the longest lane graph of the step trace; the long requests' mean time.
usage: bench_lane_pause.py MODEL LONG N ROUNDS BIN [BIN ...]   (run on a quiet machine)"""
import os, statistics, sys, tempfile, threading, time
import httpx
from cbserve import serve, stream_gaps

MODEL, LONG, N, ROUNDS, BINS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]


def short(url, gaps):
    body = {"prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "temperature": 0}
    gaps.extend(stream_gaps(url, body))


def long(url, k, secs):
    tokens = [100 + (k * 7919 + i * 13) % 40000 for i in range(LONG)]  # no prefix shared
    t = time.monotonic()
    r = httpx.post(url + "/v1/completions", json={"prompt": tokens, "max_tokens": 32, "ignore_eos": True,
                                                 "temperature": 0}, timeout=900)
    assert r.status_code == 200, r.text
    secs.append(time.monotonic() - t)


def one(binary):
    trace = os.path.join(tempfile.mkdtemp(), "trace.tsv")
    p, url = serve(binary, MODEL, "--trace", trace)
    try:
        gaps, secs = [], []
        ts = [threading.Thread(target=long, args=(url, k, secs)) for k in range(N)]
        for t in ts: t.start()
        time.sleep(1.0)  # the long prompts are in the lane
        ss = [threading.Thread(target=short, args=(url, gaps)) for _ in range(4)]
        for t in ss: t.start()
        for t in ss + ts: t.join()
    finally:
        p.terminate(); p.wait()
    rows = [line.split("\t") for line in open(trace).read().splitlines()[1:]]
    step = max(float(r[2]) for r in rows)
    lane = max((float(r[13]) for r in rows if len(r) > 13), default=float("nan"))
    gaps.sort()
    return (statistics.median(gaps) * 1000, gaps[int(len(gaps) * 0.99)] * 1000, gaps[-1] * 1000, step, lane,
            statistics.mean(secs))


res = {b: [] for b in BINS}
for _ in range(ROUNDS):
    for b in BINS:
        res[b].append(one(b))
        print(b, [round(x, 1) for x in res[b][-1]], flush=True)
print(f"\n{N} long prompts of {LONG} tokens beside 4 short streams, {ROUNDS} rounds, medians")
print("| server | short streams' median gap (ms) | p99 (ms) | largest (ms) | longest step (ms) | longest lane graph (ms) "
      "| long request (s) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for b, rs in res.items():
    m = [statistics.median(x[i] for x in rs) for i in range(6)]
    print(f"| {b} | {m[0]:.0f} | {m[1]:.0f} | {m[2]:.0f} | {m[3]:.0f} | {m[4]:.0f} | {m[5]:.1f} |")
