"""Clients as they are installed, speaking the APIs they know: Ollama's (the official `ollama` client
and LangChain's ChatOllama, pinned), llama-server's native /completion and /infill (the request
shapes of Continue, llama.vscode and llama.vim), the paths configurations assume without /v1 and
llama-server's /props and /apply-template, the Responses API as Codex CLI's default configuration
sends it (a namespace of functions, a hosted web_search tool), and RoPE scaling past the trained
context. One server of the default model with the tool-calling template; a second of a synthetic
model with fill-in-the-middle tokens for /infill."""
import json
import os
import subprocess
import tempfile

import httpx
import openai
import pytest

from conftest import Server

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "templates", "chatml-tools.jinja")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "maxLength": 24}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def srv():
    s = Server("--chat-template", TEMPLATE, "--max-num-seqs", "4", "--temp", "0", "-n", "24")
    yield s
    assert s.stop() == 0, s.logs()


@pytest.fixture(scope="module")
def fim():
    """A synthetic model (random weights) whose vocabulary has FIM tokens."""
    d = tempfile.mkdtemp(prefix="cobatch-fim-")
    path = os.path.join(d, "tiny.gguf")
    subprocess.run([os.environ["COBATCH_BIN"], "mkmodel", "--preset", "tiny", "-o", path], check=True,
                   capture_output=True)
    s = Server("-m", path, "--max-num-seqs", "2", "--no-embeddings")
    yield s
    assert s.stop() == 0, s.logs()


# ---------------------------------------------------------------- Ollama's API

def test_ollama_client_chat_stream_generate_embed_and_models(srv):
    import ollama
    c = ollama.Client(host=srv.url)
    msgs = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"}]
    r = c.chat(model="smol", messages=msgs, options={"temperature": 0, "num_predict": 8, "seed": 1})
    assert r.done and r.done_reason in ("stop", "length") and r.message.role == "assistant" and r.message.content
    assert r.eval_count <= 8 and r.prompt_eval_count > 5
    parts = list(c.chat(model="smol", messages=msgs, stream=True, options={"temperature": 0, "num_predict": 8}))
    assert parts[-1].done and "".join(p.message.content for p in parts) == r.message.content  # greedy: the same
    g = c.generate(model="smol", prompt="Say hi.", system="Be brief.", options={"num_predict": 6})
    assert g.done and isinstance(g.response, str) and g.eval_count <= 6
    e = c.embed(model="smol", input=["a cat sat", "a dog ran"])
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 576
    old = c.embeddings(model="smol", prompt="a cat sat")
    assert max(abs(a - b) for a, b in zip(old.embedding, e.embeddings[0])) < 1e-4
    models = c.list().models
    assert len(models) == 1 and models[0].model.endswith(":latest") and models[0].details.format == "gguf"
    show = c.show("smol")
    assert "completion" in show.capabilities and "tools" in show.capabilities
    assert any(k.endswith(".context_length") for k in show.modelinfo)
    assert c.ps().models[0].size_vram == 0
    assert httpx.get(srv.url + "/api/version").json()["version"]
    # what it cannot honour is refused by name, in Ollama's error shape
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model="smol", messages=msgs, options={"mirostat": 2})
    assert err.value.status_code == 400 and "mirostat" in err.value.error
    with pytest.raises(ollama.ResponseError):
        c.generate(model="smol", prompt="x", raw=True)


def test_ollama_tools_round_trip_and_structured_output(srv):
    import ollama
    c = ollama.Client(host=srv.url)
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                            "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "Sunny, 21 C", "tool_name": "get_weather"}]
    r = c.chat(model="smol", messages=msgs, tools=[WEATHER], options={"num_predict": 16})
    assert r.done and r.message.role == "assistant"
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    r = c.chat(model="smol", messages=[{"role": "user", "content": "Name a city as JSON."}], format=schema,
               options={"num_predict": 40})
    if r.done_reason == "stop":
        assert isinstance(json.loads(r.message.content)["city"], str)


