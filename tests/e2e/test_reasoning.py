"""Reasoning output against a real `cobatch serve` of the default model, which does not think by
itself: its output is forced through a thinking template, by a grammar (templates/chatml-think.jinja,
whose answers may open a <think> block) or by a generation prompt that opens the block
(think-open.jinja, as DeepSeek-R1 distills' and Qwen3 thinking models' templates do) with a
reasoning budget that closes it. Through the official OpenAI and Anthropic SDKs: reasoning_content
apart from the content (whole and streamed, the two a partition of the same output), its token
count, the fields that keep it in the text, leave it out or hold it back, thinking turned off,
reasoning handed back in a history (as text: no control tokens), structured output and tool calls
after the reasoning, a tool-call marker inside the reasoning that starts no call, the Messages API's
thinking blocks and the Responses API's reasoning items; and the 400s for what a template cannot do."""
import json
import os
import re
import subprocess
import tempfile

import anthropic
import httpx
import openai
import pytest

from conftest import BIN, MODEL, Server

HERE = os.path.dirname(os.path.abspath(__file__))
THINK = os.path.join(HERE, "..", "..", "templates", "chatml-think.jinja")
OPEN = os.path.join(HERE, "think-open.jinja")
ASK = [{"role": "user", "content": "What is two plus two?"}]
# the output forced through the block: reasoning of lowercase words, then an answer
FORCED = 'root ::= "<think>\\n" [a-z ]{12,40} "\\n</think>\\n\\n" [A-Za-z ]{4,30}'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def think():
    s = Server("--chat-template", THINK, "--max-num-seqs", "4", "--temp", "0", "--max-model-len", "2048")
    yield s
    assert s.stop() == 0, s.logs()


@pytest.fixture(scope="module")
def opened():
    s = Server("--chat-template", OPEN, "--max-num-seqs", "4", "--temp", "0", "--max-model-len", "2048")
    yield s
    assert s.stop() == 0, s.logs()


def oai(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)


def chat(srv, **kw):
    return httpx.post(srv.url + "/v1/chat/completions", json={"messages": ASK, **kw}, timeout=120)


def tokens(srv, text):
    r = httpx.post(srv.url + "/tokenize", json={"content": text, "add_special": False, "parse_special": False})
    return r.json()["tokens"]


def test_reasoning_apart_from_content_whole_and_streamed(think):
    c = oai(think)
    r = c.chat.completions.create(model="m", messages=ASK, max_tokens=60, extra_body={"grammar": FORCED})
    m = r.choices[0].message
    reasoning = m.model_extra["reasoning_content"]
    assert re.fullmatch(r"[a-z ]{12,40}\n", reasoning), reasoning  # the text up to the end marker
    assert m.content and "<think>" not in m.content and "</think>" not in m.content
    n = r.usage.completion_tokens_details.reasoning_tokens
    # the block's tokens (its text and end marker; the start marker is written outside it), not the answer's
    assert 2 < n < r.usage.completion_tokens
    # streamed: the same reasoning, as its own deltas, all before the content
    kinds, parts = [], {"reasoning": "", "content": ""}
    with c.chat.completions.create(model="m", messages=ASK, max_tokens=60, stream=True,
                                   stream_options={"include_usage": True}, extra_body={"grammar": FORCED}) as st:
        for ch in st:
            if ch.usage:
                assert ch.usage.completion_tokens_details.reasoning_tokens == n
            for choice in ch.choices:
                d = choice.delta
                if (d.model_extra or {}).get("reasoning_content"):
                    kinds.append("r")
                    parts["reasoning"] += d.model_extra["reasoning_content"]
                if d.content:
                    kinds.append("c")
                    parts["content"] += d.content
    assert parts == {"reasoning": reasoning, "content": m.content}
    assert kinds.index("c") > kinds.index("r") and "r" not in kinds[kinds.index("c"):]
    assert kinds.count("r") > 3  # streamed as it was written, not at the end
    # the two are a partition of one output: kept in the text, the output is the block and the answer
    raw = chat(think, max_tokens=60, grammar=FORCED, reasoning_format="none").json()["choices"][0]["message"]
    assert "reasoning_content" not in raw
    assert raw["content"] == "<think>\n" + reasoning + "</think>\n\n" + m.content
    kept = chat(think, max_tokens=60, grammar=FORCED, separate_reasoning=False).json()["choices"][0]["message"]
    assert kept["content"] == raw["content"]


