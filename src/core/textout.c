#include "textout.h"
#include "../util/buf.h"
#include "../util/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(char **p, size_t *cap, size_t need);

int cb_textout_init(cb_textout *t, const char *const *stops, size_t n_stops) {
    memset(t, 0, sizeof(*t));
    t->stop_hit = -1;
    if (n_stops) {
        t->stops = calloc(n_stops, sizeof(char *));
        t->stop_at = calloc(n_stops, sizeof(size_t));
        if (!t->stops || !t->stop_at) {
            cb_textout_free(t);
            return -1;
        }
    }
    size_t longest = 0;
    for (size_t i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        t->stops[t->n_stops] = strdup(stops[i]);
        if (!t->stops[t->n_stops]) {
            cb_textout_free(t);
            return -1;
        }
        size_t l = strlen(stops[i]);
        if (l > longest) longest = l;
        t->stop_at[t->n_stops++] = i;
    }
    /* A release is at most what was held (under the longest stop string, plus an unfinished
     * character) and one piece; each byte may become 3 (U+FFFD). */
    if (!reserve(&t->out, &t->out_cap, (longest + 4 + CB_TEXTOUT_PIECE_MAX) * 3 + 1)) {
        cb_textout_free(t);
        return -1;
    }
    t->out[0] = '\0';
    return 0;
}

void cb_textout_free(cb_textout *t) {
    for (size_t i = 0; i < t->n_stops; i++)
        free(t->stops[i]);
    free(t->stops);
    free(t->stop_at);
    free(t->buf);
    free(t->out);
    memset(t, 0, sizeof(*t));
}

static bool reserve(char **p, size_t *cap, size_t need) { return cb_grow((void **)p, cap, need, 1, 64); }

/* Copies buf[emitted, end) to out, replacing invalid bytes by U+FFFD, and advances emitted. */
static void release(cb_textout *t, size_t end, const char **out, size_t *out_len) {
    size_t n = end - t->emitted;
    if (!reserve(&t->out, &t->out_cap, n * 3 + 1)) { /* each bad byte may become 3 bytes */
        t->failed = true;
        *out = "";
        *out_len = 0;
        return;
    }
    *out_len = cb_utf8_sanitize(t->buf + t->emitted, n, t->out);
    t->emitted = end;
    *out = t->out;
}

/* Longest suffix of buf[from, len) that is a proper prefix of a stop string. */
static size_t stop_holdback(const cb_textout *t, size_t from) {
    size_t best = 0;
    for (size_t i = 0; i < t->n_stops; i++) {
        size_t sl = strlen(t->stops[i]);
        size_t k = sl - 1 < t->len - from ? sl - 1 : t->len - from;
        for (; k > best; k--) {
            if (memcmp(t->buf + t->len - k, t->stops[i], k) == 0) {
                best = k;
                break;
            }
        }
    }
    return best;
}

/* Earliest stop string starting at or after from; returns its offset or SIZE_MAX. */
/* Where the first stop string starts at or after from (SIZE_MAX: none); *which: its index in
 * init's list (the earliest listed of those starting there). */
static size_t find_stop(const cb_textout *t, size_t from, long *which) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < t->n_stops; i++) {
        size_t sl = strlen(t->stops[i]);
        /* O(held * stop length): held text is shorter than the longest stop string plus a piece */
        for (size_t p = from; p + sl <= t->len && p < best; p++) {
            if (memcmp(t->buf + p, t->stops[i], sl) == 0) {
                best = p;
                *which = (long)t->stop_at[i];
                break;
            }
        }
    }
    return best;
}

void cb_textout_set_indent(cb_textout *t, size_t n) { t->min_indent = n; }

/* Where a line that starts too little indented has its first character (SIZE_MAX: none yet), the
 * lines checked as far as the text goes. A line is checked once its first non-blank has come (a
 * newline: an empty line ends the output, as in llama-server); the first line, which continues the
 * prompt's, is not. */
static size_t short_indent(cb_textout *t) {
    if (t->min_indent == 0) return SIZE_MAX;
    for (;;) {
        const char *nl = t->line_from < t->len ? memchr(t->buf + t->line_from, '\n', t->len - t->line_from) : NULL;
        if (t->line_from == 0) { /* the first line: on to the line after its newline */
            if (!nl) return SIZE_MAX;
            t->line_from = (size_t)(nl - t->buf) + 1;
            continue;
        }
        size_t p = t->line_from;
        while (p < t->len && (t->buf[p] == ' ' || t->buf[p] == '\t'))
            p++;
        if (p >= t->len) return SIZE_MAX;               /* only blanks so far */
        if (p - t->line_from < t->min_indent) return p; /* an empty line too, as llama-server ends there */
        const char *next = memchr(t->buf + p, '\n', t->len - p);
        if (!next) return SIZE_MAX; /* this line is fine; the next is checked once it starts */
        t->line_from = (size_t)(next - t->buf) + 1;
    }
}

bool cb_textout_push(cb_textout *t, const char *piece, size_t n, const char **out, size_t *out_len) {
    *out = "";
    *out_len = 0;
    if (t->stopped) return true;
    if (!reserve(&t->buf, &t->cap, t->len + n + 1)) {
        t->failed = true;
        return false;
    }
    memcpy(t->buf + t->len, piece, n);
    t->len += n;
    t->buf[t->len] = '\0';

    long which = -1;
    size_t at = find_stop(t, t->emitted, &which), cut = short_indent(t);
    if (cut < at) {
        at = cut;
        which = CB_TEXTOUT_INDENT;
    }
    if (at != SIZE_MAX) {
        t->stop_hit = which;
        t->stopped = true;
        release(t, at, out, out_len);
        return true;
    }
    size_t end = t->len - stop_holdback(t, t->emitted);
    /* do not split a character: hold back an unfinished one at the end */
    end -= cb_utf8_unfinished_tail(t->buf + t->emitted, end - t->emitted);
    if (end > t->emitted) release(t, end, out, out_len);
    return false;
}

void cb_textout_flush(cb_textout *t, const char **out, size_t *out_len) {
    *out = "";
    *out_len = 0;
    if (t->stopped || t->emitted >= t->len) return;
    release(t, t->len, out, out_len);
}

char *cb_textout_take_final(cb_textout *t, bool flush, size_t *len) {
    const char *out = "";
    *len = 0;
    if (!t->out) return NULL;
    if (flush) cb_textout_flush(t, &out, len);
    if (*len == 0) t->out[0] = '\0';
    char *s = t->out; /* flush released into t->out: out == s or "" */
    t->out = NULL;
    t->out_cap = 0;
    return s;
}
