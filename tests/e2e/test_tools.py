"""Tool calls through the official OpenAI Python and Node SDKs against a real `cobatch serve` of the
real default model, with the tool-capable ChatML template the repository ships (SmolLM2's own
template has no tools): tool_choice required, a named function, auto and none, streamed and not;
parallel_tool_calls; a two-turn conversation (call, tool result, answer); the 400s. A forced call
is held to the template's call format by a grammar, so it is well-formed even from a 135M model."""
import json
import os
import subprocess

import httpx
import openai
import pytest

from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "templates", "chatml-tools.jinja")
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
ASK = [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                   "required": ["city"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]


@pytest.fixture(scope="module")
def tserver():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "8", "--temp", "0")
    yield s
    assert s.stop() == 0, s.logs()


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def model_id(server):
    return httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]


def valid_call(call, tools=TOOLS):
    """A call to one of tools whose arguments are a JSON object with the schema's keys and types."""
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) > 10, call
    (tool,) = [t for t in tools if t["function"]["name"] == call.function.name]
    args = json.loads(call.function.arguments)
    props = tool["function"]["parameters"]["properties"]
    assert set(tool["function"]["parameters"]["required"]) <= set(args) <= set(props), args
    for k, v in args.items():
        assert isinstance(v, str) and len(v) <= props[k].get("maxLength", 1 << 30), args
        assert "enum" not in props[k] or v in props[k]["enum"], args
    return args


def collect(stream):
    """A streamed chat's content, calls (by index: id, name, arguments joined), finish reason."""
    content, calls, finish, names = "", {}, None, {}
    for ch in stream:
        for c in ch.choices:
            d = c.delta
            content += d.content or ""
            for t in d.tool_calls or []:
                e = calls.setdefault(t.index, {"id": None, "name": None, "arguments": ""})
                if t.id:
                    assert e["id"] is None, "an id is sent once"
                    e["id"] = t.id
                if t.function and t.function.name:
                    names[t.index] = names.get(t.index, 0) + 1
                    e["name"] = t.function.name
                e["arguments"] += (t.function.arguments or "") if t.function else ""
            finish = c.finish_reason or finish
    assert all(n == 1 for n in names.values()), "a name is sent once"
    return content, calls, finish


class _Call:  # a streamed call in the SDK's shape, for valid_call
    def __init__(self, e):
        self.id, self.type = e["id"], "function"
        self.function = type("F", (), {"name": e["name"], "arguments": e["arguments"]})


def test_required_is_one_wellformed_call(tserver):
    c = client_of(tserver)
    r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="required",
                                  parallel_tool_calls=False, max_tokens=80)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None, ch
    (call,) = ch.message.tool_calls
    valid_call(call)
    # streamed: the same call in OpenAI's delta format, arguments in several pieces
    content, calls, finish = collect(c.chat.completions.create(
        model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=80, stream=True))
    assert finish == "tool_calls" and content == "" and list(calls) == [0], calls
    valid_call(_Call(calls[0]))
    # sampled too: whatever comes out is a call that validates
    for seed in range(3):
        r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="required",
                                      parallel_tool_calls=False, max_tokens=150, temperature=1.0, seed=seed)
        (call,) = r.choices[0].message.tool_calls
        valid_call(call)


def test_named_function_is_the_one_called(tserver):
    c = client_of(tserver)
    choice = {"type": "function", "function": {"name": "get_time"}}
    r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice=choice,
                                  parallel_tool_calls=False, max_tokens=60)
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_time" and r.choices[0].finish_reason == "tool_calls"
    valid_call(call)
    _, calls, finish = collect(c.chat.completions.create(
        model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False,
        max_tokens=60, stream=True))
    assert finish == "tool_calls" and [e["name"] for e in calls.values()] == ["get_time"]


