"""OpenAI's Responses API through the official OpenAI Python SDK against a real `cobatch serve` of
the default model with the tool-capable ChatML template: a response and its stream (the SDK
assembles the events into the same response), max_output_tokens (incomplete), a forced function
call and a function_call_output round trip, json_schema output, input_tokens, prefix-cache reads
in the usage, and the 400s naming what the server cannot honour (store, previous_response_id,
hosted tools, images, unknown fields)."""
import json
import os

import httpx
import openai
import pytest

from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "templates", "chatml-tools.jinja")
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                          "required": ["city"], "additionalProperties": False}}


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "4", "--temp", "0")
    yield s
    assert s.stop() == 0, s.logs()


def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def test_response_and_its_stream_agree(srv):
    c = client(srv)
    kw = dict(model="local", instructions="You are terse.", input="Name three colors.", max_output_tokens=24,
              store=False)
    r = c.responses.create(**kw)
    assert r.object == "response" and r.id.startswith("resp_") and r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output_text
    assert r.usage.output_tokens > 0 and r.usage.input_tokens > 10
    assert r.instructions == "You are terse." and r.max_output_tokens == 24
    events, final = [], None
    with c.responses.stream(**kw) as st:  # (the SDK's get_final_response wants response.completed only)
        for e in st:
            events.append(e.type)
            if e.type in ("response.completed", "response.incomplete"):
                final = e.response
    assert final is not None, events
    assert final.output_text == r.output_text and final.status == r.status  # greedy: the same text
    assert final.usage.output_tokens == r.usage.output_tokens
    assert events[:2] == ["response.created", "response.in_progress"], events
    assert events[-1] in ("response.completed", "response.incomplete")
    for kind in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                 "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert kind in events, (kind, events)
    again = c.responses.create(**kw)  # the prompt read from the prefix cache, and the usage says so
    assert again.usage.input_tokens_details.cached_tokens > 0


def test_max_output_tokens_makes_it_incomplete(srv):
    r = client(srv).responses.create(model="local", input="Write a long story about a dragon.", max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5


def test_function_call_and_its_output_round_trip(srv):
    c = client(srv)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    for stream in (False, True):
        kw = dict(model="local", input=ask, tools=[WEATHER], max_output_tokens=64, parallel_tool_calls=False,
                  tool_choice={"type": "function", "name": "get_weather"})
        if stream:
            with c.responses.stream(**kw) as st:
                kinds = [e.type for e in st]
                r = st.get_final_response()
            assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
        else:
            r = c.responses.create(**kw)
        calls = [o for o in r.output if o.type == "function_call"]
        assert calls and calls[0].name == "get_weather", r.output
        args = json.loads(calls[0].arguments)
        assert isinstance(args["city"], str) and len(args["city"]) <= 24
    # the call and its output go back as input items: the model answers in text
    follow = ask + [{"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                     "arguments": calls[0].arguments},
                    {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"}]
    r = c.responses.create(model="local", input=follow, tools=[WEATHER], tool_choice="none", max_output_tokens=24)
    assert r.output[0].type == "message" and r.output_text


def test_json_schema_output(srv):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client(srv).responses.create(
        model="local", input="Invent a person.", max_output_tokens=64,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    v = json.loads(r.output_text)
    assert set(v) == {"name", "age"} and isinstance(v["age"], int)


def test_input_tokens(srv):
    r = httpx.post(srv.url + "/v1/responses/input_tokens", json={"model": "local", "input": "Hello there."}, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response.input_tokens" and body["input_tokens"] > 3
    longer = httpx.post(srv.url + "/v1/responses/input_tokens",
                        json={"model": "local", "input": "Hello there. How are you today?"}, timeout=30)
    assert longer.json()["input_tokens"] > body["input_tokens"]


@pytest.mark.parametrize("extra,param", [
    ({"store": True}, "store"),
    ({"previous_response_id": "resp_abc"}, "previous_response_id"),
    ({"tools": [{"type": "custom", "name": "grep"}]}, "tools"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning"),
    ({"truncation": "auto"}, "truncation"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(srv, extra, param):
    body = {"model": "local", "input": "Hi", "max_output_tokens": 4, **extra}
    r = httpx.post(srv.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param or param in err["message"], err


def test_the_agents_sdk_runs_a_tool_and_answers(srv):
    """The OpenAI Agents SDK (openai-agents, pinned) with a function tool, run whole and streamed: its
    forced call runs the tool, the call and its output go back as items, and the model answers."""
    import asyncio

    import agents

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"It is sunny in {city}."

    model = agents.OpenAIResponsesModel(model="local", openai_client=openai.AsyncOpenAI(
        base_url=srv.url + "/v1", api_key="none", max_retries=0))
    agent = agents.Agent(name="helper", instructions="Answer briefly. Use get_weather for weather questions.",
                         model=model, tools=[get_weather],
                         model_settings=agents.ModelSettings(max_tokens=120, tool_choice="required"))

    async def run():
        whole = await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        streamed = agents.Runner.run_streamed(agent, "What is the weather in Rome?", max_turns=3)
        kinds = [e.type async for e in streamed.stream_events()]
        return whole, streamed, kinds

    whole, streamed, kinds = asyncio.run(run())
    assert calls and all(isinstance(c, str) and c for c in calls), calls
    for r in (whole, streamed):
        items = [i.type for i in r.new_items]
        assert "tool_call_item" in items and "tool_call_output_item" in items, items
        assert items[-1] == "message_output_item" and isinstance(r.final_output, str) and r.final_output, items
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds, set(kinds)


def test_verbosity_and_reasoning_context(srv):
    """Codex CLI's built-in provider (openai_base_url) sends text.verbosity low and reasoning.context
    all_turns: taken. Every turn's reasoning cannot reach the prompt through this template (it shows
    no reasoning): an earlier turn's handed back is a 400 naming reasoning; current_turn leaves it out."""
    body = {"model": "local", "input": "Hi", "max_output_tokens": 4, "text": {"verbosity": "low"},
            "reasoning": {"effort": "low", "context": "all_turns"}}
    r = httpx.post(srv.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["text"]["verbosity"] == "low"
    earlier = [{"role": "user", "content": "Hi"},
               {"type": "reasoning", "id": "rs_1", "summary": [],
                "content": [{"type": "reasoning_text", "text": "Greet back."}]},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
               {"role": "user", "content": "Bye"}]
    r = httpx.post(srv.url + "/v1/responses", json={**body, "input": earlier}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "reasoning" and "before the last user message" in err["message"], err
    body["reasoning"]["context"] = "current_turn"
    r = httpx.post(srv.url + "/v1/responses", json={**body, "input": earlier}, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.post(srv.url + "/v1/responses", json={**body, "text": {"verbosity": "loud"}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "text", r.text


def test_errors_the_chat_parser_raises_name_the_responses_fields(srv):
    """A field the translation passes on and the chat parser refuses is named as the client sent it."""
    big = {"type": "string", "minLength": 3000000000}  # past 2^31 - 1, what a schema may ask
    cases = [
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": big}}}, "text.format",
         "'text.format.schema'"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": big}}}]},
         "tools", "tools[0].parameters"),
        ({"max_output_tokens": 99999999}, "max_output_tokens", "'max_output_tokens' must be"),
    ]
    for extra, param, says in cases:
        r = httpx.post(srv.url + "/v1/responses", json={"model": "local", "input": "Hi", **extra}, timeout=30)
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == param and says in err["message"], (extra, err)
        for chat in ("response_format", ".function.", "max_tokens"):
            assert chat not in err["message"], err
