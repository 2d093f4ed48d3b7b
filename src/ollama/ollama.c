/* ollama.c — Ollama's API (see ollama.h): its requests translated, every field honoured or refused
 * by name, its answers and NDJSON streams in its shapes. */
#include "ollama.h"
#include "../openai/bounds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool one_of(const char *k, const char *const *keys) {
    for (; *keys; keys++)
        if (!strcmp(k, *keys)) return true;
    return false;
}

/* ---------------------------------------------------------------- options ------------------- */

/* Options that load a model (threads, GPU layers, memory mapping, batch): this server loaded its
 * own at start, and they change no output: taken as hints. */
static const char *const LOAD[] = {"numa",         "num_batch",    "num_gpu",   "main_gpu",   "low_vram",
                                   "vocab_only",   "use_mmap",     "use_mlock", "num_thread", "num_keep",
                                   "mirostat_eta", "mirostat_tau", NULL};

/* options: the sampling ones mapped to the chat request's fields; load-time ones taken as hints;
 * the ones this server lacks refused unless at the value that asks for nothing. */
static int options(const cJSON *o, cJSON *out, cb_openai_error *e) {
    static const char *const SAME[] = {"temperature",       "top_k", "top_p", "min_p", "seed", "presence_penalty",
                                       "frequency_penalty", "stop",  NULL};
    if (!cJSON_IsObject(o)) return cb_openai_bad(e, "options", "'options' must be an object");
    for (const cJSON *x = o->child; x; x = x->next) {
        const char *k = x->string;
        char where[48];
        snprintf(where, sizeof(where), "options.%.30s", k);
        if (!cb_json_given(x) || one_of(k, LOAD)) continue;
        if (one_of(k, SAME)) {
            if (!cb_json_add(out, k, cJSON_Duplicate(x, true))) return cb_dialect_nomem(e);
        } else if (!strcmp(k, "repeat_penalty")) {
            if (!cb_json_add(out, "repetition_penalty", cJSON_Duplicate(x, true))) return cb_dialect_nomem(e);
        } else if (!strcmp(k, "num_predict")) {
            if (!cb_dialect_whole(x, -2, 1 << 24))
                return cb_openai_bad(e, where, "'%s' must be -1, -2 or a count of tokens", where);
            /* -1 and -2: until the end of generation or the context (the chat's default) */
            if (x->valuedouble >= 0 && !cJSON_AddNumberToObject(out, "max_tokens", x->valuedouble))
                return cb_dialect_nomem(e);
        } else if (!strcmp(k, "num_ctx")) { /* the context is the server's: a prompt past it is refused, never cut */
            if (!cb_dialect_whole(x, 1, 1 << 24))
                return cb_openai_bad(e, where, "'%s' must be a count of tokens", where);
        } else if (!strcmp(k, "repeat_last_n")) {
            if (!(cJSON_IsNumber(x) && x->valuedouble == 64))
                return cb_openai_bad(e, where, "'%s': penalties look back 64 tokens here (only 64)", where);
        } else if ((!strcmp(k, "typical_p") || !strcmp(k, "tfs_z")) && cJSON_IsNumber(x) && x->valuedouble == 1) {
            continue;
        } else if (!strcmp(k, "mirostat") && cJSON_IsNumber(x) && x->valuedouble == 0) {
            continue;
        } else if (!strcmp(k, "penalize_newline") && cJSON_IsFalse(x)) {
            continue;
        } else {
            return cb_openai_bad(e, where, "'%s' is not supported by this server", where);
        }
    }
    return 0;
}

