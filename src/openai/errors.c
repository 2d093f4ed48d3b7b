/* errors.c — the refusal every OpenAI-shaped parser writes (a 400 naming the field at fault, a 503
 * when memory ran out), and OpenAI's error object. */
#include "openai.h"

#include <stdarg.h>
#include <cjson/cJSON.h>
#include <stdio.h>

int cb_openai_bad(cb_openai_error *e, const char *param, const char *fmt, ...) {
    *e = (cb_openai_error){.status = 400, .type = "invalid_request_error"};
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}

int cb_openai_nomem(cb_openai_error *e) {
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
