/* answer.c — OpenAI's answers: the JSON of a response, of its stream's chunks and their
 * log-probabilities, and OpenAI's own chat and completions as a dialect (cb_openai_dialect,
 * cb_openai_completion_dialect: see dialect.h) the server drives as it drives every other. */
#include "dialect.h"
#include "embeddings.h"
#include "../util/utf8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- responses ----------------- */

static cJSON *envelope(cb_openai_kind kind, const char *id, long created, const char *model, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object",
                            kind == CB_OPENAI_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                   : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    return o;
}

static void add_usage(cJSON *o, const cb_openai_usage *x) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", x->prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", x->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", x->prompt_tokens + x->completion_tokens);
    if (x->cached_tokens >= 0) /* OpenAI's place for prompt tokens served from a prefix cache */
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", x->cached_tokens);
    cJSON *d =
        x->reasoning_tokens >= 0 || x->prediction >= 0 ? cJSON_AddObjectToObject(u, "completion_tokens_details") : NULL;
    if (x->reasoning_tokens >= 0) /* and for the output's tokens of reasoning */
        cJSON_AddNumberToObject(d, "reasoning_tokens", x->reasoning_tokens);
    if (x->prediction >= 0) { /* Predicted Outputs */
        int rejected = x->prediction - x->accepted_prediction;
        cJSON_AddNumberToObject(d, "accepted_prediction_tokens", x->accepted_prediction);
        cJSON_AddNumberToObject(d, "rejected_prediction_tokens", rejected > 0 ? rejected : 0);
    }
}

static char *print(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---------------------------------------------------------------- log-probabilities --------- */

/* A token's text as a JSON string: itself when it is UTF-8, else OpenAI's "bytes:\\xNN..." form
 * (a token may be part of a character). n: its length. */
static cJSON *token_string(const char *t, int32_t n) {
    bool part;
    if (cb_utf8_valid_prefix(t, (size_t)n, &part) == (size_t)n) return cJSON_CreateString(t);
    char buf[6 + 4 * 64 + 1];
    int at = snprintf(buf, sizeof(buf), "bytes:");
    for (int32_t i = 0; i < n && at + 4 < (int)sizeof(buf); i++)
        at += snprintf(buf + at, sizeof(buf) - (size_t)at, "\\x%02x", (unsigned char)t[i]);
    return cJSON_CreateString(buf);
}

#define CB_OPENAI_PIECE_MAX 4096

/* The text of token tok into buf (NUL-terminated, cut at cap - 1 bytes); returns its length. */
static int32_t piece(const cb_openai_logprobs *lp, int32_t tok, char *buf, int32_t cap) {
    int32_t n = tok >= 0 ? lp->piece(lp->user, tok, buf, cap - 1) : -1;
    if (n < 0 || n > cap - 1) n = 0; /* no token's text is near CB_OPENAI_PIECE_MAX bytes */
    buf[n] = '\0';
    return n;
}

/* The token's name in the answer: its text (as token_string), or "token_id:N". */
static cJSON *token_name(const cb_openai_logprobs *lp, int32_t tok, const char *text, int32_t n) {
    if (!lp->as_ids) return token_string(text, n);
    char b[32];
    snprintf(b, sizeof(b), "token_id:%d", tok);
    return cJSON_CreateString(b);
}

static int32_t chars(const char *t, int32_t n) { /* UTF-8 characters started in t[0, n) */
    int32_t c = 0;
    for (int32_t i = 0; i < n; i++)
        c += ((unsigned char)t[i] & 0xC0) != 0x80;
    return c;
}

int32_t cb_openai_text_end(const cb_openai_logprobs *lp) {
    char buf[CB_OPENAI_PIECE_MAX];
    int32_t off = lp->text_offset;
    for (int32_t i = 0; i < lp->n_rows; i++)
        off += chars(buf, piece(lp, lp->rows[(size_t)i * (size_t)lp->stride].token, buf, (int32_t)sizeof(buf)));
    return off;
}

static void add_number_or_null(cJSON *o, const char *key, float v) {
    if (isnan(v))
        cJSON_AddNullToObject(o, key);
    else
        cJSON_AddNumberToObject(o, key, v);
}

/* Chat: {"token", "logprob", "bytes"} of one entry. */
static cJSON *chat_entry(const cb_openai_logprobs *lp, const struct cobatch_logprob *x) {
    char buf[CB_OPENAI_PIECE_MAX];
    int32_t n = piece(lp, x->token, buf, (int32_t)sizeof(buf));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", token_name(lp, x->token, buf, n));
    add_number_or_null(o, "logprob", x->logprob);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int32_t i = 0; i < n; i++)
        cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
    return o;
}

