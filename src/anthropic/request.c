/* request.c — the Messages API request translated into the chat request (see anthropic.h). */
#include "anthropic.h"
#include "../openai/dialect.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- request ------------------- */

/* cache_control: {"type": "ephemeral", "ttl"?}: a hint the prefix cache follows without being told
 * (every prefix is kept while there is room). Anything else is refused. */
static int cache_control(const cJSON *x, const char *where, cb_openai_error *e) {
    if (!x || cJSON_IsNull(x)) return 0;
    const cJSON *k;
    bool ok = cJSON_IsObject(x) && cb_dialect_is(cJSON_GetObjectItemCaseSensitive(x, "type"), "ephemeral");
    cJSON_ArrayForEach(k, x) ok = ok && (!strcmp(k->string, "type") || !strcmp(k->string, "ttl"));
    return ok ? 0 : cb_openai_bad(e, "cache_control", "%s.cache_control must be {\"type\": \"ephemeral\"}", where);
}

/* Every key of obj is one of keys, or the request is refused naming it. */
static int only(const cJSON *obj, const char *const *keys, const char *where, cb_openai_error *e) {
    return cb_dialect_only(obj, keys, NULL, where, e);
}

/* Appends text to a growing string (*s, malloc'd), sep between parts. */
static bool join(char **s, const char *text, const char *sep) {
    size_t a = *s ? strlen(*s) : 0, b = strlen(text), c = a ? strlen(sep) : 0;
    char *t = realloc(*s, a + b + c + 1);
    if (!t) return false;
    if (c) memcpy(t + a, sep, c);
    memcpy(t + a + c, text, b + 1);
    *s = t;
    return true;
}

/* A text block {"type": "text", "text", "cache_control"?} (citations refused). */
static int text_block(const cJSON *b, const char *where, const char **text, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "text", "cache_control", "citations", NULL};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text");
    const cJSON *cit = cJSON_GetObjectItemCaseSensitive(b, "citations");
    if (only(b, KEYS, where, e) || cache_control(cJSON_GetObjectItemCaseSensitive(b, "cache_control"), where, e))
        return -1;
    if (!cJSON_IsString(t)) return cb_openai_bad(e, "messages", "%s.text must be a string", where);
    if (cit && !cJSON_IsNull(cit) && !(cJSON_IsArray(cit) && cJSON_GetArraySize(cit) == 0))
        return cb_openai_bad(e, "citations", "%s.citations are not supported", where);
    *text = t->valuestring;
    return 0;
}

/* Text of a string or an array of text blocks, parts joined by sep; NULL with e set. */
static char *text_of(const cJSON *x, const char *where, const char *sep, cb_openai_error *e) {
    if (cJSON_IsString(x)) {
        char *s = strdup(x->valuestring);
        if (!s) cb_dialect_nomem(e);
        return s;
    }
    if (!cJSON_IsArray(x)) {
        cb_openai_bad(e, "messages", "%s must be a string or an array of text blocks", where);
        return NULL;
    }
    char *s = strdup(""), w[96];
    const cJSON *b;
    int i = 0;
    cJSON_ArrayForEach(b, x) {
        const char *t;
        snprintf(w, sizeof(w), "%s[%d]", where, i++);
        if (!s) break;
        if (!cb_dialect_is(cJSON_GetObjectItemCaseSensitive(b, "type"), "text")) {
            cb_openai_bad(e, "messages", "%s: only text blocks are accepted here", w);
            free(s);
            return NULL;
        }
        if (text_block(b, w, &t, e)) {
            free(s);
            return NULL;
        }
        if (!join(&s, t, *s ? sep : "")) {
            free(s);
            s = NULL;
        }
    }
    if (!s) cb_dialect_nomem(e);
    return s;
}

static cJSON *message(cJSON *msgs, const char *role) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m) || !cJSON_AddStringToObject(m, "role", role)) return NULL;
    return m;
}

