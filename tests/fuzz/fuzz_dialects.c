/* libFuzzer: Ollama's API (/api/chat, /api/generate, /api/embed, /api/embeddings) and llama-server's
 * (/completion, /infill), and the infill prompt's assembly. The first byte picks the surface, the
 * rest is the body. A body a dialect takes becomes a request the OpenAI parser takes or refuses with
 * a 400 (or 503); a body it refuses is a 400 (or 503). Then the answer side, with the body's text
 * as the answer's text, reasoning, call name and arguments (OpenAI's own answers too): every stream
 * piece is whole lines of JSON (Ollama's NDJSON) or "data: JSON" events (llama-server's, OpenAI's),
 * and every answer and error is one JSON value. For the infill assembly the bytes become token pieces and budgets: the
 * prompt holds the FIM tokens once each, in order, and never more than its pieces. */
#include "../../src/core/fim.h"
#include "../../src/native/native.h"
#include "../../src/ollama/ollama.h"
#include "../../src/openai/embeddings.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_value(char *s) {
    if (!s) abort(); /* no allocation fails here */
    cJSON *j = cJSON_Parse(s);
    if (!j) abort();
    cJSON_Delete(j);
    free(s);
}

/* s (taken) as the dialect frames its stream: NDJSON lines, or SSE "data:" events and comments. */
static void framed(const cb_dialect *d, char *s) {
    if (!s) abort();
    bool ndjson = d->stream_type && strstr(d->stream_type, "ndjson");
    for (char *p = s, *end; *p; p = end) {
        end = strstr(p, ndjson ? "\n" : "\n\n");
        if (!end) abort();
        *end = '\0';
        end += ndjson ? 1 : 2;
        if (!ndjson && (p[0] == ':' || !strcmp(p, "data: [DONE]"))) continue; /* a keep-alive; OpenAI's end */
        const char *json = ndjson ? p : (strncmp(p, "data: ", 6) == 0 ? p + 6 : NULL);
        if (!json) abort();
        cJSON *j = cJSON_Parse(json);
        if (!j) abort();
        cJSON_Delete(j);
    }
    free(s);
}

static void answers(const cb_dialect *d, const char *text, const cJSON *echo) {
    cb_dialect_head h = {.id = "id_1", .created = 1, .model = text, .echo = echo};
    struct cobatch_tool_call call = {.name = (char *)text, .arguments = (char *)text};
    const char *ids[] = {"call_1"};
    cb_dialect_answer a = {.text = text,
                           .reasoning = text,
                           .n_reasoning = 3,
                           .calls = &call,
                           .n_calls = 1,
                           .call_ids = ids,
                           .finish = "length",
                           .stop = -1,
                           .n_prompt = 5,
                           .n_cached = 2,
                           .n_generated = 4,
                           .prompt_ms = 1.5,
                           .predicted_ms = 2.5};
    if (d->answer_json) json_value(d->answer_json(&h, &a, 1));
    a.finish = "stop", a.stop = 0, a.stop_sequence = text;
    if (d->answer_json) json_value(d->answer_json(&h, &a, 1));
    cb_openai_error e = {.status = 400};
    snprintf(e.message, sizeof(e.message), "%.200s", text);
    snprintf(e.param, sizeof(e.param), "%.60s", text);
    json_value(d->error_json(&e));
    char *count = d->count_json ? d->count_json(7) : NULL; /* NULL: the dialect has no count endpoint */
    if (count) json_value(count);
    float v[4] = {0.5f, -1.0f, 1e-30f, 3.0f};
    if (d->embd_json) json_value(d->embd_json(&h, v, 2, 2, 9));
    if (!d->stream_size) return;
    void *st = calloc(1, d->stream_size);
    bool late = false;
    if (!st) abort();
    framed(d, d->stream_start(st, &h, 5, 2));
    if (d->stream_reasoning) framed(d, d->stream_reasoning(st, 0, text));
    framed(d, d->stream_text(st, 0, text, NULL, NULL));
    if (d->stream_call) {
        framed(d, d->stream_call(st, 0, 0, "call_1", text, text, &late));
        framed(d, d->stream_call(st, 0, 0, NULL, NULL, text, &late));
    }
    framed(d, d->stream_end(st, &a));
    framed(d, d->stream_error(st, 0, 503, "service_unavailable", text));
    d->stream_free(st);
    free(st);
}

/* A body a dialect took: the request it makes is taken or refused as the server would. */
static void parse_made(const cb_dialect *d, cJSON *made, const cJSON *echo) {
    cb_openai_error e;
    if (d->embd_json && !d->stream_size) {
        cb_openai_embd_request r;
        if (cb_openai_embd_parse_json(made, 8, &r, &e) != 0 && e.status != 400 && e.status != 503) abort();
        cb_openai_embd_request_free(&r);
        return;
    }
    cb_openai_request r;
    if (cb_openai_parse_json(d->completion ? CB_OPENAI_COMPLETION : CB_OPENAI_CHAT, NULL, made, &r, &e) == 0) {
        if (r.n != 1) abort();
        if (d->adjust) d->adjust(echo, &r.params);
    } else if (e.status != 400 && e.status != 503) {
        abort();
    }
    cb_openai_request_free(&r);
}