/* format: "json" (any JSON object) or a JSON schema the answer is held to. */
static int format(const cJSON *x, cJSON *out, cb_openai_error *e) {
    if (cJSON_IsString(x) && !x->valuestring[0]) return 0;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    if (!rf) return cb_dialect_nomem(e);
    if (cJSON_IsString(x) && !strcmp(x->valuestring, "json"))
        return cJSON_AddStringToObject(rf, "type", "json_object") ? 0 : cb_dialect_nomem(e);
    if (!cJSON_IsObject(x)) return cb_openai_bad(e, "format", "'format' must be \"json\" or a JSON schema object");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    return js && cJSON_AddStringToObject(rf, "type", "json_schema") && cJSON_AddStringToObject(js, "name", "output") &&
                   cb_json_add(js, "schema", cJSON_Duplicate(x, true))
               ? 0
               : cb_dialect_nomem(e);
}

/* think: true or false (the template's switch), or high, medium, low (its effort). */
static int think(const cJSON *x, cJSON *out, cb_openai_error *e) {
    if (cJSON_IsBool(x)) {
        cJSON *kw = cJSON_AddObjectToObject(out, "chat_template_kwargs");
        return kw && cJSON_AddBoolToObject(kw, "enable_thinking", cJSON_IsTrue(x)) ? 0 : cb_dialect_nomem(e);
    }
    if (cJSON_IsString(x) &&
        (!strcmp(x->valuestring, "high") || !strcmp(x->valuestring, "medium") || !strcmp(x->valuestring, "low")))
        return cJSON_AddStringToObject(out, "reasoning_effort", x->valuestring) ? 0 : cb_dialect_nomem(e);
    return cb_openai_bad(e, "think", "'think' must be true, false, high, medium or low");
}

/* The fields /api/chat and /api/generate share: model, stream (true when left out), options,
 * format, think, keep_alive (taken: the model stays loaded), tools. */
static int common(const cJSON *in, cJSON *out, cb_openai_error *e) {
    const cJSON *x;
    if (cb_json_given(x = cb_json_get(in, "model")) && !cJSON_IsString(x))
        return cb_openai_bad(e, "model", "'model' must be a string");
    if (cb_json_given(x) && !cJSON_AddStringToObject(out, "model", x->valuestring)) return cb_dialect_nomem(e);
    x = cb_json_get(in, "stream");
    if (cb_json_given(x) && !cJSON_IsBool(x)) return cb_openai_bad(e, "stream", "'stream' must be a boolean");
    if (!cJSON_AddBoolToObject(out, "stream", !cJSON_IsFalse(x))) return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "options")) && options(x, out, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "format")) && format(x, out, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "think")) && think(x, out, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "tools")) && !cb_json_add(out, "tools", cJSON_Duplicate(x, true)))
        return cb_dialect_nomem(e);
    x = cb_json_get(in, "keep_alive");
    if (cb_json_given(x) && !cJSON_IsString(x) && !cJSON_IsNumber(x))
        return cb_openai_bad(e, "keep_alive", "'keep_alive' must be a duration or a number of seconds");
    return 0;
}

/* An assistant's tool_calls ([{"function": {"name", "arguments": {...}}}]) as OpenAI's. */
static int calls_of(const cJSON *calls, int i, cJSON *m, cb_openai_error *e) {
    if (!cJSON_IsArray(calls)) return cb_openai_bad(e, "messages", "messages[%d].tool_calls must be an array", i);
    cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, calls) {
        const cJSON *f = cb_json_get(c, "function"), *name = cb_json_get(f, "name"),
                    *args = cb_json_get(f, "arguments");
        if (!cJSON_IsString(name) || (cb_json_given(args) && !cJSON_IsObject(args)))
            return cb_openai_bad(e, "messages",
                                 "messages[%d].tool_calls[%d] needs a function's name and arguments object", i, k);
        char id[32], *a = cb_json_given(args) ? cJSON_PrintUnformatted(args) : strdup("{}");
        snprintf(id, sizeof(id), "call_%d_%d", i, k++);
        cJSON *o = cJSON_CreateObject(), *fo = o ? cJSON_AddObjectToObject(o, "function") : NULL;
        bool ok = arr && a && fo && cJSON_AddStringToObject(o, "id", id) &&
                  cJSON_AddStringToObject(o, "type", "function") &&
                  cJSON_AddStringToObject(fo, "name", name->valuestring) && cJSON_AddStringToObject(fo, "arguments", a);
        free(a);
        if (!ok || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return cb_dialect_nomem(e);
        }
    }
    return 0;
}

