/* reply.c — the server's answers of JSON and its errors, in OpenAI's shape or a dialect's (see
 * server_internal.h). */
#include "server_internal.h"
#include "../openai/openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void count_status(srv *s, int status) {
    if (status >= 500)
        s->m.http_errors_5xx++;
    else if (status >= 400)
        s->m.http_errors_4xx++;
}

void cb_srv_reply_json(srv *s, cb_conn *c, int status, const char *json, const char *extra) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
    if (!json) status = 500, json = oom;
    if (!extra && (status == 429 || status == 503)) extra = "Retry-After: 1\r\n";
    count_status(s, status);
    cb_conn_reply(c, status, "application/json", extra, json, strlen(json));
}

static void vreply_error(srv *s, cb_conn *c, const cb_dialect *d, int status, const char *type, const char *param,
                         const char *fmt, va_list ap) {
    cb_openai_error e = {.status = status, .type = type};
    snprintf(e.param, sizeof(e.param), "%s", param ? param : "");
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    char *j = cb_dialect_error_json(d, &e);
    cb_srv_reply_json(s, c, status, j, NULL);
    free(j);
}

void cb_srv_reply_error(srv *s, cb_conn *c, int status, const char *type, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreply_error(s, c, &cb_openai_dialect, status, type, param, fmt, ap);
    va_end(ap);
}

void cb_srv_dreply_error(srv *s, cb_conn *c, const cb_dialect *d, int status, const char *type, const char *param,
                         const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreply_error(s, c, d, status, type, param, fmt, ap);
    va_end(ap);
}

void cb_srv_reply_cjson(srv *s, cb_conn *c, cJSON *o) {
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cb_srv_reply_json(s, c, 200, j, NULL);
    free(j);
}
