"""Log-probabilities, echo, prompt lists and a loglikelihood evaluation, through the official OpenAI
Python SDK against a real `cobatch serve` of the real default model. Log-probabilities are of the
model's own distribution (before logit_bias, penalties and temperature), so greedy output is the
most likely token at every step."""
import math

import httpx
import openai
import pytest

from conftest import Server

PROMPT = "The three primary colors are"
CHAT = [{"role": "user", "content": "Name a color."}]


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def model_id(server):
    return httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["id"]


def tokenize(server, text):
    return httpx.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]


def piece(server, tok):
    return httpx.post(server.url + "/detokenize", json={"tokens": [tok]}, timeout=30).json()["content"]


def test_completion_logprobs_have_openai_shapes(server):
    """logprobs=k: one entry per generated token; the top dict holds the k most likely and the
    sampled token (so up to k + 1 keys); greedy tokens are the most likely; offsets count
    characters of the text. Streamed chunks carry the same tokens and numbers, chunk by chunk."""
    c = client_of(server)
    r = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=10, temperature=0, logprobs=3,
                             extra_body={"ignore_eos": True})
    ch = r.choices[0]
    lp = ch.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) \
        == r.usage.completion_tokens == 10
    assert "".join(lp.tokens) == ch.text
    for tok, x, top, off in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert x <= 0 and 1 <= len(top) <= 4
        assert math.isclose(x, max(top.values()), abs_tol=1e-6)  # greedy: the most likely
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-4
        assert ch.text[off:off + len(tok)] == tok
    streamed = []
    for chunk in c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=10, temperature=0, logprobs=3,
                                      stream=True, extra_body={"ignore_eos": True}):
        for x in chunk.choices:
            if x.logprobs:
                streamed += list(zip(x.logprobs.tokens, x.logprobs.token_logprobs, x.logprobs.text_offset))
    assert [t for t, _, _ in streamed] == lp.tokens
    assert [o for _, _, o in streamed] == lp.text_offset
    assert all(math.isclose(a, b, abs_tol=1e-5) for (_, a, _), b in zip(streamed, lp.token_logprobs))


def test_chat_logprobs_have_openai_shapes(server):
    """logprobs=true, top_logprobs=k: content entries with token, logprob, bytes (the token's UTF-8)
    and k alternatives, most likely first; streamed the same."""
    c = client_of(server)
    r = c.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
                                  top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for e in content:
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or e.token.startswith("bytes:")
        assert len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert math.isclose(e.logprob, e.top_logprobs[0].logprob, abs_tol=1e-6)
    text = "".join(e.token for e in content if not e.token.startswith("<|"))
    assert text == r.choices[0].message.content
    streamed = []
    for chunk in c.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=8, temperature=0,
                                           logprobs=True, top_logprobs=2, stream=True):
        for x in chunk.choices:
            streamed += [(e.token, e.logprob) for e in (x.logprobs.content if x.logprobs else [])]
    assert [t for t, _ in streamed] == [e.token for e in content]
    # without logprobs the field is null, and top_logprobs alone is refused
    r = c.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=2, temperature=0)
    assert r.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(model=model_id(server), messages=CHAT, max_tokens=2, top_logprobs=2)
    assert ei.value.body["param"] == "top_logprobs"


