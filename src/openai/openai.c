#include "openai.h"
#include "bounds.h"
#include "../util/buf.h"
#include "../util/utf8.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- errors -------------------- */

static int oom(cb_openai_error *e) {
    cb_openai_bad(e, NULL, "out of memory; retry later");
    e->status = 503;
    e->type = "service_unavailable";
    return -1;
}

char *cb_openai_error_json(const cb_openai_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0])
        cJSON_AddStringToObject(err, "param", e->param);
    else
        cJSON_AddNullToObject(err, "param");
    cJSON_AddNullToObject(err, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---------------------------------------------------------------- parsing ------------------- */

static char *keep(cb_openai_request *r, const char *s) {
    /* doubling: a request of many messages stays linear */
    if (!cb_grow((void **)&r->strings, &r->strings_cap, r->n_strings + 1, sizeof(char *), 16)) return NULL;
    char *c = strdup(s);
    if (c) r->strings[r->n_strings++] = c;
    return c;
}

/* A number field in [lo, hi] (integer when want_int); absent or null leaves *out alone. */
static int num(cJSON *root, const char *key, double lo, double hi, bool want_int, double *out, cb_openai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return cb_openai_bad(e, key, "'%s' must be %s", key, want_int ? "an integer" : "a number");
    if (want_int && v->valuedouble != floor(v->valuedouble))
        return cb_openai_bad(e, key, "'%s' must be an integer", key);
    if (v->valuedouble < lo || v->valuedouble > hi) /* %.15g: whole bounds print whole */
        return cb_openai_bad(e, key, "'%s' must be between %.15g and %.15g", key, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int boolean(cJSON *root, const char *key, bool *out, cb_openai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return cb_openai_bad(e, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Token ids of one prompt: every element a non-negative integer. */
static int token_list(cJSON *a, cb_openai_prompt *out, cb_openai_error *e) {
    int n = cJSON_GetArraySize(a); /* one walk of the list: cJSON_GetArrayItem(p, i) is O(i) */
    if (n == 0) return cb_openai_bad(e, "prompt", "a prompt is empty");
    out->tokens = malloc(sizeof(int32_t) * (size_t)n);
    if (!out->tokens) return oom(e);
    int i = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, a) {
        if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble) || t->valuedouble != floor(t->valuedouble) ||
            t->valuedouble < 0 || t->valuedouble > INT32_MAX)
            return cb_openai_bad(e, "prompt", "a prompt given as token ids must hold non-negative integers only");
        out->tokens[i++] = (int32_t)t->valuedouble;
    }
    out->n_tokens = n;
    return 0;
}

/* "prompt": a string, a list of strings, a list of token ids, or a list of lists of token ids. */
static int parse_prompt(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return cb_openai_bad(e, "prompt", "'prompt' is required");
    static const char shape[] =
        "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids";
    bool one = cJSON_IsString(p) || (cJSON_IsArray(p) && cJSON_IsNumber(p->child));
    if (!one && !cJSON_IsArray(p)) return cb_openai_bad(e, "prompt", shape);
    int n = one ? 1 : cJSON_GetArraySize(p);
    if (n == 0) return cb_openai_bad(e, "prompt", "the prompt is empty");
    if (n > CB_OPENAI_MAX_CHOICES)
        return cb_openai_bad(e, "prompt", "at most %d prompts in one request", CB_OPENAI_MAX_CHOICES);
    r->prompts = calloc((size_t)n, sizeof(*r->prompts));
    if (!r->prompts) return oom(e);
    r->n_prompts = n;
    int i = 0;
    cJSON *x = one ? p : p->child;
    for (; i < n && x; i++, x = x->next) {
        cb_openai_prompt *q = &r->prompts[i];
        if (cJSON_IsString(x) && (one || cJSON_IsString(p->child))) {
            if (!x->valuestring[0]) return cb_openai_bad(e, "prompt", "the prompt is empty");
            q->text = strdup(x->valuestring);
            if (!q->text) return oom(e);
        } else if (cJSON_IsArray(x) && (one || cJSON_IsArray(p->child))) {
            if (token_list(x, q, e) != 0) return -1;
        } else {
            return cb_openai_bad(e, "prompt", shape);
        }
        if (one) break;
    }
    r->params.prompt = r->prompts[0].text;
    r->params.prompt_tokens = r->prompts[0].tokens;
    r->params.n_prompt_tokens = r->prompts[0].n_tokens;
    return 0;
}

int cb_openai_max_messages(void) { return cb_bounds.messages > 0 ? cb_bounds.messages : cb_bounds.ctx_tokens; }

static int too_many_messages(cb_openai_error *e, int n, int most) {
    return cb_openai_bad(e, "messages",
                         "the chat has %d messages and tool calls, above the limit of %d (each renders to a token at "
                         "least, and this server's prompts hold %d; --limit messages)",
                         n, most, cb_bounds.ctx_tokens > 0 ? cb_bounds.ctx_tokens : most);
}

/* content: a string, or an array of {"type": "text", "text": ...} parts (joined). */
static const char *message_content(cJSON *c, cb_openai_request *r) {
    if (cJSON_IsString(c)) return keep(r, c->valuestring);
    if (!cJSON_IsArray(c)) return NULL;
    size_t len = 0;
    cJSON *part;
    cJSON_ArrayForEach(part, c) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t)) return NULL;
        len += strlen(t->valuestring);
    }
    char *s = calloc(1, len + 1);
    if (!s) return NULL;
    size_t at = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t k = strlen(t);
        memcpy(s + at, t, k);
        at += k;
    }
    const char *k = keep(r, s);
    free(s);
    return k;
}

/* An assistant's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}], kept as
 * JSON text for the template. */
