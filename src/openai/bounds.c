#include "bounds.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const LOWER[] = {"minLength", "minItems"}, *const UPPER[] = {"maxLength", "maxItems"};

static bool named(const char *k, const char *const names[2]) { return !strcmp(k, names[0]) || !strcmp(k, names[1]); }

const char *cb_bounds_schema(const cJSON *schema, double *value) {
    for (const cJSON *x = schema ? schema->child : NULL; x; x = x->next) {
        if (x->string && cJSON_IsNumber(x) && x->valuedouble > (double)CB_GRAMMAR_MAX_COUNT &&
            (named(x->string, LOWER) || named(x->string, UPPER))) {
            *value = x->valuedouble;
            return x->string;
        }
        if (cJSON_IsObject(x) || cJSON_IsArray(x)) {
            const char *k = cb_bounds_schema(x, value);
            if (k) return k;
        }
    }
    return NULL;
}

unsigned long long cb_bounds_gbnf(const char *g) {
    cb_gbnf_shape sh = cb_gbnf_scan(g);
    unsigned long long big = sh.repeat_min > sh.repeat_max ? sh.repeat_min : sh.repeat_max;
    return big > CB_GRAMMAR_MAX_COUNT ? big : 0;
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
