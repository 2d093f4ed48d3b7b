"""No request may crash the server, freeze it, stall the others or leave a stream silent: while
hostile requests of each kind arrive (grammars nested 20,000 deep, exponential and ambiguous grammars, repetitions of
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
SLOW = 2 if os.environ.get("COBATCH_SANITIZED") else 1  # a sanitized server parses and renders slower
GAP_BOUND_S = 3.0 * SLOW
# The release build runs the default sizes (streams of 4096 cells on a host of 16 GiB or more: its
# largest gap 0.56 s). A sanitizer build there saw a 16.7 s gap during the 60 MB answer, 2.7 s with
# 1024-cell streams, a cost not yet explained: it runs 1024-cell streams and the long lane.
SIZES = ("--max-model-len", "1024", "--long-lane", "8192") if os.environ.get("COBATCH_SANITIZED") else ()
HEALTH_BOUND_S = 2.0
# The message limit, lowered from the context's tokens (8,192) to keep the test short: the largest
# body renders at the worker's low priority, 10x slower beside a busy engine (8,192 messages: 33 s).
MOST_MESSAGES = 2048


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "8", "--temp", "0", "--sse-ping-interval", "2",
               "--limit", f"messages={MOST_MESSAGES}", *SIZES)
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


def largest_bodies(url):
    """The largest body of each dialect the limits let through to rendering (as many messages as the
    limit: by default the context's tokens, each message renders to one at least), and ones past them
    (refused before they render)."""
    most = MOST_MESSAGES - 1  # ends with a user's turn
    chat = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(most)]
    pairs = (most - 1) // 3  # a call is an assistant message and its call, its output a tool message
    items = []
    for i in range(pairs):
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "ok"})
    return [
        ("chat, 2,047 messages", "/v1/chat/completions", {"messages": chat, "max_tokens": 1}),
        ("Messages, 2,047 messages", "/v1/messages", {"model": "m", "max_tokens": 1, "messages": chat}),
        ("Responses, 682 calls and outputs", "/v1/responses",
         {"model": "m", "max_output_tokens": 1, "input": [{"role": "user", "content": "Hi"}] + items}),
        ("Messages, 28,000 messages", "/v1/messages", {"model": "m", "max_tokens": 1, "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(28001)]}),
        ("Responses, 7,000 calls and outputs", "/v1/responses", {"model": "m", "input": [
            {"type": "function_call", "call_id": f"c{i // 2}", "name": "f", "arguments": "{}"} if i % 2 == 0 else
            {"type": "function_call_output", "call_id": f"c{i // 2}", "output": "ok"} for i in range(14000)]}),
        ("60,000 template variables", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                              "chat_template_kwargs": {f"k{i}": i for i in range(60000)}}),
    ]


def test_dialects_largest_bodies_stall_no_one(srv):
    """Each dialect's largest body renders on a worker of its own (bodies over 128 KB, at a lower
    priority than the engine's threads): meanwhile a stream's gaps and a small request's time to its
    answer stay within the bound, and bodies past the message limit are refused before they render
    (28,000 Anthropic messages held the one worker 9 s, and every request behind it)."""
    gaps, done = [], threading.Event()

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

    th = threading.Thread(target=stream)
    th.start()
    time.sleep(2)
    rows = []
    for name, path, body in largest_bodies(srv.url):
        result = {}

        def big():
            t = time.monotonic()
            r = httpx.post(srv.url + path, json=body, timeout=300)
            result["big"] = (r.status_code, round(time.monotonic() - t, 2), r.text[:160])
        bt = threading.Thread(target=big)
        bt.start()
        time.sleep(0.3)  # the big body is being parsed or rendered
        t = time.monotonic()
        small = httpx.post(srv.url + "/v1/chat/completions", timeout=60,
                           json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
        result["small"] = round(time.monotonic() - t, 2)
        bt.join(timeout=300)
        rows.append((name, result["big"], result["small"]))
        assert small.status_code == 200
        assert result["big"][0] in (200, 400), rows[-1]  # answered, or past the context or the message limit
        assert result["small"] < HEALTH_BOUND_S + 1, rows[-1]
    done.set()
    th.join(timeout=60)
    for row in rows:
        print("#", row)
    print(f"# stream: {len(gaps)} gaps, largest {max(gaps):.3f} s")
    for name, big, _ in rows[3:]:  # past the limits: refused at once, not rendered
        assert big[1] < 3 * SLOW and ("limit" in big[2] or "at most" in big[2]), (name, big)
    assert max(gaps) < GAP_BOUND_S


def test_long_prompts_never_leave_a_stream_silent(srv):
    """A prompt that takes longer to compute than a client waits in silence (5 s here, ~15 s for
    Claude Code) keeps each dialect's official client connected: the stream's head goes out after the
    ping interval (2 s here) with a keep-alive, then one every interval, then the answer."""
    import anthropic
    import openai
    text = " ".join(f"word{i % 97} item{i}" for i in range(250))  # 1,610 tokens: ~7 s to compute alone
    quiet = 5.0  # seconds without a byte before a client gives up
    out = {}

    def run_chat():
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=quiet)
        s = c.chat.completions.create(model="m", max_tokens=2, stream=True,
                                      messages=[{"role": "user", "content": "A " + text}])
        out["chat"] = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)

    def run_messages():
        c = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0, timeout=quiet)
        with c.messages.stream(model="m", max_tokens=2, messages=[{"role": "user", "content": "B " + text}]) as s:
            out["messages"] = s.get_final_message().usage.output_tokens

    def run_responses():
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=quiet)
        s = c.responses.create(model="m", max_output_tokens=2, stream=True, input="C " + text)
        out["responses"] = [e.type for e in s][-1]

    errors = []

    def guard(f):
        try:
            f()
        except Exception as e:  # noqa: BLE001 -- the failure is reported below
            errors.append(f"{f.__name__}: {e!r}")
    before = httpx.get(srv.url + "/metrics", timeout=10).text
    t = time.monotonic()
    threads = [threading.Thread(target=guard, args=(f,)) for f in (run_chat, run_messages, run_responses)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    took = time.monotonic() - t
    after = httpx.get(srv.url + "/metrics", timeout=10).text

    def pings(text):
        return float([x for x in text.splitlines() if x.startswith("cobatch:sse_pings_total")][0].split()[-1])
    print(f"# three 1,610-token prompts together: {took:.1f} s, {pings(after) - pings(before):.0f} pings")
    assert not errors, errors
    assert took > 10  # silence longer than the clients' 5 s was there to be bridged
    assert out["chat"] is not None and out["messages"] >= 1 and out["responses"] in ("response.completed", "response.incomplete"), out
    assert pings(after) - pings(before) >= 3
