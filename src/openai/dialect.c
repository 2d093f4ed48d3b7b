/* dialect.c — what the translating API dialects share (see dialect.h). */
#include "dialect.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cb_dialect_bad(cb_openai_error *e, const char *param, const char *fmt, ...) {
    *e = (cb_openai_error){.status = 400, .type = "invalid_request_error"};
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -1;
}

int cb_dialect_nomem(cb_openai_error *e) {
    *e = (cb_openai_error){.status = 503, .type = "server_error"};
    snprintf(e->message, sizeof(e->message), "out of memory");
    return -1;
}

bool cb_dialect_is(const cJSON *x, const char *s) { return cJSON_IsString(x) && !strcmp(x->valuestring, s); }

int cb_dialect_only(const cJSON *obj, const char *const *keys, const char *param, const char *where,
                    cb_openai_error *e) {
    const cJSON *k;
    cJSON_ArrayForEach(k, obj) {
        const char *const *p = keys;
        while (*p && strcmp(*p, k->string) != 0)
            p++;
        if (!*p) return cb_dialect_bad(e, param ? param : k->string, "%s'%s' is not supported", where, k->string);
    }
    return 0;
}

bool cb_dialect_sse(char **out, const char *type, const char *json) {
    size_t a = *out ? strlen(*out) : 0, n = strlen(type) + strlen(json) + 20;
    char *t = realloc(*out, a + n);
    if (!t) return false;
    snprintf(t + a, n, "event: %s\ndata: %s\n\n", type, json);
    *out = t;
    return true;
}
