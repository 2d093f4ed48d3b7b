/* dialect.h — the API dialects the server speaks (OpenAI's own chat and completions here, and those
 * that translate into a chat request: src/anthropic, src/responses, src/native, src/ollama): the
 * interface the server drives them through (cb_dialect: the request in, the answer, its stream and
 * errors out), and what they share: refusals that name the field, checks on the JSON they read, and
 * the framing of their named server-sent events. Pure: cJSON and text in. */
#ifndef CB_OPENAI_DIALECT_H
#define CB_OPENAI_DIALECT_H

#include "openai.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

struct cobatch_tool_call;

/* Who answers and how the request asked to be answered: the request's id, when it was made, the
 * model's name, what a Responses answer repeats of the request (NULL for a dialect that repeats
 * nothing), and OpenAI's own options. */
typedef struct {
    const char *id;
    long long created;
    const char *model;
    const cJSON *echo;
    int n;              /* choices (OpenAI's n over its prompts); every other dialect answers one */
    bool include_usage; /* a stream ends with the usage (OpenAI's stream_options.include_usage) */
    bool calls_tools;   /* the outputs are read for tool calls (a chat stream opens with no content) */
    bool base64;        /* embeddings as base64 (OpenAI's encoding_format) */
} cb_dialect_head;

/* The answer of one choice, as the server collected it, with the request's usage. */
typedef struct {
    int index;                    /* the choice's (prompt x n + sample) */
    const cb_openai_logprobs *lp; /* its tokens' log-probabilities (NULL: none asked) */
    const char *text;             /* the content, calls taken out ("" for none) */
    const char *reasoning;        /* the reasoning read apart ("" or NULL for none, or left out) */
    int n_reasoning;              /* the output's tokens of reasoning; < 0: the output was not read for it */
    const struct cobatch_tool_call *calls;
    size_t n_calls;
    const char *const *call_ids;         /* (n_calls) */
    const char *finish;                  /* "stop" or "length" */
    int stop;                            /* the request's stop string that ended it (its index), or -1 */
    const char *stop_sequence;           /* that string, or NULL */
    int n_prompt, n_cached, n_generated; /* the prompt's tokens (n_cached of them read from the prefix cache),
                                            the output's */
    int n_prediction, n_pred_accepted;   /* a prediction's tokens over the choices (-1: none given), and those that
                                            held as drafts */
    double prompt_ms, predicted_ms;      /* from its submit to its first token (its wait too); from there to its end */
} cb_dialect_answer;

/* A dialect. The server holds one per request and reaches its shapes through nothing else: the
 * request lifecycle, tool-call parsing, stops, cancellation, log-probabilities and the SSE transport
 * are the server's, written once. Only OpenAI's answer several choices (their index) and
 * log-probabilities; the others take choice 0 and ignore what they do not say. Every text returned
 * is malloc'd (the caller frees it), NULL when out of memory. */
typedef struct cb_dialect {
    const char *id_prefix; /* of its answers' ids: "chatcmpl-", "msg_", "resp_" */
    bool completion;       /* its body is (or becomes) a completions request (else a chat one) */
    /* An error the chat parser or the engine raises names chat fields: pairs (chat, the dialect's),
     * NULL-ended, that cb_dialect_error_json renames. params: the error's param and what follows it
     * ('.' or '['); message: exact texts in the message. */
    const char *const *params;
    const char *const *message;
    /* root as the chat request it asks for (*chat, the caller's), and (may stay NULL) what each answer
     * repeats (*echo); count_only: for a token count. 0, or -1 with e. NULL: the body is OpenAI's. */
    int (*to_chat)(const cJSON *root, bool count_only, cJSON **chat, cJSON **echo, cb_openai_error *e);
    /* What the OpenAI request cannot say, set on the parsed request from *echo (NULL: nothing). */
    void (*adjust)(const cJSON *echo, struct cobatch_request_params *p);
    char *(*count_json)(int n_tokens); /* a token count's answer (NULL: the dialect has no such endpoint) */
    char *(*error_json)(const cb_openai_error *e);
    char *(*answer_json)(const cb_dialect_head *h, const cb_dialect_answer *a, int n); /* n choices */
    /* An embeddings request's answer (n_inputs vectors of dim floats; the inputs' tokens); NULL: the
     * dialect takes no embeddings request. */
    char *(*embd_json)(const cb_dialect_head *h, const float *v, int n_inputs, int dim, int n_prompt);
    /* A stream: its state is stream_size zeroed bytes the caller owns (the head's texts outlive it);
     * stream_start first, then each choice's text and calls as they are read (reasoning first, as it
     * is read; a call k's id and name with its first part, NULL after; *late when a part arrived after
     * the call's event was closed: the stream must then end in an error; a choice's last text carries
     * its finish, its text's log-probabilities lp), then stream_end (the first choice's answer, with
     * the usage) or stream_error (type: the error's, as OpenAI's types go), then stream_free (after
     * any of them, or none). Each returns the events to send ("" for none). */
    size_t stream_size;
    const char *ping;        /* what a stream sends to show it is alive while no output comes (framed) */
    const char *stream_type; /* its streams' Content-Type */
    char *(*stream_start)(void *st, const cb_dialect_head *h, int n_prompt, int n_cached);
    char *(*stream_reasoning)(void *st, int choice, const char *text);
    char *(*stream_text)(void *st, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp);
    char *(*stream_call)(void *st, int choice, int k, const char *id, const char *name, const char *args, bool *late);
    char *(*stream_end)(void *st, const cb_dialect_answer *a);
    char *(*stream_error)(void *st, int choice, int status, const char *type, const char *message);
    void (*stream_free)(void *st);
} cb_dialect;