/* A block type this text-only server cannot take, named for the refusal; NULL for one it can. */
static const char *refused_block(const char *type) {
    static const char *const NO[] = {"image",
                                     "document",
                                     "search_result",
                                     "redacted_thinking",
                                     "server_tool_use",
                                     "web_search_tool_result",
                                     "container_upload",
                                     NULL};
    for (const char *const *p = NO; *p; p++)
        if (!strcmp(*p, type)) return *p;
    return NULL;
}

/* An output_config.effort: absent, null, or low to max (a model without a thinking budget has one
 * effort, whatever is asked). */
static bool effort_ok(const cJSON *effort) {
    return !effort || cJSON_IsNull(effort) || cb_dialect_is(effort, "low") || cb_dialect_is(effort, "medium") ||
           cb_dialect_is(effort, "high") || cb_dialect_is(effort, "max");
}

/* An assistant's tool_use block {"type", "id", "name", "input", "cache_control"?} as one of its
 * tool_calls (appended to calls). */
static int tool_use(const cJSON *b, const char *w, cJSON *calls, cb_openai_error *e) {
    static const char *const TK[] = {"type", "id", "name", "input", "cache_control", NULL};
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id"), *name = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (only(b, TK, "tool_use: ", e) || cache_control(cJSON_GetObjectItemCaseSensitive(b, "cache_control"), w, e))
        return -1;
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input))
        return cb_openai_bad(e, "messages", "%s needs an id, a name and an input object", w);
    char *args = cJSON_PrintUnformatted(input), what[128];
    snprintf(what, sizeof(what), "%s.input", w);
    if (args && cb_dialect_args_depth(args, "messages", what, e)) {
        free(args);
        return -1;
    }
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    bool ok = args && c && f && cJSON_AddItemToArray(calls, c) && cJSON_AddStringToObject(c, "id", id->valuestring) &&
              cJSON_AddStringToObject(c, "type", "function") && cJSON_AddItemToObject(c, "function", f) &&
              cJSON_AddStringToObject(f, "name", name->valuestring) && cJSON_AddStringToObject(f, "arguments", args);
    if (!ok && c && !f) cJSON_Delete(c);
    free(args);
    return ok ? 0 : cb_dialect_nomem(e);
}

/* One message: a user's text and tool results (each result a "tool" message, before the text, in
 * the order given), or an assistant's text and tool_use blocks (its tool_calls). */
