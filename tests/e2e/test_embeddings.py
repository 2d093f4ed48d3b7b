"""POST /v1/embeddings with the official OpenAI Python SDK (embeddings.create: a string, a list, token
ids, lists of token ids; base64, the SDK's default, against float), what is refused and how the error
names it, usage and /metrics, a cosine-similarity sanity check on sentence pairs, the flags
(--no-embeddings, --pooling), and embedding requests beside a generation stream: both finish, the
stream's largest gap stays bounded."""
import base64
import math
import os
import struct
import subprocess
import threading
import time

import httpx
import openai
import pytest

from conftest import BIN, MODEL, Server

# as test_stall's: a release build on a quiet 2-core machine, generous; sanitizer builds three times it
GAP_BOUND_S = 3.0 * (3 if os.environ.get("COBATCH_SANITIZED") else 1)
DIM = 576  # SmolLM2-135M's hidden size

PAIRS = [  # a sentence, its paraphrase, an unrelated one
    ("The cat sat on the mat.", "A cat was sitting on the rug.", "The stock market fell sharply today."),
    ("How do I bake bread at home?", "What is a simple recipe for homemade bread?",
     "The train leaves the station at noon."),
    ("Paris is the capital of France.", "France's capital city is Paris.",
     "Photosynthesis converts light into energy."),
    ("The doctor examined the patient.", "A physician checked the sick person.", "The river flows into the sea."),
]


@pytest.fixture(scope="module")
def srv():
    s = Server("--max-num-seqs", "4", "--temp", "0", "--max-model-len", "1024", "--long-lane", "0")
    yield s
    assert s.stop() == 0, s.logs()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def tokens(url, text):
    return httpx.post(url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]