/* messages: role, content, thinking, tool_calls, tool_name; images refused. */
static int messages(const cJSON *in, cJSON *msgs, cb_openai_error *e) {
    static const char *const KEYS[] = {"role", "content", "thinking", "tool_calls", "tool_name", "images", NULL};
    if (!cJSON_IsArray(in)) return cb_openai_bad(e, "messages", "'messages' must be an array");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, in) {
        const cJSON *role = cb_json_get(m, "role"), *content = cb_json_get(m, "content"), *x;
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return cb_openai_bad(e, "messages", "messages[%d] needs a string 'role'", i);
        for (x = m->child; x; x = x->next)
            if (!one_of(x->string, KEYS))
                return cb_openai_bad(e, "messages", "messages[%d].%.40s is not supported by this server", i, x->string);
        if (cb_json_given(x = cb_json_get(m, "images")) && !(cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0))
            return cb_openai_bad(e, "messages", "messages[%d].images: this server's model reads no images", i);
        if (cb_json_given(content) && !cJSON_IsString(content))
            return cb_openai_bad(e, "messages", "messages[%d].content must be a string", i);
        cJSON *o = cJSON_CreateObject();
        bool ok = o && cJSON_AddItemToArray(msgs, o) && cJSON_AddStringToObject(o, "role", role->valuestring) &&
                  cJSON_AddStringToObject(o, "content", cb_json_given(content) ? content->valuestring : "");
        if (!ok) return cb_dialect_nomem(e);
        if (cb_json_given(x = cb_json_get(m, "thinking")) &&
            (!cJSON_IsString(x) || !cb_json_add(o, "reasoning_content", cJSON_Duplicate(x, true))))
            return cJSON_IsString(x) ? cb_dialect_nomem(e)
                                     : cb_openai_bad(e, "messages", "messages[%d].thinking: a string", i);
        if (cb_json_given(x = cb_json_get(m, "tool_name")) &&
            (!cJSON_IsString(x) || !cb_json_add(o, "name", cJSON_Duplicate(x, true))))
            return cJSON_IsString(x) ? cb_dialect_nomem(e)
                                     : cb_openai_bad(e, "messages", "messages[%d].tool_name: a string", i);
        if (cb_json_given(x = cb_json_get(m, "tool_calls")) && calls_of(x, i, o, e)) return -1;
        i++;
    }
    return 0;
}

static int chat_to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    static const char *const KEYS[] = {"model",  "messages",   "tools", "format", "options",
                                       "stream", "keep_alive", "think", NULL};
    (void)count_only;
    *echo = NULL;
    if (!cJSON_IsObject(root)) return cb_openai_bad(e, "", "the body must be a JSON object");
    for (const cJSON *x = root->child; x; x = x->next)
        if (!one_of(x->string, KEYS))
            return cb_openai_bad(e, x->string, "'%s' is not supported by this server", x->string);
    if (!(*out = cJSON_CreateObject())) return cb_dialect_nomem(e);
    cJSON *msgs = cJSON_AddArrayToObject(*out, "messages");
    if (!msgs) return cb_dialect_nomem(e);
    if (common(root, *out, e) || messages(cb_json_get(root, "messages"), msgs, e)) return -1;
    return 0;
}

/* /api/generate: a prompt (and a system message) through the model's template. raw (no template),
 * suffix (fill in the middle), a template of the request's own, a context of old tokens and images
 * are refused. */