def test_reasoning_left_out_or_held_back(think):
    whole = chat(think, max_tokens=60, grammar=FORCED).json()["choices"][0]["message"]
    out = chat(think, max_tokens=60, grammar=FORCED, include_reasoning=False).json()
    assert "reasoning_content" not in out["choices"][0]["message"]
    assert out["choices"][0]["message"]["content"] == whole["content"]
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0  # it was written, and paid for
    with httpx.stream("POST", think.url + "/v1/chat/completions", timeout=120, json={
            "messages": ASK, "max_tokens": 60, "grammar": FORCED, "stream": True, "stream_reasoning": False}) as r:
        deltas = [json.loads(x[6:])["choices"][0]["delta"] for x in r.iter_lines()
                  if x.startswith("data: {") and '"choices":[{' in x]
    held = [d["reasoning_content"] for d in deltas if "reasoning_content" in d]
    assert held == [whole["reasoning_content"]]  # one delta, whole, once its block ended


def test_thinking_turned_off_renders_the_closed_block(think):
    on = chat(think, max_tokens=40, grammar=FORCED).json()
    for off in ({"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}):
        r = chat(think, max_tokens=40, grammar=FORCED, **off).json()
        # the generation prompt closes an empty block, and the output is not read for reasoning
        assert r["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"] + 3
        assert "reasoning_content" not in r["choices"][0]["message"], off
        assert r["choices"][0]["message"]["content"].startswith("<think>\n")
        assert "completion_tokens_details" not in r["usage"]


def test_reasoning_in_a_history_is_text_after_the_last_user_turn(think):
    def prompt(history):
        return chat(think, messages=history, max_tokens=1).json()["usage"]["prompt_tokens"]
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}
    def loop(reasoning):  # a tool loop: the assistant's turn comes after the last user turn
        a = {"role": "assistant", "content": None, "tool_calls": [call]}
        if reasoning is not None:
            a["reasoning_content"] = reasoning
        return [ASK[0], a, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    base = prompt(loop(None))
    shown = prompt(loop("it is in norway"))
    assert shown > base + len(tokens(think, "it is in norway"))
    # control-token text in the reasoning stays text, as in a content: tokenized on its own, as text
    forged = prompt(loop("<|im_end|>"))
    assert forged - shown == len(tokens(think, "<|im_end|>")) - len(tokens(think, "it is in norway"))
    # before the last user turn the template drops it
    hist = [ASK[0], {"role": "assistant", "content": "Four.", "reasoning_content": "easy sum"},
            {"role": "user", "content": "And three plus three?"}]
    assert prompt(hist) == prompt([dict(m, reasoning_content=None) if "reasoning_content" in m else m for m in hist])


def test_what_the_template_cannot_do_is_a_400(think, server):
    r = chat(think, reasoning_effort="high", max_tokens=4)  # it thinks but reads no effort
    assert r.status_code == 400 and r.json()["error"]["param"] == "reasoning_effort", r.text
    r = chat(think, grammar=FORCED, thinking_budget_tokens=4, max_tokens=4)
    assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_budget_tokens", r.text
    # the default template does not think: thinking cannot be turned on; an effort or a budget asks nothing
    r = chat(server, chat_template_kwargs={"enable_thinking": True}, max_tokens=4)
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs", r.text
    r = httpx.post(server.url + "/v1/messages", timeout=60, json={
        "model": "m", "max_tokens": 8, "messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 4}})
    assert r.status_code == 400 and "thinking" in r.json()["error"]["message"], r.text
    for moot in ({"reasoning_effort": "high"}, {"thinking_budget_tokens": 4}):
        r = chat(server, max_tokens=4, **moot)
        assert r.status_code == 200, r.text
        assert "completion_tokens_details" not in r.json()["usage"]


def test_a_budget_closes_the_block(opened):
    end = len(tokens(opened, "</think>"))
    for budget in (0, 6, 15):
        r = chat(opened, max_tokens=60, thinking_budget_tokens=budget).json()
        n = r["usage"]["completion_tokens_details"]["reasoning_tokens"]
        assert n == budget + end, (budget, r)  # the budget's tokens, then the forced end marker
        assert "</think>" not in r["choices"][0]["message"].get("reasoning_content", "")
    # without one the model never leaves the block: every token is reasoning, there is no answer
    r = chat(opened, max_tokens=24).json()
    assert r["usage"]["completion_tokens_details"]["reasoning_tokens"] == r["usage"]["completion_tokens"]
    assert r["choices"][0]["message"]["content"] == ""


def test_structured_output_after_the_reasoning(opened):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                               "population": {"type": "integer"}},
              "required": ["name", "population"], "additionalProperties": False}
    r = oai(opened).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Describe Paris."}], max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
        extra_body={"thinking_budget_tokens": 10})
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"].strip()
    v = json.loads(m.content)
    assert set(v) == {"name", "population"} and isinstance(v["population"], int)
    assert r.choices[0].finish_reason == "stop"


def test_tool_calls_after_the_reasoning(opened):
    c = oai(opened)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model="m", messages=ask, max_tokens=80, tools=[WEATHER], tool_choice="required",
                                  extra_body={"thinking_budget_tokens": 8})
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"].strip() and r.choices[0].finish_reason == "tool_calls"
    assert m.tool_calls[0].function.name == "get_weather" and "city" in json.loads(m.tool_calls[0].function.arguments)
    # a call marker written inside the reasoning starts no call (the lazy grammar waits out the block);
    # the model pushed to write markers writes one there, and its call after the block is read
    bias = {str(t): 8 for t in tokens(opened, "<tool_call>\n")}
    r = c.chat.completions.create(model="m", messages=ask, max_tokens=80, tools=[WEATHER], logit_bias=bias,
                                  extra_body={"thinking_budget_tokens": 12})
    m = r.choices[0].message
    assert "<tool_call>\n" in m.model_extra["reasoning_content"]
    assert m.tool_calls and m.tool_calls[0].function.name == "get_weather"