def cos(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def close(a, b, tol=1e-5):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


def test_string_list_and_token_ids(srv, client):
    text = "The cat sat on the mat."
    one = client.embeddings.create(model="anything", input=text, encoding_format="float")
    assert one.object == "list" and len(one.data) == 1
    v = one.data[0].embedding
    assert one.data[0].index == 0 and one.data[0].object == "embedding"
    assert len(v) == DIM
    assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4  # unit length, as OpenAI's
    ids = tokens(srv.url, text)
    assert one.usage.prompt_tokens == len(ids) == one.usage.total_tokens
    assert one.model == os.path.basename(MODEL).removesuffix(".gguf")  # the served name, as other endpoints

    texts = [p[0] for p in PAIRS]
    many = client.embeddings.create(model="m", input=texts, encoding_format="float")
    assert [d.index for d in many.data] == list(range(len(texts)))
    assert many.usage.prompt_tokens == sum(len(tokens(srv.url, t)) for t in texts)
    alone = [client.embeddings.create(model="m", input=t, encoding_format="float").data[0].embedding for t in texts]
    for d, a in zip(many.data, alone):  # batched together or alone: the same vector
        assert close(d.embedding, a)

    by_ids = client.embeddings.create(model="m", input=ids, encoding_format="float")
    assert close(by_ids.data[0].embedding, v)  # token ids taken as given: the text's own tokens
    lists = client.embeddings.create(model="m", input=[ids, tokens(srv.url, texts[1])], encoding_format="float")
    assert close(lists.data[0].embedding, v) and close(lists.data[1].embedding, alone[1])
    assert lists.usage.prompt_tokens == len(ids) + len(tokens(srv.url, texts[1]))


def test_base64_is_the_floats(srv, client):
    text = ["Paris is the capital of France.", "The river flows into the sea."]
    floats = client.embeddings.create(model="m", input=text, encoding_format="float")
    decoded = client.embeddings.create(model="m", input=text)  # the SDK asks for base64 and decodes it
    for f, d in zip(floats.data, decoded.data):
        assert close(f.embedding, list(d.embedding), 1e-7)
    raw = httpx.post(srv.url + "/v1/embeddings", json={"input": text, "encoding_format": "base64"},
                     timeout=60).json()  # the same inputs in one pass: the same bits
    b = base64.b64decode(raw["data"][0]["embedding"])
    assert len(b) == 4 * DIM
    little_endian = struct.unpack(f"<{DIM}f", b)
    # every float as written reads back as the same float32
    assert list(little_endian) == [struct.unpack("<f", struct.pack("<f", x))[0] for x in floats.data[0].embedding]


def bad(fn):
    with pytest.raises(openai.BadRequestError) as ex:
        fn()
    return ex.value


def test_refusals_name_their_field(srv, client):
    e = bad(lambda: client.embeddings.create(model="m", input="hi", dimensions=64))
    assert e.param == "dimensions" and "576" in e.message
    assert client.embeddings.create(model="m", input="hi", dimensions=DIM).data  # its own size asks for nothing
    assert bad(lambda: client.embeddings.create(model="m", input="")).param == "input"
    assert bad(lambda: client.embeddings.create(model="m", input=[])).param == "input"
    e = bad(lambda: client.embeddings.create(model="m", input=["fine", ""]))
    assert e.param == "input" and "input[1]" in e.message
    e = bad(lambda: client.embeddings.create(model="m", input="word " * 600))  # past one pass
    assert e.param == "input" and "at most 512" in e.message
    e = bad(lambda: client.embeddings.create(model="m", input=[[1, 2], [49152]]))
    assert e.param == "input" and "vocabulary" in e.message
    e = bad(lambda: client.embeddings.create(model="m", input=["a"] * 2049))
    assert e.param == "input" and "2048" in e.message
    for field, value in [("normalize", False), ("truncate_prompt_tokens", 8), ("priority", 1)]:
        e = bad(lambda: client.embeddings.create(model="m", input="hi", extra_body={field: value}))
        assert e.param == field
    e = bad(lambda: client.embeddings.create(model="m", input="hi", encoding_format="int8"))
    assert e.param == "encoding_format"
    assert client.embeddings.create(model="m", input="hi", user="u-42").data  # a hint, taken


def test_paraphrases_score_above_unrelated(client):
    for a, para, other in PAIRS:
        r = client.embeddings.create(model="m", input=[a, para, other])
        v = [list(d.embedding) for d in r.data]
        p, u = cos(v[0], v[1]), cos(v[0], v[2])
        print(f"# {a!r}: paraphrase {p:.3f}, unrelated {u:.3f}")
        assert p > u + 0.05


def test_metrics_count_embeddings(srv, client):
    before = srv.metrics()
    r = client.embeddings.create(model="m", input=["one", "two words", "three words here"])
    after = srv.metrics()
    assert after["cobatch:embedding_requests_total"] - before["cobatch:embedding_requests_total"] == 1
    assert after["cobatch:embedding_inputs_total"] - before["cobatch:embedding_inputs_total"] == 3
    assert after["cobatch:embedding_tokens_total"] - before["cobatch:embedding_tokens_total"] == r.usage.prompt_tokens
    assert after["cobatch:embedding_passes_total"] > before["cobatch:embedding_passes_total"]
    assert after["cobatch:embedding_requests_waiting"] == 0


@pytest.mark.skipif(bool(os.environ.get("COBATCH_SANITIZED")),
                    reason="a stream's gaps beside embedding passes, timing: the plain build measures it")
def test_embeddings_beside_a_stream(srv, client):
    gaps, done, tokens_seen = [], threading.Event(), []

    def stream():
        body = {"messages": [{"role": "user", "content": "Count from one to a thousand."}],
                "max_tokens": 4000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=300) as r:
            last = None
            for line in r.iter_lines():
                now = time.monotonic()
                if line.startswith("data: ") and line != "data: [DONE]":
                    tokens_seen.append(1)
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                if done.is_set():
                    break

    results, errors = [], []

    def embed(k):
        texts = [f"{a} ({k}, {i})" for i, (a, _, _) in enumerate(PAIRS * 2)]
        try:
            for _ in range(5):
                results.append(len(client.embeddings.create(model="m", input=texts).data))
        except Exception as ex:  # noqa: BLE001 (reported below)
            errors.append(repr(ex))

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(2)  # the stream is under way
    workers = [threading.Thread(target=embed, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    during = len(gaps)
    time.sleep(1)
    done.set()
    t.join(timeout=120)
    print(f"# stream: {len(gaps)} gaps ({during} while embedding), largest {max(gaps):.3f} s")
    assert not errors, errors
    assert results == [8] * 20  # every embedding request finished whole
    assert during > 10  # the stream went on while they ran
    assert max(gaps) < GAP_BOUND_S


def test_flags():
    s = Server("--no-embeddings", "--max-num-seqs", "2", "--max-model-len", "512", "--long-lane", "0")
    try:
        r = httpx.post(s.url + "/v1/embeddings", json={"input": "hi"}, timeout=30)
        assert r.status_code == 501 and "--no-embeddings" in r.json()["error"]["message"]
    finally:
        assert s.stop() == 0, s.logs()
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--pooling", "none"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--pooling none" in p.stderr
    s = Server("--pooling", "last", "--max-num-seqs", "2", "--max-model-len", "512", "--long-lane", "0")
    try:
        assert "last pooling" in s.logs()
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        last = c.embeddings.create(model="m", input=["The cat sat on the mat.", "The cat sat on the mat"])
        a, b = (list(d.embedding) for d in last.data)
        # the last token's vector: a final "." changes it far more than it changes a mean
        assert cos(a, b) < 0.99
    finally:
        assert s.stop() == 0, s.logs()


def test_drain_answers_every_embedding_request():
    """SIGTERM while embedding requests wait and run: each is answered, 200 or 503, and the server
    exits cleanly."""
    s = Server("--max-num-seqs", "2", "--max-model-len", "512", "--long-lane", "0", "--drain-timeout", "60")
    statuses, lock = [], threading.Lock()
    texts = [f"{a} ({i})" for i, (a, _, _) in enumerate(PAIRS * 16)]

    def send():
        r = httpx.post(s.url + "/v1/embeddings", json={"input": texts}, timeout=300)
        with lock:
            statuses.append(r.status_code)
            if r.status_code == 200:
                assert len(r.json()["data"]) == len(texts)
    ts = [threading.Thread(target=send) for _ in range(6)]
    for t in ts:
        t.start()
    deadline = time.time() + 60
    while s.metrics().get("cobatch:embedding_requests_waiting", 0) < 6 and time.time() < deadline:
        time.sleep(0.05)
    assert s.stop() == 0, s.logs()
    for t in ts:
        t.join(timeout=120)
    print(f"# statuses {sorted(statuses)}")
    assert len(statuses) == 6 and set(statuses) <= {200, 503}
    assert 503 in statuses  # those that had not run were told to go elsewhere at once
