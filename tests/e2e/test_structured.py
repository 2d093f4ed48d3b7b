"""Structured output through the official OpenAI Python SDK against a real `cobatch serve` of the
real default model: response_format json_schema (the SDK's pydantic parse) and json_object,
streamed and not, llama-server's grammar field; the output always parses and validates, whatever
a 135M model would have written unconstrained."""
import json
import threading
from enum import Enum
from typing import List, Optional

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

ASK = [{"role": "user", "content": "Describe the city of Paris."}]


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def model_id(server):
    return httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]


class City(BaseModel):
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)
    population: int


class Kind(str, Enum):
    capital = "capital"
    town = "town"
    village = "village"


class Place(BaseModel):  # nested objects, arrays, enums, optional fields, bounds and a pattern
    code: str = Field(pattern=r"^[A-Z]{3}$")
    kind: Kind
    founded: int = Field(ge=0, le=2100)
    mayor: Optional[str] = Field(default=None, max_length=20)
    districts: List[str] = Field(min_length=1, max_length=3)
    location: City


def test_pydantic_parse_returns_the_model(server):
    c = client_of(server)
    r = c.chat.completions.parse(model=model_id(server), messages=ASK, response_format=City, max_tokens=200,
                                 temperature=0)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "stop", msg.content
    assert isinstance(msg.parsed, City), msg.content
    # sampled too: whatever comes out validates
    for seed in range(3):
        r = c.chat.completions.parse(model=model_id(server), messages=ASK, response_format=City, max_tokens=200,
                                     temperature=1.0, seed=seed)
        assert isinstance(r.choices[0].message.parsed, City)


@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_with_nesting_enums_bounds_and_a_pattern_validates(server, stream):
    c = client_of(server)
    schema = Place.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}}
    # sampled at 0.8, a seed may talk on inside a string until max_tokens (this model repeats itself):
    # that answer must still be the start of a JSON value; two seeds that end must validate whole
    whole = 0
    for seed in range(8):
        kw = dict(model=model_id(server), messages=[{"role": "user", "content": "Describe a place as JSON."}],
                  max_tokens=300, temperature=0.8, seed=seed, response_format=fmt)
        if stream:
            text, finish = "", None
            for ch in c.chat.completions.create(stream=True, **kw):
                for x in ch.choices:
                    text += x.delta.content or ""
                    finish = x.finish_reason or finish
        else:
            r = c.chat.completions.create(**kw)
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert finish in ("stop", "length"), (finish, text)
        if finish == "length":
            assert json_or_prefix(text) == "prefix", text
            continue
        Place.model_validate_json(text)
        whole += 1
        if whole == 2:
            break
    assert whole == 2, "fewer than two of eight seeds ended their JSON"


class _Ended(Exception):
    """The text ended inside a JSON value."""


def json_or_prefix(text):
    """'whole' when text is one JSON value, 'prefix' when it ends inside one; ValueError at the first
    character JSON cannot have where it stands (numbers are read loosely: their characters only)."""
    i = 0

    def peek():
        if i >= len(text):
            raise _Ended
        return text[i]

    def ws():
        nonlocal i
        while i < len(text) and text[i] in " \t\n\r":
            i += 1

    def take(ch):
        nonlocal i
        if peek() != ch:
            raise ValueError(f"{ch!r} expected at {i}: {text[max(0, i - 60):i + 1]!r}")
        i += 1

    def string():
        nonlocal i
        take('"')
        while True:
            c = peek()
            i += 1
            if c == '"':
                return
            if ord(c) < 0x20:
                raise ValueError(f"control character in a string at {i - 1}")
            if c == "\\":
                e = peek()
                i += 1
                if e == "u":
                    for _ in range(4):
                        if peek() not in "0123456789abcdefABCDEF":
                            raise ValueError(f"bad \\u escape at {i}")
                        i += 1
                elif e not in '"\\/bfnrt':
                    raise ValueError(f"bad escape at {i - 1}")

    def value():
        nonlocal i
        ws()
        c = peek()
        if c in "{[":
            close = "}" if c == "{" else "]"
            take(c)
            ws()
            if peek() == close:
                take(close)
                return
            while True:
                if close == "}":
                    ws()
                    string()
                    ws()
                    take(":")
                value()
                ws()
                if peek() == ",":
                    take(",")
                    continue
                take(close)
                return
        elif c == '"':
            string()
        elif c in "-0123456789":
            while i < len(text) and text[i] in "0123456789+-.eE":
                i += 1
        else:
            for lit in ("true", "false", "null"):
                if c == lit[0]:
                    for ch in lit:
                        take(ch)
                    return
            raise ValueError(f"no JSON value at {i}: {text[max(0, i - 60):i + 1]!r}")

    try:
        value()
        ws()
    except _Ended:
        return "prefix"
    if i != len(text):
        raise ValueError(f"text after the value at {i}")
    return "whole"