/* OpenAI's shapes: completions {tokens, token_logprobs, top_logprobs (the alternatives and the
 * token itself, by text), text_offset}; chat {content: [{token, logprob, bytes, top_logprobs}]}. */
static cJSON *logprobs_json(cb_openai_kind kind, const cb_openai_logprobs *lp) {
    cJSON *o = cJSON_CreateObject();
    char buf[CB_OPENAI_PIECE_MAX];
    if (kind == CB_OPENAI_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int32_t i = 0; i < lp->n_rows; i++) {
            const struct cobatch_logprob *row = lp->rows + (size_t)i * (size_t)lp->stride;
            cJSON *c = chat_entry(lp, &row[0]);
            cJSON *top = cJSON_AddArrayToObject(c, "top_logprobs");
            for (int32_t k = 1; k <= lp->top && row[k].token >= 0; k++)
                cJSON_AddItemToArray(top, chat_entry(lp, &row[k]));
            cJSON_AddItemToArray(content, c);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    int32_t off = lp->text_offset;
    for (int32_t i = 0; i < lp->n_rows; i++) {
        const struct cobatch_logprob *row = lp->rows + (size_t)i * (size_t)lp->stride;
        int32_t n = piece(lp, row[0].token, buf, (int32_t)sizeof(buf));
        cJSON_AddItemToArray(tokens, token_name(lp, row[0].token, buf, n));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber(off));
        off += chars(buf, n);
        if (isnan(row[0].logprob)) { /* an echoed prompt's first token: nothing came before it */
            cJSON_AddItemToArray(lps, cJSON_CreateNull());
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(row[0].logprob));
        cJSON *t = cJSON_CreateObject();
        bool listed = false;
        for (int32_t k = 1; k <= lp->top; k++) {
            int32_t m = piece(lp, row[k].token, buf, (int32_t)sizeof(buf));
            cJSON *key = token_name(lp, row[k].token, buf, m);
            listed |= row[k].token == row[0].token;
            if (!cJSON_GetObjectItemCaseSensitive(t, key->valuestring)) /* two tokens of one text: the likelier */
                cJSON_AddNumberToObject(t, key->valuestring, row[k].logprob);
            cJSON_Delete(key);
        }
        if (!listed) { /* OpenAI: the sampled token is always there, so up to logprobs + 1 entries */
            int32_t m = piece(lp, row[0].token, buf, (int32_t)sizeof(buf));
            cJSON *key = token_name(lp, row[0].token, buf, m);
            if (!cJSON_GetObjectItemCaseSensitive(t, key->valuestring))
                cJSON_AddNumberToObject(t, key->valuestring, row[0].logprob);
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(tops, t);
    }
    return o;
}

static void add_logprobs(cJSON *c, cb_openai_kind kind, const cb_openai_logprobs *lp) {
    if (lp)
        cJSON_AddItemToObject(c, "logprobs", logprobs_json(kind, lp));
    else
        cJSON_AddNullToObject(c, "logprobs");
}

char *cb_openai_response_json(cb_openai_kind kind, const char *id, long created, const char *model,
                              const cb_openai_choice *choices, int n_choices, const cb_openai_usage *usage) {
    cJSON *o = envelope(kind, id, created, model, false);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < n_choices; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", i);
        if (kind == CB_OPENAI_CHAT) {
            const cb_openai_choice *ch = &choices[i];
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            if (ch->n_calls && !ch->text[0]) /* OpenAI's: calls and no text, content null */
                cJSON_AddNullToObject(m, "content");
            else
                cJSON_AddStringToObject(m, "content", ch->text);
            if (ch->reasoning && ch->reasoning[0]) /* llama-server's and vLLM's place for it */
                cJSON_AddStringToObject(m, "reasoning_content", ch->reasoning);
            cJSON *calls = ch->n_calls ? cJSON_AddArrayToObject(m, "tool_calls") : NULL;
            for (size_t k = 0; k < ch->n_calls; k++) {
                cJSON *tc = cJSON_CreateObject();
                cJSON_AddStringToObject(tc, "id", ch->call_ids[k]);
                cJSON_AddStringToObject(tc, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(tc, "function");
                cJSON_AddStringToObject(f, "name", ch->calls[k].name);
                cJSON_AddStringToObject(f, "arguments", ch->calls[k].arguments);
                cJSON_AddItemToArray(calls, tc);
            }
        } else {
            cJSON_AddStringToObject(c, "text", choices[i].text);
        }
        add_logprobs(c, kind, choices[i].lp);
        cJSON_AddStringToObject(c, "finish_reason", choices[i].finish);
        cJSON_AddItemToArray(arr, c);
    }
    add_usage(o, usage);
    return print(o);
}

char *cb_openai_reasoning_chunk_json(const char *id, long created, const char *model, int index, const char *text) {
    cJSON *o = envelope(CB_OPENAI_CHAT, id, created, model, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "delta"), "reasoning_content", text);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return print(o);
}

