#include "bounds.h"

#include <ctype.h>
#include <string.h>

static const char *const COUNTED[] = {"minLength", "maxLength", "minItems", "maxItems"};

const char *cb_bounds_schema(const cJSON *schema, double *value) {
    for (const cJSON *x = schema ? schema->child : NULL; x; x = x->next) {
        if (x->string && cJSON_IsNumber(x) && x->valuedouble > CB_GRAMMAR_MAX_REPEAT)
            for (size_t i = 0; i < sizeof(COUNTED) / sizeof(COUNTED[0]); i++)
                if (!strcmp(x->string, COUNTED[i])) {
                    *value = x->valuedouble;
                    return COUNTED[i];
                }
        if (cJSON_IsObject(x) || cJSON_IsArray(x)) {
            const char *k = cb_bounds_schema(x, value);
            if (k) return k;
        }
    }
    return NULL;
}

/* A decimal count at *p (after blanks), saturating; advances *p. Returns 0 when none. */
static unsigned long long count_at(const char **p, int *digits) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t')
        s++;
    unsigned long long v = 0;
    *digits = 0;
    for (; isdigit((unsigned char)*s); s++, (*digits)++)
        v = v > 1000000000000ULL ? v : v * 10 + (unsigned long long)(*s - '0');
    while (*s == ' ' || *s == '\t')
        s++;
    *p = s;
    return v;
}

unsigned long long cb_bounds_gbnf(const char *g) {
    unsigned long long worst = 0;
    for (const char *p = g; *p; p++) {
        if (*p == '#') { /* a comment, to the end of its line */
            while (p[1] && p[1] != '\n')
                p++;
        } else if (*p == '"' || *p == '[') { /* a literal or a class: its braces are characters */
            char end = *p == '"' ? '"' : ']';
            while (p[1] && p[1] != end)
                p += p[1] == '\\' && p[2] ? 2 : 1;
            if (p[1]) p++;
        } else if (*p == '{') { /* {m}, {m,}, {m,n} */
            const char *s = p + 1;
            int d1, d2 = 0;
            unsigned long long lo = count_at(&s, &d1), hi = 0;
            if (*s == ',') {
                s++;
                hi = count_at(&s, &d2);
            }
            if (*s == '}' && (d1 || d2)) {
                if (lo > CB_GRAMMAR_MAX_REPEAT && lo > worst) worst = lo;
                if (d2 && hi > CB_GRAMMAR_MAX_REPEAT && hi > worst) worst = hi;
            }
        }
    }
    return worst;
}
