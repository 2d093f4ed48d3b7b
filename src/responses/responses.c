/* responses.c — the Responses API translated to and from the chat request (see responses.h). */
#include "responses.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- request ------------------- */

static bool given(const cJSON *x) { return x && !cJSON_IsNull(x); }
static cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Adds v to o under k; v is deleted when it cannot be (out of memory). */
static bool add(cJSON *o, const char *k, cJSON *v) {
    if (o && v && cJSON_AddItemToObject(o, k, v)) return true;
    cJSON_Delete(v);
    return false;
}

/* A value that must be one of a few strings (or absent / null). */
static bool one_of(const cJSON *x, const char *const *values) {
    if (!given(x)) return true;
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

/* A new object in the array arr, or NULL (out of memory). */
static cJSON *object_in(cJSON *arr) {
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddItemToArray(arr, o)) return o;
    cJSON_Delete(o);
    return NULL;
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
        const cJSON *type = get(p, "type"), *text = get(p, "text"), *ann = get(p, "annotations");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type))
            return cb_openai_bad(e, "input", "%s.content: each part must be an object with a type", where);
        if (!cb_dialect_is(type, "input_text") && !cb_dialect_is(type, "output_text"))
            return cb_openai_bad(e, "input", "%s.content: %s parts are not supported (a text-only model)", where,
                                 type->valuestring);
        if (cb_dialect_only(p, KEYS, "input", "input[].content[]: ", e)) return -1;
        if (!cJSON_IsString(text))
            return cb_openai_bad(e, "input", "%s.content: a part's text must be a string", where);
        if (given(ann) && !(cJSON_IsArray(ann) && cJSON_GetArraySize(ann) == 0))
            return cb_openai_bad(e, "input", "%s.content: annotations are not supported", where);
        cJSON *q = object_in(parts);
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
        !add(m, "reasoning_content", cJSON_Duplicate(*thought, true)))
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
    const cJSON *sum = get(it, "summary"), *c = get(it, "content"), *enc = get(it, "encrypted_content"), *p;
    if (given(sum) && !(cJSON_IsArray(sum) && cJSON_GetArraySize(sum) == 0))
        return cb_openai_bad(e, "input",
                             "%s: reasoning summaries are not read (this server makes none: hand back the "
                             "reasoning's content)",
                             w);
    if (given(enc) && !(cJSON_IsString(enc) && !enc->valuestring[0]))
        return cb_openai_bad(e, "input", "%s: encrypted reasoning is not read (this server encrypts none)", w);
    if (given(c) && !cJSON_IsArray(c)) return cb_openai_bad(e, "input", "%s.content must be an array", w);
    int n = 0;
    const cJSON *parts = given(c) ? c : NULL;
    cJSON_ArrayForEach(p, parts) {
        if (!cb_dialect_is(get(p, "type"), "reasoning_text") || !cJSON_IsString(get(p, "text")))
            return cb_openai_bad(e, "input", "%s.content: parts are reasoning_text with a text", w);
        if (cb_dialect_only(p, PK, "input", "input[].content[]: ", e)) return -1;
        n++;
    }
    if (n > 1) return cb_openai_bad(e, "input", "%s.content: one reasoning_text part (this server writes one)", w);
    *text = n ? get(c->child, "text") : NULL;
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
        const cJSON *type = get(it, "type"), *role = get(it, "role");
        if (!given(type) && cJSON_IsString(role))
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
            if (content(get(it, "content"), m, w, e)) return -1;
            last = !strcmp(r, "assistant") ? m : NULL;
            if (thought && !add(m, "reasoning_content", cJSON_Duplicate(thought, true))) return cb_dialect_nomem(e);
            thought = NULL;
        } else if (cb_dialect_is(type, "function_call")) {
            static const char *const KEYS[] = {"type",      "call_id", "name",   "arguments",
                                               "namespace", "id",      "status", NULL};
            if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
            const cJSON *id = get(it, "call_id"), *name = get(it, "name"), *args = get(it, "arguments");
            if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
                return cb_openai_bad(e, "input", "%s: a function_call needs call_id, name and arguments (strings)", w);
            if (given(get(it, "namespace")) && !cJSON_IsString(get(it, "namespace")))
                return cb_openai_bad(e, "input", "%s.namespace must be a string", w);
            char what[48];
            snprintf(what, sizeof(what), "%s.arguments", w);
            if (cb_dialect_args_depth(args->valuestring, "input", what, e)) return -1;
            if (!last) {
                if (!(last = message(msgs, "assistant")) || !cJSON_AddNullToObject(last, "content"))
                    return cb_dialect_nomem(e);
            }
            if (thought && get(last, "reasoning_content")) { /* a second block: a turn of its own */
                if (lone_reasoning(msgs, &thought, e)) return -1;
                if (!(last = message(msgs, "assistant")) || !cJSON_AddNullToObject(last, "content"))
                    return cb_dialect_nomem(e);
            }
            if (thought && !add(last, "reasoning_content", cJSON_Duplicate(thought, true))) return cb_dialect_nomem(e);
            thought = NULL;
            cJSON *calls = cJSON_GetObjectItemCaseSensitive(last, "tool_calls");
            if (!calls && !(calls = cJSON_AddArrayToObject(last, "tool_calls"))) return cb_dialect_nomem(e);
            cJSON *c = object_in(calls), *f = c ? cJSON_AddObjectToObject(c, "function") : NULL;
            if (!f || !cJSON_AddStringToObject(c, "id", id->valuestring) ||
                !cJSON_AddStringToObject(c, "type", "function") ||
                !cJSON_AddStringToObject(f, "name", name->valuestring) ||
                !cJSON_AddStringToObject(f, "arguments", args->valuestring))
                return cb_dialect_nomem(e);
        } else if (cb_dialect_is(type, "function_call_output")) {
            static const char *const KEYS[] = {"type", "call_id", "output", "id", "status", NULL};
            if (cb_dialect_only(it, KEYS, "input", "input[]: ", e)) return -1;
            const cJSON *id = get(it, "call_id");
            if (!cJSON_IsString(id)) return cb_openai_bad(e, "input", "%s.call_id must be a string", w);
            if (thought && lone_reasoning(msgs, &thought, e)) return -1;
            cJSON *m = message(msgs, "tool");
            if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring)) return cb_dialect_nomem(e);
            if (content(get(it, "output"), m, w, e)) return -1;
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
    const cJSON *name = get(t, "name"), *params = get(t, "parameters");
    const cJSON *desc = get(t, "description"), *strict = get(t, "strict");
    if (cb_dialect_only(t, KEYS, "tools", "tools[]: ", e)) return -1;
    if (!cJSON_IsString(name)) return cb_openai_bad(e, "tools", "%s.name must be a string", w);
    if (given(params) && !cJSON_IsObject(params))
        return cb_openai_bad(e, "tools", "%s.parameters must be a JSON schema object", w);
    if (given(desc) && !cJSON_IsString(desc)) return cb_openai_bad(e, "tools", "%s.description must be a string", w);
    if (given(strict) && !cJSON_IsBool(strict)) return cb_openai_bad(e, "tools", "%s.strict must be a boolean", w);
    cJSON *o = object_in(arr), *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    bool ok = f && cJSON_AddStringToObject(o, "type", "function") &&
              cJSON_AddStringToObject(f, "name", name->valuestring) &&
              (!given(desc) || cJSON_AddStringToObject(f, "description", desc->valuestring)) &&
              (!given(params) || add(f, "parameters", cJSON_Duplicate(params, true))) &&
              (!given(strict) || cJSON_AddBoolToObject(f, "strict", cJSON_IsTrue(strict)));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* A namespace ({"type": "namespace", "name", "description"?, "tools": [functions]}): its functions
 * offered by their own names (a call answers with the name and the namespace, as OpenAI's does). */
static int namespace_tool(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "name", "description", "tools", NULL};
    const cJSON *inner = get(t, "tools"), *f;
    if (cb_dialect_only(t, KEYS, "tools", "tools[] (namespace): ", e)) return -1;
    if (!cJSON_IsString(get(t, "name")) || !cJSON_IsArray(inner))
        return cb_openai_bad(e, "tools", "%s: a namespace needs a name and its tools", w);
    int k = 0;
    cJSON_ArrayForEach(f, inner) {
        char wk[64];
        snprintf(wk, sizeof(wk), "%s.tools[%d]", w, k++);
        if (!cJSON_IsObject(f) || !cb_dialect_is(get(f, "type"), "function"))
            return cb_openai_bad(e, "tools", "%s: a namespace's tools must be functions here", wk);
        if (function_tool(f, wk, arr, e)) return -1;
    }
    return 0;
}

