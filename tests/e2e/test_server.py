"""cobatch serve end to end, with real clients: curl, the OpenAI Python SDK, the OpenAI Node SDK.
The model is the real default (SmolLM2-135M-Instruct Q4_1)."""
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import httpx
import openai
import pytest

from conftest import Server

PROMPT = "The capital of France is"
# with a system message: the model's own template otherwise adds one this small quantized model answers badly
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the capital of France?"}]


def tokens_of(server, text):
    return httpx.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["count"]


def model_id(server):
    return httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]


def test_health_and_models(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["object"] == "model"
    assert models["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1"


def test_weights_named(server):
    """Where the weights live is said at start, in /server_info and in /metrics, and agrees: AMX
    only with --repack on (its kernels segfault on some AMX hosts), whatever this host is."""
    w = httpx.get(server.url + "/server_info", timeout=30).json()["weights"]
    assert w["repack"] == "auto" and w["amx"] is False
    assert w["buffer_types"] and "AMX" not in w["buffer_types"]
    assert "AMX" in w["reason"]
    assert f"weights in {','.join(w['buffer_types'])} (--repack auto): {w['reason']}" in server.logs()
    line = [l for l in httpx.get(server.url + "/metrics", timeout=10).text.splitlines()
            if l.startswith("cobatch:weights_info{")]
    assert len(line) == 1 and line[0].endswith(" 1")
    assert f'buffer_types="{",".join(w["buffer_types"])}",repack="auto",amx="false"' in line[0]


def test_curl_completion(server):
    body = json.dumps({"model": "x", "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True})
    out = subprocess.run(["curl", "-sS", "-H", "Content-Type: application/json", "-d", body,
                          server.url + "/v1/completions"], capture_output=True, text=True, timeout=60, check=True)
    r = json.loads(out.stdout)
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert r["choices"][0]["finish_reason"] == "length"
    cached = r["usage"].pop("prompt_tokens_details")["cached_tokens"]  # prefix cache hits, OpenAI's field
    assert 0 <= cached < tokens_of(server, PROMPT)
    assert r["usage"] == {"prompt_tokens": tokens_of(server, PROMPT), "completion_tokens": 5, "total_tokens":
                          tokens_of(server, PROMPT) + 5}
    assert "Paris" in r["choices"][0]["text"]


def test_curl_stream(server):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 6, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    out = subprocess.run(["curl", "-sSN", "-d", body, server.url + "/v1/completions"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])


def test_python_sdk(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    m = model_id(server)
    r = client.completions.create(model=m, prompt=PROMPT, max_tokens=8, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens == tokens_of(server, PROMPT)
    full = r.choices[0].text
    text, finish, usage = "", None, None
    for c in client.completions.create(model=m, prompt=PROMPT, max_tokens=8, stream=True,
                                       stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        if c.usage:
            usage = c.usage
        for ch in c.choices:
            text += ch.text
            finish = ch.finish_reason or finish
    assert text == full and finish == "length" and usage.completion_tokens == 8

    r = client.chat.completions.create(model=m, messages=CHAT, max_tokens=40)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert "Paris" in r.choices[0].message.content and r.choices[0].finish_reason == "stop"
    text, finish, roles = "", None, []
    for c in client.chat.completions.create(model=m, messages=CHAT, max_tokens=40, stream=True):
        for ch in c.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert roles == ["assistant"] and text == r.choices[0].message.content and finish == "stop"


def test_node_sdk(server):
    out = subprocess.run(["node", "node_client.mjs", server.url, model_id(server)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["completion"]["object"] == "text_completion" and r["completion"]["finish"] == "length"
    assert r["completion"]["usage"]["completion_tokens"] == 12
    assert r["completion_stream"]["text"] == r["completion"]["text"]
    assert r["completion_stream"]["usage"]["completion_tokens"] == 12
    assert r["chat"]["role"] == "assistant" and "Paris" in r["chat"]["text"] and r["chat"]["finish"] == "stop"
    assert r["chat_stream"]["text"] == r["chat"]["text"] and r["chat_stream"]["finish"] == "stop"
    assert r["chat_stream"]["usage"]["total_tokens"] == r["chat"]["usage"]["total_tokens"]


def test_32_concurrent_streams(server):
    results = [None] * 32

    def run(i):
        body = {"prompt": f"Request {i}: list the numbers after {i}:", "max_tokens": 12, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=300) as resp:
            events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
        results[i] = (resp.status_code, events)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    ids = set()
    for i, (status, events) in enumerate(results):
        assert status == 200 and events[-1] == "[DONE]", i
        chunks = [json.loads(e) for e in events[:-1]]
        assert len({c["id"] for c in chunks}) == 1
        ids.add(chunks[0]["id"])
        assert chunks[-1]["usage"]["completion_tokens"] == 12
        assert chunks[-1]["usage"]["prompt_tokens"] == tokens_of(server, f"Request {i}: list the numbers after {i}:")
    assert len(ids) == 32  # every client got its own stream


def wait_idle(server, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if m["cobatch:kv_cache_used_cells"] == 0 and m["cobatch:num_requests_running"] == 0:
            return m
        time.sleep(0.1)
    return server.metrics()


def test_metrics_show_every_engine_statistic(server):
    """Each gauge and counter of the engine's one list of statistics (COBATCH_STATS in cobatch.h)
    is in /metrics, with its kind; a field in microseconds is shown in seconds."""
    header = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "cobatch.h")).read()
    table = re.findall(r'X\((\w+), (\w+), COBATCH_STAT_(\w+), "(\w*)", "', header)
    assert len(table) >= 40, table
    httpx.post(server.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=60)
    text = httpx.get(server.url + "/metrics", timeout=10).text
    m = server.metrics()
    shown = [(field, kind, metric) for _, field, kind, metric in table if kind != "NONE"]
    assert len(shown) >= 35
    for field, kind, metric in shown:
        assert f"# TYPE cobatch:{metric} {kind.lower()}\n" in text, metric
        assert f"cobatch:{metric}" in m, metric
        assert not field.endswith("_us") or metric.endswith("_seconds_total"), metric
    assert m["cobatch:engine_steps_total"] > 0 and m["cobatch:prompt_tokens_computed_total"] > 0


def test_disconnects_free_kv(server):
    socks = []
    for i in range(8):
        s = socket.create_connection(("127.0.0.1", server.port))
        body = json.dumps({"prompt": f"Tell a long story number {i}.", "max_tokens": 2000, "stream": True,
                           "ignore_eos": True})
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        socks.append(s)
    for s in socks:  # wait until each stream is really flowing
        got = b""
        while got.count(b"data: ") < 2:
            more = s.recv(4096)
            assert more, got  # the server closed it: refused, not streamed
            got += more
    assert server.metrics()["cobatch:kv_cache_used_cells"] > 0
    for s in socks:
        s.close()
    m = wait_idle(server)
    assert m["cobatch:kv_cache_used_cells"] == 0 and m["cobatch:num_requests_running"] == 0


def test_prefix_cache_shares_a_repeated_prefix(server):
    system = ("You are a careful assistant. Answer briefly and never invent facts. " * 8).strip()
    m0 = server.metrics()
    texts, cached, prompt = [], [], []
    for question in ["What is the capital of France?", "What is the capital of Italy?"]:
        r = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "max_tokens": 8}).json()
        texts.append(r["choices"][0]["message"]["content"])
        cached.append(r["usage"]["prompt_tokens_details"]["cached_tokens"])
        prompt.append(r["usage"]["prompt_tokens"])
    m1 = server.metrics()
    # the second request finds at least the system prompt cached, but for the prompt's last 64 tokens
    # that an exact hit computes again (README, --approximate-hits)
    shared = min(tokens_of(server, system), prompt[1] - 64)
    assert shared > 40
    hits = m1["cobatch:prefix_cache_hits_total"] - m0["cobatch:prefix_cache_hits_total"]
    assert hits >= shared - 2, (hits, shared)
    assert cached[1] >= shared - 2 and cached[1] <= hits, (cached, shared, hits)  # OpenAI's usage field
    assert m1["cobatch:prefix_cache_queries_total"] > m0["cobatch:prefix_cache_queries_total"] + hits
    assert "Paris" in texts[0] and "Rome" in texts[1]


BAD = [
    ("/v1/completions", "{not json", 400, "invalid_request_error", None),
    ("/v1/completions", "[1, 2]", 400, "invalid_request_error", None),
    ("/v1/completions", '{"prompt": 42}', 400, "invalid_request_error", "prompt"),
    ("/v1/completions", '{"prompt": ""}', 400, "invalid_request_error", "prompt"),
    ("/v1/completions", '{"max_tokens": 5}', 400, "invalid_request_error", "prompt"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": 0}', 400, "invalid_request_error", "max_tokens"),
    ("/v1/completions", '{"prompt": "hi", "max_tokens": "ten"}', 400, "invalid_request_error", "max_tokens"),
    ("/v1/completions", '{"prompt": "hi", "temperature": "hot"}', 400, "invalid_request_error", "temperature"),
    ("/v1/completions", '{"prompt": "hi", "top_p": 0}', 400, "invalid_request_error", "top_p"),
    ("/v1/completions", '{"prompt": "hi", "stop": 3}', 400, "invalid_request_error", "stop"),
    ("/v1/completions", '{"prompt": "hi", "stream": "yes"}', 400, "invalid_request_error", "stream"),
    ("/v1/completions", '{"prompt": "hi", "n": 17}', 400, "invalid_request_error", "n"),
    ("/v1/completions", '{"prompt": [1, -5]}', 400, "invalid_request_error", "prompt"),
    ("/v1/completions", '{"prompt": [1, 99999999]}', 400, "invalid_request_error", "prompt"),
    ("/v1/completions", json.dumps({"prompt": "word " * 9000}), 400, "invalid_request_error", "prompt"),
    ("/v1/chat/completions", '{"messages": "hi"}', 400, "invalid_request_error", "messages"),
    ("/v1/chat/completions", '{"messages": []}', 400, "invalid_request_error", "messages"),
    ("/v1/chat/completions", '{"messages": [{"content": "hi"}]}', 400, "invalid_request_error", "messages"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": ""}]}', 400, "invalid_request_error",
     "messages"),
    ("/v1/nope", "{}", 404, "invalid_request_error", None),
]


@pytest.mark.parametrize("path,body,status,etype,param", BAD)
def test_bad_requests(server, path, body, status, etype, param):
    r = httpx.post(server.url + path, content=body, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == etype and err["message"]
    assert set(err) == {"message", "type", "param", "code"}
    if param:
        assert err["param"] == param


def test_wrong_method_and_oversized_body(server):
    r = httpx.get(server.url + "/v1/completions", timeout=30)
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "' + b"a" * (1536 * 1024) + b'"}',
                   timeout=30)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_api_key():
    s = Server("--api-key", "sekret")
    try:
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
        assert r.status_code == 401 and r.json()["error"]["message"]
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1},
                       headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret")
        assert client.completions.create(model="m", prompt="hi", max_tokens=2).usage.completion_tokens >= 1
        assert httpx.get(s.url + "/health").status_code == 200  # health needs no key
    finally:
        assert s.stop() == 0


def test_queue_full():
    s = Server("--max-num-seqs", "1", "--max-queue", "2")
    try:
        results = []

        def run(i):
            r = httpx.post(s.url + "/v1/completions", timeout=300,
                           json={"prompt": f"Story {i}", "max_tokens": 24, "ignore_eos": True})
            results.append((r.status_code, r.headers.get("retry-after"), r.json()))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        ok = [r for r in results if r[0] == 200]
        refused = [r for r in results if r[0] == 429]
        assert len(ok) + len(refused) == 10 and refused and len(ok) >= 3
        assert all(r[1] == "1" and r[2]["error"]["type"] == "rate_limit_error" for r in refused)
        assert all(r[2]["usage"]["completion_tokens"] == 24 for r in ok)
        # more choices than the queue holds can never wait at once: a 400 naming n, not a 429 to retry
        for body, param in (({"n": 3}, "n"), ({"prompt": ["a", "b", "c"]}, "prompt")):
            r = httpx.post(s.url + "/v1/completions", timeout=60, json={"prompt": "Hi", "max_tokens": 2, **body})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
            assert "--max-queue" in r.json()["error"]["message"]
        r = httpx.post(s.url + "/v1/completions", timeout=60, json={"prompt": "Hi", "max_tokens": 2, "n": 2})
        assert r.status_code == 200 and len(r.json()["choices"]) == 2  # as many as it holds: served
    finally:
        assert s.stop() == 0


def test_sigterm_drains():
    s = Server()
    out = {}

    def run():
        out["r"] = httpx.post(s.url + "/v1/completions", timeout=120,
                              json={"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True})

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and s.metrics()["cobatch:num_requests_running"] == 0:
        time.sleep(0.02)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        h = httpx.get(s.url + "/health", timeout=5)
        assert h.status_code == 503  # draining: still up, refusing new work
    except httpx.ConnectError:
        pass  # the request already finished and the server is gone: also a clean drain
    t.join(120)
    assert out["r"].status_code == 200 and out["r"].json()["usage"]["completion_tokens"] == 64
    # further signals while it stops (the loop's last ticks, then the engine and model being freed)
    # cut what is left or do nothing: a clean stop is never turned into a kill
    deadline = time.time() + 60
    while s.proc.poll() is None and time.time() < deadline:
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.005)
    assert s.stop() == 0, s.logs()


def test_drain_grace_serves_until_a_second_signal():
    """--drain-grace: after SIGTERM /health says 503 (a router takes the replica out) but requests
    are still served; a second signal ends the grace, the drain refuses new work and the server
    exits."""
    s = Server("--drain-grace", "60")
    try:
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert httpx.get(s.url + "/health", timeout=5).status_code == 503
        assert s.metrics()["cobatch:draining"] == 1
        r = httpx.post(s.url + "/v1/completions", timeout=60,
                       json={"prompt": "Still here?", "max_tokens": 3, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(30) == 0
        assert time.time() - t0 < 20  # not the grace's 60 s
        assert "draining" in s.logs()
    finally:
        s.stop()


def test_loadgen_measures_the_server(server, tmp_path):
    out = tmp_path / "lg.json"
    p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "-m", os.environ["COBATCH_E2E_MODEL"], "--url",
                        server.url, "--workload", "mixed-small", "--max-concurrency", "3", "--json", str(out),
                        "--goodput", "e2el:600000"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["requests"] == 6 and r["failed"] == 0
    assert r["output_tokens"] == 218  # mixed-small, seed 0: every output length exactly, ignore_eos
    assert 0 < r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"] <= r["e2el_ms"]["max"]
    assert r["goodput"] == pytest.approx(r["request_throughput"])
    assert "| server |" in p.stdout


def test_loadgen_runs_sessions(server, tmp_path):
    """The sessions workload: each turn re-sends its conversation with the answers as streamed, so
    the prompts grow turn by turn and a later turn finds most of its prompt in the prefix cache."""
    out = tmp_path / "sessions.json"
    p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "-m", os.environ["COBATCH_E2E_MODEL"], "--url",
                        server.url, "--endpoint", "/v1/chat/completions", "--workload", "sessions", "--sessions", "3",
                        "--turns", "3", "--system-len", "120", "--task-len", "30", "--turn-len", "20",
                        "--output-len", "12", "--think-ms", "50", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert r["requests"] == 9 and r["failed"] == 0 and r["output_tokens"] == 9 * 12
    turns = r["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3] and all(t["failed"] == 0 for t in turns)
    # each turn adds a user message (20 tokens), the answer before it (12) and the template's markers;
    # a later turn computes what it added, or a whole attention tile (64 rows: the split layout
    # computes a short rest again as a tile where the one-row kernel would cost more), no more
    assert turns[0]["prompt_tokens"] / 3 >= 150
    for a, b in zip(turns, turns[1:]):
        added = (b["prompt_tokens"] - a["prompt_tokens"]) / 3
        assert added >= 32
        assert (b["prompt_tokens"] - b["cached_tokens"]) / 3 <= max(added, 64) + 1, turns
    assert "| turn |" in p.stdout
    p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "-m", os.environ["COBATCH_E2E_MODEL"], "--url",
                        server.url, "--workload", "sessions"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "/v1/chat/completions" in p.stderr


def test_host_tier_brings_conversations_back():
    """Two streams and no holder streams for four conversations: a turn finds its history in the
    host tier (/metrics counts the loads and the tokens), computes only what it added, and answers
    as a server that computes the whole conversation does, but where that one saw a near-tie: the
    token taken within 0.25 of its best (greedy, through the official SDK; the same messages sent to
    both; on some hosts' kernels three tokens lie that close)."""
    from openai import OpenAI

    def ask(c, messages):
        return c.chat.completions.create(model="m", messages=messages, max_tokens=16, temperature=0, logprobs=True,
                                         top_logprobs=5)

    s = Server("--max-num-seqs", "2", "--prefix-cache-streams", "0", "--cache-ram", "0.25")
    ref = Server("--max-num-seqs", "2", "--no-prefix-caching", "--flash-attn", "on")  # the same kernels
    try:
        c = OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        convs = [[{"role": "system", "content": "You are a helpful assistant who answers in one sentence."},
                  {"role": "user", "content": f"Session {i}: tell me about the number {i * 7 + 3}."}]
                 for i in range(4)]
        asked, got = [], []
        for t in range(3):
            for conv in convs:
                r = ask(c, conv)
                asked.append(list(conv))
                got.append(r)
                conv.append({"role": "assistant", "content": r.choices[0].message.content})
                conv.append({"role": "user", "content": f"And what about turn {t + 2}? Say more."})
        m = s.metrics()
        cr = OpenAI(base_url=ref.url + "/v1", api_key="x", max_retries=0)
        for messages, r in zip(asked, got):
            want = ask(cr, messages).choices[0].logprobs.content
            have = [x.token for x in r.choices[0].logprobs.content]
            for i, w in enumerate(want):  # the first token that differs was a near-tie for the reference
                if i < len(have) and have[i] == w.token:
                    continue
                assert i < len(have), (have, want)
                top = {x.token: x.logprob for x in w.top_logprobs}
                assert have[i] in top and w.top_logprobs[0].logprob - top[have[i]] < 0.25, (i, have, w)
                break
    finally:
        assert s.stop() == 0, s.logs()
        assert ref.stop() == 0
    assert m["cobatch:host_cache_saves_total"] >= 6
    assert m["cobatch:host_cache_loads_total"] >= 6  # the later turns of the conversations no stream kept
    assert m["cobatch:host_cache_failures_total"] == 0
    # each load brings back its conversation but the prompt's last 64 tokens, computed again by an
    # exact hit (turns of 80-140 tokens here)
    assert m["cobatch:prefix_cache_host_hits_total"] >= 6 * 25
    assert 0 < m["cobatch:host_cache_used_bytes"] <= m["cobatch:host_cache_capacity_bytes"] == 0.25 * 2**30
    assert m["cobatch:host_cache_entries"] >= 2
    assert m["cobatch:kv_mismatched_sequences"] == 0
    for r in got[4:]:  # a later turn reads its history from the cache, wherever it was kept
        u = r.usage
        assert u.prompt_tokens - u.prompt_tokens_details.cached_tokens <= 64 + 1, u


def test_cache_hits_answer_as_cold_prompts():
    """A prompt answers the same, bit for bit, whether its prefix was computed, taken from a stream or
    loaded from the host tier: a hit computes its prompt's last 64 tokens again, so the rows behind its
    first token run ggml's tiled flash-attention kernel as the cold prompt's did (under the tile a row
    sums in f16 alone: 0.1-0.3 nats apart, greedy answers diverging). Requests run one at a time (the
    same batch shapes); four ~800-token prompts through two streams and no holder make the first go to
    the host tier and come back."""
    s = Server("--max-num-seqs", "2", "--prefix-cache-streams", "0", "--cache-ram", "0.25", "--temp", "0")
    words = "river stone garden lamp window cloud paper market bridge candle forest tower".split()
    prompts = [" ".join(f"{words[(i * 7 + k * 5) % 12]}{k % 17}" for k in range(330)) + f" Story {i}:"
               for i in range(4)]

    def ask(p):
        r = httpx.post(s.url + "/v1/completions", timeout=120,
                       json={"prompt": p, "max_tokens": 24, "logprobs": 5, "ignore_eos": True})
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        return (c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"],
                r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    try:
        cold = [ask(p) for p in prompts]
        m0 = s.metrics()
        host = ask(prompts[0])    # its stream went to a later prompt: loaded from the host tier
        device = ask(prompts[0])  # its stream parked: taken over in place
        m1 = s.metrics()
    finally:
        assert s.stop() == 0, s.logs()
    assert m1["cobatch:host_cache_loads_total"] - m0["cobatch:host_cache_loads_total"] >= 1
    for hit in (host, device):
        assert hit[3] > 500  # most of the prompt came from the cache, the last 64 tokens computed again
        assert hit[:3] == cold[0][:3], (hit[:2], cold[0][:2])


def test_trace_accounts_for_every_token(tmp_path):
    trace = tmp_path / "steps.tsv"
    s = Server("--trace", str(trace), "--max-num-batched-tokens", "16")
    prompts = ["The capital of France is", "One, two, three, four, five, six, seven, eight,"]
    usages = []
    for i, prompt in enumerate(prompts):
        r = httpx.post(s.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 5 + i, "ignore_eos": True},
                       timeout=120)
        assert r.status_code == 200
        usages.append(r.json()["usage"])
    assert s.stop() == 0, s.logs()
    lines = trace.read_text().splitlines()
    assert lines[0].split("\t")[:5] == ["config", "t_ms", "step_ms", "decode_rows", "prefill_tokens"]
    rows = [line.split("\t") for line in lines[1:]]
    assert rows and all(r[0] == "serve" and len(r) == 20 for r in rows)
    assert lines[0].split("\t")[10] == "graph_runs" and all(r[10] == "1" for r in rows)  # one request a step
    assert lines[0].split("\t")[11] == "swapped" and all(r[11] == "0" for r in rows)  # nothing preempted
    assert lines[0].split("\t")[12:14] == ["lane_tokens", "lane_ms"] and all(r[12] == "0" for r in rows)  # no lane
    assert lines[0].split("\t")[15:17] == ["embd_tokens", "embd_ms"] and all(r[15] == "0" for r in rows)  # none
    # the step's time inside llama_decode: some of every step, never more than the step
    assert lines[0].split("\t")[17] == "decode_ms" and all(0 < float(r[17]) <= float(r[2]) for r in rows)
    # one request a step: the cells its rows attend over end at its last row, so they grow by the step's rows
    assert lines[0].split("\t")[14] == "context_cells"
    assert all(int(r[14]) >= int(r[3]) + int(r[4]) for r in rows)
    assert all(int(b[14]) == int(a[14]) + int(b[3]) + int(b[4]) for a, b in zip(rows, rows[1:]) if b[4] == "0")
    # the split layout's attention: each row over its stream's cells padded to 256 (one stream a step)
    assert lines[0].split("\t")[18] == "attended_cells"
    assert all(int(r[18]) == (int(r[3]) + int(r[4])) * ((int(r[14]) + 255) // 256 * 256) for r in rows)
    assert lines[0].split("\t")[19] == "draft_rows" and all(r[19] == "0" for r in rows)  # speculation off
    # every prompt token not taken from the cache was computed in some step, and every generated
    # token but each request's first (sampled after its last prompt chunk) took one decode row
    computed = sum(u["prompt_tokens"] - u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    assert sum(int(r[4]) for r in rows) == computed
    assert sum(int(r[3]) for r in rows) == sum(u["completion_tokens"] - 1 for u in usages)
    assert all(int(r[4]) + int(r[3]) <= 16 for r in rows)  # the step budget holds
    assert [float(r[1]) for r in rows] == sorted(float(r[1]) for r in rows)


def test_loadgen_refuses_bad_input():
    p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "--url", "ftp://x"], capture_output=True, text=True)
    assert p.returncode == 2 and "--url http://HOST:PORT" in p.stderr
    p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "-m", os.environ["COBATCH_E2E_MODEL"], "--url",
                        "http://127.0.0.1:9", "--workload", "mixed-small"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1  # nothing listens there: every request fails, and the exit says so


def test_loadgen_times_out_a_silent_server(tmp_path):
    """--timeout: a request fails after that many seconds without a byte (a server computing a long
    prompt before its first token, as a client with the OpenAI SDKs' 600 s read timeout sees it)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    held = []
    def accept():
        try:
            while True:
                held.append(silent.accept()[0])  # read nothing, answer nothing
        except OSError:
            pass
    threading.Thread(target=accept, daemon=True).start()
    try:
        t0 = time.monotonic()
        p = subprocess.run([os.environ["COBATCH_BIN"], "loadgen", "-m", os.environ["COBATCH_E2E_MODEL"], "--url",
                            "http://127.0.0.1:%d" % silent.getsockname()[1], "--workload", "long-context",
                            "--context-len", "64", "--output-len", "2", "--num-prompts", "1", "--timeout", "2",
                            "--json", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    finally:
        silent.close()
        for c in held:
            c.close()
    assert p.returncode == 1 and json.load(open(tmp_path / "t.json"))["failed"] == 1, p.stderr
    assert 2 <= took < 60


def test_tokenize_round_trip_and_bad_bodies(server):
    toks = httpx.post(server.url + "/tokenize", json={"content": "Hello world"}).json()["tokens"]
    text = httpx.post(server.url + "/detokenize", json={"tokens": toks}).json()["content"]
    assert text.strip() == "Hello world"
    for path in ("/tokenize", "/detokenize"):
        r = httpx.post(server.url + path, content="{oops")
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(server.url + "/detokenize", json={"tokens": [1, 99999999]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"


# ---------------------------------------------------------------- fields a client may send

def first_token(server, prompt, **kw):
    """The first generated token's id and text (greedy, one token)."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    text = client.completions.create(model=model_id(server), prompt=prompt, max_tokens=1, temperature=0, **kw) \
        .choices[0].text
    ids = httpx.post(server.url + "/tokenize", json={"content": PROMPT + text, "add_special": False},
                     timeout=30).json()["tokens"]
    base = httpx.post(server.url + "/tokenize", json={"content": PROMPT, "add_special": False},
                      timeout=30).json()["tokens"]
    assert ids[:len(base)] == base
    return ids[len(base)], text


def test_logit_bias_bans_and_forces_a_token(server):
    tok, text = first_token(server, PROMPT)
    assert "Paris" in text or text.strip()  # the greedy choice, whatever it is
    banned, banned_text = first_token(server, PROMPT, logit_bias={str(tok): -100})
    assert banned != tok, "logit_bias -100 did not ban the greedy token"
    target = httpx.post(server.url + "/tokenize", json={"content": " banana", "add_special": False},
                        timeout=30).json()["tokens"][0]
    forced, _ = first_token(server, PROMPT, logit_bias={str(target): 100})
    assert forced == target, "logit_bias +100 did not force the token"
    # the same through chat, streamed
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    out = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=model_id(server), messages=CHAT, max_tokens=3, temperature=0, stream=True,
        logit_bias={str(target): 100}) if c.choices)
    assert out.startswith(" banana") or out.startswith("banana"), out


def test_logit_bias_outside_the_vocabulary_is_refused(server):
    for bias, why in [({"99999999": 5}, "vocabulary"), ({"x": 5}, "token ids"), ({"1": 101}, "-100 to 100")]:
        r = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 1, "logit_bias": bias},
                       timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "logit_bias" and why in r.json()["error"]["message"], r.text


@pytest.mark.parametrize("path,body,field", [
    ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix"),
    ("/v1/completions", {"prompt": "x", "best_of": 2}, "best_of"),
    ("/v1/chat/completions", {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ("/v1/chat/completions", {"messages": CHAT, "response_format": {"type": "json_schema"}}, "response_format"),
    ("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"messages": CHAT, "echo": True}, "echo"),
])
def test_a_field_the_server_does_not_honour_is_refused_by_name(server, path, body, field):
    r = httpx.post(server.url + path, json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and field in err["message"], err


def test_a_field_sent_as_null_asks_for_nothing(server):
    r = httpx.post(server.url + "/v1/chat/completions",
                   json={"messages": CHAT, "max_tokens": 2, "tools": None, "response_format": None}, timeout=60)
    assert r.status_code == 200, r.text


def test_tokenizer_info_and_round_trip(server):
    """What lm-evaluation-harness's server-side tokenizer reads; tokenize then detokenize gives the
    text back."""
    info = httpx.get(server.url + "/tokenizer_info", timeout=30).json()
    assert info["eos_token"] == "<|im_end|>" and isinstance(info["eos_token_id"], int)
    assert "bos_token" in info and "add_bos_token" in info
    assert "<|im_start|>" in info["chat_template"]  # SmolLM2's own ChatML template
    assert info["vocab_size"] == 49152 and info["model_max_length"] >= 1024
    text = "Hello, world! Ünïcödé and <|im_end|> as text."
    toks = httpx.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False},
                      timeout=30).json()["tokens"]
    assert httpx.post(server.url + "/detokenize", json={"tokens": toks}, timeout=30).json()["prompt"] == text
    with_special = httpx.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": True},
                              timeout=30).json()["tokens"]
    if info["add_bos_token"]:
        assert with_special[0] == info["bos_token_id"] and with_special[1:] == toks
    else:
        assert with_special == toks


def test_openai_sampling_defaults_and_operator_defaults():
    """Without an operator's default a request that leaves out temperature samples at 1 with a fresh
    seed (OpenAI's defaults): two such requests differ, two with the same seed match. --temp 0 on
    the server makes the same requests greedy: they match without a seed."""
    body = {"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True}
    s = Server("--max-num-seqs", "4")
    try:
        texts = [httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
                 for _ in range(3)]
        assert len(set(texts)) > 1, texts
        seeded = [httpx.post(s.url + "/v1/completions", json={**body, "seed": 11}, timeout=60)
                  .json()["choices"][0]["text"] for _ in range(2)]
        assert seeded[0] == seeded[1]
    finally:
        assert s.stop() == 0
    s = Server("--max-num-seqs", "4", "--temp", "0")
    try:
        texts = [httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
                 for _ in range(2)]
        assert texts[0] == texts[1]
    finally:
        assert s.stop() == 0


def test_n_choices_share_one_prompt(server):
    """n=4: four choices, index 0..3, usage counts the prompt once and the outputs summed; the
    choices after the first take the prompt's cells from the prefix cache instead of computing
    them again; a seed gives the same four again. Streamed too, chunk by chunk with their index."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    prompt = "Write a short poem about the sea and the wind over the harbour at night:"
    n_prompt = tokens_of(server, prompt)
    m0 = server.metrics()
    r = client.completions.create(model=model_id(server), prompt=prompt, max_tokens=12, n=4, temperature=1.0,
                                  seed=5, extra_body={"ignore_eos": True})
    m1 = server.metrics()
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == 48
    assert len({c.text for c in r.choices}) > 1  # four samples, not one four times
    hits = m1["cobatch:prefix_cache_hits_total"] - m0["cobatch:prefix_cache_hits_total"]
    assert hits >= 3 * (n_prompt - 2), (hits, n_prompt)  # one prefill, three shares
    assert m1["cobatch:prompt_tokens_total"] - m0["cobatch:prompt_tokens_total"] == n_prompt  # once per request
    again = client.completions.create(model=model_id(server), prompt=prompt, max_tokens=12, n=4, temperature=1.0,
                                      seed=5, extra_body={"ignore_eos": True})
    assert [c.text for c in again.choices] == [c.text for c in r.choices]

    texts, finishes, usage = {}, {}, None
    for ch in client.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=6, n=3, stream=True,
                                             temperature=1.0, stream_options={"include_usage": True}):
        usage = ch.usage or usage
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            finishes[c.index] = c.finish_reason or finishes.get(c.index)
    assert sorted(texts) == [0, 1, 2] and all(finishes[i] in ("stop", "length") for i in range(3))
    assert usage.completion_tokens <= 18 and usage.prompt_tokens < 40

    r = httpx.post(server.url + "/v1/completions", json={"prompt": "x", "n": 17}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


@pytest.mark.parametrize("body", [
    {"prompt": "x", "max_tokens": 1, "best_of": 1, "suffix": "", "store": False},
    {"prompt": "x", "max_tokens": 1, "logprobs": False, "echo": False},
])
def test_unsupported_fields_with_the_value_that_asks_nothing_are_accepted(server, body):
    assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x", "logprobs": 21}, "logprobs"),
    ({"prompt": "x", "logprobs": "yes"}, "logprobs"),
    ({"prompt": "x", "stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options"),
    ({"prompt": "x", "best_of": 2}, "best_of"),
])
def test_fields_that_ask_for_something_unsupported_are_refused(server, body, param):
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.skipif(bool(os.environ.get("COBATCH_SANITIZED")),
                    reason="a prompt of the whole trained context: uninstrumented compute, the plain build runs it")
def test_requests_get_the_trained_context_by_default(server):
    """With the defaults a request may use the model's trained context (8192): streams are sized by
    memory (4096 cells where the running ones and a quarter more fit an eighth of the host's memory:
    an agent's first request fits one), a prompt longer than a stream is answered in the long lane beside short
    requests in the streams; the limit shows in /tokenize; past it is a 400."""
    import re
    m = re.search(r"KV: 8 streams of (\d+) cells, (\d+) more for the prefix cache, long lane (\d+) cells",
                  server.logs())
    assert m, server.logs()[-2000:]
    cells, lane = int(m[1]), int(m[3])
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    kv = min(mem // 8, 8 << 30)  # 10 streams (8 running + a quarter) at 23,040 bytes a cell
    want = 4096 if 10 * 4096 * 23040 <= kv else 2048 if 10 * 2048 * 23040 <= kv else 1024
    assert (cells, lane) == (want, 8192), m[0]
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    info = httpx.post(server.url + "/tokenize", json={"content": "x"}, timeout=30).json()
    assert info["max_model_len"] == 8192, info
    ids = httpx.post(server.url + "/tokenize", json={"content": "The river runs past the old mill. " * 800,
                                                     "add_special_tokens": False}, timeout=30).json()["tokens"]
    ids = ids[:cells + 300]  # past a stream: the lane
    box = {}

    def long_one():
        box["r"] = c.completions.create(model=model_id(server), prompt=ids, max_tokens=8, temperature=0)

    t = threading.Thread(target=long_one)
    t.start()
    short = [c.completions.create(model=model_id(server), prompt="The capital of France is", max_tokens=8)
             for _ in range(3)]
    t.join(timeout=300)
    r = box["r"]
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 8, r.usage
    assert all(s.usage.completion_tokens == 8 for s in short)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=model_id(server), prompt=ids * 3, max_tokens=4)
    assert "8192" in e.value.body["message"], e.value.body
