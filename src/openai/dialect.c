/* dialect.c — what the translating API dialects share (see dialect.h). */
#include "dialect.h"
#include "bounds.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic unsigned long long cb_dialect_offers;

int cb_dialect_nomem(cb_openai_error *e) {
    *e = (cb_openai_error){.status = 503, .type = "server_error"};
    snprintf(e->message, sizeof(e->message), "out of memory");
    return -1;
}

bool cb_dialect_is(const cJSON *x, const char *s) { return cJSON_IsString(x) && !strcmp(x->valuestring, s); }

bool cb_dialect_whole(const cJSON *x, double lo, double hi) {
    return cJSON_IsNumber(x) && isfinite(x->valuedouble) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == floor(x->valuedouble);
}

int cb_dialect_args_depth(const char *args, const char *param, const char *what, cb_openai_error *e) {
    int depth = cb_bounds_text_depth(args);
    if (depth <= cb_bounds.json_depth) return 0;
    return cb_openai_bad(e, param, "%s nests %d levels deep, above the limit of %d (--limit json-depth)", what, depth,
                         cb_bounds.json_depth);
}

int cb_dialect_only(const cJSON *obj, const char *const *keys, const char *param, const char *where,
                    cb_openai_error *e) {
    const cJSON *k;
    cJSON_ArrayForEach(k, obj) {
        const char *const *p = keys;
        while (*p && strcmp(*p, k->string) != 0)
            p++;
        if (!*p) return cb_openai_bad(e, param ? param : k->string, "%s'%s' is not supported", where, k->string);
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

/* Replaces each `from` in buf (cap bytes, NUL-ended) by `to`, cutting what no longer fits. */
static void replace_all(char *buf, size_t cap, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(buf, from); p; p = strstr(p, from)) {
        size_t tail = strlen(p + fl), at = (size_t)(p - buf);
        if (at + tl >= cap) { /* not even the new name fits: the message ends before it */
            *p = '\0';
            return;
        }
        if (at + tl + tail >= cap) tail = cap - 1 - at - tl;
        memmove(p + tl, p + fl, tail);
        p[tl + tail] = '\0';
        memcpy(p, to, tl);
        p += tl;
    }
}

int cb_dialect_tools(const cJSON *in, cJSON *out, cb_dialect_tool_fn one, cb_openai_error *e) {
    if (!cJSON_IsArray(in)) return cb_openai_bad(e, "tools", "'tools' must be an array");
    cJSON *arr = cJSON_AddArrayToObject(out, "tools");
    if (!arr) return cb_dialect_nomem(e);
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, in) {
        char w[32];
        snprintf(w, sizeof(w), "tools[%d]", i++);
        if (one(t, w, arr, e) != 0) return -1;
    }
    return 0;
}

char *cb_dialect_join(char *a, char *b) {
    size_t na = a ? strlen(a) : 0, nb = b ? strlen(b) : 0;
    char *o = a && b ? realloc(a, na + nb + 1) : NULL;
    if (o)
        memcpy(o + na, b, nb + 1);
    else
        free(a);
    free(b);
    return o;
}

char *cb_dialect_data(char *json) {
    if (!json) return NULL;
    size_t n = strlen(json);
    char *o = malloc(n + 9);
    if (o) {
        memcpy(o, "data: ", 6);
        memcpy(o + 6, json, n);
        memcpy(o + 6 + n, "\n\n", 3);
    }
    free(json);
    return o;
}

char *cb_dialect_error_json(const cb_dialect *d, const cb_openai_error *e) {
    cb_openai_error r = *e;
    for (const char *const *m = d->params; m && *m; m += 2) {
        size_t n = strlen(m[0]);
        if (strncmp(r.param, m[0], n) != 0 || (r.param[n] && r.param[n] != '.' && r.param[n] != '[')) continue;
        char rest[sizeof(r.param)];
        snprintf(rest, sizeof(rest), "%s", r.param + n);
        snprintf(r.param, sizeof(r.param), "%s%s", m[1], rest);
        break;
    }
    for (const char *const *m = d->message; m && *m; m += 2)
        replace_all(r.message, sizeof(r.message), m[0], m[1]);
    return d->error_json(&r);
}
