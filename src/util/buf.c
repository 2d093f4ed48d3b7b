#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cb_grow(void **items, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need) {
        if (c > SIZE_MAX / 2) return false;
        c *= 2;
    }
    if (elem && c > SIZE_MAX / elem) return false;
    void *v = realloc(*items, c * elem);
    if (!v) return false;
    *items = v;
    *cap = c;
    return true;
}

/* Room for n more bytes and the terminator. */
static bool reserve(cb_buf *b, size_t n) {
    if (b->failed) return false;
    if (n > SIZE_MAX - b->len - 1 || !cb_grow((void **)&b->s, &b->cap, b->len + n + 1, 1, 64)) {
        b->failed = true;
        return false;
    }
    return true;
}

bool cb_buf_append(cb_buf *b, const void *p, size_t n) {
    if (!reserve(b, n)) return false;
    if (n) memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
    return true;
}

bool cb_buf_printf(cb_buf *b, const char *fmt, ...) {
    if (!reserve(b, 0)) return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= b->cap - b->len && reserve(b, (size_t)n)) {
        va_start(ap, fmt);
        n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    if (n < 0 || b->failed) {
        b->failed = true;
        b->s[b->len] = '\0';
        return false;
    }
    b->len += (size_t)n;
    return true;
}

const char *cb_buf_str(const cb_buf *b) { return b->s ? b->s : ""; }

char *cb_buf_take(cb_buf *b, size_t *len) {
    char *s = b->s;
    if (len) *len = b->len;
    *b = (cb_buf){0};
    return s;
}

void cb_buf_free(cb_buf *b) {
    free(b->s);
    *b = (cb_buf){0};
}