static void infill(const cJSON *root) {
    struct cobatch_infill parts;
    cb_openai_error e;
    if (cb_native_infill_parts(root, &parts, &e) != 0) {
        if (e.status != 400 && e.status != 503) abort();
        return;
    }
    if (!parts.prefix || !parts.suffix || !parts.prompt || (parts.n_extra && !parts.extra_texts)) abort();
    for (size_t i = 0; i < parts.n_extra; i++)
        if (!parts.extra_texts[i]) abort();
    cb_native_infill_free(&parts);
    const int32_t toks[] = {11, 12, 13};
    cJSON *made = NULL, *echo = NULL;
    if (cb_native_to_completion(root, toks, 3, &made, &echo, &e) == 0) {
        if (!made) abort();
        parse_made(&cb_native_dialect, made, echo);
    } else if (e.status != 400 && e.status != 503) {
        abort();
    }
    cJSON_Delete(made);
    cJSON_Delete(echo);
}

/* Token pieces from the bytes: ids 100 and up (never a FIM token), lengths and budgets from them. */
static void fim(const uint8_t *data, size_t size) {
    if (size < 8) return;
    int32_t ids[256];
    for (int i = 0; i < 256; i++)
        ids[i] = 100 + i;
    cb_tokens t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (cb_tokens){ids, data[i] % 200};
    cb_tokens files[2] = {t[5], t[6]}, texts[2] = {t[6], t[7]};
    cb_fim_vocab v = {.pre = 1,
                      .suf = 2,
                      .mid = 3,
                      .rep = data[0] & 1 ? 4 : -1,
                      .sep = data[0] & 1 ? 5 : -1,
                      .bos = 6,
                      .add_bos = data[1] & 1,
                      .spm = data[2] & 1};
    int32_t budget = size > 8 ? (int32_t)data[8] * 8 : 64;
    cb_fim_request r = {.prefix = t[0],
                        .suffix = t[1],
                        .prompt = t[2],
                        .files = files,
                        .texts = texts,
                        .n_extra = data[3] % 3,
                        .repo = t[3],
                        .snippet = t[4],
                        .cur_file = t[4],
                        .n_batch = budget,
                        .n_predict = data[4] % 64 - 8,
                        .n_ctx = budget * 2 + (data[5] % 7) * 50};
    int32_t n = 0, *out = cb_fim_assemble(&v, &r, &n);
    if (!out) abort();
    int32_t most = 8 + t[0].n + t[1].n + t[2].n + t[3].n + t[4].n * (1 + r.n_extra) + 2 * 200 * r.n_extra;
    if (n < 3 || n > most) abort();
    int seen[4] = {0}, at[4] = {0};
    for (int32_t i = 0; i < n; i++)
        if (out[i] >= 1 && out[i] <= 3) seen[out[i]]++, at[out[i]] = i;
    if (seen[1] != 1 || seen[2] != 1 || seen[3] != 1 || at[3] < at[1] || at[3] < at[2]) abort();
    if ((v.spm ? at[2] > at[1] : at[1] > at[2])) abort();
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const cb_dialect *const DIALECTS[] = {&cb_ollama_chat_dialect, &cb_ollama_generate_dialect,
                                                 &cb_ollama_embed_dialect, &cb_ollama_embeddings_dialect,
                                                 &cb_native_dialect};
    int which = data[0] % 7;
    if (which == 6) {
        fim(data + 1, size - 1);
        return 0;
    }
    const cb_dialect *d = DIALECTS[which < 5 ? which : 4];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    cb_openai_error e;
    cJSON *root = cb_openai_has_nul(body, len) ? NULL : cb_openai_json_parse(body, len, &e), *made = NULL, *echo = NULL;
    if (root && which == 5) {
        infill(root);
    } else if (root && d->to_chat(root, data[0] & 8, &made, &echo, &e) == 0) {
        if (!made) abort();
        parse_made(d, made, echo);
    } else if (root && e.status != 400 && e.status != 503) { /* what it made the caller frees, as the server does */
        abort();
    }
    cJSON_Delete(made);
    made = NULL;
    if (!echo && d == &cb_native_dialect) { /* the server answers a request it took: a plain one's echo */
        cJSON *plain = cJSON_Parse("{\"prompt\": \"x\"}");
        if (!plain || d->to_chat(plain, false, &made, &echo, &e) != 0) abort();
        cJSON_Delete(plain);
        cJSON_Delete(made);
    }
    cJSON_Delete(root);
    char *text = strndup(body, len);
    if (text) {
        answers(d, text, echo);
        answers(data[0] & 64 ? &cb_openai_dialect : &cb_openai_completion_dialect, text, NULL); /* OpenAI's own */
        cb_ollama_model m = {.name = text,
                             .path = text,
                             .size = (long long)len,
                             .family = text,
                             .params = text,
                             .quant = text,
                             .chat_template = text,
                             .ctx = 8192,
                             .tools = data[0] & 16};
        json_value(cb_ollama_tags_json(&m, data[0] & 32));
        json_value(cb_ollama_show_json(&m));
    }
    free(text);
    cJSON_Delete(echo);
    return 0;
}