def test_echo_gives_the_prompt_logprobs_the_generation_had(server):
    """Generate greedily with logprobs, then echo prompt + output with max_tokens 0: the prompt's
    log-probabilities (the first null) equal those the same tokens had when generated (1e-3), the
    text is the prompt's; again once the prompt is in the prefix cache; and streamed."""
    c = client_of(server)
    ids = tokenize(server, PROMPT)
    g = c.completions.create(model=model_id(server), prompt=ids, max_tokens=12, temperature=0, logprobs=1,
                             extra_body={"ignore_eos": True})
    gen_ids = tokenize(server, PROMPT + g.choices[0].text)[len(ids):]
    all_ids = ids + gen_ids
    want = g.choices[0].logprobs.token_logprobs
    for _ in range(2):  # the second finds every token cached; it must compute them anyway
        e = c.completions.create(model=model_id(server), prompt=all_ids, max_tokens=0, echo=True, logprobs=1)
        ch = e.choices[0]
        assert ch.text.strip() == (PROMPT + g.choices[0].text).strip()
        assert e.usage.prompt_tokens == len(all_ids) and e.usage.completion_tokens == 0
        lp = ch.logprobs
        assert len(lp.token_logprobs) == len(all_ids)
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert lp.tokens[len(ids):] == g.choices[0].logprobs.tokens  # the same tokens, re-tokenized
        got = lp.token_logprobs[len(ids):]
        assert all(abs(a - b) < 1e-3 for a, b in zip(got, want)), (got, want)
        assert e.usage.prompt_tokens_details.cached_tokens == 0
    # echo with generation, streamed: the prompt chunk first, then the tokens
    text, n_rows = "", 0
    for chunk in c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=4, temperature=0, echo=True,
                                      logprobs=0, stream=True, extra_body={"ignore_eos": True}):
        for x in chunk.choices:
            text += x.text
            n_rows += len(x.logprobs.tokens) if x.logprobs else 0
    assert text.startswith(PROMPT) and len(text) > len(PROMPT)
    assert n_rows == len(ids) + 4
    # echo without logprobs: text only
    e = c.completions.create(model=model_id(server), prompt=PROMPT, max_tokens=2, temperature=0, echo=True)
    assert e.choices[0].text.startswith(PROMPT) and e.choices[0].logprobs is None
    # max_tokens 0 without echo asks for nothing
    r = httpx.post(server.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 0}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_a_list_of_prompts_gives_a_choice_per_prompt_and_sample(server):
    """prompt=[a, b, c] with n=2: six choices, index = prompt x 2 + sample, each prompt's choices
    its own; usage counts each prompt once. Token-id lists too."""
    c = client_of(server)
    prompts = ["The capital of France is", "Two plus two equals", "The opposite of hot is"]
    r = c.completions.create(model=model_id(server), prompt=prompts, n=2, max_tokens=4, temperature=0,
                             extra_body={"ignore_eos": True})
    assert [x.index for x in r.choices] == list(range(6))
    singles = [c.completions.create(model=model_id(server), prompt=p, max_tokens=4, temperature=0,
                                    extra_body={"ignore_eos": True}).choices[0].text for p in prompts]
    assert [x.text for x in r.choices] == [t for t in singles for _ in range(2)]
    assert r.usage.prompt_tokens == sum(len(tokenize(server, p)) for p in prompts)
    assert r.usage.completion_tokens == 24
    r2 = c.completions.create(model=model_id(server), prompt=[tokenize(server, p) for p in prompts], max_tokens=4,
                              temperature=0, extra_body={"ignore_eos": True})
    assert [x.text for x in r2.choices] == singles
    bad = httpx.post(server.url + "/v1/completions", json={"prompt": ["ok", ""], "max_tokens": 1}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


def encode_pair(server, context, continuation):
    """lm-evaluation-harness's split: the whole text's tokens, the context's length of them."""
    whole, ctx = tokenize(server, context + continuation), tokenize(server, context)
    assert whole[:len(ctx)] == ctx
    return ctx, whole[len(ctx):]


def loglikelihood(server, requests):
    """lm-evaluation-harness's local-completions loglikelihood, request for request: token ids of
    context + continuation in one batch request, echo, logprobs 1, max_tokens 0, temperature 0; a
    continuation's log-probability is the sum of its tokens', and it is greedy when each token's
    log-probability is the largest in its top_logprobs."""
    r = httpx.post(server.url + "/v1/completions", json={
        "model": model_id(server), "prompt": [ctx + cont for ctx, cont in requests], "echo": True, "logprobs": 1,
        "max_tokens": 0, "temperature": 0, "seed": 1234}, timeout=120)
    assert r.status_code == 200, r.text
    out = []
    for choice, (ctx, cont) in zip(r.json()["choices"], requests):
        lps = choice["logprobs"]["token_logprobs"][len(ctx):]
        tops = choice["logprobs"]["top_logprobs"][len(ctx):]
        assert len(lps) == len(cont)
        out.append((sum(lps), all(x == max(t.values()) for x, t in zip(lps, tops))))
    return out


def test_loglikelihood_the_way_lm_evaluation_harness_asks(server):
    """The sum over the continuation agrees with the engine's own computation (the log-probabilities
    of the same tokens when it generates them greedily, named by id with vLLM's
    return_tokens_as_token_ids), and the greedy flag is true exactly for what the model generates."""
    c = client_of(server)
    context = "Question: What is the capital of France?\nAnswer:"
    ctx = tokenize(server, context)
    g = c.completions.create(model=model_id(server), prompt=ctx, max_tokens=4, temperature=0, logprobs=1,
                             extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True})
    lp = g.choices[0].logprobs
    assert all(t.startswith("token_id:") for t in lp.tokens)
    gen = [int(t.split(":")[1]) for t in lp.tokens]
    assert all(list(top) == [t] for top, t in zip(lp.top_logprobs, lp.tokens))  # greedy: its own top 1
    london, paris = encode_pair(server, context, " London, England")[1], encode_pair(server, context, " Paris")[1]
    (ll_g, is_g), (ll_l, is_l), (ll_p, _) = loglikelihood(server, [(ctx, gen), (ctx, london), (ctx, paris)])
    assert abs(ll_g - sum(lp.token_logprobs)) < 1e-3 and is_g
    assert ll_l < ll_g and not is_l
    # a one-token continuation: its log-probability is the one the engine lists for it among its
    # 20 most likely next tokens
    one = c.completions.create(model=model_id(server), prompt=ctx, max_tokens=1, temperature=0, logprobs=20,
                               extra_body={"return_tokens_as_token_ids": True})
    top = one.choices[0].logprobs.top_logprobs[0]
    assert len(paris) == 1 and f"token_id:{paris[0]}" in top
    assert abs(ll_p - top[f"token_id:{paris[0]}"]) < 1e-3