static int generate_to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    static const char *const KEYS[] = {"model",  "prompt", "system",  "suffix", "template",   "raw",   "context",
                                       "images", "format", "options", "stream", "keep_alive", "think", NULL};
    (void)count_only;
    *echo = NULL;
    if (!cJSON_IsObject(root)) return cb_openai_bad(e, "", "the body must be a JSON object");
    for (const cJSON *x = root->child; x; x = x->next)
        if (!one_of(x->string, KEYS))
            return cb_openai_bad(e, x->string, "'%s' is not supported by this server", x->string);
    const cJSON *x;
    if (cJSON_IsTrue(cb_json_get(root, "raw")))
        return cb_openai_bad(e, "raw", "raw prompts go to /v1/completions or /completion here (raw: false only)");
    if (cb_json_given(x = cb_json_get(root, "suffix")) && !(cJSON_IsString(x) && !x->valuestring[0]))
        return cb_openai_bad(e, "suffix", "'suffix' (fill in the middle): use /infill with a code model");
    if (cb_json_given(x = cb_json_get(root, "template")) && !(cJSON_IsString(x) && !x->valuestring[0]))
        return cb_openai_bad(e, "template", "'template': the server's chat template renders every request");
    if (cb_json_given(x = cb_json_get(root, "context")) && !(cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0))
        return cb_openai_bad(e, "context",
                             "'context' (earlier tokens): send the conversation as text or use /api/chat");
    if (cb_json_given(x = cb_json_get(root, "images")) && !(cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0))
        return cb_openai_bad(e, "images", "'images': this server's model reads no images");
    if (!(*out = cJSON_CreateObject())) return cb_dialect_nomem(e);
    cJSON *msgs = cJSON_AddArrayToObject(*out, "messages");
    if (!msgs || common(root, *out, e)) return msgs ? -1 : cb_dialect_nomem(e);
    const cJSON *sys = cb_json_get(root, "system"), *prompt = cb_json_get(root, "prompt");
    if ((cb_json_given(sys) && !cJSON_IsString(sys)) || (cb_json_given(prompt) && !cJSON_IsString(prompt)))
        return cb_openai_bad(e, cb_json_given(sys) && !cJSON_IsString(sys) ? "system" : "prompt", "must be a string");
    if (!cb_json_given(prompt) || !prompt->valuestring[0])
        return cb_openai_bad(e, "prompt", "'prompt' is empty (Ollama loads the model for it; it is loaded here)");
    cJSON *s = cb_json_given(sys) ? cJSON_CreateObject() : NULL, *u = cJSON_CreateObject();
    bool ok =
        (!cb_json_given(sys) || (s && cJSON_AddItemToArray(msgs, s) && cJSON_AddStringToObject(s, "role", "system") &&
                                 cJSON_AddStringToObject(s, "content", sys->valuestring))) &&
        u && cJSON_AddItemToArray(msgs, u) && cJSON_AddStringToObject(u, "role", "user") &&
        cJSON_AddStringToObject(u, "content", prompt->valuestring);
    return ok ? 0 : cb_dialect_nomem(e);
}

