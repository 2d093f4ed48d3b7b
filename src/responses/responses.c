/* responses.c — the Responses API's answers and streams, and the dialect the server drives (see
 * responses.h; the request's translation is request.c). */
#include "responses.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- answers ------------------- */

static char *print(cJSON *o) { /* takes o */
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *cb_responses_error_json(const cb_openai_error *e) { return cb_openai_error_json(e); }

static cJSON *usage(cb_responses_usage u) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject(), *out = cJSON_CreateObject();
    bool ok = o && in && out && cJSON_AddNumberToObject(o, "input_tokens", u.input_tokens) &&
              cJSON_AddNumberToObject(in, "cached_tokens", u.cached) &&
              cJSON_AddItemToObject(o, "input_tokens_details", in) &&
              cJSON_AddNumberToObject(o, "output_tokens", u.output_tokens) &&
              cJSON_AddNumberToObject(out, "reasoning_tokens", u.reasoning) &&
              cJSON_AddItemToObject(o, "output_tokens_details", out) &&
              cJSON_AddNumberToObject(o, "total_tokens", u.input_tokens + u.output_tokens);
    if (ok) return o;
    if (!cJSON_GetObjectItemCaseSensitive(o, "input_tokens_details")) cJSON_Delete(in);
    if (!cJSON_GetObjectItemCaseSensitive(o, "output_tokens_details")) cJSON_Delete(out);
    cJSON_Delete(o);
    return NULL;
}

/* An item's id: its kind and the response's id after "resp_", with its place in the output. */
static void item_id(char *out, size_t n, const char *kind, const char *resp_id, int index) {
    const char *tail = strncmp(resp_id, "resp_", 5) ? resp_id : resp_id + 5;
    snprintf(out, n, "%s_%s_%d", kind, tail, index);
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    if (p && cJSON_AddStringToObject(p, "type", "output_text") && cJSON_AddStringToObject(p, "text", text) &&
        cJSON_AddArrayToObject(p, "annotations") && cJSON_AddArrayToObject(p, "logprobs"))
        return p;
    cJSON_Delete(p);
    return NULL;
}

/* A message item (content: one output_text part, or none while text is NULL). */
static cJSON *message_item(const char *id, const char *status, const char *text) {
    cJSON *m = cJSON_CreateObject(), *c = cJSON_CreateArray();
    bool ok = m && c && cJSON_AddStringToObject(m, "id", id) && cJSON_AddStringToObject(m, "type", "message") &&
              cJSON_AddStringToObject(m, "status", status) && cJSON_AddStringToObject(m, "role", "assistant") &&
              cJSON_AddItemToObject(m, "content", c);
    cJSON *part = ok && text ? text_part(text) : NULL;
    if (ok && text && !(part && cJSON_AddItemToArray(c, part))) {
        cJSON_Delete(part);
        ok = false;
    }
    if (ok) return m;
    if (!cJSON_GetObjectItemCaseSensitive(m, "content")) cJSON_Delete(c);
    cJSON_Delete(m);
    return NULL;
}

/* A reasoning item: its text as one reasoning_text part (none while text is NULL), no summary. */
static cJSON *reasoning_item_of(const char *id, const char *status, const char *text) {
    cJSON *r = cJSON_CreateObject(), *c = cJSON_CreateArray();
    bool ok = r && c && cJSON_AddStringToObject(r, "id", id) && cJSON_AddStringToObject(r, "type", "reasoning") &&
              cJSON_AddStringToObject(r, "status", status) && cJSON_AddArrayToObject(r, "summary") &&
              cJSON_AddItemToObject(r, "content", c);
    if (ok && text) {
        cJSON *p = cb_json_object_in(c);
        ok = p && cJSON_AddStringToObject(p, "type", "reasoning_text") && cJSON_AddStringToObject(p, "text", text);
    }
    if (ok) return r;
    if (!cJSON_GetObjectItemCaseSensitive(r, "content")) cJSON_Delete(c);
    cJSON_Delete(r);
    return NULL;
}

