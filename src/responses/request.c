/* request.c — the Responses API request translated into the chat request (see responses.h). */
#include "responses.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- request ------------------- */

/* A value that must be one of a few strings (or absent / null). */
static bool one_of(const cJSON *x, const char *const *values) {
    if (!cb_json_given(x)) return true;
    for (; *values; values++)
        if (cb_dialect_is(x, *values)) return true;
    return false;
}

/* A new chat message in msgs, or NULL (out of memory). */
static cJSON *message(cJSON *msgs, const char *role) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    return cJSON_AddStringToObject(m, "role", role) ? m : NULL;
}

/* A message item's content (or a function call's output): a string, or parts input_text /
 * output_text, set on m as the chat message's content (text parts, which the chat parser joins as it
 * does a chat request's); files, images and audio are refused. */
static int content(const cJSON *c, cJSON *m, const char *where, cb_openai_error *e) {
    if (cJSON_IsString(c)) return cJSON_AddStringToObject(m, "content", c->valuestring) ? 0 : cb_dialect_nomem(e);
    if (!cJSON_IsArray(c)) return cb_openai_bad(e, "input", "%s.content must be a string or an array of parts", where);
    cJSON *parts = cJSON_AddArrayToObject(m, "content");
    if (!parts) return cb_dialect_nomem(e);
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        static const char *const KEYS[] = {"type", "text", "annotations", "logprobs", NULL};
        const cJSON *type = cb_json_get(p, "type"), *text = cb_json_get(p, "text"),
                    *ann = cb_json_get(p, "annotations");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type))
            return cb_openai_bad(e, "input", "%s.content: each part must be an object with a type", where);
        if (!cb_dialect_is(type, "input_text") && !cb_dialect_is(type, "output_text"))
            return cb_openai_bad(e, "input", "%s.content: %s parts are not supported (a text-only model)", where,
                                 type->valuestring);
        if (cb_dialect_only(p, KEYS, "input", "input[].content[]: ", e)) return -1;
        if (!cJSON_IsString(text))
            return cb_openai_bad(e, "input", "%s.content: a part's text must be a string", where);
        if (cb_json_given(ann) && !(cJSON_IsArray(ann) && cJSON_GetArraySize(ann) == 0))
            return cb_openai_bad(e, "input", "%s.content: annotations are not supported", where);
        cJSON *q = cb_json_object_in(parts);
        if (!q || !cJSON_AddStringToObject(q, "type", "text") || !cJSON_AddStringToObject(q, "text", text->valuestring))
            return cb_dialect_nomem(e);
    }
    return 0;
}

/* A reasoning item handed back belongs to the assistant's turn after it; one that no message or call
 * follows (the output ended inside its reasoning) was an assistant's turn of its own. */
static int lone_reasoning(cJSON *msgs, const cJSON **thought, cb_openai_error *e) {
    cJSON *m = message(msgs, "assistant");
    if (!m || !cJSON_AddStringToObject(m, "content", "") ||
        !cb_json_add(m, "reasoning_content", cJSON_Duplicate(*thought, true)))
        return cb_dialect_nomem(e);
    *thought = NULL;
    return 0;
}

/* A reasoning item: its content (reasoning_text parts) is the reasoning, *text (NULL when it has
 * none). Summaries and encrypted content are not read: this server makes neither. */
static int reasoning_item(const cJSON *it, const char *w, const cJSON **text, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "id", "summary", "content", "encrypted_content", "status", NULL},
                             *const PK[] = {"type", "text", NULL};
    if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
    const cJSON *sum = cb_json_get(it, "summary"), *c = cb_json_get(it, "content"),
                *enc = cb_json_get(it, "encrypted_content"), *p;
    if (cb_json_given(sum) && !(cJSON_IsArray(sum) && cJSON_GetArraySize(sum) == 0))
        return cb_openai_bad(e, "input",
                             "%s: reasoning summaries are not read (this server makes none: hand back the "
                             "reasoning's content)",
                             w);
    if (cb_json_given(enc) && !(cJSON_IsString(enc) && !enc->valuestring[0]))
        return cb_openai_bad(e, "input", "%s: encrypted reasoning is not read (this server encrypts none)", w);
    if (cb_json_given(c) && !cJSON_IsArray(c)) return cb_openai_bad(e, "input", "%s.content must be an array", w);
    int n = 0;
    const cJSON *parts = cb_json_given(c) ? c : NULL;
    cJSON_ArrayForEach(p, parts) {
        if (!cb_dialect_is(cb_json_get(p, "type"), "reasoning_text") || !cJSON_IsString(cb_json_get(p, "text")))
            return cb_openai_bad(e, "input", "%s.content: parts are reasoning_text with a text", w);
        if (cb_dialect_only(p, PK, "input", "input[].content[]: ", e)) return -1;
        n++;
    }
    if (n > 1) return cb_openai_bad(e, "input", "%s.content: one reasoning_text part (this server writes one)", w);
    *text = n ? cb_json_get(c->child, "text") : NULL;
    return 0;
}

