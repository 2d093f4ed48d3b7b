"""The Anthropic Messages API through the official Anthropic Python SDK against a real `cobatch
serve` of the default model with the tool-capable ChatML template: a message and its usage, a
stream (the SDK assembles the events into the same message), stop sequences named, max_tokens,
forced tool use (tool_choice any and tool) streamed and not, a tool_use / tool_result round trip,
count_tokens, x-api-key, prefix-cache reads in the usage, and the 400s for what the server cannot
honour (images, thinking, server tools, unknown fields), in Anthropic's error shape."""
import json
import os

import anthropic
import httpx
import pytest

from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "templates", "chatml-tools.jinja")
WEATHER = {"name": "get_weather", "description": "Current weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                            "required": ["city"], "additionalProperties": False}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
KEY = "sk-test-anthropic"


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "4", "--temp", "0", "--api-key", KEY)
    yield s
    assert s.stop() == 0, s.logs()


def client(srv):
    return anthropic.Anthropic(base_url=srv.url, api_key=KEY, max_retries=0)


def test_message_and_its_stream_agree(srv):
    c = client(srv)
    kw = dict(model="local", max_tokens=24, system="You are terse.",
              messages=[{"role": "user", "content": "Name three colors."}])
    m = c.messages.create(**kw)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.output_tokens > 0 and m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 10
    with c.messages.stream(**kw) as st:
        events = [e.type for e in st]
        final = st.get_final_message()
    assert final.content[0].text == m.content[0].text  # greedy: the same text
    assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_start" in events and "content_block_stop" in events
    # the second time the prompt was read from the prefix cache, and the usage says so
    again = c.messages.create(**kw)
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens + again.usage.cache_read_input_tokens == \
        m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_max_tokens_and_stop_sequences(srv):
    c = client(srv)
    m = c.messages.create(model="local", max_tokens=3, messages=[{"role": "user", "content": "Count to twenty."}])
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 3
    full = c.messages.create(model="local", max_tokens=40, messages=[{"role": "user", "content": "Count to twenty."}])
    text = full.content[0].text
    words = [w for w in text.split() if len(w) > 1]
    assert words, text
    stop = words[min(2, len(words) - 1)]
    m = c.messages.create(model="local", max_tokens=40, stop_sequences=["@@never@@", stop],
                          messages=[{"role": "user", "content": "Count to twenty."}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert stop not in m.content[0].text and text.startswith(m.content[0].text)


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_use(srv, stream):
    c = client(srv)
    kw = dict(model="local", max_tokens=64, tools=[WEATHER], messages=ASK,
              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    if stream:
        with c.messages.stream(**kw) as st:
            m = st.get_final_message()
    else:
        m = c.messages.create(**kw)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and m.stop_reason == "tool_use", m
    assert uses[0].name == "get_weather" and isinstance(uses[0].input, dict) and "city" in uses[0].input
    assert uses[0].id


def test_tool_result_round_trip(srv):
    c = client(srv)
    m = c.messages.create(model="local", max_tokens=64, tools=[WEATHER], messages=ASK,
                          tool_choice={"type": "any", "disable_parallel_tool_use": True})
    use = next(b for b in m.content if b.type == "tool_use")
    history = ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                     {"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}]}]
    answer = c.messages.create(model="local", max_tokens=32, tools=[WEATHER], messages=history,
                               tool_choice={"type": "none"})
    assert answer.content and answer.content[0].type == "text" and answer.stop_reason in ("end_turn", "max_tokens")
    n = c.messages.count_tokens(model="local", tools=[WEATHER], messages=history)
    assert n.input_tokens > c.messages.count_tokens(model="local", messages=ASK).input_tokens > 5


def test_what_cannot_be_honoured_is_refused_by_name(srv):
    c = client(srv)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    cases = [
        (dict(messages=[{"role": "user", "content": [image]}]), "image"),
        (dict(messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}), "thinking"),
        (dict(messages=ASK, tools=[{"type": "bash_20250124", "name": "bash"}]), "bash_20250124"),
        (dict(messages=ASK, tools=[WEB_SEARCH], tool_choice={"type": "tool", "name": "web_search"}), "server tool"),
        (dict(messages=ASK, extra_body={"frobnicate": 1}), "frobnicate"),
        (dict(messages=[{"role": "tool", "content": "x"}]), "role"),
        (dict(messages=ASK + [{"role": "assistant", "content": "The weather"}]), "prefill"),
    ]
    for kw, says in cases:
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model="local", max_tokens=8, **kw)
        assert e.value.status_code == 400 and says in str(e.value), (says, e.value)
        assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"


def test_server_tools_are_offers_never_called(srv):
    """A server tool (web search, ...) is an offer the model may take on Anthropic's side: this server
    runs none, so it takes the offer and never calls it (counted in /metrics); the rest of the
    request is served, and a count of its tokens answers too."""
    c = client(srv)
    def offered():
        text = httpx.get(srv.url + "/metrics", headers={"x-api-key": KEY}, timeout=10).text
        return float([x for x in text.splitlines() if x.startswith("cobatch:hosted_tools_offered_total")][0].split()[-1])
    before = offered()
    m = c.messages.create(model="local", max_tokens=8, messages=ASK, tools=[WEATHER, WEB_SEARCH])
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert all(b.type != "server_tool_use" and getattr(b, "name", "") != "web_search" for b in m.content)
    assert c.messages.count_tokens(model="local", messages=ASK, tools=[WEATHER, WEB_SEARCH]).input_tokens > 5
    assert offered() - before == 2


def test_keys_and_error_shape(srv):
    body = {"model": "local", "max_tokens": 4, "messages": ASK}
    r = httpx.post(srv.url + "/v1/messages", json=body, headers={"x-api-key": "wrong"}, timeout=60)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(srv.url + "/v1/messages", json=body, timeout=60,
                   headers={"Authorization": "Bearer " + KEY, "anthropic-version": "2023-06-01",
                            "anthropic-beta": "prompt-caching-2024-07-31"})
    assert r.status_code == 200 and r.json()["type"] == "message"
    r = httpx.post(srv.url + "/v1/messages", content=b"{", headers={"x-api-key": KEY}, timeout=60)
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = httpx.post(srv.url + "/v1/messages", json={"model": "local", "messages": ASK}, headers={"x-api-key": KEY},
                   timeout=60)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    # a wrong method or an unknown path under /v1/messages: Anthropic's shape, as the SDK reads it
    r = httpx.get(srv.url + "/v1/messages", headers={"x-api-key": KEY}, timeout=60)
    assert r.status_code == 405 and r.json()["type"] == "error", r.text
    r = httpx.post(srv.url + "/v1/messages/batches", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert r.status_code == 404 and r.json()["type"] == "error" and r.json()["error"]["type"] == "not_found_error"
    assert "type" not in httpx.get(srv.url + "/v1/nothing", timeout=60).json()  # OpenAI's shape elsewhere


def test_stream_events_in_order(srv):
    """The raw event sequence a client that does not use the SDK reads: message_start, ping, then each
    block started, its deltas, stopped, then message_delta with the stop reason and message_stop."""
    body = {"model": "local", "max_tokens": 12, "stream": True, "messages": ASK}
    with httpx.stream("POST", srv.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    names = [ln[7:] for ln in lines if ln.startswith("event: ")]
    datas = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: ")]
    assert len(names) == len(datas) and all(d["type"] == n for n, d in zip(names, datas))
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert datas[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens") and datas[-2]["usage"]["output_tokens"] > 0


def test_what_claude_code_sends_is_taken(srv):
    """Fields Claude Code sends with every request, at the values that ask for what the server does:
    adaptive thinking (this model never thinks), clearing thinking blocks (there are none), an effort
    level, system turns inside the conversation, a deferred tool (kept out of the prompt: no tool
    search here), metadata.user_id; and output_config.format held as a JSON schema."""
    c = client(srv)
    deferred = {**WEATHER, "name": "later", "defer_loading": True}
    kw = dict(model="local", max_tokens=16, tools=[WEATHER, deferred], metadata={"user_id": "u1"},
              messages=[{"role": "user", "content": "Hi"}],
              extra_body={"thinking": {"type": "adaptive", "display": "omitted"},
                          "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                          "output_config": {"effort": "medium"}})
    kw["messages"] = [{"role": "user", "content": "Hi"}, {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}]
    m = c.messages.create(**kw)
    assert m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert all(b.name != "later" for b in m.content if b.type == "tool_use")
    without = c.messages.count_tokens(model="local", tools=[WEATHER], messages=ASK).input_tokens
    assert c.messages.count_tokens(model="local", tools=[WEATHER, deferred], messages=ASK).input_tokens == without
    schema = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}},
              "required": ["color"], "additionalProperties": False}
    m = c.messages.create(model="local", max_tokens=32, messages=[{"role": "user", "content": "A color?"}],
                          extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}})
    assert json.loads(m.content[0].text)["color"] in ("red", "blue")
    for extra, says in [({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking"),
                        ({"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}, "context_management"),
                        ({"output_config": {"effort": "extreme"}}, "effort")]:
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model="local", max_tokens=8, messages=ASK, extra_body=extra)
        assert says in str(e.value), (says, e.value)


def test_errors_the_chat_parser_raises_name_the_messages_fields(srv):
    """A field the translation passes on and the chat parser refuses is named as the client sent it."""
    big = {"type": "string", "minLength": 3000000000}  # past 2^31 - 1, what a schema may ask
    cases = [
        ({"output_config": {"format": {"type": "json_schema", "schema": big}}}, "output_config.format",
         "'output_config.format.schema'"),
        ({"tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"a": big}}}]}, "tools",
         "tools[0].input_schema"),
        ({"stop_sequences": [f"s{i}" for i in range(40)]}, "stop_sequences", "stop strings"),
    ]
    for extra, param, says in cases:
        body = {"model": "local", "max_tokens": 8, "messages": ASK, **extra}
        r = httpx.post(srv.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
        err = r.json()["error"]
        assert r.status_code == 400 and says in err["message"], (extra, err)
        for chat in ("response_format", ".function.", "'stop'"):
            assert chat not in err["message"], err
