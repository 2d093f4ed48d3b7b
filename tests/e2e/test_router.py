"""Replicas behind a router: two `cobatch serve` behind sglang-router (PyPI, pinned), as
scripts/replicas.py runs them. The router adds fields of its own to every request it forwards;
requests are spread over both replicas; one replica stopped (SIGTERM: it drains, its /health says
503, then it exits) and the rest of the requests are still answered by the other."""
import socket
import subprocess
import sys
import time

import httpx
import openai

from conftest import Server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(workers, policy):
    port, prom = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
         "--worker-urls", *workers, "--policy", policy, "--health-check-endpoint", "/health",
         "--health-check-interval-secs", "1", "--health-failure-threshold", "2",
         "--retry-max-retries", "3", "--retry-initial-backoff-ms", "50",
         "--prometheus-port", str(prom), "--log-level", "warn"],
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
