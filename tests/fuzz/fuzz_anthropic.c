/* libFuzzer: the Anthropic Messages API. A body (first byte: a message or a count_tokens one) is
 * translated to a chat request and parsed as the server does; what is accepted is consistent, what
 * is refused is a 400 (or 503). Then the answer side: with the input's text as the answer's text,
 * a tool's name, its arguments and a stop string, every stream event is an "event:" line naming
 * the type its JSON data carries, and the whole message is JSON whose tool input is an object. */
#include "../../src/anthropic/anthropic.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every event in s (takes s): "event: T\ndata: J\n\n" with J an object whose type is T. */
static void check_events(char *s) {
    if (!s) abort(); /* no allocation fails here */
    char *p = s;
    while (*p) {
        char *nl = strchr(p, '\n'), *end = strstr(p, "\n\n");
        if (strncmp(p, "event: ", 7) != 0 || !nl || !end || strncmp(nl + 1, "data: ", 6) != 0) abort();
        *nl = *end = '\0';
        cJSON *d = cJSON_Parse(nl + 7), *type = cJSON_GetObjectItemCaseSensitive(d, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, p + 7) != 0) abort();
        cJSON_Delete(d);
        p = end + 2;
    }
    free(s);
}

static void answers(const char *text) {
    cb_anthropic_stream st;
    bool late = false;
    check_events(cb_anthropic_stream_start(&st, "msg_1", text, 7, 3));
    check_events(cb_anthropic_dialect.stream_text(&st, 0, text, NULL, NULL));
    check_events(cb_anthropic_dialect.stream_call(&st, 0, 0, "call_1", text, text, &late));
    check_events(cb_anthropic_dialect.stream_call(&st, 0, 0, NULL, NULL, text, &late));
    check_events(cb_anthropic_dialect.stream_text(&st, 0, text, NULL, NULL));
    check_events(cb_anthropic_dialect.stream_call(&st, 0, 0, NULL, NULL, "x", &late));
    if (!late && *text) abort(); /* call 0's block was closed by the text */
    check_events(cb_anthropic_stream_end(&st, "end_turn", text, 4, 3, 2));
    check_events(cb_anthropic_dialect.stream_error(NULL, 0, 503, "server_error", text));
    struct cobatch_tool_call call = {.name = (char *)text, .arguments = (char *)text};
    const char *ids[] = {"call_1"};
    cb_anthropic_message m = {.text = text, .calls = &call, .n_calls = 1, .call_ids = ids, .stop_reason = "tool_use"};
    char *j = cb_anthropic_message_json("msg_1", "m", &m);
    cJSON *o = cJSON_Parse(j), *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    cJSON *last = cJSON_GetArrayItem(content, cJSON_GetArraySize(content) - 1);
    if (!o || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(last, "input"))) abort();
    cJSON_Delete(o);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool count = data[0] & 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    cb_openai_error e;
    cJSON *root = cb_openai_has_nul(body, len) ? NULL : cb_openai_json_parse(body, len, &e), *chat = NULL;
    if (root && cb_anthropic_to_chat(root, count, &chat, &e) == 0) {
        cb_openai_request r;
        if (!chat) abort();
        if (cb_openai_parse_json(CB_OPENAI_CHAT, NULL, chat, &r, &e) == 0) {
            const struct cobatch_request_params *p = &r.params;
            if (r.n != 1 || !p->messages || p->n_messages < 1 || r.echo || p->logprobs) abort();
            if (!count && !cJSON_GetObjectItemCaseSensitive(chat, "max_tokens")) abort();
        } else if (e.status != 400 && e.status != 503) {
            abort();
        }
        cb_openai_request_free(&r);
        cJSON_Delete(chat);
    } else if (root && (chat || (e.status != 400 && e.status != 503))) {
        abort();
    }
    cJSON_Delete(root);
    char *text = strndup(body, len);
    if (text) answers(text);
    free(text);
    return 0;
}