static int message_calls(cJSON *calls, int i, struct cobatch_chat_message *m, cb_openai_request *r,
                         cb_openai_error *e) {
    if (!cJSON_IsArray(calls)) return cb_openai_bad(e, "messages", "messages[%d].tool_calls must be an array", i);
    int k = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, calls) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
        cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
        cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(f, "arguments");
        cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
        if (!cJSON_IsObject(c) ||
            (type && !cJSON_IsNull(type) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))))
            return cb_openai_bad(e, "messages", "messages[%d].tool_calls[%d] must be a function call", i, k);
        if (!cJSON_IsObject(f) || !cJSON_IsString(name) || !cJSON_IsString(args))
            return cb_openai_bad(e, "messages",
                                 "messages[%d].tool_calls[%d].function needs a string 'name' and 'arguments'", i, k);
        if (id && !cJSON_IsNull(id) && !cJSON_IsString(id))
            return cb_openai_bad(e, "messages", "messages[%d].tool_calls[%d].id must be a string", i, k);
        int depth = cb_bounds_text_depth(args->valuestring);
        if (depth > cb_bounds.json_depth)
            return cb_openai_bad(
                e, "messages",
                "messages[%d].tool_calls[%d].function.arguments nests %d levels deep, above the limit of %d "
                "(--limit json-depth)",
                i, k, depth, cb_bounds.json_depth);
        k++;
    }
    if (k == 0) return 0;
    char *j = cJSON_PrintUnformatted(calls);
    m->tool_calls = j ? keep(r, j) : NULL;
    free(j);
    return m->tool_calls ? 0 : oom(e);
}

/* A message's optional string field (tool_call_id, name) into *out. */
static int message_string(cJSON *msg, const char *key, int i, const char **out, cb_openai_request *r,
                          cb_openai_error *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(msg, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x)) return cb_openai_bad(e, "messages", "messages[%d].%s must be a string", i, key);
    return (*out = keep(r, x->valuestring)) ? 0 : oom(e);
}

/* An assistant's reasoning, as llama-server (reasoning_content) or vLLM (reasoning) hands it back. */
static int message_reasoning(cJSON *msg, int i, struct cobatch_chat_message *m, cb_openai_request *r,
                             cb_openai_error *e) {
    const char *k = "reasoning_content";
    if (message_string(msg, k, i, &m->reasoning, r, e) != 0) return -1;
    const char *other = NULL;
    if (message_string(msg, "reasoning", i, &other, r, e) != 0) return -1;
    if (other && m->reasoning)
        return cb_openai_bad(e, "messages", "messages[%d]: give 'reasoning_content' or 'reasoning', not both", i);
    if (other) m->reasoning = other, k = "reasoning";
    if (m->reasoning && strcmp(m->role, "assistant") != 0)
        return cb_openai_bad(e, "messages", "messages[%d]: only an assistant's message has %s", i, k);
    return 0;
}

static int parse_messages(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!m) return cb_openai_bad(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return cb_openai_bad(e, "messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(m), most = cb_openai_max_messages();
    if (n == 0) return cb_openai_bad(e, "messages", "'messages' is empty");
    if (most > 0 && n > most) return too_many_messages(e, n, most);
    r->messages = calloc((size_t)n, sizeof(*r->messages));
    if (!r->messages) return oom(e);
    bool any = false;
    int i = 0, items = n;
    cJSON *msg;
    cJSON_ArrayForEach(msg, m) { /* one walk: cJSON_GetArrayItem(m, i) is O(i) */
        cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role))
            return cb_openai_bad(e, "messages", "messages[%d] needs a string 'role'", i);
        const char *text = content && !cJSON_IsNull(content) ? message_content(content, r) : keep(r, "");
        if (!text)
            return cb_openai_bad(e, "messages", "messages[%d].content must be a string or an array of text parts", i);
        struct cobatch_chat_message *mi = &r->messages[i];
        mi->role = keep(r, role->valuestring);
        mi->content = text;
        if (!mi->role) return oom(e);
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        if (calls && !cJSON_IsNull(calls)) {
            if (strcmp(mi->role, "assistant") != 0)
                return cb_openai_bad(e, "messages", "messages[%d]: only an assistant's message has tool_calls", i);
            if (message_calls(calls, i, mi, r, e)) return -1;
            items += cJSON_GetArraySize(calls);
            if (most > 0 && items > most) return too_many_messages(e, items, most);
        }
        if (message_string(msg, "tool_call_id", i, &mi->tool_call_id, r, e) ||
            message_string(msg, "name", i, &mi->name, r, e) || message_reasoning(msg, i, mi, r, e))
            return -1;
        any |= text[0] != '\0' || mi->tool_calls || (mi->reasoning && mi->reasoning[0]);
        i++;
    }
    if (!any) return cb_openai_bad(e, "messages", "the prompt is empty");
    r->params.messages = r->messages;
    r->params.n_messages = (size_t)n;
    return 0;
}

/* Whether s is a function name OpenAI accepts: 1 to 64 of a-z, A-Z, 0-9, _ and -. */
static bool function_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return false;
    return true;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}];
 * tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}};
 * parallel_tool_calls: a boolean (true: any number of calls). */