def test_langchain_chat_ollama(srv):
    from langchain_ollama import ChatOllama, OllamaEmbeddings
    llm = ChatOllama(model="smol", base_url=srv.url, temperature=0, num_predict=8)
    out = llm.invoke("Say hello.")
    assert isinstance(out.content, str) and out.response_metadata["done"]
    chunks = list(llm.stream("Say hello."))
    assert "".join(ch.content for ch in chunks) == out.content
    bound = llm.bind_tools([{"type": "function", "function": WEATHER["function"]}])
    assert bound.invoke("Weather in Paris?").response_metadata["done"]
    vecs = OllamaEmbeddings(model="smol", base_url=srv.url).embed_documents(["one", "two"])
    assert len(vecs) == 2 and len(vecs[1]) == 576


# ---------------------------------------------------------------- llama-server's native API

def test_native_completion_answers_and_streams_in_its_shape(srv):
    body = {"prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "cache_prompt": True,
            "top_k": 40, "top_p": 0.95, "stop": ["\n\n"]}
    r = httpx.post(srv.url + "/completion", json=body, timeout=60).json()
    assert r["stop"] is True and r["stop_type"] in ("eos", "limit", "word") and r["tokens_predicted"] <= 6
    assert r["tokens_evaluated"] > 3 and "timings" in r and r["generation_settings"]["n_predict"] == 6
    events = []
    with httpx.stream("POST", srv.url + "/completion", json={**body, "stream": True}, timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["stop"] is True and all(not e["stop"] for e in events[:-1])
    assert "".join(e["content"] for e in events) == r["content"]  # greedy: the same text
    warm = httpx.post(srv.url + "/completion", json={"prompt": "The capital of France is", "n_predict": 0},
                      timeout=60).json()
    assert warm["content"] == "" and warm["tokens_predicted"] == 0  # the prompt computed, nothing generated
    only = httpx.post(srv.url + "/completion", timeout=60,
                      json={**body, "response_fields": ["content", "timings/predicted_n", "missing"]}).json()
    assert set(only) == {"content", "predicted_n"}
    for bad in ({"n_probs": 3}, {"mirostat": 2}, {"samplers": ["temperature", "top_k"]}, {"frobnicate": 1}):
        e = httpx.post(srv.url + "/completion", json={**body, **bad}, timeout=60)
        assert e.status_code == 400 and list(bad)[0] in e.json()["error"]["message"], e.text


def test_infill_as_editors_send_it(fim):
    vscode = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
              "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
              "prompt": "return", "n_predict": 16, "top_k": 40, "top_p": 0.99, "stream": False,
              "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
              "t_max_predict_ms": 1000, "n_indent": 4,
              "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"]}
    r = httpx.post(fim.url + "/infill", json=vscode, timeout=120)
    assert r.status_code == 200, r.text
    assert set(r.json()) <= {"content", "prompt_n", "predicted_n", "truncated", "tokens_cached"}
    assert r.json()["prompt_n"] > 20  # the FIM prompt: prefix, suffix, the extra file, the tokens around them
    cont = httpx.post(fim.url + "/completion", json={"prompt": "x = 1", "n_predict": 4, "stream": False}, timeout=120)
    assert cont.status_code == 200


def test_completions_suffix_is_the_infill_prompt(fim):
    """OpenAI's suffix: the prompt before the insertion, the suffix after it, the same FIM prompt /infill makes."""
    pre, suf = "def add(a, b):\n    return", "\n\nprint(add(1, 2))\n"
    c = openai.OpenAI(base_url=fim.url + "/v1", api_key="x", max_retries=0)
    out = c.completions.create(model="m", prompt=pre, suffix=suf, max_tokens=3, temperature=0)
    inf = httpx.post(fim.url + "/infill", json={"input_prefix": pre, "input_suffix": suf, "n_predict": 3}, timeout=60)
    assert inf.status_code == 200, inf.text
    assert out.usage.prompt_tokens == inf.json()["tokens_evaluated"]
    plain = c.completions.create(model="m", prompt=pre, max_tokens=1)
    assert plain.usage.prompt_tokens < out.usage.prompt_tokens  # the suffix and the FIM tokens are in the prompt


