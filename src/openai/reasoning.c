/* reasoning.c — a chat request's reasoning fields (see openai.h): OpenAI's reasoning_effort, the
 * chat template's variables (vLLM's and llama-server's chat_template_kwargs, enable_thinking among
 * them), llama-server's reasoning_format and thinking budget, vLLM's include_reasoning and SGLang's
 * separate_reasoning and stream_reasoning. The engine decides what the template can do with them. */
#include "openai.h"
#include "bounds.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static cJSON *given(const cJSON *root, const char *key) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    return x && !cJSON_IsNull(x) ? x : NULL;
}

static int flag(const cJSON *root, const char *key, bool *out, cb_openai_error *e) {
    cJSON *x = given(root, key);
    if (!x) return 0;
    if (!cJSON_IsBool(x)) return cb_openai_bad(e, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(x);
    return 0;
}

/* reasoning_effort: OpenAI's levels; "none" asks for no reasoning. */
static int effort(const cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    static const char *const LEVELS[] = {"none", "minimal", "low", "medium", "high", NULL};
    cJSON *x = given(root, "reasoning_effort");
    if (!x) return 0;
    for (int i = 0; cJSON_IsString(x) && LEVELS[i]; i++)
        if (!strcmp(x->valuestring, LEVELS[i])) {
            r->params.reasoning.effort = LEVELS[i];
            return 0;
        }
    return cb_openai_bad(e, "reasoning_effort", "'reasoning_effort' is none, minimal, low, medium or high");
}

/* Variables the renderer sets itself: one from a client would replace the messages the parser
 * checked, the tools, or the markers around them. */
static const char *const RESERVED[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", NULL};

/* chat_template_kwargs: variables the template sees (at most CB_KWARGS_MAX of them, in
 * CB_KWARGS_MAX_BYTES of JSON: each is a variable of the template's context, which the renderer
 * builds per request); a boolean enable_thinking is also the switch the engine checks the template
 * has. */
static int kwargs(const cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *x = given(root, "chat_template_kwargs");
    if (!x) return 0;
    if (!cJSON_IsObject(x)) return cb_openai_bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    int n = 0;
    for (const cJSON *c = x->child; c; c = c->next, n++)
        for (int k = 0; RESERVED[k]; k++)
            if (!strcmp(c->string, RESERVED[k]))
                return cb_openai_bad(
                    e, "chat_template_kwargs",
                    "'chat_template_kwargs.%s' is set by the server (the request's own fields give it)", RESERVED[k]);
    if (n > CB_KWARGS_MAX)
        return cb_openai_bad(e, "chat_template_kwargs", "'chat_template_kwargs' has %d variables; at most %d", n,
                             CB_KWARGS_MAX);
    char why[160];
    if (cb_bounds_json_shape(x, cb_bounds.json_depth, cb_bounds.name_length, why, sizeof(why)))
        return cb_openai_bad(e, "chat_template_kwargs", "'chat_template_kwargs' %s", why);
    cJSON *on = given(x, "enable_thinking");
    if (on && !cJSON_IsBool(on))
        return cb_openai_bad(e, "chat_template_kwargs", "'chat_template_kwargs.enable_thinking' must be a boolean");
    if (on) {
        enum cobatch_think t = cJSON_IsTrue(on) ? COBATCH_THINK_ON : COBATCH_THINK_OFF;
        if (r->params.reasoning.effort && !strcmp(r->params.reasoning.effort, "none") && t == COBATCH_THINK_ON)
            return cb_openai_bad(e, "reasoning_effort",
                                 "'reasoning_effort' none asks for no thinking, and enable_thinking for thinking");
        r->params.reasoning.think = t;
    }
    if (x->child) {
        char *j = cJSON_PrintUnformatted(x);
        if (!j) {
            cb_openai_bad(e, NULL, "out of memory; retry later");
            e->status = 503;
            e->type = "service_unavailable";
            return -1;
        }
        if (strlen(j) > CB_KWARGS_MAX_BYTES) {
            free(j);
            return cb_openai_bad(e, "chat_template_kwargs", "'chat_template_kwargs' is over %d bytes as JSON",
                                 CB_KWARGS_MAX_BYTES);
        }
        r->template_kwargs = j;
        r->params.template_kwargs = j;
    }
    return 0;
}

/* thinking_budget_tokens / reasoning_budget_tokens (llama-server's names): -1 no bound, else the
 * most reasoning tokens. */
static int budget(const cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    static const char *const KEYS[] = {"thinking_budget_tokens", "reasoning_budget_tokens"};
    for (int i = 0; i < 2; i++) {
        cJSON *x = given(root, KEYS[i]);
        if (!x) continue;
        if (r->budget_key)
            return cb_openai_bad(e, KEYS[i], "give 'thinking_budget_tokens' or 'reasoning_budget_tokens', not both");
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble != floor(x->valuedouble) ||
            x->valuedouble < -1 || x->valuedouble > INT32_MAX / 2)
            return cb_openai_bad(e, KEYS[i], "'%s' must be an integer: -1 (no bound) or at least 0", KEYS[i]);
        r->budget_key = KEYS[i];
        r->params.reasoning.has_budget = true;
        r->params.reasoning.budget = (int32_t)x->valuedouble;
    }
    return 0;
}

int cb_openai_parse_reasoning(const cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    if (effort(root, r, e) || kwargs(root, r, e) || budget(root, r, e)) return -1;
    cJSON *f = given(root, "reasoning_format");
    if (f) { /* llama-server's, for one request: none leaves the reasoning in the content */
        if (!cJSON_IsString(f) ||
            (strcmp(f->valuestring, "none") && strcmp(f->valuestring, "auto") && strcmp(f->valuestring, "deepseek")))
            return cb_openai_bad(e, "reasoning_format", "'reasoning_format' is none, auto or deepseek");
        r->params.reasoning.keep = !strcmp(f->valuestring, "none");
    }
    bool separate = true, include = true, stream = true;
    if (flag(root, "separate_reasoning", &separate, e) || flag(root, "include_reasoning", &include, e) ||
        flag(root, "stream_reasoning", &stream, e))
        return -1;
    if (!separate) {
        if (f && !r->params.reasoning.keep)
            return cb_openai_bad(e, "separate_reasoning",
                                 "'separate_reasoning' false keeps the reasoning in the "
                                 "content; 'reasoning_format' asks for it apart");
        r->params.reasoning.keep = true;
    }
    r->omit_reasoning = !include;
    r->hold_reasoning = !stream;
    cJSON *c = given(root, "reasoning_context");
    if (c) { /* the Responses API's reasoning.context, for chat too: which turns' reasoning handed back is shown */
        if (!cJSON_IsString(c) || (strcmp(c->valuestring, "auto") && strcmp(c->valuestring, "all_turns") &&
                                   strcmp(c->valuestring, "current_turn")))
            return cb_openai_bad(e, "reasoning_context", "'reasoning_context' is auto, all_turns or current_turn");
        r->params.reasoning.past = !strcmp(c->valuestring, "all_turns")      ? COBATCH_PAST_REASONING_ALL
                                   : !strcmp(c->valuestring, "current_turn") ? COBATCH_PAST_REASONING_CURRENT
                                                                             : COBATCH_PAST_REASONING_TEMPLATE;
    }
    return 0;
}