/* tools: functions, namespaces of functions, and hosted tools (taken as offers, never used);
 * others (custom tools, local shell, ...) are refused by name. */
static int tools(const cJSON *in, cJSON *out, cb_openai_error *e) {
    if (!cJSON_IsArray(in)) return cb_openai_bad(e, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(out, "tools");
    if (!arr) return cb_dialect_nomem(e);
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, in) {
        char w[32];
        snprintf(w, sizeof(w), "tools[%d]", i++);
        const cJSON *type = get(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type)) return cb_openai_bad(e, "tools", "%s must have a type", w);
        int rc = 0;
        if (cb_dialect_is(type, "function"))
            rc = function_tool(t, w, arr, e);
        else if (cb_dialect_is(type, "namespace"))
            rc = namespace_tool(t, w, arr, e);
        else if (hosted(type))
            cb_dialect_offers++;
        else
            return cb_openai_bad(e, "tools",
                                 "%s: %s tools are not supported (functions, namespaces of them and "
                                 "hosted tools, which this server never calls, are)",
                                 w, type->valuestring);
        if (rc) return -1;
    }
    return 0;
}

/* The namespace a function the request offers belongs to (its tools as given), or NULL. */
static const char *namespace_of(const cJSON *tools, const char *name) {
    const cJSON *t, *f;
    cJSON_ArrayForEach(t, tools) {
        if (!cb_dialect_is(get(t, "type"), "namespace")) continue;
        cJSON_ArrayForEach(f, get(t, "tools")) if (cb_dialect_is(get(f, "name"), name)) return get(t, "name")
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
    const cJSON *name = get(x, "name");
    if (cJSON_IsObject(x) && hosted(get(x, "type")))
        return cb_openai_bad(e, "tool_choice", "tool_choice: this server runs no %s tool (it is offered, never called)",
                             get(x, "type")->valuestring);
    if (!cJSON_IsObject(x) || !cb_dialect_is(get(x, "type"), "function") || !cJSON_IsString(name))
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
    static const char *const KEYS[] = {"format", "verbosity", NULL}, *const VERB[] = {"medium", NULL},
                             *const FK[] = {"type", "name", "schema", "strict", "description", NULL};
    if (!cJSON_IsObject(x)) return cb_openai_bad(e, "text", "'text' must be an object");
    if (cb_dialect_only(x, KEYS, "text", "text: ", e)) return -1;
    if (!one_of(get(x, "verbosity"), VERB))
        return cb_openai_bad(e, "text", "text.verbosity: only medium (the model's own) is supported");
    const cJSON *f = get(x, "format");
    if (!given(f)) return 0;
    const cJSON *type = get(f, "type");
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
    const cJSON *schema = get(f, "schema"), *strict = get(f, "strict"), *name = get(f, "name");
    if (!cJSON_IsObject(schema)) return cb_openai_bad(e, "text", "text.format.schema must be a JSON schema object");
    if (given(strict) && !cJSON_IsBool(strict)) return cb_openai_bad(e, "text", "text.format.strict must be a boolean");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    bool ok = js && cJSON_AddStringToObject(rf, "type", "json_schema") &&
              cJSON_AddStringToObject(js, "name", cJSON_IsString(name) ? name->valuestring : "output") &&
              add(js, "schema", cJSON_Duplicate(schema, true));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* The knobs agent clients send at values that ask for what this server does, or refused. */
static int settings(const cJSON *in, cJSON *out, cb_openai_error *e) {
    static const char *const EFFORT[] = {"none", "minimal", "low", "medium", "high", NULL},
                             *const SUMMARY[] = {"auto", "concise", "detailed", NULL},
                             *const TIER[] = {"auto", "default", NULL}, *const TRUNC[] = {"disabled", NULL},
                             *const RK[] = {"effort", "summary", "generate_summary", NULL},
                             *const SO[] = {"include_obfuscation", NULL};
    const cJSON *x;
    if (given(x = get(in, "store")) && !cJSON_IsFalse(x))
        return cb_openai_bad(e, "store",
                             "responses are not stored by this server: send store false (and the whole input)");
    if (given(get(in, "previous_response_id")))
        return cb_openai_bad(e, "previous_response_id",
                             "responses are not stored by this server: send the whole conversation as input");
    /* reasoning: its effort goes to a template that reads it (one that thinks and does not refuses it, one
       that does not think writes no reasoning at any effort); no summarizer runs, at any summary asked:
       the reasoning comes whole as the item's content */
    if (given(x = get(in, "reasoning"))) {
        if (!cJSON_IsObject(x) || cb_dialect_only(x, RK, "reasoning", "reasoning: ", e))
            return cJSON_IsObject(x) ? -1 : cb_openai_bad(e, "reasoning", "'reasoning' must be an object");
        if (!one_of(get(x, "effort"), EFFORT) || !one_of(get(x, "summary"), SUMMARY) ||
            !one_of(get(x, "generate_summary"), SUMMARY))
            return cb_openai_bad(e, "reasoning",
                                 "reasoning.effort must be none to high, and its summary auto, concise or "
                                 "detailed");
        const cJSON *ef = get(x, "effort");
        if (given(ef) && !cJSON_AddStringToObject(out, "reasoning_effort", ef->valuestring)) return cb_dialect_nomem(e);
    }
    if (given(x = get(in, "include"))) {
        const cJSON *v;
        if (!cJSON_IsArray(x)) return cb_openai_bad(e, "include", "'include' must be an array");
        cJSON_ArrayForEach(v, x) if (!cb_dialect_is(v, "reasoning.encrypted_content")) return cb_openai_bad(
            e, "include", "include: %.60s is not supported (reasoning.encrypted_content is: there is none)",
            cJSON_IsString(v) ? v->valuestring : "?");
    }
    if (!one_of(get(in, "service_tier"), TIER))
        return cb_openai_bad(e, "service_tier", "service_tier must be auto or default");
    if (!one_of(get(in, "truncation"), TRUNC))
        return cb_openai_bad(e, "truncation", "truncation must be disabled (an input too long is refused, never cut)");
    if (given(x = get(in, "background")) && !cJSON_IsFalse(x))
        return cb_openai_bad(e, "background", "background responses are not supported");
    if (given(x = get(in, "top_logprobs")) && !(cJSON_IsNumber(x) && x->valuedouble == 0))
        return cb_openai_bad(e, "top_logprobs",
                             "top_logprobs are not supported on /v1/responses (chat completions has them)");
    if (given(x = get(in, "max_tool_calls")))
        return cb_openai_bad(e, "max_tool_calls", "max_tool_calls is not supported");
    if (given(x = get(in, "prompt_cache_key")) && !cJSON_IsString(x)) /* a hint: every prefix is cached anyway */
        return cb_openai_bad(e, "prompt_cache_key", "prompt_cache_key must be a string");
    if (given(x = get(in, "stream_options"))) {
        if (!cJSON_IsObject(x) || cb_dialect_only(x, SO, "stream_options", "stream_options: ", e))
            return cJSON_IsObject(x) ? -1 : cb_openai_bad(e, "stream_options", "'stream_options' must be an object");
        if (given(get(x, "include_obfuscation")) && !cJSON_IsFalse(get(x, "include_obfuscation")))
            return cb_openai_bad(e, "stream_options",
                                 "stream_options.include_obfuscation is not supported (send false)");
    }
    /* metadata is repeated in the response; client_metadata (Codex CLI: its session, turn and window
     * ids) is the client's own bookkeeping: both are labels, neither asks anything of the output */
    static const char *const LABELS[] = {"metadata", "client_metadata", NULL};
    for (const char *const *k = LABELS; *k; k++)
        if (given(x = get(in, *k))) {
            const cJSON *v;
            if (!cJSON_IsObject(x)) return cb_openai_bad(e, *k, "'%s' must be an object of strings", *k);
            cJSON_ArrayForEach(v, x) if (!cJSON_IsString(v)) return cb_openai_bad(e, *k, "'%s' values must be strings",
                                                                                  *k);
        }
    const cJSON *user = get(in, "user"), *safety = get(in, "safety_identifier");
    if (given(user) && !cJSON_IsString(user)) return cb_openai_bad(e, "user", "'user' must be a string");
    if (given(safety) && !cJSON_IsString(safety)) return cb_openai_bad(e, "safety_identifier", "must be a string");
    const cJSON *who = given(user) ? user : safety;
    if (given(who) && !cJSON_AddStringToObject(out, "user", who->valuestring)) return cb_dialect_nomem(e);
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
        const cJSON *x = get(in, *k);
        ok = given(x) ? add(o, *k, cJSON_Duplicate(x, true)) : cJSON_AddNullToObject(o, *k) != NULL;
    }
    const cJSON *p = get(in, "parallel_tool_calls");
    ok = ok && cJSON_AddBoolToObject(o, "parallel_tool_calls", !cJSON_IsFalse(p)) &&
         cJSON_AddBoolToObject(o, "store", false) && cJSON_AddNullToObject(o, "previous_response_id") &&
         cJSON_AddStringToObject(o, "truncation", "disabled");
    if (ok && !given(get(in, "tool_choice"))) {
        cJSON_DeleteItemFromObject(o, "tool_choice");
        ok = cJSON_AddStringToObject(o, "tool_choice", "auto") != NULL;
    }
    if (ok && !given(get(in, "tools"))) {
        cJSON_DeleteItemFromObject(o, "tools");
        ok = cJSON_AddArrayToObject(o, "tools") != NULL;
    }
    if (ok && !given(get(in, "metadata"))) {
        cJSON_DeleteItemFromObject(o, "metadata");
        ok = cJSON_AddObjectToObject(o, "metadata") != NULL;
    }
    if (ok && !given(get(in, "text"))) {
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
    if (given(x = get(in, "model")) && !cJSON_IsString(x)) return cb_openai_bad(e, "model", "'model' must be a string");
    if (given(x) && !cJSON_AddStringToObject(out, "model", x->valuestring)) return cb_dialect_nomem(e);
    if (given(x = get(in, "max_output_tokens"))) {
        if (!cb_dialect_whole(x, 1, 1 << 24))
            return cb_openai_bad(e, "max_output_tokens", "'max_output_tokens' must be a whole number from 1 to %d",
                                 1 << 24);
        if (!count_only && !cJSON_AddNumberToObject(out, "max_tokens", x->valuedouble)) return cb_dialect_nomem(e);
    }
    static const char *const SAME[] = {"temperature", "top_p", "parallel_tool_calls", "stream", NULL};
    for (const char *const *k = SAME; !count_only && *k; k++)
        if (given(x = get(in, *k)) && !add(out, *k, cJSON_Duplicate(x, true))) return cb_dialect_nomem(e);
    if (settings(in, out, e)) return -1;
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    if (!msgs) return cb_dialect_nomem(e);
    if (given(x = get(in, "instructions"))) {
        if (!cJSON_IsString(x)) return cb_openai_bad(e, "instructions", "'instructions' must be a string");
        cJSON *m = message(msgs, "system");
        if (!m || !cJSON_AddStringToObject(m, "content", x->valuestring)) return cb_dialect_nomem(e);
    }
    if (!given(x = get(in, "input"))) return cb_openai_bad(e, "input", "'input' is required");
    if (input(x, msgs, e)) return -1;
    if (given(x = get(in, "tools")) && tools(x, out, e)) return -1;
    if (given(x = get(in, "tool_choice")) && tool_choice(x, out, e)) return -1;
    if (given(x = get(in, "text")) && text_format(x, out, e)) return -1;
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
        cJSON *p = object_in(c);
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
    const char *ns = namespace_of(get(echo, "tools"), name);
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
    ok = ok ? add(o, "output", output) : (cJSON_Delete(output), false);
    if (ok && !strcmp(status, "incomplete")) {
        cJSON *d = cJSON_AddObjectToObject(o, "incomplete_details");
        ok = d && cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "incomplete_details") != NULL;
    }
    ok = ok && cJSON_AddStringToObject(o, "model", model);
    for (const cJSON *x = echo ? echo->child : NULL; ok && x; x = x->next)
        ok = add(o, x->string, cJSON_Duplicate(x, true));
    cJSON *r = ok ? cJSON_AddObjectToObject(o, "reasoning") : NULL;
    ok = r && cJSON_AddNullToObject(r, "effort") && cJSON_AddNullToObject(r, "summary");
    ok = ok && (u ? add(o, "usage", usage(*u)) : cJSON_AddNullToObject(o, "usage") != NULL);
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
    if (o && item && cJSON_AddStringToObject(o, "item_id", cJSON_GetStringValue(get(item, "id"))) &&
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
        cJSON *part = cJSON_GetArrayItem(get(item, "content"), 0);
        const char *text = cJSON_GetStringValue(get(part, "text"));
        ok = text &&
             event(st, out, "response.output_text.done",
                   with(with_string(at(st, true), "text", text), "logprobs", cJSON_CreateArray())) &&
             event(st, out, "response.content_part.done", with(at(st, true), "part", cJSON_Duplicate(part, true)));
    } else if (ok && st->open == -3) {
        const char *text = cJSON_GetStringValue(get(cJSON_GetArrayItem(get(item, "content"), 0), "text"));
        ok = text && event(st, out, "response.reasoning_text.done", with_string(at(st, true), "text", text));
    } else if (ok) {
        ok = event(st, out, "response.function_call_arguments.done",
                   with_string(with_string(at(st, false), "name", cJSON_GetStringValue(get(item, "name"))), "arguments",
                               cJSON_GetStringValue(get(item, "arguments"))));
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
    const char *old = cJSON_GetStringValue(get(o, key));
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

char *cb_responses_stream_reasoning(cb_responses_stream *st, const char *text) {
    if (!*text) return strdup("");
    char *out = NULL, iid[96];
    bool ok = true;
    if (st->open != -3) {
        item_id(iid, sizeof(iid), "rs", st->id, cJSON_GetArraySize(st->output));
        cJSON *r = reasoning_item_of(iid, "in_progress", NULL);
        ok = open_item(st, &out, r);
        cJSON *p = ok ? object_in(get(r, "content")) : NULL;
        ok = p && cJSON_AddStringToObject(p, "type", "reasoning_text") && cJSON_AddStringToObject(p, "text", "");
        if (ok) st->open = -3;
    }
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    ok = ok && grow(cJSON_GetArrayItem(get(item, "content"), 0), "text", text) &&
         event(st, &out, "response.reasoning_text.delta", with_string(at(st, true), "delta", text));
    return done(out, ok);
}

char *cb_responses_stream_text(cb_responses_stream *st, const char *text) {
    if (!*text) return strdup("");
    char *out = NULL, iid[96];
    bool ok = true;
    if (st->open != -2) {
        item_id(iid, sizeof(iid), "msg", st->id, cJSON_GetArraySize(st->output));
        cJSON *m = message_item(iid, "in_progress", NULL);
        ok = open_item(st, &out, m);
        cJSON *part = ok ? text_part("") : NULL;
        if (part && !cJSON_AddItemToArray(get(m, "content"), part)) {
            cJSON_Delete(part);
            part = NULL;
        }
        ok = part &&
             event(st, &out, "response.content_part.added", with(at(st, true), "part", cJSON_Duplicate(part, true)));
        if (ok) st->open = -2;
    }
    cJSON *item = cJSON_GetArrayItem(st->output, cJSON_GetArraySize(st->output) - 1);
    ok = ok && grow(cJSON_GetArrayItem(get(item, "content"), 0), "text", text) &&
         event(st, &out, "response.output_text.delta",
               with(with_string(at(st, true), "delta", text), "logprobs", cJSON_CreateArray()));
    return done(out, ok);
}

char *cb_responses_stream_call(cb_responses_stream *st, int k, const char *call_id, const char *name, const char *args,
                               bool *late) {
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

char *cb_responses_stream_error(cb_responses_stream *st, int status, const char *message) {
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

static char *answer_json(const cb_dialect_head *h, const cb_dialect_answer *a) {
    cb_responses_answer r = answer_of(a);
    return cb_responses_json(h->id, h->created, h->model, h->echo, &r);
}

static char *stream_start(void *st, const cb_dialect_head *h, int n_prompt, int n_cached) {
    (void)n_prompt, (void)n_cached; /* the usage comes at the end */
    return cb_responses_stream_start(st, h->id, h->created, h->model, h->echo);
}

static char *stream_text(void *st, const char *text) { return cb_responses_stream_text(st, text); }

static char *stream_reasoning(void *st, const char *text) { return cb_responses_stream_reasoning(st, text); }

static char *stream_call(void *st, int k, const char *id, const char *name, const char *args, bool *late) {
    return cb_responses_stream_call(st, k, id, name, args, late);
}

static char *stream_end(void *st, const cb_dialect_answer *a) {
    return cb_responses_stream_end(st, a->finish, answer_of(a).usage);
}

static char *stream_error(void *st, int status, const char *message) {
    return cb_responses_stream_error(st, status, message);
}

static void stream_free(void *st) { cb_responses_stream_free(st); }

static const char *const PARAMS[] =
    {"response_format", "text.format", "max_tokens", "max_output_tokens", "reasoning_effort", "reasoning",
     "messages",        "input",       NULL},
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