def test_json_or_prefix_can_fail():
    assert json_or_prefix('{"a": [1, "b", null]}') == "whole"
    assert json_or_prefix('{"a": [1, "b\\u00') == "prefix"
    for bad in ('{"a" 1}', '{"a": tru}', 'Sure! {"a": 1}', '{"a": 1} and more', '{a: 1}'):
        with pytest.raises(ValueError):
            json_or_prefix(bad)


def assert_json_object(text, finish):
    """A whole object when the answer stopped by itself; cut at max_tokens, what there is must be the
    start of one (the grammar allowed nothing else; greedy, this small model writes a long object on
    some hosts' kernels)."""
    assert finish in ("stop", "length"), finish
    if finish == "stop":
        assert isinstance(json.loads(text), dict), text
    else:
        assert text.lstrip().startswith("{") and json_or_prefix(text) == "prefix", text


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_is_a_json_object(server, stream):
    c = client_of(server)
    # Greedy, this small model repeats one key until max_tokens on some hosts' kernels (AVX-512): a
    # mild repetition penalty lets it close the object. The grammar is what is tested: the text is JSON.
    kw = dict(model=model_id(server), max_tokens=300, temperature=0, response_format={"type": "json_object"},
              messages=[{"role": "user", "content": "Give the name and age of a person as JSON."}],
              extra_body={"repetition_penalty": 1.1})
    if stream:
        text, finish = "", None
        for ch in c.chat.completions.create(stream=True, **kw):
            for x in ch.choices:
                text += x.delta.content or ""
                finish = x.finish_reason or finish
    else:
        choice = c.chat.completions.create(**kw).choices[0]
        text, finish = choice.message.content, choice.finish_reason
    assert_json_object(text, finish)
    # completions take it too
    r = c.completions.create(model=model_id(server), prompt="JSON for a person named Tom, age 30:", max_tokens=300,
                             temperature=0, extra_body={"response_format": {"type": "json_object"},
                                                        "repetition_penalty": 1.1})
    assert_json_object(r.choices[0].text, r.choices[0].finish_reason)


def test_grammar_field(server):
    c = client_of(server)
    for seed in range(4):
        r = c.completions.create(model=model_id(server), prompt="Is water wet? Answer:", max_tokens=5,
                                 temperature=1.5, seed=seed, extra_body={"grammar": 'root ::= " yes" | " no"'})
        assert r.choices[0].text in (" yes", " no") and r.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("body,param,why", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}}},
     "response_format", "nope"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "schema"),
    ({"response_format": {"type": "xml"}}, "response_format", "json_schema"),
    ({"grammar": "root ::= ("}, "grammar", "grammar"),
    ({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}, "grammar", "not both"),
    # counts past 2^31 - 1, the most llama.cpp's schema converter reads: refused, never unbounded
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"s": {"type": "string", "maxLength": 3000000000}}}}}},
     "response_format", "maxLength 3000000000"),
    ({"grammar": "root ::= [a-z]{1,3000000000}"}, "grammar", "3000000000"),
    # {m,n} with n < m: llama.cpp's grammar parser looped making rules until memory ran out
    ({"grammar": "root ::= \"a\"{3,2}"}, "grammar", "below m"),
    # left recursion after a rule that matches nothing: llama.cpp's start expanded without end
    ({"grammar": "root ::= e\ne ::= t e \"x\"\nt ::= [a-z]*"}, "grammar", "left recursion"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^a{5,3}$"}}}}}},
     "response_format", "below m"),
])
def test_bad_schemas_and_grammars_are_400s_that_say_why(server, body, param, why):
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, **body}, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and why in err["message"], err