static int one_message(const cJSON *m, int i, cJSON *msgs, cb_openai_error *e) {
    static const char *const KEYS[] = {"role", "content", "output_config", NULL}, *const OC[] = {"effort", NULL};
    char where[64];
    snprintf(where, sizeof(where), "messages[%d]", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsObject(m) || only(m, KEYS, "messages: ", e))
        return cJSON_IsObject(m) ? -1 : cb_openai_bad(e, "messages", "%s must be an object", where);
    /* a turn's own effort (Claude Code's per-turn control): one effort here, as for the request's */
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(m, "output_config");
    if (oc && !cJSON_IsNull(oc)) {
        if (!cJSON_IsObject(oc)) return cb_openai_bad(e, "messages", "%s.output_config must be an object", where);
        if (only(oc, OC, "messages: output_config: ", e)) return -1;
        if (!effort_ok(cJSON_GetObjectItemCaseSensitive(oc, "effort")))
            return cb_openai_bad(e, "messages", "%s.output_config.effort must be low, medium, high or max", where);
    }
    bool user = cb_dialect_is(role, "user");
    if (cb_dialect_is(role, "system")) { /* a system turn in the conversation (Claude Code sends them): its text */
        char *t = text_of(content, where, "\n\n", e);
        cJSON *o = t ? message(msgs, "system") : NULL;
        bool ok = o && cJSON_AddStringToObject(o, "content", t);
        free(t);
        return ok ? 0 : t ? cb_dialect_nomem(e) : -1;
    }
    if (!user && !cb_dialect_is(role, "assistant"))
        return cb_openai_bad(e, "messages", "%s.role must be \"user\", \"assistant\" or \"system\"", where);
    if (cJSON_IsString(content)) {
        cJSON *o = message(msgs, role->valuestring);
        return o && cJSON_AddStringToObject(o, "content", content->valuestring) ? 0 : cb_dialect_nomem(e);
    }
    if (!cJSON_IsArray(content))
        return cb_openai_bad(e, "messages", "%s.content must be a string or an array of blocks", where);
    char *text = strdup(""), *thought = strdup("");
    cJSON *calls = cJSON_CreateArray();
    int rc = text && thought && calls ? 0 : cb_dialect_nomem(e), k = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        if (rc) break;
        char w[96];
        snprintf(w, sizeof(w), "%s.content[%d]", where, k++);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
            rc = cb_openai_bad(e, "messages", "%s must be a block with a type", w);
        } else if (refused_block(t)) {
            rc = cb_openai_bad(e, "messages", "%s: %s blocks are not supported (a text-only model%s)", w, t,
                               strcmp(t, "redacted_thinking") ? ""
                                                              : "; this server signs no thinking it could read back");
        } else if (!strcmp(t, "thinking") && !user) { /* handed back: the template may show it again */
            static const char *const HK[] = {"type", "thinking", "signature", NULL};
            const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            const cJSON *sig = cJSON_GetObjectItemCaseSensitive(b, "signature");
            if (only(b, HK, "thinking: ", e))
                rc = -1;
            else if (!cJSON_IsString(th) || (sig && !cJSON_IsNull(sig) && !cJSON_IsString(sig)))
                rc = cb_openai_bad(e, "messages", "%s needs a thinking text (and a string signature)", w);
            else if (!join(&thought, th->valuestring, *thought ? "\n\n" : ""))
                rc = cb_dialect_nomem(e);
        } else if (!strcmp(t, "text")) {
            const char *s;
            rc = text_block(b, w, &s, e);
            if (!rc && !join(&text, s, *text ? "\n\n" : "")) rc = cb_dialect_nomem(e);
        } else if (!strcmp(t, "tool_use") && !user) {
            rc = tool_use(b, w, calls, e);
        } else if (!strcmp(t, "tool_result") && user) {
            static const char *const RK[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(b, "content");
            const cJSON *err = cJSON_GetObjectItemCaseSensitive(b, "is_error");
            char *out = NULL;
            if (only(b, RK, "tool_result: ", e) ||
                cache_control(cJSON_GetObjectItemCaseSensitive(b, "cache_control"), w, e)) {
                rc = -1;
            } else if (!cJSON_IsString(id)) {
                rc = cb_openai_bad(e, "messages", "%s.tool_use_id must be a string", w);
            } else if (err && !cJSON_IsBool(err)) {
                rc = cb_openai_bad(e, "messages", "%s.is_error must be a boolean", w);
            } else if (!(out = c && !cJSON_IsNull(c) ? text_of(c, w, "\n\n", e) : strdup(""))) {
                rc = c && !cJSON_IsNull(c) ? -1 : cb_dialect_nomem(e);
            } else {
                /* a failed tool's output says so, as the client's flag did (the template has no field for it) */
                cJSON *o = message(msgs, "tool");
                bool failed = cJSON_IsTrue(err);
                char *said = failed ? NULL : out;
                if (failed && (said = malloc(strlen(out) + 8))) sprintf(said, "Error: %s", out);
                if (!o || !said || !cJSON_AddStringToObject(o, "tool_call_id", id->valuestring) ||
                    !cJSON_AddStringToObject(o, "content", said))
                    rc = cb_dialect_nomem(e);
                if (said != out) free(said);
            }
            free(out);
        } else {
            rc = cb_openai_bad(e, "messages", "%s: a %s block is not accepted in a%s message", w, t,
                               user ? " user" : "n assistant");
        }
    }
    if (!rc && (*text || *thought || cJSON_GetArraySize(calls) > 0 || cJSON_GetArraySize(content) == 0)) {
        cJSON *o = message(msgs, role->valuestring);
        if (!o || !cJSON_AddStringToObject(o, "content", text) ||
            (*thought && !cJSON_AddStringToObject(o, "reasoning_content", thought)))
            rc = cb_dialect_nomem(e);
        if (!rc && cJSON_GetArraySize(calls) > 0) {
            if (cJSON_AddItemToObject(o, "tool_calls", calls))
                calls = NULL;
            else
                rc = cb_dialect_nomem(e);
        }
    }
    cJSON_Delete(calls);
    free(text);
    free(thought);
    return rc;
}