def test_parallel_calls_each_wellformed(tserver):
    """parallel_tool_calls (OpenAI's default: true) lets the output hold several calls; each is
    well-formed, except a last one cut short by max_tokens (finish_reason length says so)."""
    c = client_of(tserver)
    for stream in (False, True):
        kw = dict(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=100)
        if stream:
            _, got, finish = collect(c.chat.completions.create(**kw, stream=True))
            calls = [_Call(got[i]) for i in sorted(got)]
        else:
            r = c.chat.completions.create(**kw)
            calls, finish = r.choices[0].message.tool_calls, r.choices[0].finish_reason
        assert len(calls) >= 1 and finish in ("tool_calls", "length")
        for call in calls[:-1] if finish == "length" else calls:
            valid_call(call)
        assert len({x.id for x in calls}) == len(calls), "ids are unique"


def test_auto_answers_or_calls(tserver):
    """auto: the model decides. SmolLM2 answers in text; with a bias toward "<" it starts the call
    marker, from which the lazy grammar holds the call to the format."""
    c = client_of(tserver)
    r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, max_tokens=30)
    ch = r.choices[0]
    assert ch.message.tool_calls is None and ch.message.content and ch.finish_reason in ("stop", "length")
    lt = httpx.post(tserver.url + "/tokenize", json={"content": "<", "add_special_tokens": False},
                    timeout=30).json()["tokens"]
    assert len(lt) == 1
    bias = {str(lt[0]): 5}
    r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="auto",
                                  parallel_tool_calls=False, logit_bias=bias, max_tokens=60)
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and len(ch.message.tool_calls) == 1, ch
    valid_call(ch.message.tool_calls[0])
    content, calls, finish = collect(c.chat.completions.create(
        model=model_id(tserver), messages=ASK, tools=TOOLS, parallel_tool_calls=False, logit_bias=bias, max_tokens=60,
        stream=True))
    assert finish == "tool_calls" and len(calls) == 1 and "<tool_call>" not in content
    valid_call(_Call(calls[0]))


def test_a_long_answer_with_tools_streams_as_it_is_written(tserver):
    """With tools offered, a streamed output is read for calls as it grows; a long answer still
    arrives a few tokens at a time, not in bursts that grow with its length (each read waits for
    1/1024 of the output: 6 bytes at 6 KB, where waiting for an eighth held back 700 bytes)."""
    c = client_of(tserver)
    msgs = [SYSTEM, {"role": "user", "content": "Write a long story about a cat who travels the world."}]
    pieces, text = [], ""
    for ch in c.chat.completions.create(model=model_id(tserver), messages=msgs, tools=TOOLS, max_tokens=1500,
                                        stream=True, extra_body={"ignore_eos": True}):
        for choice in ch.choices:
            d = choice.delta
            for piece in [d.content or ""] + [t.function.arguments or "" for t in d.tool_calls or [] if t.function]:
                if piece:
                    pieces.append(len(piece.encode()))
                    text += piece
    assert len(text.encode()) > 4096, text[:200]
    assert max(pieces) <= 64, sorted(pieces)[-10:]


def test_none_lists_the_tools_and_answers(tserver):
    c = client_of(tserver)
    plain = c.chat.completions.create(model=model_id(tserver), messages=ASK, max_tokens=20)
    r = c.chat.completions.create(model=model_id(tserver), messages=ASK, tools=TOOLS, tool_choice="none",
                                  max_tokens=20)
    ch = r.choices[0]
    assert ch.message.tool_calls is None and ch.message.content and ch.finish_reason in ("stop", "length")
    # the template lists the tools in the prompt: the model is told of them even when it may not call
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, (r.usage, plain.usage)


def test_two_turn_conversation(tserver):
    """call -> tool result -> answer: the assistant's tool_calls and the tool message go back through
    the template (the second prompt holds both), and the final answer is text."""
    c = client_of(tserver)
    m = model_id(tserver)
    r = c.chat.completions.create(model=m, messages=ASK, tools=TOOLS, parallel_tool_calls=False,
                                  tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                  max_tokens=60)
    call = r.choices[0].message.tool_calls[0]
    history = ASK + [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18, "sky": "cloudy"}'}]
    r2 = c.chat.completions.create(model=m, messages=history, tools=TOOLS, tool_choice="none", max_tokens=40)
    ch = r2.choices[0]
    assert ch.message.tool_calls is None and isinstance(ch.message.content, str) and ch.message.content
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens + r.usage.completion_tokens
    # the rendering carries the call and the result: what the template makes of them, token for token
    tail = httpx.post(tserver.url + "/tokenize", json={"content": "<tool_response>\n{\"temperature\": 18, \"sky\": "
                                                                 "\"cloudy\"}\n</tool_response>",
                                                       "add_special_tokens": False}, timeout=30).json()["count"]
    no_result = c.chat.completions.create(model=m, messages=history[:-1] + [{"role": "user", "content": "ok"}],
                                          tools=TOOLS, tool_choice="none", max_tokens=1)
    assert r2.usage.prompt_tokens >= no_result.usage.prompt_tokens + tail - 4


