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

/* ---------------------------------------------------------------- parsing ------------------- */

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
    if (!out->tokens) return cb_openai_nomem(e);
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
    if (!r->prompts) return cb_openai_nomem(e);
    r->n_prompts = n;
    int i = 0;
    cJSON *x = one ? p : p->child;
    for (; i < n && x; i++, x = x->next) {
        cb_openai_prompt *q = &r->prompts[i];
        if (cJSON_IsString(x) && (one || cJSON_IsString(p->child))) {
            if (!x->valuestring[0]) return cb_openai_bad(e, "prompt", "the prompt is empty");
            q->text = strdup(x->valuestring);
            if (!q->text) return cb_openai_nomem(e);
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
        const char *kw = cb_bounds_schema(cJSON_GetObjectItemCaseSensitive(f, "parameters"), &v);
        if (kw)
            return cb_openai_bad(e, "tools", "tools[%d].function.parameters: %s %.0f is above %llu, the most %s", k, kw,
                                 v, CB_GRAMMAR_MAX_COUNT, CB_BOUNDS_HELD);
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
    r->params.tools = j ? cb_openai_keep(r, j) : NULL;
    free(j);
    if (!r->params.tools || (function && !(r->params.tool_function = cb_openai_keep(r, function))))
        return cb_openai_nomem(e);
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
        if (!(r->stops[r->params.n_stop++] = cb_openai_keep(r, s->valuestring))) return cb_openai_nomem(e);
    } else if (cJSON_IsArray(s)) {
        if (cJSON_GetArraySize(s) > CB_OPENAI_MAX_STOP)
            return cb_openai_bad(e, "stop", "at most %d stop strings", CB_OPENAI_MAX_STOP);
        cJSON *x;
        cJSON_ArrayForEach(x, s) {
            if (!cJSON_IsString(x)) return cb_openai_bad(e, "stop", "'stop' must be a string or an array of strings");
            if (!(r->stops[r->params.n_stop++] = cb_openai_keep(r, x->valuestring))) return cb_openai_nomem(e);
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
    if (!r->logit_bias) return cb_openai_nomem(e);
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
    if (!t) return cb_openai_nomem(e);
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
                                        "reasoning_context",
                                        "verbosity",
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
    if (cJSON_IsString(c)) return (r->prediction = strdup(c->valuestring)) ? 0 : cb_openai_nomem(e);
    if (!cJSON_IsArray(c)) return cb_openai_bad(e, "prediction", "'prediction.content' must be a string or text parts");
    size_t len = 0;
    for (cJSON *x = c->child; x; x = x->next) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text"), *k = cJSON_GetObjectItemCaseSensitive(x, "type");
        if (!cJSON_IsString(t) || !cJSON_IsString(k) || strcmp(k->valuestring, "text") != 0)
            return cb_openai_bad(e, "prediction",
                                 "'prediction.content' parts must be {\"type\": \"text\", \"text\": ...}");
        len += strlen(t->valuestring);
    }
    if (!(r->prediction = malloc(len + 1))) return cb_openai_nomem(e);
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
        unsigned long long big = cb_bounds_gbnf(g->valuestring);
        if (big)
            return cb_openai_bad(e, "grammar", "'grammar': a repetition count of %llu is above %llu, the most %s", big,
                                 CB_GRAMMAR_MAX_COUNT, CB_BOUNDS_HELD);
        if (!(r->grammar = strdup(g->valuestring))) return cb_openai_nomem(e);
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
        return r->json_schema ? 0 : cb_openai_nomem(e);
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
    const char *kw = cb_bounds_schema(schema, &v);
    if (kw)
        return cb_openai_bad(e, "response_format",
                             "'response_format.json_schema.schema': %s %.0f is above %llu, the most %s", kw, v,
                             CB_GRAMMAR_MAX_COUNT, CB_BOUNDS_HELD);
    /* strict or not, the output is held to the schema: the grammar is the only way this server has */
    r->json_schema = cJSON_PrintUnformatted(schema);
    return r->json_schema ? 0 : cb_openai_nomem(e);
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
    unsigned long long big = cb_bounds_gbnf(g);
    if (big) {
        free(g);
        return cb_openai_bad(
            e, "response_format",
            "the schema asks for a repetition count of %llu (a pattern's {n}?), above %llu, the most %s", big,
            CB_GRAMMAR_MAX_COUNT, CB_BOUNDS_HELD);
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
    return (r->suffix = cb_openai_keep(r, x->valuestring)) ? 0 : cb_openai_nomem(e);
}

/* verbosity (OpenAI's, which its models are trained to): low or high asks this model in its
 * instructions, one line at the end of the chat's first system (or developer) message, or a system
 * message of its own first when there is none (after the messages are read: their indices in errors
 * are the client's); medium, the model's own, asks nothing. */
static int apply_verbosity(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "verbosity");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v) ||
        (strcmp(v->valuestring, "low") && strcmp(v->valuestring, "medium") && strcmp(v->valuestring, "high")))
        return cb_openai_bad(e, "verbosity", "'verbosity' is low, medium or high");
    if (!strcmp(v->valuestring, "medium")) return 0;
    const char *line = !strcmp(v->valuestring, "low") ? CB_OPENAI_VERBOSITY_LOW : CB_OPENAI_VERBOSITY_HIGH;
    struct cobatch_chat_message *first = &r->messages[0];
    if (!strcmp(first->role, "system") || !strcmp(first->role, "developer")) {
        size_t n = strlen(first->content) + strlen(line) + 3;
        char *s = malloc(n);
        if (!s) return cb_openai_nomem(e);
        snprintf(s, n, "%s%s%s", first->content, first->content[0] ? "\n\n" : "", line);
        first->content = cb_openai_keep(r, s);
        free(s);
        return first->content ? 0 : cb_openai_nomem(e);
    }
    struct cobatch_chat_message *m = calloc(r->params.n_messages + 1, sizeof(*m));
    if (!m) return cb_openai_nomem(e);
    memcpy(m + 1, r->messages, r->params.n_messages * sizeof(*m));
    m[0].role = cb_openai_keep(r, "system");
    m[0].content = cb_openai_keep(r, line);
    free(r->messages);
    r->messages = m;
    r->params.messages = m;
    r->params.n_messages++;
    return m[0].role && m[0].content ? 0 : cb_openai_nomem(e);
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
    if ((kind == CB_OPENAI_COMPLETION ? parse_prompt(root, r, e) : cb_openai_parse_messages(root, r, e)) != 0) goto out;
    if (kind == CB_OPENAI_CHAT && apply_verbosity(root, r, e) != 0) goto out;
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