/* tools: [{"name", "description"?, "input_schema", "cache_control"?, "type"?: "custom"}]; a
 * server tool (web search, bash, text editor, computer use: a "type" other than custom) is refused. */
/* Tools Anthropic's side runs (web search and fetch, code execution, tool search: type web_search_20250305
 * and the like): offered to a model that may use them; this server runs none. Tools the client runs
 * with Anthropic's schemas (bash, text_editor, computer, memory) are not among them. */
static bool server_tool(const cJSON *type) {
    static const char *const KINDS[] = {"web_search_", "web_fetch_", "code_execution_", "tool_search_tool_", NULL};
    for (int k = 0; cJSON_IsString(type) && KINDS[k]; k++)
        if (!strncmp(type->valuestring, KINDS[k], strlen(KINDS[k]))) return true;
    return false;
}

/* Whether the tools as given hold a server tool named name. */
static bool names_server_tool(const cJSON *tools, const char *name) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        if (server_tool(cJSON_GetObjectItemCaseSensitive(t, "type")) &&
            cb_dialect_is(cJSON_GetObjectItemCaseSensitive(t, "name"), name))
            return true;
    }
    return false;
}

static int tool(const cJSON *t, const char *w, cJSON *arr, cb_openai_error *e) {
    static const char *const KEYS[] = {"type",          "name",          "description", "input_schema",
                                       "cache_control", "defer_loading", NULL};
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
    if (!cJSON_IsObject(t)) return cb_openai_bad(e, "tools", "%s must be an object", w);
    if (server_tool(type)) { /* an offer: this server runs none, and never calls one */
        cb_dialect_offers++;
        return 0;
    }
    if (type && !cJSON_IsNull(type) && !cb_dialect_is(type, "custom"))
        return cb_openai_bad(e, "tools",
                             "%s: tools of type %s are not supported; define the tool by name and input_schema "
                             "(server tools are taken as offers this server never calls)",
                             w, cJSON_IsString(type) ? type->valuestring : "?");
    if (only(t, KEYS, "tools: ", e) || cache_control(cJSON_GetObjectItemCaseSensitive(t, "cache_control"), w, e))
        return -1;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
    if (!cJSON_IsString(name)) return cb_openai_bad(e, "tools", "%s.name must be a string", w);
    if (!cJSON_IsObject(schema)) return cb_openai_bad(e, "tools", "%s.input_schema must be an object", w);
    if (desc && !cJSON_IsString(desc)) return cb_openai_bad(e, "tools", "%s.description must be a string", w);
    const cJSON *defer = cJSON_GetObjectItemCaseSensitive(t, "defer_loading");
    if (defer && !cJSON_IsBool(defer)) return cb_openai_bad(e, "tools", "%s.defer_loading must be a boolean", w);
    if (cJSON_IsTrue(defer)) return 0; /* kept out of the prompt until a tool search finds it: none here */
    cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject(), *s = cJSON_Duplicate(schema, true);
    bool ok = o && f && s && cJSON_AddItemToArray(arr, o) && cJSON_AddStringToObject(o, "type", "function") &&
              cJSON_AddItemToObject(o, "function", f) && cJSON_AddStringToObject(f, "name", name->valuestring) &&
              (!desc || cJSON_AddStringToObject(f, "description", desc->valuestring)) &&
              cJSON_AddItemToObject(f, "parameters", s);
    return ok ? 0 : cb_dialect_nomem(e); /* what was not added leaks only on allocation failure */
}