/* /api/embed ({"input": text or texts, "truncate", "dimensions"}) and /api/embeddings ({"prompt"}). */
static int embed_to(const cJSON *root, bool old, cJSON **out, cJSON **echo, cb_openai_error *e) {
    static const char *const KEYS[] = {"model", "input", "truncate", "dimensions", "options", "keep_alive", NULL},
                             *const OLD[] = {"model", "prompt", "options", "keep_alive", NULL};
    *echo = NULL;
    if (!cJSON_IsObject(root)) return cb_openai_bad(e, "", "the body must be a JSON object");
    for (const cJSON *x = root->child; x; x = x->next)
        if (!one_of(x->string, old ? OLD : KEYS))
            return cb_openai_bad(e, x->string, "'%s' is not supported by this server", x->string);
    const cJSON *in = cb_json_get(root, old ? "prompt" : "input"), *x;
    if (cb_json_given(x = cb_json_get(root, "options")) && !cJSON_IsObject(x))
        return cb_openai_bad(e, "options", "must be an object");
    for (const cJSON *o = cb_json_given(x) ? x->child : NULL; o; o = o->next) /* nulls and load-time hints only */
        if (cb_json_given(o) && !one_of(o->string, LOAD) && strcmp(o->string, "num_ctx") != 0)
            return cb_openai_bad(e, "options", "'options.%.40s' of an embedding is not supported", o->string);
    if (cb_json_given(x = cb_json_get(root, "truncate")) && !cJSON_IsBool(x))
        return cb_openai_bad(e, "truncate", "'truncate' must be a boolean (an input past the context is refused here)");
    if (!(*out = cJSON_CreateObject())) return cb_dialect_nomem(e);
    bool ok =
        cb_json_given(in) && cb_json_add(*out, "input", cJSON_Duplicate(in, true)) &&
        (!cb_json_given(x = cb_json_get(root, "model")) || cb_json_add(*out, "model", cJSON_Duplicate(x, true))) &&
        (!cb_json_given(x = cb_json_get(root, "dimensions")) ||
         cb_json_add(*out, "dimensions", cJSON_Duplicate(x, true)));
    if (!cb_json_given(in))
        return cb_openai_bad(e, old ? "prompt" : "input", "'%s' is required", old ? "prompt" : "input");
    return ok ? 0 : cb_dialect_nomem(e);
}

static int embed_to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    (void)count_only;
    return embed_to(root, false, out, echo, e);
}

static int embeddings_to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    (void)count_only;
    return embed_to(root, true, out, echo, e);
}

/* ---------------------------------------------------------------- answers ------------------- */

/* RFC 3339 in UTC, as Ollama writes created_at. */
static void rfc3339(long long t, char out[32]) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static cJSON *head_object(const cb_dialect_head *h) {
    char at[32];
    rfc3339(h->created, at);
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddStringToObject(o, "model", h->model) && cJSON_AddStringToObject(o, "created_at", at)) return o;
    cJSON_Delete(o);
    return NULL;
}

/* The last object's counts and durations (nanoseconds). */
static bool stats(cJSON *o, const cb_dialect_answer *a) {
    double p = a->prompt_ms * 1e6, g = a->predicted_ms * 1e6;
    return cJSON_AddBoolToObject(o, "done", true) &&
           cJSON_AddStringToObject(o, "done_reason", a->finish && !strcmp(a->finish, "length") ? "length" : "stop") &&
           cJSON_AddNumberToObject(o, "total_duration", p + g) && cJSON_AddNumberToObject(o, "load_duration", 0) &&
           cJSON_AddNumberToObject(o, "prompt_eval_count", a->n_prompt - a->n_cached) &&
           cJSON_AddNumberToObject(o, "prompt_eval_duration", p) &&
           cJSON_AddNumberToObject(o, "eval_count", a->n_generated) && cJSON_AddNumberToObject(o, "eval_duration", g);
}

/* Tool calls as Ollama's ([{"function": {"name", "arguments": {...}}}]); arguments that do not
 * parse as an object come as {} (a call the grammar held is always one). */