def test_infill_needs_a_model_with_fim_tokens(srv):
    r = httpx.post(srv.url + "/infill", json={"input_prefix": "a", "input_suffix": "b"}, timeout=60)
    assert r.status_code == 400 and "fill-in-the-middle" in r.json()["error"]["message"]


# ---------------------------------------------------------------- paths configurations assume

def test_paths_without_v1_props_and_apply_template(srv):
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert httpx.post(srv.url + "/chat/completions", json=chat, timeout=60).json()["object"] == "chat.completion"
    assert httpx.post(srv.url + "/completions", json={"prompt": "Hi", "max_tokens": 2},
                      timeout=60).json()["object"] == "text_completion"
    assert httpx.post(srv.url + "/embeddings", json={"input": "Hi"}, timeout=60).json()["data"][0]["embedding"]
    assert httpx.get(srv.url + "/v1/health").json() == {"status": "ok"}
    props = httpx.get(srv.url + "/props").json()
    assert props["default_generation_settings"]["n_ctx"] > 1000 and props["total_slots"] == 4
    prompt = httpx.post(srv.url + "/apply-template", json=chat, timeout=60).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nHi<|im_end|>" in prompt


# ---------------------------------------------------------------- Codex CLI's default tools

def test_responses_namespace_and_hosted_tools(srv):
    """Codex CLI's default configuration offers a namespace of functions and a hosted web_search:
    the namespace's functions are offered by name and a call to one answers with its namespace; the
    hosted tool is an offer never taken; forcing it is refused."""
    ns = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
          "tools": [{"type": "function", "name": "spawn_agent", "description": "Spawn an agent.", "strict": False,
                     "parameters": {"type": "object", "properties": {"task": {"type": "string", "maxLength": 20}},
                                    "required": ["task"]}}]}
    base = {"model": "m", "input": "Spawn an agent to list files.", "max_output_tokens": 48,
            "tools": [ns, {"type": "web_search", "external_web_access": False}]}
    r = httpx.post(srv.url + "/v1/responses", timeout=120,
                   json={**base, "tool_choice": {"type": "function", "name": "spawn_agent"}})
    assert r.status_code == 200, r.text
    calls = [o for o in r.json()["output"] if o["type"] == "function_call"]
    assert calls and calls[0]["name"] == "spawn_agent" and calls[0]["namespace"] == "multi_agent_v1"
    assert r.json()["tools"][0]["type"] == "namespace"
    # the call handed back with its namespace, as Codex sends history
    back = {**base, "input": [{"role": "user", "content": "Spawn an agent."}, {
        "type": "function_call", "call_id": calls[0]["call_id"], "name": "spawn_agent",
        "namespace": "multi_agent_v1", "arguments": calls[0]["arguments"]},
        {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "agent 7 started"}]}
    assert httpx.post(srv.url + "/v1/responses", json=back, timeout=120).status_code == 200
    r = httpx.post(srv.url + "/v1/responses", json={**base, "tool_choice": {"type": "web_search"}}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = httpx.post(srv.url + "/v1/responses", json={**base, "tools": [{"type": "custom", "name": "apply_patch"}]},
                   timeout=60)
    assert r.status_code == 400 and "custom" in r.json()["error"]["message"]


# ---------------------------------------------------------------- Predicted Outputs

CODE = "def add(a, b):\n    total = a + b\n    return total\n\n\ndef scale(values, k):\n    return [v * k for v in values]\n"


def near_tie_or_same(ref, other):
    """The same tokens, or the first that differs was a near-tie in ref (a draft row is one more row of
    the batch, and this model's logits move by tenths across batch shapes)."""
    for a, b in zip(ref.logprobs.content, other.logprobs.content):
        if a.token != b.token:
            top = a.top_logprobs
            return len(top) > 1 and top[0].logprob - top[1].logprob < 0.35
    return len(ref.logprobs.content) == len(other.logprobs.content)


def test_predicted_outputs_with_the_openai_sdk(srv):
    """OpenAI's Predicted Outputs through the official SDK: the prediction's tokens are drafts, the
    answer is the one without it, usage counts the prediction's tokens accepted and rejected;
    speculative false checks none; where OpenAI has no such field (completions) it is refused by name."""
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
    ask = dict(model="m", temperature=0, max_tokens=60, logprobs=True, top_logprobs=2,
               messages=[{"role": "user", "content": "Repeat this code exactly:\n" + CODE}])
    before = httpx.get(srv.url + "/metrics").text
    plain = c.chat.completions.create(**ask)
    pred = c.chat.completions.create(**ask, prediction={"type": "content", "content": CODE})
    assert near_tie_or_same(plain.choices[0], pred.choices[0])
    d = pred.usage.completion_tokens_details
    n_pred = len(httpx.post(srv.url + "/tokenize", json={"content": CODE}).json()["tokens"])
    assert d.accepted_prediction_tokens > 0
    assert d.accepted_prediction_tokens + d.rejected_prediction_tokens == n_pred
    assert plain.usage.completion_tokens_details is None or plain.usage.completion_tokens_details.accepted_prediction_tokens is None

    def accepted(text):
        return sum(float(l.split()[-1]) for l in text.splitlines()
                   if l.startswith("cobatch:spec_decode_num_accepted_tokens_total"))
    # drafts that held are output tokens; usage counts each of the prediction's tokens that appeared once
    # (a prediction that repeats itself can have a token held as a draft twice), those the next sample
    # matched too
    held = accepted(httpx.get(srv.url + "/metrics").text) - accepted(before)
    assert 0 < held <= pred.usage.completion_tokens
    parts = c.chat.completions.create(**ask, extra_body={"speculative": False},
                                      prediction={"type": "content", "content": [{"type": "text", "text": CODE}]})
    # no drafts: the prediction is unused and usage counts none of it
    assert parts.usage.completion_tokens_details is None or \
        parts.usage.completion_tokens_details.accepted_prediction_tokens is None
    assert near_tie_or_same(plain.choices[0], parts.choices[0])
    for bad in [{"type": "text", "content": CODE}, {"type": "content", "content": 3},
                {"type": "content", "content": [{"type": "image", "text": "x"}]}]:
        r = httpx.post(srv.url + "/v1/chat/completions", timeout=60,
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "prediction": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prediction", r.text
    r = httpx.post(srv.url + "/v1/completions", timeout=60,
                   json={"model": "m", "prompt": "hi", "prediction": {"type": "content", "content": "x"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prediction", r.text


# ---------------------------------------------------------------- context beyond training

@pytest.mark.skipif(bool(os.environ.get("COBATCH_SANITIZED")),
                    reason="a context of 16k tokens: uninstrumented compute, the plain build runs it")
def test_rope_scaling_extends_the_context_on_purpose():
    """--max-model-len past the trained context is refused unless RoPE is scaled to reach it; with
    YaRN x2 a request may use 16,384 tokens (a prompt that long takes minutes here: BENCHMARKS.md has
    it measured)."""
    bin_, model = os.environ["COBATCH_BIN"], os.environ["COBATCH_E2E_MODEL"]
    p = subprocess.run([bin_, "serve", "-m", model, "--port", "0", "--max-model-len", "16384"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "--rope-scaling yarn --rope-scale 2" in p.stderr, p.stderr
    s = Server("--rope-scaling", "yarn", "--rope-scale", "2", "--max-num-seqs", "2", "--no-embeddings")
    try:
        assert "sequences of up to 16384 tokens" in s.logs()
        assert httpx.get(s.url + "/v1/models").json()["data"][0]["max_model_len"] == 16384
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 2},
                       timeout=120)
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0, s.logs()