static int parse_tools(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    bool parallel = true;
    if (boolean(root, "parallel_tool_calls", &parallel, e)) return -1;
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return cb_openai_bad(e, "tools", "'tools' must be an array");
    int k = 0;
    cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
            !cJSON_IsObject(f))
            return cb_openai_bad(e, "tools", "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", k);
        cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name) || !function_name(name->valuestring))
            return cb_openai_bad(e, "tools", "tools[%d].function.name must be 1 to 64 letters, digits, '_' or '-'", k);
        for (cJSON *x = f->child; x; x = x->next) {
            if (!x->string || cJSON_IsNull(x) || !strcmp(x->string, "name")) continue;
            bool fine = !strcmp(x->string, "description")  ? cJSON_IsString(x)
                        : !strcmp(x->string, "parameters") ? cJSON_IsObject(x)
                        : !strcmp(x->string, "strict")     ? cJSON_IsBool(x)
                                                           : false;
            if (!fine)
                return cb_openai_bad(e, "tools", "tools[%d].function.%.40s: %s", k, x->string,
                                     !strcmp(x->string, "description") || !strcmp(x->string, "parameters") ||
                                             !strcmp(x->string, "strict")
                                         ? "wrong type"
                                         : "not supported by this server");
        }
        if (k >= cb_bounds.tools)
            return cb_openai_bad(e, "tools", "more than %d tools, the limit (--limit tools)", cb_bounds.tools);
        char why[160];
        if (cb_bounds_json_shape(cJSON_GetObjectItemCaseSensitive(f, "parameters"), cb_bounds.json_depth,
                                 cb_bounds.name_length, why, sizeof(why)))
            return cb_openai_bad(e, "tools", "tools[%d].function.parameters: %s", k, why);
        double v;
        const char *kw = cb_bounds_schema(cJSON_GetObjectItemCaseSensitive(f, "parameters"),
                                          cb_bounds_reach(r->params.max_tokens), &v);
        if (kw)
            return cb_openai_bad(e, "tools", "tools[%d].function.parameters: %s %.0f is above %d, the most %s", k, kw,
                                 v, CB_GRAMMAR_MAX_REPEAT, CB_BOUNDS_DROPPED);
        for (cJSON *o = tools->child; o != t; o = o->next) {
            cJSON *on = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "function"), "name");
            if (!strcmp(on->valuestring, name->valuestring))
                return cb_openai_bad(e, "tools", "tools[%d]: a second function named '%.64s'", k, name->valuestring);
        }
        k++;
    }
    enum cobatch_tool_choice c = COBATCH_TOOL_CHOICE_AUTO;
    const char *function = NULL;
    if (choice && !cJSON_IsNull(choice)) {
        if (cJSON_IsString(choice)) {
            const char *v = choice->valuestring;
            if (!strcmp(v, "none"))
                c = COBATCH_TOOL_CHOICE_NONE;
            else if (!strcmp(v, "required"))
                c = COBATCH_TOOL_CHOICE_REQUIRED;
            else if (strcmp(v, "auto") != 0)
                return cb_openai_bad(e, "tool_choice",
                                     "'tool_choice' is none, auto, required or a function (got '%.40s')", v);
        } else {
            cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
            cJSON *name =
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "function"), "name");
            if (!cJSON_IsObject(choice) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
                !cJSON_IsString(name))
                return cb_openai_bad(e, "tool_choice",
                                     "'tool_choice' is none, auto, required or {\"type\": \"function\", \"function\": "
                                     "{\"name\": ...}}");
            c = COBATCH_TOOL_CHOICE_REQUIRED;
            function = name->valuestring;
            bool found = false;
            cJSON_ArrayForEach(t, tools) {
                cJSON *tn = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
                found |= !strcmp(tn->valuestring, function);
            }
            if (!found)
                return cb_openai_bad(e, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'",
                                     function);
        }
    }
    if (k == 0) { /* no tools: nothing to call */
        if (c == COBATCH_TOOL_CHOICE_REQUIRED && !function)
            return cb_openai_bad(e, "tool_choice", "'tool_choice' required needs 'tools'");
        return 0;
    }
    char *j = cJSON_PrintUnformatted(tools);
    r->params.tools = j ? keep(r, j) : NULL;
    free(j);
    if (!r->params.tools || (function && !(r->params.tool_function = keep(r, function)))) return oom(e);
    r->params.tool_choice = c;
    r->params.single_tool_call = !parallel;
    r->calls_tools = c != COBATCH_TOOL_CHOICE_NONE;
    if (r->calls_tools && (r->params.grammar || r->json_schema))
        return cb_openai_bad(
            e, r->params.grammar ? "grammar" : "response_format",
            "a request that may call tools is held to the tools' call format: give no '%s' with it (or "
            "'tool_choice': \"none\")",
            r->params.grammar ? "grammar" : "response_format");
    return 0;
}

static int parse_stop(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!s || cJSON_IsNull(s)) return 0;
    if (cJSON_IsString(s)) {
        if (!(r->stops[r->params.n_stop++] = keep(r, s->valuestring))) return oom(e);
    } else if (cJSON_IsArray(s)) {
        if (cJSON_GetArraySize(s) > CB_OPENAI_MAX_STOP)
            return cb_openai_bad(e, "stop", "at most %d stop strings", CB_OPENAI_MAX_STOP);
        cJSON *x;
        cJSON_ArrayForEach(x, s) {
            if (!cJSON_IsString(x)) return cb_openai_bad(e, "stop", "'stop' must be a string or an array of strings");
            if (!(r->stops[r->params.n_stop++] = keep(r, x->valuestring))) return oom(e);
        }
    } else {
        return cb_openai_bad(e, "stop", "'stop' must be a string or an array of strings");
    }
    r->params.stop = r->stops;
    return 0;
}

