"""What RoPE scaling costs and buys (README, 'Context beyond training'): the mean negative
log-likelihood per token of one long English text (Python's own documentation, pydoc_data.topics),
measured through /v1/completions with echo and logprobs, by position in the context, on the model as
trained (to its trained context) and with --rope-scaling yarn|linear --rope-scale 4 (to 4x it); and a
pass key hidden at half depth in filler, asked for at the end (greedy), at each length.
usage: bench_rope.py BIN MODEL [LENGTH]   (LENGTH: tokens, default 16384; needs httpx: tests/e2e's virtual
environment has it; about an hour on two cores)"""
import math, random, statistics, sys
import httpx
from pydoc_data.topics import topics
from cbserve import serve

BIN, MODEL = sys.argv[1], sys.argv[2]
LENGTH = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
TEXT = "\n\n".join(topics[k] for k in sorted(topics))[:LENGTH * 8]  # (enough for LENGTH tokens)
BUCKETS = [(0, 2048), (2048, 8192), (8192, 16384), (16384, 24576), (24576, 32768)]
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
SERVERS = [("as trained", ["--max-model-len", "8192"]),
           ("yarn x4", ["--rope-scaling", "yarn", "--rope-scale", "4", "--max-model-len", "32768"]),
           ("linear x4", ["--rope-scaling", "linear", "--rope-scale", "4", "--max-model-len", "32768"])]


def tokens(url, text):
    r = httpx.post(url + "/tokenize", json={"content": text, "add_special": False}, timeout=600)
    return r.json()["tokens"]


def nll(url, ids):
    """Per-token negative log-likelihoods of the prompt ids (the first has none)."""
    r = httpx.post(url + "/v1/completions", timeout=3600,
                   json={"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0})
    assert r.status_code == 200, r.text
    return [-x for x in r.json()["choices"][0]["logprobs"]["token_logprobs"][1:]]


def passkey(url, n, seed):
    key = random.Random(seed).randrange(10000, 99999)
    reps = max(1, (n - 60) // len(tokens(url, FILLER)))
    body = FILLER * (reps // 2) + f"The pass key is {key}. Remember it. {key} is the pass key. " + FILLER * (reps - reps // 2)
    r = httpx.post(url + "/v1/chat/completions", timeout=3600, json={
        "messages": [{"role": "user", "content": body + "\nWhat is the pass key?"}], "max_tokens": 12, "temperature": 0})
    assert r.status_code == 200, r.text
    return str(key) in r.json()["choices"][0]["message"]["content"]


for name, flags in SERVERS:
    p, url = serve(BIN, MODEL, "--temp", "0", "--max-num-seqs", "1", *flags)
    try:
        limit = 8191 if name == "as trained" else LENGTH
        ids = tokens(url, TEXT)[:min(limit, LENGTH)]
        per = nll(url, ids)
        row = {}
        for a, b in BUCKETS:
            vals = per[a:b]
            if len(vals) > (b - a) // 2:
                m = statistics.fmean(vals)
                row[f"{a}-{b}"] = f"nll {m:.3f} ppl {math.exp(m):.1f}"
        keys = {n: sum(passkey(url, n, s) for s in range(2)) for n in (2048, 6144, LENGTH - 512) if n <= limit}
        print(f"{name}: {row}; pass key found (of 2) by prompt tokens {keys}", flush=True)
    finally:
        p.terminate()
        p.wait()