/* A function_call item; with the namespace its function came in, when it came in one. */
static cJSON *call_item(const char *id, const char *status, const char *call_id, const char *name, const char *args,
                        const cJSON *echo) {
    cJSON *f = cJSON_CreateObject();
    const char *ns = cb_responses_namespace_of(cb_json_get(echo, "tools"), name);
    if (f && cJSON_AddStringToObject(f, "id", id) && cJSON_AddStringToObject(f, "type", "function_call") &&
        cJSON_AddStringToObject(f, "status", status) && cJSON_AddStringToObject(f, "call_id", call_id) &&
        cJSON_AddStringToObject(f, "name", name) && (!ns || cJSON_AddStringToObject(f, "namespace", ns)) &&
        cJSON_AddStringToObject(f, "arguments", args))
        return f;
    cJSON_Delete(f);
    return NULL;
}

/* The response object around output (taken): status in_progress, completed or incomplete. */
static cJSON *response(const char *id, long long created, const char *model, const cJSON *echo, const char *status,
                       cJSON *output, const cb_responses_usage *u) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "id", id) && cJSON_AddStringToObject(o, "object", "response") &&
              cJSON_AddNumberToObject(o, "created_at", (double)created) &&
              cJSON_AddStringToObject(o, "status", status) && cJSON_AddNullToObject(o, "error");
    ok = ok ? cb_json_add(o, "output", output) : (cJSON_Delete(output), false);
    if (ok && !strcmp(status, "incomplete")) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        ok = d && cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "incomplete_details") != NULL;
    }
    ok = ok && cJSON_AddStringToObject(o, "model", model);
    for (const cJSON *x = echo ? echo->child : NULL; ok && x; x = x->next)
        ok = cb_json_add(o, x->string, cJSON_Duplicate(x, true));
    cJSON *r = ok ? cJSON_AddObjectToObject(o, "reasoning") : NULL;
    ok = r && cJSON_AddNullToObject(r, "effort") && cJSON_AddNullToObject(r, "summary");
    ok = ok && (u ? cb_json_add(o, "usage", usage(*u)) : cJSON_AddNullToObject(o, "usage") != NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

char *cb_responses_json(const char *id, long long created, const char *model, const cJSON *echo,
                        const cb_responses_answer *a) {
    cJSON *output = cJSON_CreateArray();
    char iid[96];
    bool ok = output != NULL;
    int n = 0;
    if (ok && a->reasoning && *a->reasoning) {
        item_id(iid, sizeof(iid), "rs", id, n++);
        cJSON *r = reasoning_item_of(iid, "completed", a->reasoning);
        if (!(ok = r && cJSON_AddItemToArray(output, r))) cJSON_Delete(r);
    }
    if (ok && a->text && *a->text) {
        item_id(iid, sizeof(iid), "msg", id, n++);
        cJSON *m = message_item(iid, "completed", a->text);
        if (!(ok = m && cJSON_AddItemToArray(output, m))) cJSON_Delete(m);
    }
    for (size_t k = 0; ok && k < a->n_calls; k++) {
        item_id(iid, sizeof(iid), "fc", id, n++);
        cJSON *f = call_item(iid, "completed", a->call_ids[k], a->calls[k].name, a->calls[k].arguments, echo);
        if (!(ok = f && cJSON_AddItemToArray(output, f))) cJSON_Delete(f);
    }
    if (!ok) {
        cJSON_Delete(output);
        return NULL;
    }
    const char *status = a->finish && !strcmp(a->finish, "length") ? "incomplete" : "completed";
    return print(response(id, created, model, echo, status, output, &a->usage));
}

/* ---------------------------------------------------------------- stream -------------------- */

/* Appends one event to *out (malloc'd), numbered; takes data. False when out of memory. */
static bool event(cb_responses_stream *st, char **out, const char *type, cJSON *data) {
    char *j =
        data && cJSON_AddStringToObject(data, "type", type) && cJSON_AddNumberToObject(data, "sequence_number", st->seq)
            ? cJSON_PrintUnformatted(data)
            : NULL;
    cJSON_Delete(data);
    bool ok = j && cb_dialect_sse(out, type, j);
    free(j);
    if (ok) st->seq++;
    return ok;
}

static char *done(char *out, bool ok) {
    if (ok) return out ? out : strdup("");
    free(out);
    return NULL;
}

/* {"output_index", "item_id"?, "content_index"?} for an event about the open item. */
static cJSON *at(cb_responses_stream *st, bool part) {
    cJSON *o = cJSON_CreateObject(), *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    if (o && item && cJSON_AddStringToObject(o, "item_id", cJSON_GetStringValue(cb_json_get(item, "id"))) &&
        cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(st->output) - 1) &&
        (!part || cJSON_AddNumberToObject(o, "content_index", 0)))
        return o;
    cJSON_Delete(o);
    return NULL;
}