static int parse_sampling(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    struct cobatch_sampling *s = &r->params.sampling;
#define FIELD(key, lo, hi, isint, dst, type)                                                                           \
    do {                                                                                                               \
        double x_ = (double)(dst);                                                                                     \
        if (num(root, key, lo, hi, isint, &x_, e)) return -1;                                                          \
        dst = (type)x_;                                                                                                \
    } while (0)
    FIELD("temperature", 0, 2, false, s->temperature, float);
    FIELD("top_p", 0, 1, false, s->top_p, float);
    FIELD("top_k", -1, 1 << 20, true, s->top_k, int32_t);
    FIELD("min_p", 0, 1, false, s->min_p, float);
    FIELD("presence_penalty", -2, 2, false, s->presence_penalty, float);
    FIELD("frequency_penalty", -2, 2, false, s->frequency_penalty, float);
    FIELD("repetition_penalty", 0.01, 10, false, s->repetition_penalty, float);
    /* no seed: the defaults' (a fresh one unless an operator set one); -1: a fresh one per request
     * whatever the defaults (the engine draws it); OpenAI's seeds are 64-bit */
    double seed = NAN;
    if (num(root, "seed", -9.2e18, 9.2e18, true, &seed, e)) return -1;
    if (seed == -1) {
        s->seed = COBATCH_SEED_RANDOM;
    } else if (!isnan(seed)) {
        uint64_t x = (uint64_t)(int64_t)seed;
        uint32_t v = (uint32_t)(x ^ (x >> 32));
        s->seed = v == COBATCH_SEED_RANDOM ? v - 1 : v;
    }
    if (s->top_k < 0) s->top_k = 0; /* -1 means off, as in vLLM */
    if (s->top_p <= 0) return cb_openai_bad(e, "top_p", "'top_p' must be greater than 0");
    double mt = -1, mct = -1; /* 0: the prompt only (completions with echo; checked by the caller) */
    FIELD("max_tokens", 0, 1 << 24, true, mt, double);
    FIELD("max_completion_tokens", 0, 1 << 24, true, mct, double);
    if (mct >= 0)
        r->params.max_tokens = (int32_t)mct;
    else if (mt >= 0)
        r->params.max_tokens = (int32_t)mt;
    /* vLLM's meaning: a lower value is served first; the engine's is the opposite */
    double prio = 0;
    FIELD("priority", -1000000, 1000000, true, prio, double);
    r->params.priority = -(int32_t)prio;
    r->has_priority = prio != 0;
    double n = 1;
    FIELD("n", 1, CB_OPENAI_MAX_N, true, n, double);
    r->n = (int)n;
#undef FIELD
    return 0;
}

bool cb_openai_has_nul(const char *s, size_t len) {
    if (memchr(s, '\0', len)) return true;
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < len && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* the escaped character: "\\\\u0000" is a backslash, then text */
    }
    return false;
}

/* ---------------------------------------------------------------- well-formed JSON --------- */

/* A syntax check that allocates nothing (RFC 8259), so that a parse that failed for want of memory
 * is not answered as the client's mistake. Recursive descent, nesting bounded as cJSON's. */
typedef struct {
    const char *s, *end;
    int depth;
    bool control; /* the check stopped at a raw control character inside a string */
} jscan;

static void ws(jscan *j) {
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
        j->s++;
}

static bool lit(jscan *j, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(j->end - j->s) < n || memcmp(j->s, w, n) != 0) return false;
    j->s += n;
    return true;
}

/* Four hex digits after "\\u" at j->s (which is left after them); -1 when not there. */
static long hex4(jscan *j) {
    if (j->end - j->s < 4) return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        char c = *j->s++;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string, with cJSON's rule for UTF-16 escapes: a high surrogate needs its low one next, a low
 * one never stands alone. */
static bool str(jscan *j) {
    if (j->s >= j->end || *j->s != '"') return false;
    for (j->s++; j->s < j->end;) {
        unsigned char c = (unsigned char)*j->s++;
        if (c == '"') return true;
        if (c < 0x20) { /* RFC 8259: a control character inside a string is escaped */
            j->control = true;
            return false;
        }
        if (c != '\\') continue;
        if (j->s >= j->end) return false;
        char e = *j->s++;
        if (e == 'u') {
            long u = hex4(j);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (j->end - j->s < 2 || j->s[0] != '\\' || j->s[1] != 'u') return false;
                j->s += 2;
                long lo = hex4(j);
                if (lo < 0xDC00 || lo > 0xDFFF) return false;
            }
        } else if (!e || !strchr("\"\\/bfnrt", e)) {
            return false;
        }
    }
    return false;
}

static bool digits(jscan *j) {
    const char *a = j->s;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9')
        j->s++;
    return j->s > a;
}

static bool number(jscan *j) {
    if (j->s < j->end && *j->s == '-') j->s++;
    if (j->s < j->end && *j->s == '0')
        j->s++;
    else if (!digits(j))
        return false;
    if (j->s < j->end && *j->s == '.' && (j->s++, !digits(j))) return false;
    if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
        j->s++;
        if (j->s < j->end && (*j->s == '+' || *j->s == '-')) j->s++;
        if (!digits(j)) return false;
    }
    return true;
}

static bool value(jscan *j);

static bool members(jscan *j, char close, bool keyed) {
    if (++j->depth > 1000) return false;
    j->s++;
    ws(j);
    if (j->s < j->end && *j->s == close) {
        j->s++;
        j->depth--;
        return true;
    }
    for (;;) {
        ws(j);
        if (keyed) {
            if (!str(j)) return false;
            ws(j);
            if (j->s >= j->end || *j->s++ != ':') return false;
        }
        if (!value(j)) return false;
        ws(j);
        if (j->s >= j->end) return false;
        if (*j->s == close) {
            j->s++;
            j->depth--;
            return true;
        }
        if (*j->s++ != ',') return false;
    }
}

static bool value(jscan *j) {
    ws(j);
    if (j->s >= j->end) return false;
    switch (*j->s) {
    case '{': return members(j, '}', true);
    case '[': return members(j, ']', false);
    case '"': return str(j);
    case 't': return lit(j, "true");
    case 'f': return lit(j, "false");
    case 'n': return lit(j, "null");
    default: return number(j);
    }
}

/* The check, and whether it stopped at a raw control character in a string. */
static bool well_formed(const char *s, size_t len, bool *control) {
    jscan j = {s, s + len, 0, false};
    bool ok = value(&j);
    *control = j.control;
    if (!ok) return false;
    ws(&j);
    return j.s == j.end || (j.s < j.end && *j.s == '\0' && j.s + 1 == j.end);
}

bool cb_openai_json_well_formed(const char *s, size_t len) {
    bool control;
    return well_formed(s, len, &control);
}