/* input: a string (one user message) or items: messages, function calls and their outputs. The
 * function calls in a row (after the assistant's text, if any) become one assistant message's
 * tool_calls, as a chat history holds them. */
static int input(const cJSON *in, cJSON *msgs, cb_openai_error *e) {
    if (cJSON_IsString(in)) {
        cJSON *m = message(msgs, "user");
        return m && cJSON_AddStringToObject(m, "content", in->valuestring) ? 0 : cb_dialect_nomem(e);
    }
    if (!cJSON_IsArray(in) || cJSON_GetArraySize(in) == 0)
        return cb_openai_bad(e, "input", "'input' must be a string or a non-empty array of items");
    cJSON *last = NULL;          /* the assistant message calls join, while calls follow one another */
    const cJSON *thought = NULL; /* a reasoning item's text, for the assistant's message or calls after it */
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        char w[32];
        snprintf(w, sizeof(w), "input[%d]", i++);
        if (!cJSON_IsObject(it)) return cb_openai_bad(e, "input", "%s must be an object", w);
        const cJSON *type = cb_json_get(it, "type"), *role = cb_json_get(it, "role");
        if (!cb_json_given(type) && cJSON_IsString(role))
            type = NULL; /* a message without its type */
        else if (!cJSON_IsString(type))
            return cb_openai_bad(e, "input", "%s needs a type", w);
        if (!type || cb_dialect_is(type, "message")) {
            static const char *const KEYS[] = {"type", "role", "content", "id", "status", NULL};
            if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
            const char *r = cJSON_IsString(role) ? role->valuestring : "";
            if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system") && strcmp(r, "developer"))
                return cb_openai_bad(e, "input", "%s.role must be user, assistant, system or developer", w);
            if (thought && strcmp(r, "assistant") != 0 && lone_reasoning(msgs, &thought, e)) return -1;
            cJSON *m = message(msgs, !strcmp(r, "developer") ? "system" : r);
            if (!m) return cb_dialect_nomem(e);
            if (content(cb_json_get(it, "content"), m, w, e)) return -1;
            last = !strcmp(r, "assistant") ? m : NULL;
            if (thought && !cb_json_add(m, "reasoning_content", cJSON_Duplicate(thought, true)))
                return cb_dialect_nomem(e);
            thought = NULL;
        } else if (cb_dialect_is(type, "function_call")) {
            static const char *const KEYS[] = {"type",      "call_id", "name",   "arguments",
                                               "namespace", "id",      "status", NULL};
            if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
            const cJSON *id = cb_json_get(it, "call_id"), *name = cb_json_get(it, "name"),
                        *args = cb_json_get(it, "arguments");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
                return cb_openai_bad(e, "input", "%s: a function_call needs call_id, name and arguments (strings)", w);
            if (cb_json_given(cb_json_get(it, "namespace")) && !cJSON_IsString(cb_json_get(it, "namespace")))
                return cb_openai_bad(e, "input", "%s.namespace must be a string", w);
            char what[48];
            snprintf(what, sizeof(what), "%s.arguments", w);
            if (cb_dialect_args_depth(args->valuestring, "input", what, e)) return -1;
            if (!last) {
                if (!(last = message(msgs, "assistant")) || !cJSON_AddNullToObject(last, "content"))
                    return cb_dialect_nomem(e);
            }
            if (thought && cb_json_get(last, "reasoning_content")) { /* a second block: a turn of its own */
                if (lone_reasoning(msgs, &thought, e)) return -1;
                if (!(last = message(msgs, "assistant")) || !cJSON_AddNullToObject(last, "content"))
                    return cb_dialect_nomem(e);
            }
            if (thought && !cb_json_add(last, "reasoning_content", cJSON_Duplicate(thought, true)))
                return cb_dialect_nomem(e);
            thought = NULL;
            cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
            if (!calls && !(calls = cJSON_AddArrayToObject(last, "tool_calls"))) return cb_dialect_nomem(e);
            cJSON *c = cb_json_object_in(calls), *f = c ? cJSON_AddObjectToObject(c, "function") : NULL;
            if (!f || !cJSON_AddStringToObject(c, "id", id->valuestring) ||
                !cJSON_AddStringToObject(c, "type", "function") ||
                !cJSON_AddStringToObject(f, "name", name->valuestring) ||
                !cJSON_AddStringToObject(f, "arguments", args->valuestring))
                return cb_dialect_nomem(e);
        } else if (cb_dialect_is(type, "function_call_output")) {
            static const char *const KEYS[] = {"type", "call_id", "output", "id", "status", NULL};
            if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
            const cJSON *id = cb_json_get(it, "call_id");
            if (!cJSON_IsString(id)) return cb_openai_bad(e, "input", "%s.call_id must be a string", w);
            if (thought && lone_reasoning(msgs, &thought, e)) return -1;
            cJSON *m = message(msgs, "tool");
            if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring)) return cb_dialect_nomem(e);
            if (content(cb_json_get(it, "output"), m, w, e)) return -1;
            last = NULL;
        } else if (cb_dialect_is(type, "reasoning")) { /* one handed back: its text for the template */
            if (thought && lone_reasoning(msgs, &thought, e)) return -1;
            if (reasoning_item(it, w, &thought, e)) return -1;
            last = NULL; /* a new step of the model's: its calls open a turn of their own */
        } else {
            return cb_openai_bad(e, "input", "%s: %s items are not supported by this server", w, type->valuestring);
        }
    }
    return thought ? lone_reasoning(msgs, &thought, e) : 0;
}