static cJSON *ollama_calls(const struct cobatch_tool_call *calls, size_t n) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t k = 0; arr && k < n; k++) {
        cJSON *args = cJSON_Parse(calls[k].arguments ? calls[k].arguments : "{}");
        if (!cJSON_IsObject(args)) {
            cJSON_Delete(args);
            args = cJSON_CreateObject();
        }
        cJSON *c = cJSON_CreateObject(), *f = c ? cJSON_AddObjectToObject(c, "function") : NULL;
        bool ok = f && cJSON_AddNumberToObject(f, "index", (double)k) &&
                  cJSON_AddStringToObject(f, "name", calls[k].name) && cb_json_add(f, "arguments", args);
        if (!f) cJSON_Delete(args);
        if (!ok || !cJSON_AddItemToArray(arr, c)) {
            cJSON_Delete(c);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* A message (chat) or response (generate) object's part: text, thinking, calls. */
static bool body(cJSON *o, bool chat, const char *text, const char *thinking, const struct cobatch_tool_call *calls,
                 size_t n_calls) {
    cJSON *m = chat ? cJSON_AddObjectToObject(o, "message") : o;
    return m && (!chat || cJSON_AddStringToObject(m, "role", "assistant")) &&
           cJSON_AddStringToObject(m, chat ? "content" : "response", text ? text : "") &&
           (!thinking || !*thinking || cJSON_AddStringToObject(m, "thinking", thinking)) &&
           (n_calls == 0 || !chat || cb_json_add(m, "tool_calls", ollama_calls(calls, n_calls)));
}

static char *print_line(cJSON *o) { /* one NDJSON line, or one answer */
    char *j = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *out = realloc(j, n + 2);
    if (!out) {
        free(j);
        return NULL;
    }
    memcpy(out + n, "\n", 2);
    return out;
}

static char *answer(const cb_dialect_head *h, const cb_dialect_answer *a, bool chat) {
    cJSON *o = head_object(h);
    if (!o || !body(o, chat, a->text, a->reasoning, a->calls, a->n_calls) || !stats(o, a)) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_line(o);
}

/* One choice (n). */
static char *chat_answer(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    (void)n;
    return answer(h, a, true);
}
static char *generate_answer(const cb_dialect_head *h, const cb_dialect_answer *a, int n) {
    (void)n;
    return answer(h, a, false);
}

/* A stream: a line a piece; calls gathered whole (Ollama sends a call's arguments as an object), sent
 * before the last line. */
typedef struct {
    cb_dialect_head head;
    bool chat;
    struct cobatch_tool_call *calls; /* (n_calls) names and arguments as they grew */
    size_t n_calls;
} ollama_stream;

static char *piece(ollama_stream *s, const char *text, const char *thinking) {
    cJSON *o = head_object(&s->head);
    if (!o || !body(o, s->chat, text, thinking, NULL, 0) || !cJSON_AddBoolToObject(o, "done", false)) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_line(o);
}

static char *start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached, bool chat) {
    (void)n_prompt, (void)n_cached;
    ollama_stream *s = st;
    s->head = *h;
    s->chat = chat;
    return strdup("");
}

static char *chat_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    return start(st, h, n_prompt, n_cached, true);
}
static char *generate_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    return start(st, h, n_prompt, n_cached, false);
}

/* One choice; its end goes with the answer's. */
static char *stream_text(void *st, int choice, const char *text, const char *finish, const cb_openai_logprobs *lp) {
    (void)choice, (void)finish, (void)lp;
    return *text ? piece(st, text, NULL) : strdup("");
}
static char *stream_reasoning(void *st, int choice, const char *text) {
    (void)choice;
    return *text ? piece(st, "", text) : strdup("");
}

static char *stream_call(void *st, int choice, int k, const char *id, const char *name, const char *args, bool *late) {
    (void)choice, (void)id, (void)late;
    ollama_stream *s = st;
    if (name) { /* a new call */
        struct cobatch_tool_call *c = realloc(s->calls, sizeof(*c) * (s->n_calls + 1));
        if (!c) return NULL;
        s->calls = c;
        s->calls[s->n_calls] = (struct cobatch_tool_call){strdup(name), strdup("")};
        if (!s->calls[s->n_calls].name || !s->calls[s->n_calls].arguments) return NULL;
        s->n_calls++;
    }
    if (k < 0 || (size_t)k >= s->n_calls || !*args) return strdup("");
    struct cobatch_tool_call *c = &s->calls[k];
    size_t a = strlen(c->arguments), b = strlen(args);
    char *grown = realloc(c->arguments, a + b + 1);
    if (!grown) return NULL;
    memcpy(grown + a, args, b + 1);
    c->arguments = grown;
    return strdup("");
}