cJSON *cb_openai_body_parse(const char *body, size_t len, cb_openai_error *e) {
    if (cb_openai_has_nul(body, len)) {
        cb_openai_bad(e, NULL, "a string contains a NUL character (\\u0000); it is not accepted");
        return NULL;
    }
    if (cb_utf8_valid_prefix(body, len, NULL) != len) {
        cb_openai_bad(e, NULL, "the body is not valid UTF-8");
        return NULL;
    }
    return cb_openai_json_parse(body, len, e);
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key given twice in object x (compared as parsed: escapes undone), or NULL; keys is
 * scratch space for sorting (*cap entries). A small object is compared pairwise, a larger one
 * sorted: O(k log k). *oom set when the scratch could not grow. */
static const cJSON *twice_in(const cJSON *x, const cJSON ***keys, size_t *cap, bool *oom_out) {
    size_t k = 0;
    for (const cJSON *c = x->child; c; c = c->next)
        k++;
    if (k <= 16) {
        for (const cJSON *a = x->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (!strcmp(a->string, b->string)) return a;
        return NULL;
    }
    if (!cb_grow((void **)keys, cap, k, sizeof(**keys), 64)) {
        *oom_out = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = x->child; c; c = c->next)
        (*keys)[i++] = c;
    qsort(*keys, k, sizeof(**keys), by_key);
    for (i = 1; i < k; i++)
        if (!strcmp((*keys)[i - 1]->string, (*keys)[i]->string)) return (*keys)[i];
    return NULL;
}

/* Every object under x (nesting bounded by the syntax check: 1000 levels). */
static const cJSON *twice_under(const cJSON *x, const cJSON ***keys, size_t *cap, bool *oom_out) {
    const cJSON *dup = cJSON_IsObject(x) ? twice_in(x, keys, cap, oom_out) : NULL;
    for (const cJSON *c = x->child; c && !dup && !*oom_out; c = c->next)
        if (cJSON_IsObject(c) || cJSON_IsArray(c)) dup = twice_under(c, keys, cap, oom_out);
    return dup;
}

/* An object's keys are unique: RFC 8259 leaves duplicates' meaning open, cJSON reads the first and
 * Python's and JavaScript's parsers the last, so a gateway that checks a body would see another
 * request than the one that runs. Returns -1 with e set (the key named), 0 when none is. */
static int duplicate_keys(const cJSON *root, cb_openai_error *e) {
    const cJSON **keys = NULL;
    size_t cap = 0;
    bool no_room = false;
    const cJSON *dup = twice_under(root, &keys, &cap, &no_room);
    free(keys);
    if (no_room) return oom(e);
    if (dup) return cb_openai_bad(e, dup->string, "the key '%.100s' is given twice in one object", dup->string);
    return 0;
}

cJSON *cb_openai_json_parse(const char *s, size_t len, cb_openai_error *e) {
    /* checked first: cJSON alone takes text after the value ("{...} garbage", "{...}{...}") and
     * numbers such as 01 or 1. */
    bool control = false;
    if (!well_formed(s, len, &control)) {
        cb_openai_bad(e, NULL,
                      control ? "the body is not valid JSON: a string holds a raw control character (below "
                                "U+0020); escape it (\\n, \\t, \\u0001, ...)"
                              : "the body is not valid JSON");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(s, len);
    if (!root) {
        oom(e); /* valid JSON that could not be held: the server's trouble, not the client's */
        return NULL;
    }
    if (duplicate_keys(root, e)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int cb_openai_parse(cb_openai_kind kind, const cb_openai_defaults *defaults, const char *body, size_t len,
                    cb_openai_request *r, cb_openai_error *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    cJSON *root = cb_openai_body_parse(body, len, e);
    if (!root) return -1;
    int rc = cb_openai_parse_json(kind, defaults, root, r, e);
    cJSON_Delete(root);
    return rc;
}

typedef struct {
    struct cobatch_logit_bias b;
    size_t pos; /* where it came in the object */
} bias_entry;

static int by_token_then_pos(const void *a, const void *b) {
    const bias_entry *x = a, *y = b;
    if (x->b.token != y->b.token) return (x->b.token > y->b.token) - (x->b.token < y->b.token);
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* {"token id": bias, ...}: OpenAI's keys are token ids written as strings; the engine checks them
 * against the vocabulary. At most one entry per token of a 256k vocabulary. */
static int parse_logit_bias(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb))
        return cb_openai_bad(e, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = 0;
    for (cJSON *x = lb->child; x; x = x->next)
        n++;
    if (n == 0) return 0;
    if (n > 300000)
        return cb_openai_bad(e, "logit_bias", "'logit_bias' has more entries than any vocabulary has tokens");
    r->logit_bias = malloc(sizeof(*r->logit_bias) * n);
    if (!r->logit_bias) return oom(e);
    size_t k = 0;
    for (cJSON *x = lb->child; x; x = x->next, k++) {
        char *end = NULL;
        long id = x->string && x->string[0] >= '0' && x->string[0] <= '9' ? strtol(x->string, &end, 10) : -1;
        if (id < 0 || !end || *end || id > INT32_MAX)
            return cb_openai_bad(e, "logit_bias", "'logit_bias' keys are token ids (got \"%.40s\")",
                                 x->string ? x->string : "");
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < -100 || x->valuedouble > 100)
            return cb_openai_bad(e, "logit_bias", "'logit_bias' values are numbers from -100 to 100");
        r->logit_bias[k] = (struct cobatch_logit_bias){.token = (int32_t)id, .bias = (float)x->valuedouble};
    }
    /* a token named twice: the last value wins (JSON's rule), not the sum of both */
    bias_entry *t = malloc(sizeof(*t) * n);
    if (!t) return oom(e);
    for (size_t i = 0; i < n; i++)
        t[i] = (bias_entry){.b = r->logit_bias[i], .pos = i};
    qsort(t, n, sizeof(*t), by_token_then_pos);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && r->logit_bias[m - 1].token == t[i].b.token) m--;
        r->logit_bias[m++] = t[i].b;
    }
    free(t);
    r->params.logit_bias = r->logit_bias;
    r->params.n_logit_bias = m;
    return 0;
}

/* Every field a request may carry; any other is refused by name, so that nothing a client asks for
 * is silently ignored (a field sent as null asks for nothing and is accepted). */
static const char *const COMMON_KEYS[] = {"model",
                                          "stream",
                                          "stream_options",
                                          "max_tokens",
                                          "max_completion_tokens",
                                          "temperature",
                                          "top_p",
                                          "top_k",
                                          "min_p",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "repetition_penalty",
                                          "seed",
                                          "stop",
                                          "n",
                                          "priority",
                                          "ignore_eos",
                                          "logprobs",
                                          "logit_bias",
                                          "return_tokens_as_token_ids",
                                          "response_format",
                                          "grammar",
                                          "speculative",
                                          "user",
                                          NULL};
static const char *const COMPLETION_KEYS[] = {"prompt", "echo", "suffix", NULL};
static const char *const CHAT_KEYS[] = {"messages",
                                        "prediction",
                                        "top_logprobs",
                                        "tools",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "reasoning_effort",
                                        "chat_template_kwargs",
                                        "reasoning_format",
                                        "thinking_budget_tokens",
                                        "reasoning_budget_tokens",
                                        "include_reasoning",
                                        "separate_reasoning",
                                        "stream_reasoning",
                                        NULL};

static bool listed(const char *const *keys, const char *k) {
    for (; *keys; keys++)
        if (!strcmp(*keys, k)) return true;
    return false;
}

/* Fields this server does not implement, sent with the value that asks for nothing (some clients
 * send them always): best_of 1, suffix "", store false, top_logprobs 0 (completions, which have no
 * such field), modalities ["text"], service_tier "auto" or "default"; hints that ask for nothing of
 * the output: prompt_cache_key (the prefix cache needs none), safety_identifier (as user); on
 * completions, which have no tools: tools [], tool_choice "none", parallel_tool_calls. The fields
 * LLM routers (sglang-router, vllm-router) add to every request they forward, at the values that
 * ask for what this server does: no_stop_trim false (a stop string is cut), continue_final_message
 * false, skip_special_tokens true, return_hidden_states false (separate_reasoning, stream_reasoning
 * and include_reasoning are a chat's reasoning fields: completions have no reasoning to separate, and
 * take them either way). */
static bool asks_nothing(const cJSON *x) {
    const char *k = x->string;
    if (!strcmp(k, "best_of") || !strcmp(k, "top_logprobs"))
        return cJSON_IsNumber(x) && x->valuedouble == (!strcmp(k, "best_of") ? 1 : 0);
    if (!strcmp(k, "suffix")) return cJSON_IsString(x) && !x->valuestring[0];
    if (!strcmp(k, "tools")) return cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0;
    if (!strcmp(k, "tool_choice")) return cJSON_IsString(x) && !strcmp(x->valuestring, "none");
    if (!strcmp(k, "store")) return cJSON_IsFalse(x);
    if (!strcmp(k, "parallel_tool_calls")) return cJSON_IsBool(x);
    if (!strcmp(k, "modalities"))
        return cJSON_IsArray(x) && cJSON_GetArraySize(x) == 1 && cJSON_IsString(x->child) &&
               !strcmp(x->child->valuestring, "text");
    if (!strcmp(k, "service_tier"))
        return cJSON_IsString(x) && (!strcmp(x->valuestring, "auto") || !strcmp(x->valuestring, "default"));
    if (!strcmp(k, "prompt_cache_key") || !strcmp(k, "safety_identifier")) return cJSON_IsString(x);
    if (!strcmp(k, "no_stop_trim") || !strcmp(k, "continue_final_message") || !strcmp(k, "return_hidden_states"))
        return cJSON_IsFalse(x);
    if (!strcmp(k, "skip_special_tokens")) return cJSON_IsTrue(x);
    if (!strcmp(k, "separate_reasoning") || !strcmp(k, "stream_reasoning") || !strcmp(k, "include_reasoning"))
        return cJSON_IsBool(x);
    return false;
}

static int check_keys(cb_openai_kind kind, cJSON *root, cb_openai_error *e) {
    for (cJSON *x = root->child; x; x = x->next) {
        if (!x->string || cJSON_IsNull(x) || listed(COMMON_KEYS, x->string) || asks_nothing(x)) continue;
        if (listed(kind == CB_OPENAI_COMPLETION ? COMPLETION_KEYS : CHAT_KEYS, x->string)) continue;
        return cb_openai_bad(e, x->string, "'%.40s' is not supported by this server", x->string);
    }
    return 0;
}

struct cobatch_sampling cb_openai_default_sampling(void) {
    struct cobatch_sampling s = cobatch_request_default_params().sampling;
    s.temperature = 1.0f;
    return s;
}

cb_openai_defaults cb_openai_default_defaults(void) {
    return (cb_openai_defaults){.sampling = cb_openai_default_sampling(), .max_tokens = 0};
}

/* Predicted Outputs: {"type": "content", "content": text or [{"type": "text", "text": ...}, ...]},
 * the text the output is expected to repeat; its tokens become draft tokens (the output is the same
 * with or without it). */
static int parse_prediction(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prediction");
    if (!p || cJSON_IsNull(p)) return 0;
    cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (!cJSON_IsObject(p) || !cJSON_IsString(type) || strcmp(type->valuestring, "content") != 0)
        return cb_openai_bad(e, "prediction", "'prediction' must be {\"type\": \"content\", \"content\": ...}");
    for (cJSON *x = p->child; x; x = x->next)
        if (strcmp(x->string, "type") != 0 && strcmp(x->string, "content") != 0)
            return cb_openai_bad(e, "prediction", "'prediction.%s' is not supported", x->string);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(p, "content");
    if (cJSON_IsString(c)) return (r->prediction = strdup(c->valuestring)) ? 0 : oom(e);
    if (!cJSON_IsArray(c)) return cb_openai_bad(e, "prediction", "'prediction.content' must be a string or text parts");
    size_t len = 0;
    for (cJSON *x = c->child; x; x = x->next) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text"), *k = cJSON_GetObjectItemCaseSensitive(x, "type");
        if (!cJSON_IsString(t) || !cJSON_IsString(k) || strcmp(k->valuestring, "text") != 0)
            return cb_openai_bad(e, "prediction",
                                 "'prediction.content' parts must be {\"type\": \"text\", \"text\": ...}");
        len += strlen(t->valuestring);
    }
    if (!(r->prediction = malloc(len + 1))) return oom(e);
    len = 0;
    for (cJSON *x = c->child; x; x = x->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(x, "text")->valuestring;
        memcpy(r->prediction + len, t, strlen(t));
        len += strlen(t);
    }
    r->prediction[len] = '\0';
    return 0;
}

/* response_format (OpenAI: text, json_object, json_schema) and llama-server's grammar (GBNF). */
static int parse_format(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "grammar");
    if (g && !cJSON_IsNull(g)) {
        if (!cJSON_IsString(g) || !g->valuestring[0])
            return cb_openai_bad(e, "grammar", "'grammar' must be a GBNF text");
        unsigned long long big = cb_bounds_gbnf(g->valuestring, cb_bounds_reach(r->params.max_tokens));
        if (big)
            return cb_openai_bad(e, "grammar", "'grammar': a repetition count of %llu is above %d, the most %s", big,
                                 CB_GRAMMAR_MAX_REPEAT, CB_BOUNDS_DROPPED);
        if (!(r->grammar = strdup(g->valuestring))) return oom(e);
        r->params.grammar = r->grammar;
    }
    cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (!f || cJSON_IsNull(f)) return 0;
    cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
    if (!t || !cJSON_IsString(t))
        return cb_openai_bad(e, "response_format", "'response_format' must be an object with a 'type'");
    for (cJSON *x = f->child; x; x = x->next)
        if (x->string && strcmp(x->string, "type") && strcmp(x->string, "json_schema") && !cJSON_IsNull(x))
            return cb_openai_bad(e, "response_format", "'response_format.%.40s' is not supported by this server",
                                 x->string);
    const char *type = t->valuestring;
    if (!strcmp(type, "text")) return 0;
    if (r->grammar) return cb_openai_bad(e, "grammar", "give 'grammar' or a JSON 'response_format', not both");
    if (!strcmp(type, "json_object")) {
        r->json_schema = strdup("{\"type\": \"object\"}");
        return r->json_schema ? 0 : oom(e);
    }
    if (strcmp(type, "json_schema") != 0)
        return cb_openai_bad(e, "response_format",
                             "'response_format.type' is text, json_object or json_schema (got '%.40s')", type);
    cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
    cJSON *schema = cJSON_IsObject(js) ? cJSON_GetObjectItemCaseSensitive(js, "schema") : NULL;
    if (!schema || !(cJSON_IsObject(schema) || cJSON_IsBool(schema)))
        return cb_openai_bad(e, "response_format", "'response_format.json_schema.schema' must be a JSON schema object");
    cJSON *strict = cJSON_GetObjectItemCaseSensitive(js, "strict");
    if (strict && !cJSON_IsNull(strict) && !cJSON_IsBool(strict))
        return cb_openai_bad(e, "response_format", "'response_format.json_schema.strict' must be a boolean");
    char why[160];
    if (cb_bounds_json_shape(schema, cb_bounds.json_depth, cb_bounds.name_length, why, sizeof(why)))
        return cb_openai_bad(e, "response_format", "'response_format.json_schema.schema' %s", why);
    double v;
    const char *kw = cb_bounds_schema(schema, cb_bounds_reach(r->params.max_tokens), &v);
    if (kw)
        return cb_openai_bad(e, "response_format",
                             "'response_format.json_schema.schema': %s %.0f is above %d, the most %s", kw, v,
                             CB_GRAMMAR_MAX_REPEAT, CB_BOUNDS_DROPPED);
    /* strict or not, the output is held to the schema: the grammar is the only way this server has */
    r->json_schema = cJSON_PrintUnformatted(schema);
    return r->json_schema ? 0 : oom(e);
}