static cJSON *with(cJSON *o, const char *key, cJSON *v) { /* takes both */
    if (o && v && cJSON_AddItemToObject(o, key, v)) return o;
    cJSON_Delete(o);
    cJSON_Delete(v);
    return NULL;
}

static cJSON *with_string(cJSON *o, const char *key, const char *v) {
    if (o && cJSON_AddStringToObject(o, key, v)) return o;
    cJSON_Delete(o);
    return NULL;
}

/* output_item.added for the item just appended. */
static bool added(cb_responses_stream *st, char **out) {
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(st->output) - 1)) {
        cJSON_Delete(o);
        return false;
    }
    return event(st, out, "response.output_item.added", with(o, "item", cJSON_Duplicate(item, true)));
}

/* The open item's done events, its status completed. */
static bool close_item(cb_responses_stream *st, char **out) {
    if (st->open == -1) return true;
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    bool ok = item && cJSON_ReplaceItemInObjectCaseSensitive(item, "status", cJSON_CreateString("completed"));
    if (ok && st->open == -2) {
        cJSON *part = cJSON_GetArrayItem(cb_json_get(item, "content"), 0);
        const char *text = cJSON_GetStringValue(cb_json_get(part, "text"));
        ok = text &&
             event(st, out, "response.output_text.done",
                   with(with_string(at(st, true), "text", text), "logprobs", cJSON_CreateArray())) &&
             event(st, out, "response.content_part.done", with(at(st, true), "part", cJSON_Duplicate(part, true)));
    } else if (ok && st->open == -3) {
        const char *text =
            cJSON_GetStringValue(cb_json_get(cJSON_GetArrayItem(cb_json_get(item, "content"), 0), "text"));
        ok = text && event(st, out, "response.reasoning_text.done", with_string(at(st, true), "text", text));
    } else if (ok) {
        ok = event(st, out, "response.function_call_arguments.done",
                   with_string(with_string(at(st, false), "name", cJSON_GetStringValue(cb_json_get(item, "name"))),
                               "arguments", cJSON_GetStringValue(cb_json_get(item, "arguments"))));
    }
    cJSON *o = ok ? cJSON_CreateObject() : NULL;
    ok = ok && o && cJSON_AddNumberToObject(o, "output_index", cJSON_GetArraySize(st->output) - 1);
    ok = ok ? event(st, out, "response.output_item.done", with(o, "item", cJSON_Duplicate(item, true)))
            : (cJSON_Delete(o), false);
    st->open = -1;
    return ok;
}

/* Closes the open item and appends item (taken; NULL: out of memory) as the next one, with its
 * output_item.added event. The caller marks it open. */
static bool open_item(cb_responses_stream *st, char **out, cJSON *item) {
    if (!item || !close_item(st, out) || !cJSON_AddItemToArray(st->output, item)) {
        cJSON_Delete(item);
        return false;
    }
    return added(st, out);
}

/* Appends s to the string at o[key]. */
static bool grow(cJSON *o, const char *key, const char *s) {
    const char *old = cJSON_GetStringValue(cb_json_get(o, key));
    size_t a = old ? strlen(old) : 0, b = strlen(s);
    char *t = malloc(a + b + 1);
    if (!t) return false;
    memcpy(t, old ? old : "", a);
    memcpy(t + a, s, b + 1);
    cJSON *v = cJSON_CreateString(t);
    free(t);
    if (!v) return false;
    return cJSON_ReplaceItemInObjectCaseSensitive(o, key, v) || (cJSON_Delete(v), false);
}