/* Tools the Responses API runs on its own side (a hosted tool): offered to a model that may use
 * them. This server runs none: the offer is taken and never used (counted: cb_dialect_offers),
 * and a tool_choice that forces one is refused. */
static const char *const HOSTED[] = {"web_search",
                                     "web_search_preview",
                                     "web_search_preview_2025_03_11",
                                     "web_search_2025_08_26",
                                     "file_search",
                                     "code_interpreter",
                                     "image_generation",
                                     "mcp",
                                     "computer_use_preview",
                                     "computer_use",
                                     "tool_search",
                                     NULL};

static bool hosted(const cJSON *type) { return one_of(type, HOSTED) && cJSON_IsString(type); }

/* One function tool (t) into the chat's tools (arr); w names it in errors. */
static int function_tool(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "name", "description", "parameters", "strict", NULL};
    const cJSON *name = cb_json_get(t, "name"), *params = cb_json_get(t, "parameters");
    const cJSON *desc = cb_json_get(t, "description"), *strict = cb_json_get(t, "strict");
    if (cb_dialect_only(t, KEYS, "tools", "tools[]: ", e)) return -1;
    if (!cJSON_IsString(name)) return cb_openai_bad(e, "tools", "%s.name must be a string", w);
    if (cb_json_given(params) && !cJSON_IsObject(params))
        return cb_openai_bad(e, "tools", "%s.parameters must be a JSON schema object", w);
    if (cb_json_given(desc) && !cJSON_IsString(desc))
        return cb_openai_bad(e, "tools", "%s.description must be a string", w);
    if (cb_json_given(strict) && !cJSON_IsBool(strict))
        return cb_openai_bad(e, "tools", "%s.strict must be a boolean", w);
    cJSON *o = cb_json_object_in(arr), *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    bool ok = f && cJSON_AddStringToObject(o, "type", "function") &&
              cJSON_AddStringToObject(f, "name", name->valuestring) &&
              (!cb_json_given(desc) || cJSON_AddStringToObject(f, "description", desc->valuestring)) &&
              (!cb_json_given(params) || cb_json_add(f, "parameters", cJSON_Duplicate(params, true))) &&
              (!cb_json_given(strict) || cJSON_AddBoolToObject(f, "strict", cJSON_IsTrue(strict)));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* A namespace ({"type": "namespace", "name", "description"?, "tools": [functions]}): its functions
 * offered by their own names (a call answers with the name and the namespace, as OpenAI's does). */
static int namespace_tool(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "name", "description", "tools", NULL};
    const cJSON *inner = cb_json_get(t, "tools"), *f;
    if (cb_dialect_only(t, KEYS, "tools", "tools[] (namespace): ", e)) return -1;
    if (!cJSON_IsString(cb_json_get(t, "name")) || !cJSON_IsArray(inner))
        return cb_openai_bad(e, "tools", "%s: a namespace needs a name and its tools", w);
    int k = 0;
    cJSON_ArrayForEach(f, inner) {
        char wk[64];
        snprintf(wk, sizeof(wk), "%s.tools[%d]", w, k++);
        if (!cJSON_IsObject(f) || !cb_dialect_is(cb_json_get(f, "type"), "function"))
            return cb_openai_bad(e, "tools", "%s: a namespace's tools must be functions here", wk);
        if (function_tool(f, wk, arr, e)) return -1;
    }
    return 0;
}