const char *cb_openai_param(const cb_openai_request *r, const char *f) {
    const char *whole = r->kind == CB_OPENAI_CHAT ? "messages" : "prompt";
    if (!f || !strcmp(f, "prompt") || !strcmp(f, "prompt_tokens") || !strcmp(f, "chat")) return whole;
    if (!strcmp(f, "grammar")) return r->json_schema ? "response_format" : "grammar";
    if (!strcmp(f, "json_schema")) return "response_format";
    if (!strcmp(f, "reasoning")) return r->params.reasoning.effort ? "reasoning_effort" : "chat_template_kwargs";
    if (!strcmp(f, "reasoning_budget") && r->budget_key) return r->budget_key;
    return f;
}

int cb_openai_resolve_schema(cb_openai_request *r, cb_openai_schema_fn convert, cb_openai_error *e) {
    memset(e, 0, sizeof(*e));
    if (!r->json_schema) return 0;
    char err[200] = "";
    char *g = convert(r->json_schema, err, sizeof(err));
    if (!g) return cb_openai_bad(e, "response_format", "%s", err[0] ? err : "the schema cannot be used");
    /* a pattern's {n}, say: what the keywords above miss */
    unsigned long long big = cb_bounds_gbnf(g, cb_bounds_reach(r->params.max_tokens));
    if (big) {
        free(g);
        return cb_openai_bad(e, "response_format",
                             "the schema asks for a repetition count of %llu (a pattern's {n}?), above %d, the most %s",
                             big, CB_GRAMMAR_MAX_REPEAT, CB_BOUNDS_DROPPED);
    }
    free(r->grammar);
    r->grammar = g;
    r->params.grammar = g;
    return 0;
}