static char *stream_end(void *st, const cb_dialect_answer *a) {
    ollama_stream *s = st;
    char *calls = strdup("");
    if (s->n_calls) { /* the calls, whole, in a line of their own */
        cJSON *o = head_object(&s->head);
        if (!o || !body(o, true, "", NULL, s->calls, s->n_calls) || !cJSON_AddBoolToObject(o, "done", false)) {
            cJSON_Delete(o);
            free(calls);
            return NULL;
        }
        calls = cb_dialect_join(calls, print_line(o));
    }
    cJSON *o = head_object(&s->head);
    char *last = o && body(o, s->chat, "", NULL, NULL, 0) && stats(o, a) ? print_line(o) : (cJSON_Delete(o), NULL);
    return cb_dialect_join(calls, last);
}

static char *error_line(int status, const char *message) {
    (void)status;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "error", message)) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_line(o);
}

static char *error_json(const cb_openai_error *e) { return error_line(e->status, e->message); }
static char *stream_error(void *st, int choice, int status, const char *type, const char *message) {
    (void)st, (void)choice, (void)type;
    return error_line(status, message);
}

static void stream_free(void *st) {
    ollama_stream *s = st;
    for (size_t k = 0; k < s->n_calls; k++) {
        free(s->calls[k].name);
        free(s->calls[k].arguments);
    }
    free(s->calls);
}

static char *embed_json(const cb_dialect_head *h, const float *v, int n_inputs, int dim, int n_prompt) {
    cJSON *o = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(o, "embeddings");
    bool ok = all && cJSON_AddStringToObject(o, "model", h->model);
    for (int i = 0; ok && i < n_inputs; i++) {
        cJSON *row = cJSON_CreateFloatArray(v + (size_t)i * (size_t)dim, dim);
        ok = row && cJSON_AddItemToArray(all, row);
        if (!ok) cJSON_Delete(row);
    }
    ok = ok && cJSON_AddNumberToObject(o, "total_duration", 0) && cJSON_AddNumberToObject(o, "load_duration", 0) &&
         cJSON_AddNumberToObject(o, "prompt_eval_count", n_prompt);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_line(o);
}

static char *embeddings_json(const cb_dialect_head *h, const float *v, int n_inputs, int dim, int n_prompt) {
    (void)h, (void)n_prompt;
    cJSON *o = cJSON_CreateObject();
    if (!o || n_inputs < 1 || !cb_json_add(o, "embedding", cJSON_CreateFloatArray(v, dim))) {
        cJSON_Delete(o);
        return NULL;
    }
    return print_line(o);
}

#define OLLAMA_STREAM                                                                                                  \
    .stream_type = "application/x-ndjson", .error_json = error_json, .stream_size = sizeof(ollama_stream),             \
    .stream_text = stream_text, .stream_reasoning = stream_reasoning, .stream_call = stream_call,                      \
    .stream_end = stream_end, .stream_error = stream_error, .stream_free = stream_free

/* A line that says nothing (an NDJSON stream has no comments): what a quiet stream sends. */
const cb_dialect cb_ollama_chat_dialect = {
    .id_prefix = "chat-",
    .ping = "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":false}\n",
    .to_chat = chat_to_chat,
    .answer_json = chat_answer,
    .stream_start = chat_start,
    OLLAMA_STREAM};
const cb_dialect cb_ollama_generate_dialect = {.id_prefix = "gen-",
                                               .ping = "{\"response\":\"\",\"done\":false}\n",
                                               .to_chat = generate_to_chat,
                                               .answer_json = generate_answer,
                                               .stream_start = generate_start,
                                               OLLAMA_STREAM};
const cb_dialect cb_ollama_embed_dialect = {
    .id_prefix = "emb-", .to_chat = embed_to_chat, .error_json = error_json, .embd_json = embed_json};
const cb_dialect cb_ollama_embeddings_dialect = {
    .id_prefix = "emb-", .to_chat = embeddings_to_chat, .error_json = error_json, .embd_json = embeddings_json};

