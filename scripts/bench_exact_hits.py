"""What exact cache hits cost (BENCHMARKS.md, 'Batch invariance and cache hits'): the time to the
first token of a prompt of ~800 tokens sent cold and then again with REST new tokens at its end
(a hit), on a server with exact hits (the default) and one with --approximate-hits, servers
taking turns, ROUNDS rounds; per server and round, the median over 5 prompts.
usage: bench_exact_hits.py BIN MODEL ROUNDS [REST ...]   (run on a quiet machine)"""
import statistics, sys, time
import httpx
from cbserve import serve

BIN, MODEL, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3])
RESTS = [int(x) for x in sys.argv[4:]] or [1, 20]
WORDS = "river stone garden lamp window cloud paper market bridge candle forest tower".split()


def hit_ttft(url, rest, k):
    base = " ".join(f"{WORDS[(k * 7 + i * 5) % 12]}{i % 17}" for i in range(330))
    httpx.post(url + "/v1/completions", json={"prompt": base, "max_tokens": 1}, timeout=120)
    t = time.monotonic()
    r = httpx.post(url + "/v1/completions", json={"prompt": base + " and" * rest, "max_tokens": 1}, timeout=120)
    assert r.status_code == 200, r.text
    return time.monotonic() - t


for rnd in range(ROUNDS):
    for flags in ([], ["--approximate-hits"]):
        p, url = serve(BIN, MODEL, "--temp", "0", *flags)
        try:
            row = {rest: round(1000 * statistics.median(hit_ttft(url, rest, k) for k in range(5))) for rest in RESTS}
        finally:
            p.terminate()
            p.wait()
        print(f"round {rnd + 1} {' '.join(flags) or 'exact hits'}: TTFT ms by new tokens {row}", flush=True)