/* completions: "logprobs": k (0 to 20) alternatives per token, and "echo"; chat: "logprobs": true
 * and "top_logprobs": k. Echo with logprobs asks for the prompt's too. */
static int parse_logprobs(cb_openai_kind kind, cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    if (boolean(root, "echo", &r->echo, e)) return -1;
    cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    double k = -1;
    if (kind == CB_OPENAI_CHAT) {
        bool on = false;
        if (boolean(root, "logprobs", &on, e) || num(root, "top_logprobs", 0, COBATCH_MAX_LOGPROBS, true, &k, e))
            return -1;
        if (k > 0 && !on) return cb_openai_bad(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        k = on ? (k < 0 ? 0 : k) : -1;
    } else if (lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp)) {
        if (!cJSON_IsNumber(lp))
            return cb_openai_bad(e, "logprobs", "'logprobs' must be an integer from 0 to %d", COBATCH_MAX_LOGPROBS);
        if (num(root, "logprobs", 0, COBATCH_MAX_LOGPROBS, true, &k, e)) return -1;
    }
    r->params.logprobs = k >= 0;
    r->top = k >= 0 ? (int)k : 0;
    r->params.top_logprobs = r->top;
    r->params.prompt_logprobs = r->echo && r->params.logprobs;
    return boolean(root, "return_tokens_as_token_ids", &r->tokens_as_ids, e);
}