/* tool_choice: {"type": auto | any | tool (with name) | none, "disable_parallel_tool_use"?}. */
static int tool_choice(const cJSON *in, const cJSON *tools, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "name", "disable_parallel_tool_use", NULL};
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(in, "type");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(in, "name");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(in, "disable_parallel_tool_use");
    if (!cJSON_IsObject(in) || !cJSON_IsString(type))
        return cb_openai_bad(e, "tool_choice", "'tool_choice' must be an object with a type");
    if (only(in, KEYS, "tool_choice: ", e)) return -1;
    if (one && !cJSON_IsBool(one))
        return cb_openai_bad(e, "tool_choice", "tool_choice.disable_parallel_tool_use must be a boolean");
    bool ok = true;
    if (cb_dialect_is(type, "auto") || cb_dialect_is(type, "none") || cb_dialect_is(type, "any")) {
        ok = cJSON_AddStringToObject(out, "tool_choice", cb_dialect_is(type, "any") ? "required" : type->valuestring) !=
             NULL;
    } else if (cb_dialect_is(type, "tool")) {
        if (!cJSON_IsString(name)) return cb_openai_bad(e, "tool_choice", "tool_choice of type tool needs a name");
        if (names_server_tool(tools, name->valuestring))
            return cb_openai_bad(e, "tool_choice", "tool_choice: %.64s is a server tool, which this server never calls",
                                 name->valuestring);
        cJSON *o = cJSON_AddObjectToObject(out, "tool_choice"), *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
        ok = f && cJSON_AddStringToObject(o, "type", "function") &&
             cJSON_AddStringToObject(f, "name", name->valuestring);
    } else {
        return cb_openai_bad(e, "tool_choice", "tool_choice.type must be auto, any, tool or none");
    }
    if (ok && cJSON_IsTrue(one)) ok = cJSON_AddBoolToObject(out, "parallel_tool_calls", false) != NULL;
    return ok ? 0 : cb_dialect_nomem(e);
}

/* thinking: enabled (thinking on, budget_tokens its most tokens: from 1 to below max_tokens;
 * Anthropic's floor of 1,024 is not kept), disabled (thinking off: the template's switch), or adaptive
 * (the template's default). display: summarized (this server has no summarizer: the reasoning comes
 * whole) or omitted (no thinking block). A template that cannot do what is asked refuses it. */
static int thinking(const cJSON *x, const cJSON *max_tokens, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"type", "display", "budget_tokens", NULL};
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(x, "type");
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(x, "budget_tokens");
    const cJSON *display = cJSON_GetObjectItemCaseSensitive(x, "display");
    bool on = cb_dialect_is(type, "enabled");
    if (!cJSON_IsObject(x) || !(on || cb_dialect_is(type, "disabled") || cb_dialect_is(type, "adaptive")))
        return cb_openai_bad(e, "thinking", "thinking.type must be enabled, disabled or adaptive");
    if (only(x, KEYS, "thinking: ", e)) return -1;
    if (display && !cJSON_IsNull(display) && !cb_dialect_is(display, "summarized") &&
        !cb_dialect_is(display, "omitted"))
        return cb_openai_bad(e, "thinking", "thinking.display must be summarized or omitted");
    if (on && (!cb_dialect_whole(budget, 1, INT32_MAX / 2) ||
               (cJSON_IsNumber(max_tokens) && budget->valuedouble >= max_tokens->valuedouble)))
        return cb_openai_bad(e, "thinking", "thinking.budget_tokens must be a whole number from 1 to below max_tokens");
    if (!on && budget && !cJSON_IsNull(budget))
        return cb_openai_bad(e, "thinking", "thinking.budget_tokens goes with thinking enabled");
    bool ok = true;
    if (!cb_dialect_is(type, "adaptive")) {
        cJSON *kw = cJSON_AddObjectToObject(out, "chat_template_kwargs");
        ok = kw && cJSON_AddBoolToObject(kw, "enable_thinking", on);
    }
    if (ok && on) ok = cJSON_AddNumberToObject(out, "thinking_budget_tokens", budget->valuedouble) != NULL;
    if (ok && cb_dialect_is(display, "omitted")) ok = cJSON_AddBoolToObject(out, "include_reasoning", false) != NULL;
    return ok ? 0 : cb_dialect_nomem(e);
}