/* OpenAI's own: /v1/chat/completions (and its errors, embeddings, every other OpenAI endpoint's),
 * and /v1/completions (answer.c). */
extern const cb_dialect cb_openai_dialect, cb_openai_completion_dialect;

/* JSON the dialects read and write: o's member k (NULL: none); whether x is there and not null; o's
 * member k set to v (taken; freed when it cannot be added: o NULL, out of memory): false then. */
static inline cJSON *cb_json_get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static inline bool cb_json_given(const cJSON *x) { return x && !cJSON_IsNull(x); }
static inline bool cb_json_add(cJSON *o, const char *k, cJSON *v) {
    if (o && v && cJSON_AddItemToObject(o, k, v)) return true;
    cJSON_Delete(v);
    return false;
}

/* A new object in the array arr, or NULL (out of memory). */
static inline cJSON *cb_json_object_in(cJSON *arr) {
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddItemToArray(arr, o)) return o;
    cJSON_Delete(o);
    return NULL;
}

/* Hosted tools (web search, file search, ...; Anthropic's server tools) requests offered and this
 * server took as offers it never uses, since it started (any thread; /metrics). */
extern _Atomic unsigned long long cb_dialect_offers;

/* The error in d's shape, its chat field names renamed to d's (d->params, d->message); NULL when
 * out of memory. */
char *cb_dialect_error_json(const cb_dialect *d, const cb_openai_error *e);

/* e as a 503 (out of memory); returns -1. */
int cb_dialect_nomem(cb_openai_error *e);
/* Whether x is the string s. */
bool cb_dialect_is(const cJSON *x, const char *s);
/* Whether x is a whole number from lo to hi (checked before any conversion to an integer type). */
bool cb_dialect_whole(const cJSON *x, double lo, double hi);
/* Whether JSON text (tool-call arguments) nests within the --limit json-depth bound; else a 400 for
 * param naming `what` (e.g. "input[3].arguments") and the depth. */
int cb_dialect_args_depth(const char *args, const char *param, const char *what, cb_openai_error *e);
/* Every key of obj is one of keys (NULL-terminated): 0; or -1 with a 400 "<where>'<key>' is not
 * supported" naming param (NULL: the key itself). */
int cb_dialect_only(const cJSON *obj, const char *const *keys, const char *param, const char *where,
                    cb_openai_error *e);
/* A dialect's tool t (named w, "tools[3]", in errors) as the chat body's tools in arr (or none: an
 * offer it never uses). 0, or -1 with e set. */
typedef int (*cb_dialect_tool_fn)(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e);
/* The request's tools in (an array, else a 400 naming tools), each through one, into the chat body's
 * "tools" array added to out. 0, or -1 with e set. */
int cb_dialect_tools(const cJSON *in, cJSON *out, cb_dialect_tool_fn one, cb_openai_error *e);
/* a then b (both malloc'd, both taken) as one text; NULL when either is NULL (or out of memory). */
char *cb_dialect_join(char *a, char *b);
/* json (taken) as one unnamed server-sent event, "data: <json>\n\n"; NULL when json is NULL or out of
 * memory. */
char *cb_dialect_data(char *json);
/* Appends the event "event: <type>\ndata: <json>\n\n" to *out (malloc'd, NULL at first); false when
 * out of memory (*out is then unchanged). */
bool cb_dialect_sse(char **out, const char *type, const char *json);

#endif