char *cb_responses_stream_start(cb_responses_stream *st, const char *id, long long created, const char *model,
                                const cJSON *echo) {
    *st = (cb_responses_stream){.created = created, .echo = echo, .open = -1};
    snprintf(st->id, sizeof(st->id), "%s", id);
    snprintf(st->model, sizeof(st->model), "%s", model);
    if (!(st->output = cJSON_CreateArray())) return NULL;
    char *out = NULL;
    bool ok = event(st, &out, "response.created",
                    with(cJSON_CreateObject(), "response",
                         response(id, created, model, echo, "in_progress", cJSON_CreateArray(), NULL))) &&
              event(st, &out, "response.in_progress",
                    with(cJSON_CreateObject(), "response",
                         response(id, created, model, echo, "in_progress", cJSON_CreateArray(), NULL)));
    return done(out, ok);
}

/* Reasoning: in the open reasoning item (its one reasoning_text part), or a new one. */
static char *stream_reasoning(void *vst, int choice, const char *text) {
    (void)choice; /* one choice */
    cb_responses_stream *st = vst;
    if (!*text) return strdup("");
    char *out = NULL, iid[96];
    bool ok = true;
    if (st->open != -3) {
        item_id(iid, sizeof(iid), "rs", st->id, cJSON_GetArraySize(st->output));
        cJSON *r = reasoning_item_of(iid, "in_progress", NULL);
        ok = open_item(st, &out, r);
        cJSON *p = ok ? cb_json_object_in(cb_json_get(r, "content")) : NULL;
        ok = p && cJSON_AddStringToObject(p, "type", "reasoning_text") && cJSON_AddStringToObject(p, "text", "");
        if (ok) st->open = -3;
    }
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    ok = ok && grow(cJSON_GetArrayItem(cb_json_get(item, "content"), 0), "text", text) &&
         event(st, &out, "response.reasoning_text.delta", with_string(at(st, true), "delta", text));
    return done(out, ok);
}

/* Text: in the open message item, or a new one (closing a function call item). */
static char *stream_text(void *vst, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp) {
    (void)choice, (void)finish, (void)lp; /* one choice; its end goes with the answer's */
    cb_responses_stream *st = vst;
    if (!*text) return strdup("");
    char *out = NULL, iid[96];
    bool ok = true;
    if (st->open != -2) {
        item_id(iid, sizeof(iid), "msg", st->id, cJSON_GetArraySize(st->output));
        cJSON *m = message_item(iid, "in_progress", NULL);
        ok = open_item(st, &out, m);
        cJSON *part = ok ? text_part("") : NULL;
        if (part && !cJSON_AddItemToArray(cb_json_get(m, "content"), part)) {
            cJSON_Delete(part);
            part = NULL;
        }
        ok = part &&
             event(st, &out, "response.content_part.added", with(at(st, true), "part", cJSON_Duplicate(part, true)));
        if (ok) st->open = -2;
    }
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    ok = ok && grow(cJSON_GetArrayItem(cb_json_get(item, "content"), 0), "text", text) &&
         event(st, &out, "response.output_text.delta",
               with(with_string(at(st, true), "delta", text), "logprobs", cJSON_CreateArray()));
    return done(out, ok);
}

/* Call k of the output: first (call_id and name given) a new function_call item, closing the open
 * one; then pieces of its arguments. A piece for a call whose item was closed returns "" and sets
 * *late (its arguments would go astray). */
static char *stream_call(void *vst, int choice, int k, const char *call_id, const char *name, const char *args,
                         bool *late) {
    (void)choice;
    cb_responses_stream *st = vst;
    char *out = NULL, iid[96];
    bool ok = true;
    if (call_id) { /* a new call: its item */
        item_id(iid, sizeof(iid), "fc", st->id, cJSON_GetArraySize(st->output));
        ok = open_item(st, &out, call_item(iid, "in_progress", call_id, name, "", st->echo));
        if (ok) st->open = k;
    } else if (st->open != k) {
        *late = true;
        return strdup("");
    }
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    if (ok && *args)
        ok = grow(item, "arguments", args) &&
             event(st, &out, "response.function_call_arguments.delta", with_string(at(st, false), "delta", args));
    return done(out, ok);
}

