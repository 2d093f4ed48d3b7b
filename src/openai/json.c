/* json.c — a request body read as JSON: UTF-8 with no NUL, well-formed (checked without allocating,
 * so that a parse that failed for want of memory is not answered as the client's mistake), then
 * parsed, with every object's keys unique (see openai.h). */
#include "openai.h"
#include "../util/buf.h"
#include "../util/utf8.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

bool cb_openai_has_nul(const char *s, size_t len) {
    if (memchr(s, '\0', len)) return true;
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < len && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* the escaped character: "\\\\u0000" is a backslash, then text */
    }
    return false;
}

/* ---------------------------------------------------------------- well-formed JSON --------- */

/* A syntax check that allocates nothing (RFC 8259), so that a parse that failed for want of memory
 * is not answered as the client's mistake. Recursive descent, nesting bounded as cJSON's. */
typedef struct {
    const char *s, *end;
    int depth;
    bool control; /* the check stopped at a raw control character inside a string */
} jscan;

static void ws(jscan *j) {
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
        j->s++;
}

static bool lit(jscan *j, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(j->end - j->s) < n || memcmp(j->s, w, n) != 0) return false;
    j->s += n;
    return true;
}

/* Four hex digits after "\\u" at j->s (which is left after them); -1 when not there. */
static long hex4(jscan *j) {
    if (j->end - j->s < 4) return -1;
    long v = 0;
    for (int k = 0; k < 4; k++) {
        char c = *j->s++;
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A string, with cJSON's rule for UTF-16 escapes: a high surrogate needs its low one next, a low
 * one never stands alone. */
static bool str(jscan *j) {
    if (j->s >= j->end || *j->s != '"') return false;
    for (j->s++; j->s < j->end;) {
        unsigned char c = (unsigned char)*j->s++;
        if (c == '"') return true;
        if (c < 0x20) { /* RFC 8259: a control character inside a string is escaped */
            j->control = true;
            return false;
        }
        if (c != '\\') continue;
        if (j->s >= j->end) return false;
        char e = *j->s++;
        if (e == 'u') {
            long u = hex4(j);
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return false;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (j->end - j->s < 2 || j->s[0] != '\\' || j->s[1] != 'u') return false;
                j->s += 2;
                long lo = hex4(j);
                if (lo < 0xDC00 || lo > 0xDFFF) return false;
            }
        } else if (!e || !strchr("\"\\/bfnrt", e)) {
            return false;
        }
    }
    return false;
}

static bool digits(jscan *j) {
    const char *a = j->s;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9')
        j->s++;
    return j->s > a;
}

static bool number(jscan *j) {
    if (j->s < j->end && *j->s == '-') j->s++;
    if (j->s < j->end && *j->s == '0')
        j->s++;
    else if (!digits(j))
        return false;
    if (j->s < j->end && *j->s == '.' && (j->s++, !digits(j))) return false;
    if (j->s < j->end && (*j->s == 'e' || *j->s == 'E')) {
        j->s++;
        if (j->s < j->end && (*j->s == '+' || *j->s == '-')) j->s++;
        if (!digits(j)) return false;
    }
    return true;
}

static bool value(jscan *j);

static bool members(jscan *j, char close, bool keyed) {
    if (++j->depth > 1000) return false;
    j->s++;
    ws(j);
    if (j->s < j->end && *j->s == close) {
        j->s++;
        j->depth--;
        return true;
    }
    for (;;) {
        ws(j);
        if (keyed) {
            if (!str(j)) return false;
            ws(j);
            if (j->s >= j->end || *j->s++ != ':') return false;
        }
        if (!value(j)) return false;
        ws(j);
        if (j->s >= j->end) return false;
        if (*j->s == close) {
            j->s++;
            j->depth--;
            return true;
        }
        if (*j->s++ != ',') return false;
    }
}

static bool value(jscan *j) {
    ws(j);
    if (j->s >= j->end) return false;
    switch (*j->s) {
    case '{': return members(j, '}', true);
    case '[': return members(j, ']', false);
    case '"': return str(j);
    case 't': return lit(j, "true");
    case 'f': return lit(j, "false");
    case 'n': return lit(j, "null");
    default: return number(j);
    }
}

/* The check, and whether it stopped at a raw control character in a string. */
static bool well_formed(const char *s, size_t len, bool *control) {
    jscan j = {s, s + len, 0, false};
    bool ok = value(&j);
    *control = j.control;
    if (!ok) return false;
    ws(&j);
    return j.s == j.end || (j.s < j.end && *j.s == '\0' && j.s + 1 == j.end);
}

bool cb_openai_json_well_formed(const char *s, size_t len) {
    bool control;
    return well_formed(s, len, &control);
}

cJSON *cb_openai_body_parse(const char *body, size_t len, cb_openai_error *e) {
    if (cb_openai_has_nul(body, len)) {
        cb_openai_bad(e, NULL, "a string contains a NUL character (\\u0000); it is not accepted");
        return NULL;
    }
    if (cb_utf8_valid_prefix(body, len, NULL) != len) {
        cb_openai_bad(e, NULL, "the body is not valid UTF-8");
        return NULL;
    }
    return cb_openai_json_parse(body, len, e);
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key given twice in object x (compared as parsed: escapes undone), or NULL; keys is
 * scratch space for sorting (*cap entries). A small object is compared pairwise, a larger one
 * sorted: O(k log k). *oom set when the scratch could not grow. */
static const cJSON *twice_in(const cJSON *x, const cJSON ***keys, size_t *cap, bool *oom_out) {
    size_t k = 0;
    for (const cJSON *c = x->child; c; c = c->next)
        k++;
    if (k <= 16) {
        for (const cJSON *a = x->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (!strcmp(a->string, b->string)) return a;
        return NULL;
    }
    if (!cb_grow((void **)keys, cap, k, sizeof(**keys), 64)) {
        *oom_out = true;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *c = x->child; c; c = c->next)
        (*keys)[i++] = c;
    qsort(*keys, k, sizeof(**keys), by_key);
    for (i = 1; i < k; i++)
        if (!strcmp((*keys)[i - 1]->string, (*keys)[i]->string)) return (*keys)[i];
    return NULL;
}

/* Every object under x (nesting bounded by the syntax check: 1000 levels). */
static const cJSON *twice_under(const cJSON *x, const cJSON ***keys, size_t *cap, bool *oom_out) {
    const cJSON *dup = cJSON_IsObject(x) ? twice_in(x, keys, cap, oom_out) : NULL;
    for (const cJSON *c = x->child; c && !dup && !*oom_out; c = c->next)
        if (cJSON_IsObject(c) || cJSON_IsArray(c)) dup = twice_under(c, keys, cap, oom_out);
    return dup;
}

/* An object's keys are unique: RFC 8259 leaves duplicates' meaning open, cJSON reads the first and
 * Python's and JavaScript's parsers the last, so a gateway that checks a body would see another
 * request than the one that runs. Returns -1 with e set (the key named), 0 when none is. */
static int duplicate_keys(const cJSON *root, cb_openai_error *e) {
    const cJSON **keys = NULL;
    size_t cap = 0;
    bool no_room = false;
    const cJSON *dup = twice_under(root, &keys, &cap, &no_room);
    free(keys);
    if (no_room) return cb_openai_nomem(e);
    if (dup) return cb_openai_bad(e, dup->string, "the key '%.100s' is given twice in one object", dup->string);
    return 0;
}

cJSON *cb_openai_json_parse(const char *s, size_t len, cb_openai_error *e) {
    /* checked first: cJSON alone takes text after the value ("{...} garbage", "{...}{...}") and
     * numbers such as 01 or 1. */
    bool control = false;
    if (!well_formed(s, len, &control)) {
        cb_openai_bad(e, NULL,
                      control ? "the body is not valid JSON: a string holds a raw control character (below "
                                "U+0020); escape it (\\n, \\t, \\u0001, ...)"
                              : "the body is not valid JSON");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(s, len);
    if (!root) {
        cb_openai_nomem(e); /* valid JSON that could not be held: the server's trouble, not the client's */
        return NULL;
    }
    if (duplicate_keys(root, e)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