/* ---------------------------------------------------------------- the model endpoints ------- */

static cJSON *details(const cb_ollama_model *m) {
    cJSON *d = cJSON_CreateObject(), *fams = cJSON_CreateArray();
    bool ok = d && fams && cJSON_AddStringToObject(d, "parent_model", "") &&
              cJSON_AddStringToObject(d, "format", "gguf") && cJSON_AddStringToObject(d, "family", m->family) &&
              cJSON_AddItemToArray(fams, cJSON_CreateString(m->family)) && cJSON_AddItemToObject(d, "families", fams) &&
              cJSON_AddStringToObject(d, "parameter_size", m->params) &&
              cJSON_AddStringToObject(d, "quantization_level", m->quant);
    if (ok) return d;
    if (!cJSON_GetObjectItemCaseSensitive(d, "families")) cJSON_Delete(fams);
    cJSON_Delete(d);
    return NULL;
}

char *cb_ollama_tags_json(const cb_ollama_model *m, bool ps) {
    char name[160], at[32];
    snprintf(name, sizeof(name), "%s:latest", m->name);
    rfc3339(m->modified, at);
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "models"), *o = cJSON_CreateObject();
    bool ok = list && o && cJSON_AddItemToArray(list, o) && cJSON_AddStringToObject(o, "name", name) &&
              cJSON_AddStringToObject(o, "model", name) && cJSON_AddNumberToObject(o, "size", (double)m->size) &&
              cJSON_AddStringToObject(o, "digest", "") && cb_json_add(o, "details", details(m));
    if (ok && ps)
        ok = cJSON_AddStringToObject(o, "expires_at", "2318-01-01T00:00:00Z") && /* loaded for as long as it runs */
             cJSON_AddNumberToObject(o, "size_vram", 0) && cJSON_AddNumberToObject(o, "context_length", m->ctx);
    else if (ok)
        ok = cJSON_AddStringToObject(o, "modified_at", at);
    if (!o || !ok) {
        if (o && !cJSON_GetArrayItem(list, 0)) cJSON_Delete(o);
        cJSON_Delete(root);
        return NULL;
    }
    char *j = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return j;
}

char *cb_ollama_show_json(const cb_ollama_model *m) {
    char at[32], key[96];
    rfc3339(m->modified, at);
    cJSON *root = cJSON_CreateObject(), *info = cJSON_CreateObject(), *caps = cJSON_CreateArray();
    bool ok = root && info && caps && cJSON_AddStringToObject(root, "modelfile", "") &&
              cJSON_AddStringToObject(root, "parameters", "") &&
              cJSON_AddStringToObject(root, "template", m->chat_template ? m->chat_template : "") &&
              cb_json_add(root, "details", details(m)) &&
              cJSON_AddStringToObject(info, "general.architecture", m->family);
    snprintf(key, sizeof(key), "%s.context_length", m->family);
    ok = ok && cJSON_AddNumberToObject(info, key, m->ctx) && cJSON_AddItemToObject(root, "model_info", info);
    if (!ok) cJSON_Delete(info);
    ok = ok && cJSON_AddItemToArray(caps, cJSON_CreateString("completion")) &&
         (!m->tools || cJSON_AddItemToArray(caps, cJSON_CreateString("tools"))) &&
         (!m->thinking || cJSON_AddItemToArray(caps, cJSON_CreateString("thinking"))) &&
         (!m->embeddings || cJSON_AddItemToArray(caps, cJSON_CreateString("embedding"))) &&
         cJSON_AddItemToObject(root, "capabilities", caps) && cJSON_AddStringToObject(root, "modified_at", at);
    if (!ok) {
        if (!cJSON_GetObjectItemCaseSensitive(root, "capabilities")) cJSON_Delete(caps);
        cJSON_Delete(root);
        return NULL;
    }
    char *j = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return j;
}