def test_bounds_past_llama_cpps_2000_hold(server):
    """Repetition counts above 2000, which llama.cpp's grammar parser drops (an upper bound) or
    refuses (a lower one), are taken and hold: Claude Code's tool argument with maxLength 524288 at
    its max_tokens of 32,000, a GBNF {2100,2200}, a pattern's {2500}. Each forces more than 16
    tokens, so each ends by length with every character the grammar's."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 524288}}, "required": ["s"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120,
                      json={"messages": ASK, "response_format": fmt, "max_tokens": 32000, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        text = ""
        for line in r.iter_lines():  # the first tokens, then hang up (the answer could run to the context)
            if line.startswith("data: {"):
                text += json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            if len("".join(text.split())) >= 5:
                break
    assert "".join(text.split()).startswith('{"s"'), text
    pattern = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a{2500}$"}}, "required": ["s"]}
    for body in ({"grammar": "root ::= [a-z]{2100,2200}"},
                 {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": pattern}}}):
        r = httpx.post(server.url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 16, **body}, timeout=60)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        text = choice["message"]["content"]
        assert choice["finish_reason"] == "length", r.text
        if "grammar" in body:
            assert text and all("a" <= ch <= "z" for ch in text), text
        else:
            squeezed = "".join(text.split())
            assert squeezed.startswith('{"s":"') and set(squeezed[6:]) <= {"a"}, text


def test_constrained_and_unconstrained_requests_share_a_batch(server):
    """Eight constrained and eight unconstrained greedy requests at once: every constrained output
    validates, and every unconstrained one is what it is alone (the grammars touch only their own
    requests; any difference only at a near-tie is allowed for batch shapes, so compare a prefix)."""
    c = client_of(server)
    prompts = [f"Tell me about the number {i}." for i in range(8)]
    alone = [c.completions.create(model=model_id(server), prompt=p, max_tokens=12, temperature=0,
                                  extra_body={"ignore_eos": True}).choices[0].text for p in prompts]
    out, errors = {}, []

    def plain(i):
        out[("p", i)] = c.completions.create(model=model_id(server), prompt=prompts[i], max_tokens=12,
                                             temperature=0, extra_body={"ignore_eos": True}).choices[0].text

    def constrained(i):
        try:
            r = c.chat.completions.parse(model=model_id(server), messages=ASK, response_format=City,
                                         max_tokens=200, temperature=0.7, seed=i)
            out[("c", i)] = r.choices[0].message.parsed
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    ths = [threading.Thread(target=f, args=(i,)) for i in range(8) for f in (plain, constrained)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    assert not errors, errors
    assert all(isinstance(out[("c", i)], City) for i in range(8))
    same = sum(out[("p", i)] == alone[i] for i in range(8))
    assert same >= 6, [(out[("p", i)], alone[i]) for i in range(8)]


def test_chat_template_flag_and_a_template_that_raises(tmp_path):
    """--chat-template FILE renders the messages (what the model is given is that template's text),
    /tokenizer_info shows it, and a template that raises for a request is a 400 with its message:
    the server goes on."""
    from conftest import Server
    t = tmp_path / "t.jinja"
    t.write_text("{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool turns here') }}"
                 "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "<|im_start|>assistant\n")
    s = Server("--chat-template", str(t))
    try:
        info = httpx.get(s.url + "/tokenizer_info", timeout=30).json()
        assert info["chat_template"] == t.read_text().rstrip("\n")  # Jinja drops one trailing newline
        ok = httpx.post(s.url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12,
            "temperature": 0}, timeout=60).json()
        assert ok["usage"]["prompt_tokens"] < 20  # no default system message: this template has none
        bad = httpx.post(s.url + "/v1/chat/completions", json={
            "messages": [{"role": "tool", "content": "42"}], "max_tokens": 4}, timeout=60)
        assert bad.status_code == 400 and "no tool turns here" in bad.json()["error"]["message"], bad.text
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    finally:
        assert s.stop() == 0
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    import subprocess, os
    r = subprocess.run([os.environ["COBATCH_BIN"], "serve", "-m", os.environ["COBATCH_E2E_MODEL"], "--port", "0",
                        "--chat-template", str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "chat template" in r.stderr, r.stderr