def test_prompt_logprobs_longer_than_a_step_take_several(server):
    """A prompt of more rows than one step may ask logits for (64) is chunked, whatever the
    configuration: every row comes back, and the same again in a server without chunking."""
    words = " ".join(["alpha", "beta", "gamma", "delta"] * 60)
    ids = tokenize(server, words)
    assert len(ids) > 200
    body = {"prompt": ids, "echo": True, "logprobs": 0, "max_tokens": 0}
    a = httpx.post(server.url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["logprobs"]
    assert len(a["token_logprobs"]) == len(ids) and a["token_logprobs"][0] is None
    s = Server("--prefill-chunk", "0", "--kv-layout", "unified")
    try:
        b = httpx.post(s.url + "/v1/completions", json=body, timeout=120).json()["choices"][0]["logprobs"]
    finally:
        assert s.stop() == 0
    assert all(abs(x - y) < 1e-3 for x, y in zip(a["token_logprobs"][1:], b["token_logprobs"][1:]))


def test_echo_with_n_choices_computes_the_prompt_rows_once(server):
    """echo + logprobs with n=3: every choice answers the prompt's rows, computed by the first only
    (the others take the prompt's cells from the prefix cache); streamed, each choice has them too."""
    ids = tokenize(server, "A long time ago in a distant land there lived a king who loved to tell stories")
    m0 = httpx.get(server.url + "/metrics", timeout=30).text
    r = httpx.post(server.url + "/v1/completions", json={"prompt": ids, "echo": True, "logprobs": 1, "n": 3,
                                                         "max_tokens": 3, "temperature": 1.0, "seed": 9},
                   timeout=120).json()
    rows = [c["logprobs"]["token_logprobs"] for c in r["choices"]]
    assert all(len(x) == len(ids) + 3 for x in rows)
    assert rows[1][:len(ids)] == rows[0][:len(ids)] == rows[2][:len(ids)] and rows[0][0] is None
    hits = lambda t: float([ln for ln in t.splitlines() if ln.startswith("cobatch:prefix_cache_hits_total")][0]
                           .split()[-1])
    assert hits(httpx.get(server.url + "/metrics", timeout=30).text) - hits(m0) >= 2 * (len(ids) - 2)
    n_rows = {}
    with httpx.stream("POST", server.url + "/v1/completions", json={
            "prompt": ids, "echo": True, "logprobs": 0, "n": 2, "max_tokens": 2, "stream": True}, timeout=120) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                import json
                for c in json.loads(line[6:])["choices"]:
                    n_rows[c["index"]] = n_rows.get(c["index"], 0) + len((c["logprobs"] or {}).get("tokens", []))
    assert n_rows == {0: len(ids) + 2, 1: len(ids) + 2}