/* completions: "suffix", the text after the insertion; the prompt is the text before it, and the
 * output fills the middle (the server builds the model's fill-in-the-middle prompt, as /infill does).
 * Text prompts only, and not with echo (the echoed prompt would be the FIM prompt, not the client's). */
static int parse_suffix(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x)) return cb_openai_bad(e, "suffix", "'suffix' must be a string");
    if (!x->valuestring[0]) return 0;
    if (r->echo) return cb_openai_bad(e, "suffix", "'suffix' and 'echo' cannot be used together");
    for (int i = 0; i < r->n_prompts; i++)
        if (!r->prompts[i].text)
            return cb_openai_bad(e, "suffix",
                                 "'suffix' needs a text prompt (the text before the insertion), not token ids");
    return (r->suffix = keep(r, x->valuestring)) ? 0 : oom(e);
}

int cb_openai_parse_json(cb_openai_kind kind, const cb_openai_defaults *defaults, cJSON *root, cb_openai_request *r,
                         cb_openai_error *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    r->kind = kind;
    r->params = cobatch_request_default_params();
    r->params.sampling = defaults ? defaults->sampling : cb_openai_default_sampling();
    /* OpenAI's defaults: 16 tokens for legacy completions, the rest of the context for chat */
    r->params.max_tokens = defaults && defaults->max_tokens > 0 ? defaults->max_tokens
                           : kind == CB_OPENAI_COMPLETION       ? 16
                                                                : INT32_MAX / 2;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        cb_openai_bad(e, NULL, "the body must be a JSON object");
        goto out;
    }
    if (check_keys(kind, root, e) != 0) goto out;
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            cb_openai_bad(e, "model", "'model' must be a string");
            goto out;
        }
        r->model = strdup(model->valuestring);
    }
    cJSON *user = cJSON_GetObjectItemCaseSensitive(root, "user");
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user)) {
        cb_openai_bad(e, "user", "'user' must be a string");
        goto out;
    }
    if ((kind == CB_OPENAI_COMPLETION ? parse_prompt(root, r, e) : parse_messages(root, r, e)) != 0) goto out;
    if (parse_sampling(root, r, e) != 0 || parse_stop(root, r, e) != 0 || parse_logit_bias(root, r, e) != 0) goto out;
    if (boolean(root, "stream", &r->stream, e) || boolean(root, "ignore_eos", &r->params.ignore_eos, e)) goto out;
    bool spec = true; /* speculative: false checks no drafts for this request (the engine's --spec) */
    if (boolean(root, "speculative", &spec, e)) goto out;
    r->params.no_speculation = !spec;
    if (kind == CB_OPENAI_CHAT && parse_prediction(root, r, e) != 0) goto out;
    r->params.prediction = r->prediction;
    cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            cb_openai_bad(e, "stream_options", "'stream_options' must be an object");
            goto out;
        }
        for (cJSON *x = so->child; x; x = x->next)
            if (x->string && strcmp(x->string, "include_usage") != 0 && !cJSON_IsNull(x)) {
                cb_openai_bad(e, "stream_options", "'stream_options.%.40s' is not supported by this server", x->string);
                goto out;
            }
        if (boolean(so, "include_usage", &r->include_usage, e)) goto out;
    }
    if (parse_logprobs(kind, root, r, e) != 0 || parse_format(root, r, e) != 0) goto out;
    if (kind == CB_OPENAI_COMPLETION && parse_suffix(root, r, e) != 0) goto out;
    if (kind == CB_OPENAI_CHAT && (parse_tools(root, r, e) != 0 || cb_openai_parse_reasoning(root, r, e) != 0))
        goto out;
    if (r->params.max_tokens == 0 && !r->echo) {
        cb_openai_bad(
            e, cJSON_GetObjectItemCaseSensitive(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
            "0 tokens ask for no output: only a completions request with 'echo' may (its prompt comes back)");
        goto out;
    }
    if (r->n * (kind == CB_OPENAI_COMPLETION ? r->n_prompts : 1) > CB_OPENAI_MAX_CHOICES) {
        cb_openai_bad(e, "n", "%d prompts x n = %d choices: at most %d in one request", r->n_prompts,
                      r->n * r->n_prompts, CB_OPENAI_MAX_CHOICES);
        goto out;
    }
    rc = 0;
out:
    return rc;
}

void cb_openai_request_free(cb_openai_request *r) {
    for (size_t i = 0; i < r->n_strings; i++)
        free(r->strings[i]);
    free(r->strings);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    free(r->json_schema);
    free(r->grammar);
    free(r->prediction);
    free(r->template_kwargs);
    free(r->messages);
    free(r->logit_bias);
    free(r->model);
    memset(r, 0, sizeof(*r));
}

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
