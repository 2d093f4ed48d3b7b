/* anthropic.c — the Messages API's answers and streams, and the dialect the server drives (see
 * anthropic.h; the request's translation is request.c). */
#include "anthropic.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- answers ------------------- */

static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

static cJSON *error_object(int status, const char *param, const char *message) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    char msg[384];
    if (param && *param && strncmp(message, param, strlen(param)) != 0 && !strstr(message, param))
        snprintf(msg, sizeof(msg), "%s: %s", param, message);
    else
        snprintf(msg, sizeof(msg), "%s", message);
    if (!err || !cJSON_AddStringToObject(o, "type", "error") ||
        !cJSON_AddStringToObject(err, "type", error_type(status)) || !cJSON_AddStringToObject(err, "message", msg)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static char *print(cJSON *o) { /* takes o */
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *cb_anthropic_error_json(const cb_openai_error *e) { return print(error_object(e->status, e->param, e->message)); }

const char *cb_anthropic_stop_reason(const char *finish, size_t n_calls, int stop) {
    if (finish && !strcmp(finish, "length")) return "max_tokens";
    if (n_calls > 0) return "tool_use";
    return stop >= 0 ? "stop_sequence" : "end_turn";
}

static cJSON *usage(int input, int cache_read, int output) {
    cJSON *u = cJSON_CreateObject();
    if (u && cJSON_AddNumberToObject(u, "input_tokens", input) &&
        cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0) &&
        cJSON_AddNumberToObject(u, "cache_read_input_tokens", cache_read) &&
        cJSON_AddNumberToObject(u, "output_tokens", output))
        return u;
    cJSON_Delete(u);
    return NULL;
}

/* The message object, with content blocks (or an empty content array). */
static cJSON *message_object(const char *id, const char *model, const cb_anthropic_message *m) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_CreateArray();
    bool ok = o && content && cJSON_AddStringToObject(o, "id", id) && cJSON_AddStringToObject(o, "type", "message") &&
              cJSON_AddStringToObject(o, "role", "assistant") && cJSON_AddStringToObject(o, "model", model) &&
              cJSON_AddItemToObject(o, "content", content);
    if (ok && m->thinking && *m->thinking) { /* this server signs nothing: an empty signature, as llama-server's */
        cJSON *b = cJSON_CreateObject();
        ok = b && cJSON_AddItemToArray(content, b) && cJSON_AddStringToObject(b, "type", "thinking") &&
             cJSON_AddStringToObject(b, "thinking", m->thinking) && cJSON_AddStringToObject(b, "signature", "");
    }
    if (ok && m->text && *m->text) {
        cJSON *b = cJSON_CreateObject();
        ok = b && cJSON_AddItemToArray(content, b) && cJSON_AddStringToObject(b, "type", "text") &&
             cJSON_AddStringToObject(b, "text", m->text);
    }
    for (size_t k = 0; ok && k < m->n_calls; k++) {
        cJSON *b = cJSON_CreateObject(), *input = cJSON_Parse(m->calls[k].arguments);
        if (input && !cJSON_IsObject(input)) { /* arguments that are no object: the input holds none */
            cJSON_Delete(input);
            input = cJSON_CreateObject();
        }
        if (!input) input = cJSON_CreateObject();
        ok = b && input && cJSON_AddItemToArray(content, b) && cJSON_AddStringToObject(b, "type", "tool_use") &&
             cJSON_AddStringToObject(b, "id", m->call_ids[k]) && cJSON_AddStringToObject(b, "name", m->calls[k].name) &&
             cJSON_AddItemToObject(b, "input", input);
    }
    if (ok) {
        ok = (m->stop_reason ? cJSON_AddStringToObject(o, "stop_reason", m->stop_reason)
                             : cJSON_AddNullToObject(o, "stop_reason")) &&
             (m->stop_sequence ? cJSON_AddStringToObject(o, "stop_sequence", m->stop_sequence)
                               : cJSON_AddNullToObject(o, "stop_sequence")) &&
             cJSON_AddItemToObject(o, "usage", usage(m->input_tokens, m->cache_read, m->output_tokens));
    }
    if (!ok) {
        if (!o) cJSON_Delete(content);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *cb_anthropic_message_json(const char *id, const char *model, const cb_anthropic_message *m) {
    return print(message_object(id, model, m));
}

/* ---------------------------------------------------------------- stream -------------------- */

/* Appends one event to *out (malloc'd); takes data. False when out of memory. */
static bool event(char **out, const char *type, cJSON *data) {
    char *j = data && cJSON_AddStringToObject(data, "type", type) ? cJSON_PrintUnformatted(data) : NULL;
    cJSON_Delete(data);
    bool ok = j && cb_dialect_sse(out, type, j);
    free(j);
    return ok;
}

static cJSON *indexed(int index) {
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddNumberToObject(o, "index", index)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *delta(int index, const char *type, const char *key, const char *value);

static bool close_block(cb_anthropic_stream *st, char **out) {
    if (st->open == -1) return true;
    bool signed_off =
        st->open != -3 || event(out, "content_block_delta", delta(st->index - 1, "signature_delta", "signature", ""));
    st->open = -1;
    return signed_off && event(out, "content_block_stop", indexed(st->index - 1));
}

/* A block's start: {"index", "content_block": block}; takes block. */
static bool open_block(cb_anthropic_stream *st, char **out, int kind, cJSON *block) {
    cJSON *o = indexed(st->index);
    if (!o || !block || !cJSON_AddItemToObject(o, "content_block", block)) {
        cJSON_Delete(o);
        if (!o) cJSON_Delete(block);
        return false;
    }
    st->open = kind;
    st->index++;
    return event(out, "content_block_start", o);
}

static cJSON *delta(int index, const char *type, const char *key, const char *value) {
    cJSON *o = indexed(index), *d = cJSON_AddObjectToObject(o, "delta");
    if (d && cJSON_AddStringToObject(d, "type", type) && cJSON_AddStringToObject(d, key, value)) return o;
    cJSON_Delete(o);
    return NULL;
}

static char *done(char *out, bool ok) {
    if (ok) return out ? out : strdup("");
    free(out);
    return NULL;
}

char *cb_anthropic_stream_start(cb_anthropic_stream *st, const char *id, const char *model, int input_tokens,
                                int cache_read) {
    *st = (cb_anthropic_stream){.index = 0, .open = -1};
    cb_anthropic_message m = {.text = "", .input_tokens = input_tokens, .cache_read = cache_read};
    cJSON *o = cJSON_CreateObject(), *msg = message_object(id, model, &m);
    if (!o || !msg || !cJSON_AddItemToObject(o, "message", msg)) {
        cJSON_Delete(o);
        cJSON_Delete(msg);
        return NULL;
    }
    char *out = NULL;
    bool ok = event(&out, "message_start", o) && event(&out, "ping", cJSON_CreateObject());
    return done(out, ok);
}

/* Reasoning: in the open thinking block, or a new one (a thinking block closes with an empty
 * signature: this server signs nothing, and checks none it is handed back). */
static char *stream_thinking(void *vst, int choice, const char *text) {
    (void)choice; /* one choice */
    cb_anthropic_stream *st = vst;
    char *out = NULL;
    if (!*text) return strdup("");
    bool ok = true;
    if (st->open != -3) {
        cJSON *b = cJSON_CreateObject();
        ok = close_block(st, &out) && b && cJSON_AddStringToObject(b, "type", "thinking") &&
             cJSON_AddStringToObject(b, "thinking", "") && cJSON_AddStringToObject(b, "signature", "") &&
             open_block(st, &out, -3, b);
    }
    ok = ok && event(&out, "content_block_delta", delta(st->index - 1, "thinking_delta", "thinking", text));
    return done(out, ok);
}

/* Text: in the open text block, or a new one (closing a tool block). */
static char *stream_text(void *vst, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp) {
    (void)choice, (void)finish, (void)lp; /* one choice; its end goes with the answer's */
    cb_anthropic_stream *st = vst;
    char *out = NULL;
    if (!*text) return strdup("");
    bool ok = true;
    if (st->open != -2) {
        cJSON *b = cJSON_CreateObject();
        ok = close_block(st, &out) && b && cJSON_AddStringToObject(b, "type", "text") &&
             cJSON_AddStringToObject(b, "text", "") && open_block(st, &out, -2, b);
    }
    ok = ok && event(&out, "content_block_delta", delta(st->index - 1, "text_delta", "text", text));
    return done(out, ok); /* out read after event() moved it */
}

/* Tool call k of the output: first (id and name given) a new tool_use block, closing the open one;
 * then pieces of its arguments as input_json_delta. A piece for a call whose block was closed
 * returns "" and sets *late (its arguments would go astray). */
static char *stream_call(void *vst, int choice, int k, const char *id, const char *name, const char *args, bool *late) {
    (void)choice;
    cb_anthropic_stream *st = vst;
    char *out = NULL;
    bool ok = true;
    if (id) { /* a new call: its block */
        cJSON *b = cJSON_CreateObject();
        ok = close_block(st, &out) && b && cJSON_AddStringToObject(b, "type", "tool_use") &&
             cJSON_AddStringToObject(b, "id", id) && cJSON_AddStringToObject(b, "name", name) &&
             cJSON_AddObjectToObject(b, "input") && open_block(st, &out, k, b);
    } else if (st->open != k) {
        *late = true;
        return strdup("");
    }
    if (ok && *args)
        ok = event(&out, "content_block_delta", delta(st->index - 1, "input_json_delta", "partial_json", args));
    return done(out, ok);
}

char *cb_anthropic_stream_end(cb_anthropic_stream *st, const char *stop_reason, const char *stop_sequence,
                              int input_tokens, int cache_read, int output_tokens) {
    char *out = NULL;
    cJSON *o = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(o, "delta"),
          *u = usage(input_tokens, cache_read, output_tokens);
    bool ok = d && u && cJSON_AddStringToObject(d, "stop_reason", stop_reason) &&
              (stop_sequence ? cJSON_AddStringToObject(d, "stop_sequence", stop_sequence)
                             : cJSON_AddNullToObject(d, "stop_sequence")) &&
              cJSON_AddItemToObject(o, "usage", u);
    if (!ok) {
        if (!cJSON_GetObjectItemCaseSensitive(o, "usage")) cJSON_Delete(u);
        cJSON_Delete(o);
        return NULL;
    }
    ok = close_block(st, &out) && event(&out, "message_delta", o) && event(&out, "message_stop", cJSON_CreateObject());
    return done(out, ok);
}

/* A stream that failed after it began: an error event. */
static char *stream_error(void *st, int choice, int status, const char *type, const char *message) {
    (void)st, (void)choice, (void)type; /* its type follows the status */
    char *out = NULL;
    cJSON *o = error_object(status, NULL, message);
    cJSON_DeleteItemFromObject(o, "type"); /* event() names it */
    bool ok = o && event(&out, "error", o);
    return done(out, ok);
}

/* ---------------------------------------------------------------- the server's view -------- */

static int to_chat(const cJSON *root, bool count_only, cJSON **chat, cJSON **echo, cb_openai_error *e) {
    (void)echo; /* a message repeats nothing of its request */
    return cb_anthropic_to_chat(root, count_only, chat, e);
}

static char *count_json(int n_tokens) {
    char buf[48];
    snprintf(buf, sizeof(buf), "{\"input_tokens\":%d}", n_tokens);
    return strdup(buf);
}

static cb_anthropic_message message_of(const cb_dialect_answer *a) {
    return (cb_anthropic_message){.thinking = a->reasoning,
                                  .text = a->text,
                                  .calls = a->calls,
                                  .n_calls = a->n_calls,
                                  .call_ids = a->call_ids,
                                  .stop_reason = cb_anthropic_stop_reason(a->finish, a->n_calls, a->stop),
                                  .stop_sequence = a->stop_sequence,
                                  .input_tokens = a->n_prompt - a->n_cached,
                                  .cache_read = a->n_cached,
                                  .output_tokens = a->n_generated};
}

static char *answer_json(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    (void)n; /* one choice */
    cb_anthropic_message m = message_of(a);
    return cb_anthropic_message_json(h->id, h->model, &m);
}

static char *stream_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    return cb_anthropic_stream_start(st, h->id, h->model, n_prompt - n_cached, n_cached);
}

static char *stream_end(void *st, const cb_dialect_answer *a) {
    cb_anthropic_message m = message_of(a);
    return cb_anthropic_stream_end(st, m.stop_reason, m.stop_sequence, m.input_tokens, m.cache_read, m.output_tokens);
}

static void stream_free(void *st) { (void)st; /* nothing of its own */ }

static const char *const PARAMS[] = {"response_format",
                                     "output_config.format",
                                     "stop",
                                     "stop_sequences",
                                     "chat_template_kwargs",
                                     "thinking",
                                     "thinking_budget_tokens",
                                     "thinking",
                                     NULL},
                         *const MESSAGE[] = {"'response_format.json_schema.schema'",
                                             "'output_config.format.schema'",
                                             "'response_format'",
                                             "'output_config.format'",
                                             ".function.parameters",
                                             ".input_schema",
                                             "'stop'",
                                             "'stop_sequences'",
                                             NULL};

const cb_dialect cb_anthropic_dialect = {.id_prefix = "msg_",
                                         .ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n",
                                         .stream_type = "text/event-stream",
                                         .params = PARAMS,
                                         .message = MESSAGE,
                                         .to_chat = to_chat,
                                         .count_json = count_json,
                                         .error_json = cb_anthropic_error_json,
                                         .answer_json = answer_json,
                                         .stream_size = sizeof(cb_anthropic_stream),
                                         .stream_start = stream_start,
                                         .stream_reasoning = stream_thinking,
                                         .stream_text = stream_text,
                                         .stream_call = stream_call,
                                         .stream_end = stream_end,
                                         .stream_error = stream_error,
                                         .stream_free = stream_free};
