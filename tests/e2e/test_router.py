"""Replicas behind a router: two `cobatch serve` behind sglang-router (PyPI, pinned), as
scripts/replicas.py runs them. The router adds fields of its own to every request it forwards;
requests are spread over both replicas; one replica stopped (SIGTERM: it drains, its /health says
503, then it exits) and the rest of the requests are still answered by the other."""
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import openai

import pytest
from conftest import Server

# sglang-router is another program: how it and cobatch meet is checked by the plain build
pytestmark = pytest.mark.skipif(bool(os.environ.get("COBATCH_SANITIZED")),
                                reason="an outside router, not our memory or threads: the plain build checks it")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import replicas  # noqa: E402  the router's command line, as scripts/replicas.py runs it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(workers, policy):
    port, prom = free_port(), free_port()
    proc = subprocess.Popen(replicas.router_cmd(sys.executable, port, workers, policy, prom),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the router did not start")


def generated(server):
    return server.metrics()["cobatch:generation_tokens_total"]


def test_two_replicas_behind_the_router_one_stopped():
    a = Server("--max-num-seqs", "4", "--temp", "0")
    b = Server("--max-num-seqs", "4", "--temp", "0")
    router, url = start_router([a.url, b.url], "round_robin")
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        # the router lists the replicas' model by the name they give it (/server_info, /model_info)
        name = httpx.get(a.url + "/v1/models", timeout=10).json()["data"][0]["id"]
        assert [m.id for m in client.models.list().data] == [name]
        for i in range(6):
            r = client.completions.create(model="m", prompt=f"Count to {i + 3}:", max_tokens=4)
            assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 4
            c = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Say {i}"}],
                                               max_tokens=4)
            assert c.choices[0].message.content
        ga, gb = generated(a), generated(b)
        assert ga > 0 and gb > 0, (ga, gb)  # both replicas served
        assert ga + gb == 48

        assert a.stop() == 0, a.logs()  # drained and gone
        answered = 0
        for i in range(8):
            r = client.completions.create(model="m", prompt=f"After the stop {i}:", max_tokens=4)
            answered += r.usage.completion_tokens == 4
        assert answered == 8
        assert generated(b) == gb + 32  # all of them on the replica that is left
    finally:
        router.terminate()
        router.wait(30)
        b.stop()
        a.stop()


def test_replica_stopped_under_load_loses_nothing():
    """SIGTERM on a replica in the middle of a load through the router (cache_aware): for its grace
    its /health says 503 while it still serves, then it drains; the requests queued on it then get
    503 and the router sends them to the other one. Every request is answered, whole."""
    # a grace longer than the deployment's: the direct request below waits behind a's queue in it
    flags = ("--max-num-seqs", "2", "--temp", "0", "-t", "1", "--drain-grace", "10")
    a, b = Server(*flags), Server(*flags)
    router, url = start_router([a.url, b.url], "cache_aware")
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        docs = [f"Document {d}: " + " ".join(f"word{d}x{k}" for k in range(40)) for d in range(4)]

        def one(i):
            prompt = f"{docs[i % 4]}\nQuestion {i}: what comes next?"
            if i % 2:
                r = client.completions.create(model="m", prompt=prompt, max_tokens=12)
                return r.usage.completion_tokens, r.choices[0].finish_reason
            n, finish = 0, None
            for ch in client.completions.create(model="m", prompt=prompt, max_tokens=12, stream=True,
                                                stream_options={"include_usage": True}):
                if ch.usage:
                    n = ch.usage.completion_tokens
                if ch.choices and ch.choices[0].finish_reason:
                    finish = ch.choices[0].finish_reason
            return n, finish

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futs = [pool.submit(one, i) for i in range(40)]
            deadline = time.time() + 60
            while generated(a) == 0 or generated(b) == 0:  # both replicas at work
                assert time.time() < deadline, "the router did not use both replicas"
                time.sleep(0.1)
            a.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            assert httpx.get(a.url + "/health", timeout=10).status_code == 503  # the router takes it out
            direct = httpx.post(a.url + "/v1/completions", timeout=60,  # yet it still serves, for its grace
                                json={"prompt": "Still there?", "max_tokens": 2})
            assert direct.status_code == 200, direct.text
            results = [f.result() for f in futs]
        assert len(results) == 40
        for n, finish in results:  # every one answered whole: its length, or its end of text
            assert (finish == "length" and n == 12) or (finish == "stop" and 0 < n <= 12), results
        assert a.proc.wait(60) == 0, a.logs()  # drained and gone
        assert "draining" in a.logs()
    finally:
        router.terminate()
        router.wait(30)
        b.stop()
        a.stop()