char *cb_responses_stream_end(cb_responses_stream *st, const char *finish, cb_responses_usage usage) {
    char *out = NULL;
    bool length = finish && !strcmp(finish, "length");
    bool ok = close_item(st, &out);
    cJSON *r = ok ? response(st->id, st->created, st->model, st->echo, length ? "incomplete" : "completed",
                             cJSON_Duplicate(st->output, true), &usage)
                  : NULL;
    ok = r && event(st, &out, length ? "response.incomplete" : "response.completed",
                    with(cJSON_CreateObject(), "response", r));
    return done(out, ok);
}

/* A stream that failed after it began: an error event. */
static char *stream_error(void *vst, int choice, int status, const char *type, const char *message) {
    (void)choice, (void)type; /* its type follows the status */
    cb_responses_stream *st = vst;
    char *out = NULL;
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddStringToObject(o, "code", status >= 500 ? "server_error" : "invalid_request_error") &&
              cJSON_AddStringToObject(o, "message", message) && cJSON_AddNullToObject(o, "param");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    bool sent = event(st, &out, "error", o);
    return done(out, sent); /* out read after event() moved it */
}

void cb_responses_stream_free(cb_responses_stream *st) {
    cJSON_Delete(st->output);
    st->output = NULL;
    st->open = -1;
}

/* ---------------------------------------------------------------- the server's view -------- */

static char *count_json(int n_tokens) {
    char buf[80];
    snprintf(buf, sizeof(buf), "{\"object\":\"response.input_tokens\",\"input_tokens\":%d}", n_tokens);
    return strdup(buf);
}

static cb_responses_answer answer_of(const cb_dialect_answer *a) {
    return (cb_responses_answer){
        .reasoning = a->reasoning,
        .text = a->text,
        .calls = a->calls,
        .n_calls = a->n_calls,
        .call_ids = a->call_ids,
        .finish = a->finish,
        .usage = {a->n_prompt, a->n_cached, a->n_generated, a->n_reasoning > 0 ? a->n_reasoning : 0}};
}

static char *answer_json(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    (void)n; /* one choice */
    cb_responses_answer r = answer_of(a);
    return cb_responses_json(h->id, h->created, h->model, h->echo, &r);
}

static char *stream_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    (void)n_prompt, (void)n_cached; /* the usage comes at the end */
    return cb_responses_stream_start(st, h->id, h->created, h->model, h->echo);
}

static char *stream_end(void *st, const cb_dialect_answer *a) {
    return cb_responses_stream_end(st, a->finish, answer_of(a).usage);
}

static void stream_free(void *st) { cb_responses_stream_free(st); }

static const char *const PARAMS[] = {"response_format",
                                     "text.format",
                                     "max_tokens",
                                     "max_output_tokens",
                                     "reasoning_effort",
                                     "reasoning",
                                     "reasoning_context",
                                     "reasoning",
                                     "verbosity",
                                     "text",
                                     "messages",
                                     "input",
                                     NULL},
                         *const MESSAGE[] = {"'response_format.json_schema.schema'",
                                             "'text.format.schema'",
                                             "'response_format'",
                                             "'text.format'",
                                             ".function.parameters",
                                             ".parameters",
                                             "max_tokens",
                                             "max_output_tokens",
                                             NULL};

const cb_dialect cb_responses_dialect = {.id_prefix = "resp_",
                                         .ping = ": ping\n\n",
                                         .stream_type = "text/event-stream",
                                         .params = PARAMS,
                                         .message = MESSAGE,
                                         .to_chat = cb_responses_to_chat,
                                         .count_json = count_json,
                                         .error_json = cb_responses_error_json,
                                         .answer_json = answer_json,
                                         .stream_size = sizeof(cb_responses_stream),
                                         .stream_start = stream_start,
                                         .stream_reasoning = stream_reasoning,
                                         .stream_text = stream_text,
                                         .stream_call = stream_call,
                                         .stream_end = stream_end,
                                         .stream_error = stream_error,
                                         .stream_free = stream_free};
