/* libFuzzer: OpenAI's Responses API. A body (first byte: a response or an input_tokens one) is
 * translated to a chat request and parsed as the server does; what is accepted is consistent, what
 * is refused is a 400 (or 503). Then the answer side: with the input's text as the answer's text,
 * a function's name and its arguments, every stream event is an "event:" line naming the type its
 * JSON data carries, numbered in order, and the whole response is JSON whose items hold what went
 * out. */
#include "../../src/responses/responses.h"

#include <cjson/cJSON.h>
#include <cobatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every event in s (takes s): "event: T\ndata: J\n\n" with J an object whose type is T and whose
 * sequence_number follows *seq. */
static void check_events(char *s, int *seq) {
    if (!s) abort(); /* no allocation fails here */
    char *p = s;
    while (*p) {
        char *nl = strchr(p, '\n'), *end = strstr(p, "\n\n");
        if (strncmp(p, "event: ", 7) != 0 || !nl || !end || strncmp(nl + 1, "data: ", 6) != 0) abort();
        *nl = *end = '\0';
        cJSON *d = cJSON_Parse(nl + 7), *type = cJSON_GetObjectItemCaseSensitive(d, "type");
        cJSON *n = cJSON_GetObjectItemCaseSensitive(d, "sequence_number");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, p + 7) != 0) abort();
        if (!cJSON_IsNumber(n) || n->valueint != (*seq)++) abort();
        cJSON_Delete(d);
        p = end + 2;
    }
    free(s);
}

static void answers(const char *text) {
    cb_responses_stream st;
    bool late = false;
    int seq = 0;
    cJSON *echo = cJSON_CreateObject();
    check_events(cb_responses_stream_start(&st, "resp_1", 1, text, echo), &seq);
    check_events(cb_responses_dialect.stream_text(&st, 0, text, NULL, NULL), &seq);
    check_events(cb_responses_dialect.stream_call(&st, 0, 0, "call_1", text, text, &late), &seq);
    check_events(cb_responses_dialect.stream_call(&st, 0, 0, NULL, NULL, text, &late), &seq);
    check_events(cb_responses_dialect.stream_text(&st, 0, text, NULL, NULL), &seq);
    check_events(cb_responses_dialect.stream_call(&st, 0, 0, NULL, NULL, "x", &late), &seq);
    if (!late && *text) abort(); /* call 0's item was closed by the text */
    /* the final response holds the items streamed: the call's arguments whole */
    char *end = cb_responses_stream_end(&st, "stop", (cb_responses_usage){4, 3, 2, 1});
    char *data = end ? strstr(end, "event: response.completed\ndata: ") : NULL;
    if (!data) abort();
    cJSON *o = cJSON_Parse(strchr(data, '\n') + 7),
          *out = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "response"), "output");
    for (cJSON *it = out ? out->child : NULL; it; it = it->next) {
        cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
        size_t want = 2 * strlen(text) + (*text ? 0 : 1); /* with no text between, the "x" went in too */
        if (args && (!cJSON_IsString(args) || strlen(args->valuestring) != want)) abort();
    }
    cJSON_Delete(o);
    check_events(end, &seq);
    check_events(cb_responses_dialect.stream_error(&st, 0, 503, "server_error", text), &seq);
    cb_responses_stream_free(&st);
    struct cobatch_tool_call call = {.name = (char *)text, .arguments = (char *)text};
    const char *ids[] = {"call_1"};
    cb_responses_answer a = {.text = text, .calls = &call, .n_calls = 1, .call_ids = ids, .finish = "length"};
    char *j = cb_responses_json("resp_1", 1, "m", echo, &a);
    o = cJSON_Parse(j);
    out = cJSON_GetObjectItemCaseSensitive(o, "output");
    if (!o || cJSON_GetArraySize(out) != (*text ? 2 : 1)) abort();
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "status")), "incomplete") != 0) abort();
    cJSON_Delete(o);
    cJSON_Delete(echo);
    free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool count = data[0] & 1;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    cb_openai_error e;
    cJSON *root = cb_openai_has_nul(body, len) ? NULL : cb_openai_json_parse(body, len, &e), *chat = NULL, *echo;
    if (root && cb_responses_to_chat(root, count, &chat, &echo, &e) == 0) {
        cb_openai_request r;
        if (!chat || !echo) abort();
        if (cb_openai_parse_json(CB_OPENAI_CHAT, NULL, chat, &r, &e) == 0) {
            const struct cobatch_request_params *p = &r.params;
            if (r.n != 1 || !p->messages || p->n_messages < 1 || r.echo || p->logprobs) abort();
        } else if (e.status != 400 && e.status != 503) {
            abort();
        }
        cb_openai_request_free(&r);
        cJSON_Delete(chat);
        cJSON_Delete(echo);
    } else if (root && (chat || (e.status != 400 && e.status != 503))) {
        abort();
    }
    cJSON_Delete(root);
    char *text = strndup(body, len);
    if (text) answers(text);
    free(text);
    return 0;
}