def test_refusals_name_the_field(tserver):
    c = client_of(tserver)
    m = model_id(tserver)
    cases = [
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice"),
        (dict(tool_choice="required"), "tool_choice"),
        (dict(tools=TOOLS, tool_choice="sometimes"), "tool_choice"),
        (dict(tools=[{"type": "function", "function": {"description": "no name"}}]), "tools"),
        (dict(tools=[{"type": "retrieval"}]), "tools"),
        (dict(tools=[WEATHER, WEATHER]), "tools"),
        (dict(tools=TOOLS, response_format={"type": "json_object"}), "response_format"),
        (dict(tools=TOOLS, extra_body={"grammar": "root ::= \"x\""}), "grammar"),
    ]
    for kw, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=m, messages=ASK, max_tokens=5, **kw)
        assert e.value.body["param"] == param, (kw, e.value.body)
    bad_history = ASK + [{"role": "assistant", "content": None,
                          "tool_calls": [{"id": "x", "type": "function", "function": {"name": "get_weather",
                                                                                        "arguments": {"city": 1}}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=m, messages=bad_history, max_tokens=5)
    assert e.value.body["param"] == "messages" and "arguments" in e.value.body["message"]
    # tools with none and a response_format are fine: nothing is held to the call format
    r = c.chat.completions.create(model=m, messages=ASK, tools=TOOLS, tool_choice="none",
                                  response_format={"type": "json_object"}, max_tokens=20)
    assert r.choices[0].message.tool_calls is None


def test_template_without_tools_refuses_them(server):
    """SmolLM2's own template has no tool-call format: tools are refused by name, not ignored."""
    c = client_of(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=model_id(server), messages=ASK, tools=TOOLS, max_tokens=5)
    assert e.value.body["param"] == "tools" and "tool-call format" in e.value.body["message"]
    r = c.chat.completions.create(model=model_id(server), messages=ASK, tools=TOOLS, tool_choice="none",
                                  max_tokens=5)
    assert r.choices[0].message.content


def test_node_sdk_streamed_tool_call(tserver):
    out = subprocess.run(["node", "node_tools.mjs", tserver.url, model_id(tserver)], capture_output=True, text=True,
                         timeout=120, cwd=HERE)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["finish"] == "tool_calls" and r["content"] is None, r
    (call,) = r["tool_calls"]
    assert call["function"]["name"] == "get_weather" and call["id"].startswith("call_"), r
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str), r
    assert r["pieces"] > 1 and r["done"] == [call["function"]], r


def test_sdk_parse_with_a_pydantic_tool(tserver):
    """The SDK's strict pydantic tools: parse() hands back the call's arguments as the model."""
    from pydantic import BaseModel, Field

    class GetWeather(BaseModel):
        city: str = Field(max_length=24)
        days: int = Field(ge=1, le=7)

    c = client_of(tserver)
    r = c.chat.completions.parse(model=model_id(tserver), messages=ASK,
                                 tools=[openai.pydantic_function_tool(GetWeather)], tool_choice="required",
                                 parallel_tool_calls=False, max_tokens=80)
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "GetWeather" and isinstance(call.function.parsed_arguments, GetWeather), call


def test_a_tool_pattern_past_2000_holds(tserver):
    """A tool parameter's pattern asking for a{2500} becomes a repetition llama.cpp's grammar parser
    would silently drop; the engine rewrites it as rules it keeps, so the call is held to it: eight
    tokens of a forced call are its opening and 'a's, cut by length."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a{2500}$"}}, "required": ["s"]}}}
    r = httpx.post(tserver.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Call f."}], "max_tokens": 8, "tools": [tool],
        "tool_choice": "required", "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] == "length", r.text