char *cb_openai_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model, int index,
                           const char *text, const char *finish, bool role_first, const cb_openai_logprobs *lp) {
    cJSON *o = envelope(kind, id, created, model, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (kind == CB_OPENAI_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_first) cJSON_AddStringToObject(d, "role", "assistant");
        if (text ? role_first || text[0] || !finish : !role_first && !finish)
            cJSON_AddStringToObject(d, "content", text ? text : "");
    } else {
        cJSON_AddStringToObject(c, "text", text ? text : "");
    }
    add_logprobs(c, kind, lp);
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return print(o);
}

char *cb_openai_tool_chunk_json(const char *id, long created, const char *model, int index, int call,
                                const char *call_id, const char *name, const char *arguments) {
    cJSON *o = envelope(CB_OPENAI_CHAT, id, created, model, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON *tc = cJSON_CreateObject();
    cJSON_AddNumberToObject(tc, "index", call);
    if (call_id) {
        cJSON_AddStringToObject(tc, "id", call_id);
        cJSON_AddStringToObject(tc, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(tc, "function");
    if (name) cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", arguments);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(d, "tool_calls"), tc);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(choices, c);
    return print(o);
}

char *cb_openai_usage_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model,
                                 const cb_openai_usage *usage) {
    cJSON *o = envelope(kind, id, created, model, true);
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, usage);
    return print(o);
}

char *cb_openai_abort_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model, int index,
                                 int status, const char *type, const char *message) {
    cJSON *o = envelope(kind, id, created, model, true);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    if (kind == CB_OPENAI_CHAT)
        cJSON_AddObjectToObject(c, "delta");
    else
        cJSON_AddStringToObject(c, "text", "");
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", "abort");
    cJSON_AddItemToArray(choices, c);
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    return print(o);
}

/* ---------------------------------------------------------------- the dialect --------------- */

/* A stream's state: who answers, and in which of the two shapes. */
typedef struct {
    cb_dialect_head h;
    cb_openai_kind kind;
} oa_stream;

static char *done(char *events) { return cb_dialect_join(events, strdup("data: [DONE]\n\n")); }

static cb_openai_usage usage_of(const cb_dialect_answer *a) {
    return (cb_openai_usage){.prompt_tokens = a->n_prompt,
                             .completion_tokens = a->n_generated,
                             .cached_tokens = a->n_cached,
                             .reasoning_tokens = a->n_reasoning,
                             .prediction = a->n_prediction,
                             .accepted_prediction = a->n_pred_accepted};
}

static char *answer(const cb_dialect_head *h, const cb_dialect_answer *a, int n, cb_openai_kind kind) {
    cb_openai_choice *cs = calloc(n > 0 ? (size_t)n : 1, sizeof(*cs));
    if (!cs) return NULL;
    for (int i = 0; i < n; i++)
        cs[i] = (cb_openai_choice){.text = a[i].text,
                                   .reasoning = a[i].reasoning,
                                   .finish = a[i].finish,
                                   .lp = a[i].lp,
                                   .calls = a[i].calls,
                                   .n_calls = a[i].n_calls,
                                   .call_ids = a[i].call_ids};
    cb_openai_usage u = usage_of(&a[0]);
    char *j = cb_openai_response_json(kind, h->id, (long)h->created, h->model, cs, n, &u);
    free(cs);
    return j;
}