/* context_management: edits that clear thinking from earlier turns (clear_thinking_*: keep the
 * thinking of the last `keep` assistant turns that have some, 1 unless {"type": "thinking_turns",
 * "value": N} or "all" says otherwise; done on the translated messages by clear_thinking); an edit
 * that would clear anything else is refused. *keep: -1 when there is no such edit. */
static int context_management(const cJSON *x, int *keep, cb_openai_error *e) {
    static const char *const KEYS[] = {"edits", NULL}, *const EK[] = {"type", "keep", NULL};
    const cJSON *edits = cJSON_GetObjectItemCaseSensitive(x, "edits"), *ed;
    *keep = -1;
    if (!cJSON_IsObject(x) || only(x, KEYS, "context_management: ", e) || (edits && !cJSON_IsArray(edits)))
        return cb_openai_bad(e, "context_management", "context_management must be {\"edits\": [...]}");
    cJSON_ArrayForEach(ed, edits) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(ed, "type");
        if (!cJSON_IsString(type) || strncmp(type->valuestring, "clear_thinking_", 15) != 0)
            return cb_openai_bad(e, "context_management",
                                 "context_management edits other than clear_thinking are not supported");
        if (only(ed, EK, "context_management: ", e)) return -1;
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(ed, "keep"),
                    *v = cJSON_GetObjectItemCaseSensitive(k, "value");
        if (!k || cJSON_IsNull(k))
            *keep = 1;
        else if (cb_dialect_is(k, "all"))
            *keep = INT32_MAX;
        else if (cJSON_IsObject(k) && cb_dialect_is(cJSON_GetObjectItemCaseSensitive(k, "type"), "thinking_turns") &&
                 cb_dialect_whole(v, 0, INT32_MAX))
            *keep = (int)v->valuedouble;
        else
            return cb_openai_bad(e, "context_management",
                                 "clear_thinking keep must be \"all\" or {\"type\": \"thinking_turns\", \"value\": N}");
    }
    return 0;
}

/* The edit's work: the reasoning of all but the last `keep` assistant messages that have some goes. */
static void clear_thinking(cJSON *msgs, int keep) {
    int n = 0, k = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) n += cJSON_GetObjectItemCaseSensitive(m, "reasoning_content") != NULL;
    cJSON_ArrayForEach(m, msgs) if (cJSON_GetObjectItemCaseSensitive(m, "reasoning_content") && k++ < n - keep)
        cJSON_DeleteItemFromObjectCaseSensitive(m, "reasoning_content");
}

/* output_config: effort (low to max: a model without a thinking budget has one effort, whatever
 * is asked) and format (a JSON schema the output follows: response_format). */