/* tools: functions, namespaces of functions, and hosted tools (taken as offers, never used);
 * others (custom tools, local shell, ...) are refused by name. */
static int tool(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e) {
    const cJSON *type = cb_json_get(t, "type");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type)) return cb_openai_bad(e, "tools", "%s must have a type", w);
    if (cb_dialect_is(type, "function")) return function_tool(t, w, arr, e);
    if (cb_dialect_is(type, "namespace")) return namespace_tool(t, w, arr, e);
    if (!hosted(type))
        return cb_openai_bad(e, "tools",
                             "%s: %s tools are not supported (functions, namespaces of them and "
                             "hosted tools, which this server never calls, are)",
                             w, type->valuestring);
    cb_dialect_offers++;
    return 0;
}

const char *cb_responses_namespace_of(const cJSON *tools, const char *name) {
    const cJSON *t, *f;
    cJSON_ArrayForEach(t, tools) {
        if (!cb_dialect_is(cb_json_get(t, "type"), "namespace")) continue;
        cJSON_ArrayForEach(
            f, cb_json_get(t, "tools")) if (cb_dialect_is(cb_json_get(f, "name"), name)) return cb_json_get(t, "name")
            ->valuestring;
    }
    return NULL;
}

/* tool_choice: auto, none, required, or {"type": "function", "name"}. */
static int tool_choice(const cJSON *x, cJSON *out, cb_openai_error *e) {
    static const char *const MODES[] = {"auto", "none", "required", NULL}, *const KEYS[] = {"type", "name", "namespace",
                                                                                            NULL};
    if (cJSON_IsString(x)) {
        if (!one_of(x, MODES))
            return cb_openai_bad(e, "tool_choice", "'tool_choice' must be auto, none, required or a function");
        return cJSON_AddStringToObject(out, "tool_choice", x->valuestring) ? 0 : cb_dialect_nomem(e);
    }
    const cJSON *name = cb_json_get(x, "name");
    if (cJSON_IsObject(x) && hosted(cb_json_get(x, "type")))
        return cb_openai_bad(e, "tool_choice", "tool_choice: this server runs no %s tool (it is offered, never called)",
                             cb_json_get(x, "type")->valuestring);
    if (!cJSON_IsObject(x) || !cb_dialect_is(cb_json_get(x, "type"), "function") || !cJSON_IsString(name))
        return cb_openai_bad(e, "tool_choice",
                             "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}");
    if (cb_dialect_only(x, KEYS, "tool_choice", "tool_choice: ", e)) return -1;
    cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    return f && cJSON_AddStringToObject(o, "type", "function") && cJSON_AddStringToObject(f, "name", name->valuestring)
               ? 0
               : cb_dialect_nomem(e);
}