static char *chat_answer(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    return answer(h, a, n, CB_OPENAI_CHAT);
}

static char *completion_answer(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    return answer(h, a, n, CB_OPENAI_COMPLETION);
}

static char *embd_json(const cb_dialect_head *h, const float *v, int n_inputs, int dim, int n_prompt) {
    return cb_openai_embd_response_json(h->model, v, n_inputs, dim, h->base64, n_prompt);
}

/* A chat stream opens with each choice's role (and content "", none when the outputs are read for
 * calls); a completions stream with nothing. */
static char *start(void *st, const cb_dialect_head *h, cb_openai_kind kind) {
    oa_stream *o = st;
    *o = (oa_stream){.h = *h, .kind = kind};
    char *out = strdup("");
    for (int i = 0; out && kind == CB_OPENAI_CHAT && i < h->n; i++)
        out = cb_dialect_join(out, cb_dialect_data(cb_openai_chunk_json(kind, h->id, (long)h->created, h->model, i,
                                                                        h->calls_tools ? NULL : "", NULL, true, NULL)));
    return out;
}

static char *chat_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    (void)n_prompt, (void)n_cached;
    return start(st, h, CB_OPENAI_CHAT);
}

static char *completion_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    (void)n_prompt, (void)n_cached;
    return start(st, h, CB_OPENAI_COMPLETION);
}

static char *stream_reasoning(void *st, int choice, const char *text) {
    const oa_stream *o = st;
    return cb_dialect_data(cb_openai_reasoning_chunk_json(o->h.id, (long)o->h.created, o->h.model, choice, text));
}

static char *stream_text(void *st, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp) {
    const oa_stream *o = st;
    return cb_dialect_data(
        cb_openai_chunk_json(o->kind, o->h.id, (long)o->h.created, o->h.model, choice, text, finish, false, lp));
}

static char *stream_call(void *st, int choice, int k, const char *id, const char *name, const char *args, bool *late) {
    const oa_stream *o = st;
    (void)late; /* a call's chunks may come in any order */
    return cb_dialect_data(
        cb_openai_tool_chunk_json(o->h.id, (long)o->h.created, o->h.model, choice, k, id, name, args));
}

/* The choices' ends went out with their last text: the usage when asked, then [DONE]. */
static char *stream_end(void *st, const cb_dialect_answer *a) {
    const oa_stream *o = st;
    cb_openai_usage u = usage_of(a);
    char *out = o->h.include_usage
                    ? cb_dialect_data(cb_openai_usage_chunk_json(o->kind, o->h.id, (long)o->h.created, o->h.model, &u))
                    : strdup("");
    return done(out);
}

/* The stream's last chunk: finish_reason "abort" and the error (the OpenAI SDKs raise it), then [DONE]. */
static char *stream_error(void *st, int choice, int status, const char *type, const char *message) {
    const oa_stream *o = st;
    return done(cb_dialect_data(
        cb_openai_abort_chunk_json(o->kind, o->h.id, (long)o->h.created, o->h.model, choice, status, type, message)));
}

static void stream_free(void *st) { (void)st; /* nothing of its own */ }

#define CB_OPENAI_STREAMS                                                                                              \
    .error_json = cb_openai_error_json, .stream_size = sizeof(oa_stream), .ping = ": ping\n\n",                        \
    .stream_type = "text/event-stream", .stream_reasoning = stream_reasoning, .stream_text = stream_text,              \
    .stream_call = stream_call, .stream_end = stream_end, .stream_error = stream_error, .stream_free = stream_free

const cb_dialect cb_openai_dialect = {.id_prefix = "chatcmpl-",
                                      .answer_json = chat_answer,
                                      .embd_json = embd_json,
                                      .stream_start = chat_start,
                                      CB_OPENAI_STREAMS};
const cb_dialect cb_openai_completion_dialect = {.id_prefix = "cmpl-",
                                                 .completion = true,
                                                 .answer_json = completion_answer,
                                                 .stream_start = completion_start,
                                                 CB_OPENAI_STREAMS};
