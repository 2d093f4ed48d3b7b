"""No request may crash the server, freeze it, or stall the others: while hostile requests of each
kind arrive (grammars nested 20,000 deep, exponential and ambiguous grammars, repetitions of
repetitions, a grammar whose stack unfolds through 120 levels at one character, a 20,000-value enum, a
30,000-byte property name, tool-call arguments nested 50,000 deep, an output forced ever deeper into
a tool call, a repetition {3,2} that made llama.cpp's grammar parser loop, a 60 MB answer), a
stream's largest gap between tokens and /health's answer time stay bounded, each hostile request
ends, and the server exits cleanly afterwards."""
import os
import threading
import time

import httpx
import pytest

from conftest import Server

TEMPLATE = os.path.join(os.path.dirname(__file__), "..", "..", "templates", "chatml-tools.jinja")
# generous: a release build on a quiet 2-core machine, where the largest gap is 0.4-1.2 s (3.2-3.7 s
# with a fuzzer busy on one of the cores); unbounded, these stalls took 7-90 s. A sanitizer build
# computes 2-3x slower: its largest gaps were 0.7-0.9 s, then 6.5-7.9 s once a request that outgrew
# its stream was recomputed in the long lane (its own output paused for its whole length); since
# its cells move there through the host tier, 3.6 s (ASan, a build beside it). Its bound is twice
# the release build's.
GAP_BOUND_S = 3.0 * (2 if os.environ.get("COBATCH_SANITIZED") else 1)
# The release build runs the default sizes (streams of 4096 cells on a host of 16 GiB or more: its
# largest gap 0.56 s). A sanitizer build there saw a 16.7 s gap during the 60 MB answer, 2.7 s with
# 1024-cell streams, a cost not yet explained: it runs 1024-cell streams and the long lane.
SIZES = ("--max-model-len", "1024", "--long-lane", "8192") if os.environ.get("COBATCH_SANITIZED") else ()
HEALTH_BOUND_S = 2.0


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "8", "--temp", "0", *SIZES)
    yield s
    assert s.stop() == 0, s.logs()


def chat(url, body, timeout=300):
    if "prompt" in body:  # a completion
        return httpx.post(url + "/v1/completions", json=body, timeout=timeout)
    body = {"messages": [{"role": "user", "content": "Write a list."}], "max_tokens": 64, **body}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def token_ids(url, text):
    return httpx.post(url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]


def hostile(url):
    """(name, request body, statuses it may end with, what its answer says) for each kind of attack."""
    nested = "root ::= " + "(" * 20000 + '"a"' + ")" * 20000
    expo = 'P ::= "p"\nQ ::= "q"\nS0 ::= "x"\n' + "".join(
        f"S{i} ::= S{i - 1} P | S{i - 1} Q\n" for i in range(1, 23)) + "root ::= S22\n"
    ambiguous = 'root ::= S\nS ::= "a" S P | "a" S Q | "a"{16}\nP ::= "p"\nQ ::= "q"\n'
    # 27 bytes: llama.cpp's check of the candidates recursed per way through ten nested loops (> 20 s a token)
    loops = "root ::= [a-z ]++++++++++*"
    # r_i ::= "x" r_(i+1) n, n empty or one of 1,000 strings: after 120 x's a "y" unfolds 120,000 states
    unfold = "".join(f'r{i} ::= "x" r{i + 1} n\n' for i in range(120)) + 'r120 ::= "y"\nroot ::= r0\nn ::= ""' + \
        "".join(f' | "{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{i % 10}"' for i in range(1000)) + "\n"
    enum = {"type": "string", "enum": [f"v{i}" for i in range(20000)]}
    name = {"type": "object", "properties": {"!" * 30000: {"type": "string"}}}
    deep_args = "[" * 50000 + "]" * 50000
    rec = {"type": "object", "properties": {"a": {"$ref": "#/$defs/r"}}, "required": ["a"],
           "$defs": {"r": {"type": "array", "items": {"$ref": "#/$defs/r"}}}}
    bias = {str(t): 30 for t in token_ids(url, "[") + token_ids(url, "[[")}

    def fmt(schema):
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    # 8 prompts of ~900 tokens (within a stream, so that a prompt's 16 choices share its cells) x n 16,
    # echoed with top-20 log-probabilities: a 60 MB answer
    words = " ".join(f"w{i}" for i in range(250))
    big = {"prompt": [f"{k} {words}" for k in range(8)], "n": 16, "echo": True, "logprobs": 20, "max_tokens": 1}
    return [
        ("nested grammar", {"grammar": nested}, {400}, "--limit"),
        ("exponential grammar", {"grammar": expo}, {400}, "--limit"),
        ("ambiguous grammar", {"grammar": ambiguous, "max_tokens": 200}, {400}, "--limit"),
        ("repetitions of repetitions", {"grammar": loops}, {400}, "--limit"),
        ("a grammar that unfolds 120 levels", {"grammar": unfold, "max_tokens": 200}, {400}, "--limit"),
        ("repetition {3,2}", {"grammar": 'root ::= "a"{3,2}'}, {400}, "below m"),
        ("20,000-value enum", fmt(enum), {400}, "--limit"),
        ("30,000-byte property name", fmt(name), {400}, "--limit"),
        ("tool parameters with that name", {"tools": [{"type": "function", "function": {
            "name": "f", "parameters": name}}]}, {400}, "--limit"),
        ("tool-call arguments 50,000 deep", {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": deep_args}}]},
            {"role": "tool", "tool_call_id": "1", "content": "ok"}]}, {400}, "--limit"),
        ("an output forced ever deeper into a call", {
            "tools": [{"type": "function", "function": {"name": "f", "parameters": rec}}],
            "tool_choice": "required", "logit_bias": bias, "max_tokens": 600, "stream": True}, {200},
         "--limit json-depth"),
        ("a 60 MB answer", big, {200}, "completion_tokens"),
    ]


def test_hostile_requests_neither_crash_nor_stall_the_others(srv):
    attacks = hostile(srv.url)
    gaps, health, done = [], [], threading.Event()

    def stream():
        body = {"messages": [{"role": "user", "content": "Count from one to a thousand."}],
                "max_tokens": 100000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=300) as r:
            last = None
            for line in r.iter_lines():
                now = time.monotonic()
                if line.startswith("data: ") and line != "data: [DONE]":
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                if done.is_set():
                    break

    def poll():
        while not done.is_set():
            t = time.monotonic()
            assert httpx.get(srv.url + "/health", timeout=60).status_code == 200
            health.append(time.monotonic() - t)
            time.sleep(0.2)

    threads = [threading.Thread(target=stream), threading.Thread(target=poll)]
    for t in threads:
        t.start()
    time.sleep(2)  # the stream is under way
    results = []
    for name, body, statuses, says in attacks:
        t = time.monotonic()
        r = chat(srv.url, body)
        results.append((name, r.status_code, round(time.monotonic() - t, 2), len(r.content), r.text[-300:]))
        assert r.status_code in statuses, results[-1]
        assert says in r.text[-300:], results[-1]
    time.sleep(1)
    done.set()
    for t in threads:
        t.join(timeout=120)
    for row in results:
        print("#", row)
    print(f"# stream: {len(gaps)} gaps, largest {max(gaps):.3f} s; /health largest {max(health):.3f} s")
    assert results[-1][3] > 50_000_000  # the big answer is whole
    assert len(gaps) > 50
    assert max(gaps) < GAP_BOUND_S
    assert max(health) < HEALTH_BOUND_S
    assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