def test_messages_api_thinking_blocks(opened):
    c = anthropic.Anthropic(base_url=opened.url, api_key="none", max_retries=0)
    kw = dict(model="m", max_tokens=60, messages=[{"role": "user", "content": "Hi"}],
              thinking={"type": "enabled", "budget_tokens": 8})
    m = c.messages.create(**kw)
    assert m.content[0].type == "thinking" and m.content[0].thinking.strip() and m.content[0].signature == ""
    with c.messages.stream(**kw) as st:
        deltas = [e.delta.type for e in st if e.type == "content_block_delta"]
        final = st.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in m.content]
    assert "thinking_delta" in deltas and "signature_delta" in deltas
    assert deltas.index("signature_delta") > max(i for i, t in enumerate(deltas) if t == "thinking_delta")
    # off: the template's switch closes the block; omitted: no thinking block
    off = c.messages.create(**dict(kw, thinking={"type": "disabled"}))
    assert all(b.type != "thinking" for b in off.content)
    quiet = c.messages.create(**dict(kw, thinking={"type": "enabled", "budget_tokens": 8, "display": "omitted"}))
    assert [b.type for b in quiet.content] == [b.type for b in m.content if b.type != "thinking"]
    # a thinking block handed back is read (the template shows it in a tool loop)
    hist = [{"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "ask the tool", "signature": ""},
                                              {"type": "tool_use", "id": "t1", "name": "get_weather",
                                               "input": {"city": "Oslo"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]}]
    tools = [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]
    with_t = c.messages.count_tokens(model="m", messages=hist, tools=tools).input_tokens
    hist[1]["content"] = hist[1]["content"][1:]
    without = c.messages.count_tokens(model="m", messages=hist, tools=tools).input_tokens
    assert with_t > without + len(tokens(opened, "ask the tool"))
    r = httpx.post(opened.url + "/v1/messages", timeout=60, json=dict(
        kw, messages=[{"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
                      {"role": "user", "content": "Go on"}]))
    assert r.status_code == 400 and "redacted_thinking" in r.json()["error"]["message"]


def test_responses_api_reasoning_items(opened):
    c = oai(opened)
    kw = dict(model="m", input="Hi", max_output_tokens=30, store=False)
    r = c.responses.create(**kw)
    item = r.output[0]
    assert item.type == "reasoning" and item.content[0].type == "reasoning_text" and item.content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    with c.responses.stream(**kw) as st:  # all 30 tokens may be reasoning: then the last event is incomplete
        got = list(st)
    events, final = [e.type for e in got], got[-1].response
    assert events[-1] == ("response.completed" if r.status == "completed" else "response.incomplete")
    assert "response.reasoning_text.delta" in events and "response.reasoning_text.done" in events
    assert final.output[0].content[0].text == item.content[0].text
    # the output handed back as input, with a new turn: taken
    again = c.responses.create(model="m", max_output_tokens=8, store=False,
                               input=[{"role": "user", "content": "Hi"}, *[o.model_dump(exclude_none=True)
                                                                           for o in r.output],
                                      {"role": "user", "content": "And?"}])
    assert again.status in ("completed", "incomplete") and again.output
    bad = httpx.post(opened.url + "/v1/responses", timeout=60, json=dict(
        kw, input=[{"role": "user", "content": "Hi"},
                   {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
                   {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "And?"}]))
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"


def test_the_batch_runner_reads_reasoning_apart(opened):
    with tempfile.TemporaryDirectory() as d:
        job, out = os.path.join(d, "job.jsonl"), os.path.join(d, "out.jsonl")
        with open(job, "w") as f:
            f.write(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {
                "messages": ASK, "max_tokens": 40, "thinking_budget_tokens": 5}}) + "\n")
        p = subprocess.run([BIN, "batch", "-m", MODEL, "--chat-template", OPEN, "--input", job, "--output", out,
                            "--temp", "0"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        body = json.loads(open(out).read())["response"]["body"]
        assert body["choices"][0]["message"]["reasoning_content"].strip()
        assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5 + len(tokens(opened, "</think>"))
