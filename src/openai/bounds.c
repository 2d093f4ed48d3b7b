#include "bounds.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const LOWER[] = {"minLength", "minItems"}, *const UPPER[] = {"maxLength", "maxItems"};

static bool named(const char *k, const char *const names[2]) { return !strcmp(k, names[0]) || !strcmp(k, names[1]); }

unsigned long long cb_bounds_reach(long long max_tokens) {
    if (cb_bounds.ctx_tokens <= 0 || cb_bounds.token_bytes <= 0) return ULLONG_MAX;
    long long n = max_tokens > 0 && max_tokens < cb_bounds.ctx_tokens ? max_tokens : cb_bounds.ctx_tokens;
    return (unsigned long long)n * (unsigned long long)cb_bounds.token_bytes;
}

const char *cb_bounds_schema(const cJSON *schema, unsigned long long reach, double *value) {
    for (const cJSON *x = schema ? schema->child : NULL; x; x = x->next) {
        if (x->string && cJSON_IsNumber(x) && x->valuedouble > CB_GRAMMAR_MAX_REPEAT &&
            (named(x->string, LOWER) || (named(x->string, UPPER) && x->valuedouble < (double)reach))) {
            *value = x->valuedouble;
            return x->string;
        }
        if (cJSON_IsObject(x) || cJSON_IsArray(x)) {
            const char *k = cb_bounds_schema(x, reach, value);
            if (k) return k;
        }
    }
    return NULL;
}

unsigned long long cb_bounds_gbnf(const char *g, unsigned long long reach) {
    cb_gbnf_shape sh = cb_gbnf_scan(g);
    if (sh.repeat_min > CB_GRAMMAR_MAX_REPEAT) return sh.repeat_min;
    return sh.repeat_max > CB_GRAMMAR_MAX_REPEAT && sh.repeat_max < reach ? sh.repeat_max : 0;
}

cb_bounds_limits cb_bounds = {.json_depth = 128, .name_length = 256, .tools = 512};

/* The deepest group nesting of a regular expression (escapes and classes skipped). */
static int pattern_depth(const char *p) {
    int d = 0, most = 0;
    for (; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '[') { /* a class: its parentheses are characters */
            while (p[1] && p[1] != ']')
                p += p[1] == '\\' && p[2] ? 2 : 1;
        } else if (*p == '(') {
            if (++d > most) most = d;
        } else if (*p == ')' && d) {
            d--;
        }
    }
    return most;
}

static int shape_at(const cJSON *v, int depth, int max_depth, int max_name, char *why, size_t n) {
    if (depth > max_depth) {
        snprintf(why, n, "nests deeper than %d levels (--limit json-depth)", max_depth);
        return -1;
    }
    for (const cJSON *x = v ? v->child : NULL; x; x = x->next) {
        if (x->string && strlen(x->string) > (size_t)max_name) {
            snprintf(why, n, "a key of %zu bytes ('%.40s...'), above the limit of %d (--limit name-length)",
                     strlen(x->string), x->string, max_name);
            return -1;
        }
        if (x->string && !strcmp(x->string, "pattern") && cJSON_IsString(x) &&
            pattern_depth(x->valuestring) + depth > max_depth) {
            snprintf(why, n, "a pattern whose groups nest past %d levels (--limit json-depth)", max_depth);
            return -1;
        }
        if ((cJSON_IsObject(x) || cJSON_IsArray(x)) && shape_at(x, depth + 1, max_depth, max_name, why, n)) return -1;
    }
    return 0;
}

int cb_bounds_json_shape(const cJSON *v, int max_depth, int max_name, char *why, size_t n) {
    return shape_at(v, 1, max_depth, max_name, why, n);
}

int cb_bounds_text_depth(const char *s) {
    int d = 0, most = 0;
    for (; *s; s++) {
        if (*s == '"') { /* a string: its brackets are text */
            while (s[1] && s[1] != '"')
                s += s[1] == '\\' && s[2] ? 2 : 1;
            if (s[1]) s++;
        } else if (*s == '[' || *s == '{') {
            if (d < (1 << 30) && ++d > most) most = d;
        } else if ((*s == ']' || *s == '}') && d) {
            d--;
        }
    }
    return most;
}