/* text: {"format": text | json_object | json_schema (name, schema, strict, description), "verbosity"}. */
static int text_format(const cJSON *x, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"format", "verbosity", NULL}, *const VERB[] = {"low", "medium", "high", NULL},
                             *const FK[] = {"type", "name", "schema", "strict", "description", NULL};
    if (!cJSON_IsObject(x)) return cb_openai_bad(e, "text", "'text' must be an object");
    if (cb_dialect_only(x, KEYS, "text", "text: ", e)) return -1;
    const cJSON *v = cb_json_get(x, "verbosity");
    if (!one_of(v, VERB)) return cb_openai_bad(e, "text", "text.verbosity is low, medium or high");
    if (cb_json_given(v) && !cJSON_AddStringToObject(out, "verbosity", v->valuestring)) return cb_dialect_nomem(e);
    const cJSON *f = cb_json_get(x, "format");
    if (!cb_json_given(f)) return 0;
    const cJSON *type = cb_json_get(f, "type");
    if (!cJSON_IsObject(f) || !cJSON_IsString(type))
        return cb_openai_bad(e, "text", "text.format must be an object with a type");
    if (cb_dialect_only(f, FK, "text", "text.format: ", e)) return -1;
    if (cb_dialect_is(type, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    if (!rf) return cb_dialect_nomem(e);
    if (cb_dialect_is(type, "json_object"))
        return cJSON_AddStringToObject(rf, "type", "json_object") ? 0 : cb_dialect_nomem(e);
    if (!cb_dialect_is(type, "json_schema"))
        return cb_openai_bad(e, "text", "text.format.type must be text, json_object or json_schema (got '%.40s')",
                             type->valuestring);
    const cJSON *schema = cb_json_get(f, "schema"), *strict = cb_json_get(f, "strict"), *name = cb_json_get(f, "name");
    if (!cJSON_IsObject(schema)) return cb_openai_bad(e, "text", "text.format.schema must be a JSON schema object");
    if (cb_json_given(strict) && !cJSON_IsBool(strict))
        return cb_openai_bad(e, "text", "text.format.strict must be a boolean");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    bool ok = js && cJSON_AddStringToObject(rf, "type", "json_schema") &&
              cJSON_AddStringToObject(js, "name", cJSON_IsString(name) ? name->valuestring : "output") &&
              cb_json_add(js, "schema", cJSON_Duplicate(schema, true));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* The knobs agent clients send at values that ask for what this server does, or refused. */
static int settings(const cJSON *in, cJSON *out, cb_openai_error *e) {
    static const char *const
        EFFORT[] = {"none", "minimal", "low", "medium", "high", NULL},
        *const SUMMARY[] = {"auto", "concise", "detailed", NULL}, *const TIER[] = {"auto", "default", NULL},
        *const TRUNC[] = {"disabled", NULL}, *const RK[] = {"effort", "summary", "generate_summary", "context", NULL},
        *const CONTEXT[] = {"auto", "all_turns", "current_turn", NULL}, *const SO[] = {"include_obfuscation", NULL};
    const cJSON *x;
    if (cb_json_given(x = cb_json_get(in, "store")) && !cJSON_IsFalse(x))
        return cb_openai_bad(e, "store",
                             "responses are not stored by this server: send store false (and the whole input)");
    if (cb_json_given(cb_json_get(in, "previous_response_id")))
        return cb_openai_bad(e, "previous_response_id",
                             "responses are not stored by this server: send the whole conversation as input");
    /* reasoning: its effort goes to a template that reads it (one that thinks and does not refuses it, one
       that does not think writes no reasoning at any effort); no summarizer runs, at any summary asked:
       the reasoning comes whole as the item's content */
    if (cb_json_given(x = cb_json_get(in, "reasoning"))) {
        if (!cJSON_IsObject(x) || cb_dialect_only(x, RK, "reasoning", "reasoning: ", e))
            return cJSON_IsObject(x) ? -1 : cb_openai_bad(e, "reasoning", "'reasoning' must be an object");
        if (!one_of(cb_json_get(x, "effort"), EFFORT) || !one_of(cb_json_get(x, "summary"), SUMMARY) ||
            !one_of(cb_json_get(x, "generate_summary"), SUMMARY) || !one_of(cb_json_get(x, "context"), CONTEXT))
            return cb_openai_bad(e, "reasoning",
                                 "reasoning.effort must be none to high, its summary auto, concise or detailed, and "
                                 "its context auto, all_turns or current_turn");
        const cJSON *ef = cb_json_get(x, "effort"), *ctx = cb_json_get(x, "context");
        if (cb_json_given(ef) && !cJSON_AddStringToObject(out, "reasoning_effort", ef->valuestring))
            return cb_dialect_nomem(e);
        /* which turns' reasoning handed back reaches the prompt: the engine keeps it (all_turns with a
           template that leaves earlier turns' out is refused) */
        if (cb_json_given(ctx) && !cJSON_AddStringToObject(out, "reasoning_context", ctx->valuestring))
            return cb_dialect_nomem(e);
    }
    if (cb_json_given(x = cb_json_get(in, "include"))) {
        const cJSON *v;
        if (!cJSON_IsArray(x)) return cb_openai_bad(e, "include", "'include' must be an array");
        cJSON_ArrayForEach(v, x) if (!cb_dialect_is(v, "reasoning.encrypted_content")) return cb_openai_bad(
            e, "include", "include: %.60s is not supported (reasoning.encrypted_content is: there is none)",
            cJSON_IsString(v) ? v->valuestring : "?");
    }
    if (!one_of(cb_json_get(in, "service_tier"), TIER))
        return cb_openai_bad(e, "service_tier", "service_tier must be auto or default");
    if (!one_of(cb_json_get(in, "truncation"), TRUNC))
        return cb_openai_bad(e, "truncation", "truncation must be disabled (an input too long is refused, never cut)");
    if (cb_json_given(x = cb_json_get(in, "background")) && !cJSON_IsFalse(x))
        return cb_openai_bad(e, "background", "background responses are not supported");
    if (cb_json_given(x = cb_json_get(in, "top_logprobs")) && !(cJSON_IsNumber(x) && x->valuedouble == 0))
        return cb_openai_bad(e, "top_logprobs",
                             "top_logprobs are not supported on /v1/responses (chat completions has them)");
    if (cb_json_given(x = cb_json_get(in, "max_tool_calls")))
        return cb_openai_bad(e, "max_tool_calls", "max_tool_calls is not supported");
    if (cb_json_given(x = cb_json_get(in, "prompt_cache_key")) &&
        !cJSON_IsString(x)) /* a hint: every prefix is cached anyway */
        return cb_openai_bad(e, "prompt_cache_key", "prompt_cache_key must be a string");
    if (cb_json_given(x = cb_json_get(in, "stream_options"))) {
        if (!cJSON_IsObject(x) || cb_dialect_only(x, SO, "stream_options", "stream_options: ", e))
            return cJSON_IsObject(x) ? -1 : cb_openai_bad(e, "stream_options", "'stream_options' must be an object");
        if (cb_json_given(cb_json_get(x, "include_obfuscation")) &&
            !cJSON_IsFalse(cb_json_get(x, "include_obfuscation")))
            return cb_openai_bad(e, "stream_options",
                                 "stream_options.include_obfuscation is not supported (send false)");
    }
    /* metadata is repeated in the response; client_metadata (Codex CLI: its session, turn and window
     * ids) is the client's own bookkeeping: both are labels, neither asks anything of the output */
    static const char *const LABELS[] = {"metadata", "client_metadata", NULL};
    for (const char *const *k = LABELS; *k; k++)
        if (cb_json_given(x = cb_json_get(in, *k))) {
            const cJSON *v;
            if (!cJSON_IsObject(x)) return cb_openai_bad(e, *k, "'%s' must be an object of strings", *k);
            cJSON_ArrayForEach(v, x) if (!cJSON_IsString(v)) return cb_openai_bad(e, *k, "'%s' values must be strings",
                                                                                  *k);
        }
    const cJSON *user = cb_json_get(in, "user"), *safety = cb_json_get(in, "safety_identifier");
    if (cb_json_given(user) && !cJSON_IsString(user)) return cb_openai_bad(e, "user", "'user' must be a string");
    if (cb_json_given(safety) && !cJSON_IsString(safety))
        return cb_openai_bad(e, "safety_identifier", "must be a string");
    const cJSON *who = cb_json_given(user) ? user : safety;
    if (cb_json_given(who) && !cJSON_AddStringToObject(out, "user", who->valuestring)) return cb_dialect_nomem(e);
    return 0;
}

/* The request's fields each response object repeats, normalised. */
static cJSON *echo_of(const cJSON *in) {
    static const char *const SAME[] = {"instructions", "max_output_tokens",
                                       "metadata",     "temperature",
                                       "text",         "tool_choice",
                                       "tools",        "top_p",
                                       "user",         NULL};
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    for (const char *const *k = SAME; ok && *k; k++) {
        const cJSON *x = cb_json_get(in, *k);
        ok = cb_json_given(x) ? cb_json_add(o, *k, cJSON_Duplicate(x, true)) : cJSON_AddNullToObject(o, *k) != NULL;
    }
    const cJSON *p = cb_json_get(in, "parallel_tool_calls");
    ok = ok && cJSON_AddBoolToObject(o, "parallel_tool_calls", !cJSON_IsFalse(p)) &&
         cJSON_AddBoolToObject(o, "store", false) && cJSON_AddNullToObject(o, "previous_response_id") &&
         cJSON_AddStringToObject(o, "truncation", "disabled");
    if (ok && !cb_json_given(cb_json_get(in, "tool_choice"))) {
        cJSON_DeleteItemFromObject(o, "tool_choice");
        ok = cJSON_AddStringToObject(o, "tool_choice", "auto") != NULL;
    }
    if (ok && !cb_json_given(cb_json_get(in, "tools"))) {
        cJSON_DeleteItemFromObject(o, "tools");
        ok = cJSON_AddArrayToObject(o, "tools") != NULL;
    }
    if (ok && !cb_json_given(cb_json_get(in, "metadata"))) {
        cJSON_DeleteItemFromObject(o, "metadata");
        ok = cJSON_AddObjectToObject(o, "metadata") != NULL;
    }
    if (ok && !cb_json_given(cb_json_get(in, "text"))) {
        cJSON_DeleteItemFromObject(o, "text");
        cJSON *t = cJSON_AddObjectToObject(o, "text"), *f = t ? cJSON_AddObjectToObject(t, "format") : NULL;
        ok = f && cJSON_AddStringToObject(f, "type", "text");
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int translate(const cJSON *in, bool count_only, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"model",
                                       "input",
                                       "instructions",
                                       "max_output_tokens",
                                       "temperature",
                                       "top_p",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "text",
                                       "stream",
                                       "store",
                                       "previous_response_id",
                                       "metadata",
                                       "user",
                                       "safety_identifier",
                                       "prompt_cache_key",
                                       "reasoning",
                                       "include",
                                       "truncation",
                                       "service_tier",
                                       "background",
                                       "top_logprobs",
                                       "max_tool_calls",
                                       "stream_options",
                                       "client_metadata",
                                       NULL};
    if (!cJSON_IsObject(in)) return cb_openai_bad(e, "", "the body must be a JSON object");
    if (cb_dialect_only(in, KEYS, NULL, "", e)) return -1;
    const cJSON *x;
    if (cb_json_given(x = cb_json_get(in, "model")) && !cJSON_IsString(x))
        return cb_openai_bad(e, "model", "'model' must be a string");
    if (cb_json_given(x) && !cJSON_AddStringToObject(out, "model", x->valuestring)) return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "max_output_tokens"))) {
        if (!cb_dialect_whole(x, 1, 1 << 24))
            return cb_openai_bad(e, "max_output_tokens", "'max_output_tokens' must be a whole number from 1 to %d",
                                 1 << 24);
        if (!count_only && !cJSON_AddNumberToObject(out, "max_tokens", x->valuedouble)) return cb_dialect_nomem(e);
    }
    static const char *const SAME[] = {"temperature", "top_p", "parallel_tool_calls", "stream", NULL};
    for (const char *const *k = SAME; !count_only && *k; k++)
        if (cb_json_given(x = cb_json_get(in, *k)) && !cb_json_add(out, *k, cJSON_Duplicate(x, true)))
            return cb_dialect_nomem(e);
    if (settings(in, out, e)) return -1;
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    if (!msgs) return cb_dialect_nomem(e);
    if (cb_json_given(x = cb_json_get(in, "instructions"))) {
        if (!cJSON_IsString(x)) return cb_openai_bad(e, "instructions", "'instructions' must be a string");
        cJSON *m = message(msgs, "system");
        if (!m || !cJSON_AddStringToObject(m, "content", x->valuestring)) return cb_dialect_nomem(e);
    }
    if (!cb_json_given(x = cb_json_get(in, "input"))) return cb_openai_bad(e, "input", "'input' is required");
    if (input(x, msgs, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "tools")) && cb_dialect_tools(x, out, tool, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "tool_choice")) && tool_choice(x, out, e)) return -1;
    if (cb_json_given(x = cb_json_get(in, "text")) && text_format(x, out, e)) return -1;
    /* a count generates nothing: no bound of an answer's grammar applies */
    if (count_only && !cJSON_AddNumberToObject(out, "max_tokens", 1)) return cb_dialect_nomem(e);
    return 0;
}

int cb_responses_to_chat(const cJSON *root, bool count_only, cJSON **out, cJSON **echo, cb_openai_error *e) {
    *out = cJSON_CreateObject();
    *echo = NULL;
    if (!*out) return cb_dialect_nomem(e);
    if (translate(root, count_only, *out, e) == 0) {
        if ((*echo = echo_of(root)) != NULL) return 0;
        cb_dialect_nomem(e);
    }
    cJSON_Delete(*out);
    *out = NULL;
    return -1;
}