static int output_config(const cJSON *x, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"effort", "format", NULL};
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(x, "effort");
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(x, "format");
    if (!cJSON_IsObject(x)) return cb_openai_bad(e, "output_config", "output_config must be an object");
    if (only(x, KEYS, "output_config: ", e)) return -1;
    if (!effort_ok(effort))
        return cb_openai_bad(e, "output_config", "output_config.effort must be low, medium, high or max");
    if (!format || cJSON_IsNull(format)) return 0;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(format, "schema");
    if (!cb_dialect_is(cJSON_GetObjectItemCaseSensitive(format, "type"), "json_schema") || !cJSON_IsObject(schema) ||
        cJSON_GetArraySize(format) != 2)
        return cb_openai_bad(e, "output_config",
                             "output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}");
    cJSON *rf = cJSON_AddObjectToObject(out, "response_format");
    cJSON *js = rf ? cJSON_AddObjectToObject(rf, "json_schema") : NULL;
    bool ok = js && cJSON_AddStringToObject(rf, "type", "json_schema") &&
              cJSON_AddStringToObject(js, "name", "output") &&
              cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(schema, true));
    return ok ? 0 : cb_dialect_nomem(e);
}

/* The length of the attribution header Claude Code opens its system prompt with, and the blank
 * after it ("x-anthropic-billing-header: cc_version=2.1.332.8ef; cc_entrypoint=cli; cch=a5145;"),
 * or 0. It is for Anthropic's billing, not for the model, and it changes with each conversation's
 * prompt (the version's suffix, the cch stamp), ahead of everything else: kept, it would make
 * every turn of every session miss the prefix cache. It is left out of the prompt. */
static size_t billing_header(const char *s) {
    static const char HEAD[] = "x-anthropic-billing-header:";
    if (strncmp(s, HEAD, sizeof(HEAD) - 1) != 0) return 0;
    size_t at = sizeof(HEAD) - 1;
    for (;;) { /* " key=value;" pairs */
        size_t k = at;
        while (s[k] == ' ')
            k++;
        size_t eq = k;
        while (s[eq] && s[eq] != '=' && s[eq] != ';' && s[eq] != ' ' && s[eq] != '\n')
            eq++;
        if (s[eq] != '=' || eq == k) break;
        size_t end = eq + 1;
        while (s[end] && s[end] != ';' && s[end] != ' ' && s[end] != '\n')
            end++;
        if (s[end] != ';') break;
        at = end + 1;
    }
    while (s[at] == ' ' || s[at] == '\n')
        at++;
    return at;
}

/* Fields carried over to the chat request under the same name, when given and not null. */
static const char *const SAME[] = {"model", "max_tokens", "temperature", "top_p", "top_k", "stream", NULL};

