/* messages.c — a chat request's messages (see openai.h), and the strings a parsed request keeps. */
#include "openai.h"
#include "bounds.h"
#include "../util/buf.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *cb_openai_keep(cb_openai_request *r, const char *s) {
    /* doubling: a request of many messages stays linear */
    if (!cb_grow((void **)&r->strings, &r->strings_cap, r->n_strings + 1, sizeof(char *), 16)) return NULL;
    char *c = strdup(s);
    if (c) r->strings[r->n_strings++] = c;
    return c;
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
    if (cJSON_IsString(c)) return cb_openai_keep(r, c->valuestring);
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
    const char *k = cb_openai_keep(r, s);
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
    m->tool_calls = j ? cb_openai_keep(r, j) : NULL;
    free(j);
    return m->tool_calls ? 0 : cb_openai_nomem(e);
}

/* A message's optional string field (tool_call_id, name) into *out. */
static int message_string(cJSON *msg, const char *key, int i, const char **out, cb_openai_request *r,
                          cb_openai_error *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(msg, key);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsString(x)) return cb_openai_bad(e, "messages", "messages[%d].%s must be a string", i, key);
    return (*out = cb_openai_keep(r, x->valuestring)) ? 0 : cb_openai_nomem(e);
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

int cb_openai_parse_messages(cJSON *root, cb_openai_request *r, cb_openai_error *e) {
    cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!m) return cb_openai_bad(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return cb_openai_bad(e, "messages", "'messages' must be an array");
    int n = cJSON_GetArraySize(m), most = cb_openai_max_messages();
    if (n == 0) return cb_openai_bad(e, "messages", "'messages' is empty");
    if (most > 0 && n > most) return too_many_messages(e, n, most);
    r->messages = calloc((size_t)n, sizeof(*r->messages));
    if (!r->messages) return cb_openai_nomem(e);
    bool any = false;
    int i = 0, items = n;
    cJSON *msg;
    cJSON_ArrayForEach(msg, m) { /* one walk: cJSON_GetArrayItem(m, i) is O(i) */
        cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role))
            return cb_openai_bad(e, "messages", "messages[%d] needs a string 'role'", i);
        const char *text = content && !cJSON_IsNull(content) ? message_content(content, r) : cb_openai_keep(r, "");
        if (!text)
            return cb_openai_bad(e, "messages", "messages[%d].content must be a string or an array of text parts", i);
        struct cobatch_chat_message *mi = &r->messages[i];
        mi->role = cb_openai_keep(r, role->valuestring);
        mi->content = text;
        if (!mi->role) return cb_openai_nomem(e);
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