static int translate(const cJSON *in, bool count_only, cJSON *out, cb_openai_error *e) {
    static const char *const KEYS[] = {"model",         "max_tokens", "messages", "system",       "stop_sequences",
                                       "temperature",   "top_p",      "top_k",    "metadata",     "tools",
                                       "tool_choice",   "stream",     "thinking", "service_tier", "context_management",
                                       "output_config", NULL};
    static const char *const COUNT_KEYS[] = {"model",    "messages",           "system",        "tools", "tool_choice",
                                             "thinking", "context_management", "output_config", NULL};
    if (!cJSON_IsObject(in)) return cb_openai_bad(e, "", "the body must be a JSON object");
    if (only(in, count_only ? COUNT_KEYS : KEYS, "", e)) return -1;
    const cJSON *x;
    if (!count_only && !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(in, "max_tokens")))
        return cb_openai_bad(e, "max_tokens", "'max_tokens' is required: a number of tokens");
    if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(in, "model")))
        return cb_openai_bad(e, "model", "'model' is required: a string");
    for (const char *const *k = SAME; *k; k++) {
        x = cJSON_GetObjectItemCaseSensitive(in, *k);
        if (x && !cJSON_IsNull(x) && !cJSON_AddItemToObject(out, *k, cJSON_Duplicate(x, true)))
            return cb_dialect_nomem(e);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "thinking")) && !cJSON_IsNull(x) &&
        thinking(x, cJSON_GetObjectItemCaseSensitive(in, "max_tokens"), out, e))
        return -1;
    int keep = -1;
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "context_management")) && !cJSON_IsNull(x) &&
        context_management(x, &keep, e))
        return -1;
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "output_config")) && !cJSON_IsNull(x) && output_config(x, out, e))
        return -1;
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "service_tier")) && !cJSON_IsNull(x) && !cb_dialect_is(x, "auto") &&
        !cb_dialect_is(x, "standard_only"))
        return cb_openai_bad(e, "service_tier", "service_tier must be auto or standard_only (the server has one tier)");
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "metadata")) && !cJSON_IsNull(x)) {
        static const char *const MK[] = {"user_id", NULL};
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(x, "user_id");
        if (!cJSON_IsObject(x) || only(x, MK, "metadata: ", e))
            return cJSON_IsObject(x) ? -1 : cb_openai_bad(e, "metadata", "'metadata' must be an object");
        if (u && !cJSON_IsNull(u) && !cJSON_IsString(u))
            return cb_openai_bad(e, "metadata", "metadata.user_id must be a string");
        if (cJSON_IsString(u) && !cJSON_AddStringToObject(out, "user", u->valuestring)) return cb_dialect_nomem(e);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "stop_sequences")) && !cJSON_IsNull(x)) {
        if (!cJSON_IsArray(x))
            return cb_openai_bad(e, "stop_sequences", "'stop_sequences' must be an array of strings");
        const cJSON *s;
        cJSON_ArrayForEach(s, x) if (!cJSON_IsString(s)) return cb_openai_bad(
            e, "stop_sequences", "'stop_sequences' must be an array of strings");
        if (cJSON_GetArraySize(x) > 0 && !cJSON_AddItemToObject(out, "stop", cJSON_Duplicate(x, true)))
            return cb_dialect_nomem(e);
    }
    cJSON *msgs = cJSON_AddArrayToObject(out, "messages");
    if (!msgs) return cb_dialect_nomem(e);
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "system")) && !cJSON_IsNull(x)) {
        char *sys = text_of(x, "system", "\n\n", e);
        if (!sys) return -1;
        cJSON *m = message(msgs, "system");
        bool ok = m && cJSON_AddStringToObject(m, "content", sys + billing_header(sys));
        free(sys);
        if (!ok) return cb_dialect_nomem(e);
    }
    x = cJSON_GetObjectItemCaseSensitive(in, "messages");
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) == 0)
        return cb_openai_bad(e, "messages", "'messages' must be a non-empty array");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, x) if (one_message(m, i++, msgs, e)) return -1;
    /* a last assistant turn asks for its continuation (a prefill); the template would open a new turn */
    if (cb_dialect_is(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(x, cJSON_GetArraySize(x) - 1), "role"),
                      "assistant"))
        return cb_openai_bad(e, "messages", "a last assistant message (a prefill to continue) is not supported");
    if (keep >= 0) clear_thinking(msgs, keep);
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "tools")) && !cJSON_IsNull(x) && cb_dialect_tools(x, out, tool, e))
        return -1;
    if ((x = cJSON_GetObjectItemCaseSensitive(in, "tool_choice")) && !cJSON_IsNull(x) &&
        tool_choice(x, cJSON_GetObjectItemCaseSensitive(in, "tools"), out, e))
        return -1;
    /* a count generates nothing: no bound of an answer's grammar applies (Claude Code's WebFetch has a
       maxLength of 524288, refused where an answer could reach it, not past what one token can) */
    if (count_only && !cJSON_AddNumberToObject(out, "max_tokens", 1)) return cb_dialect_nomem(e);
    return 0;
}

int cb_anthropic_to_chat(const cJSON *root, bool count_only, cJSON **out, cb_openai_error *e) {
    *out = cJSON_CreateObject();
    if (!*out) return cb_dialect_nomem(e);
    if (translate(root, count_only, *out, e) == 0) return 0;
    cJSON_Delete(*out);
    *out = NULL;
    return -1;
}
