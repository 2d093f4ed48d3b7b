#include "gbnf.h"

#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

#define SATURATE (1ULL << 62)

static unsigned long long add(unsigned long long a, unsigned long long b) {
    return a > SATURATE - b || b > SATURATE ? SATURATE : a + b;
}

static unsigned long long mul(unsigned long long a, unsigned long long b) {
    return a && b > SATURATE / a ? SATURATE : a * b;
}

/* Blanks, line ends and comments, as llama.cpp's parser skips them inside a group (wherever it is:
 * looser than the parser is safe). */
static const char *blank_end(const char *s) {
    for (;;) {
        if (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') {
            s++;
        } else if (*s == '#') {
            while (*s && *s != '\n')
                s++;
        } else {
            return s;
        }
    }
}

/* llama.cpp's rewrite of the symbol before a repetition (*last elements): lo copies of it stay in
 * the sequence (none for 0), then n_opt optional copies each in a rule of its own (the symbol, a
 * reference, an alternative and an end; one for {m,} and for a dropped bound), then a reference to
 * the first. The repeated symbol is all of that afterwards: a repetition right after another
 * copies the whole ("<100 bytes>"{2000}+++ copies 200,000 elements per '+'). */
static void repeat(cb_gbnf_shape *sh, unsigned long long *last, unsigned long long lo, unsigned long long n_opt) {
    unsigned long long kept = mul(lo, *last);
    sh->elements = add(sh->elements, add(add(kept, mul(n_opt, add(*last, 3))), 1));
    *last = add(kept, n_opt ? 1 : 0);
}

/* A decimal count at *p (after blanks), saturating; advances *p. *digits: how many were read. */
static unsigned long long count_at(const char **p, int *digits) {
    const char *s = blank_end(*p);
    unsigned long long v = 0;
    *digits = 0;
    for (; isdigit((unsigned char)*s); s++, (*digits)++)
        v = v > 1000000000000ULL ? v : v * 10 + (unsigned long long)(*s - '0');
    *p = blank_end(s);
    return v;
}

/* A repetition's counts after its '{' at *s, {m}, {m,} or {m,n}: hi is m, ULLONG_MAX or n, ranged
 * whether a comma was given; *s is left at its '}'. false when it is not one (no '}', no count). */
static bool counts_at(const char **s, unsigned long long *lo, unsigned long long *hi, bool *ranged) {
    int d1, d2 = 0;
    *ranged = false;
    *lo = count_at(s, &d1);
    *hi = *lo;
    if (**s == ',') {
        *ranged = true;
        (*s)++;
        *hi = count_at(s, &d2);
        if (!d2) *hi = ULLONG_MAX;
    }
    return **s == '}' && (d1 || d2);
}

/* The bytes of the character at p as llama.cpp's parser reads it (decode_utf8): as many as its first
 * byte says, whatever they are, up to the text's end. A lead byte takes the bytes after it even
 * when they are a closing ']' or '"': "[0-\xe4@]" is not closed there. */
static size_t char_len(const char *p) {
    static const unsigned char LEN[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    size_t n = LEN[(unsigned char)*p >> 4], i = 1;
    while (i < n && p[i])
        i++;
    return i;
}

/* The end of a literal or class opened at p (its closing character, or the text's end). */
static const char *quoted_end(const char *p, char close, unsigned long long *chars) {
    *chars = 0;
    while (p[1] && p[1] != close) {
        p += p[1] == '\\' && p[2] ? 2 : char_len(p + 1);
        (*chars)++;
    }
    return p[1] ? p + 1 : p;
}

cb_gbnf_shape cb_gbnf_scan(const char *g) {
    cb_gbnf_shape sh = {0, 0, 0, 0, 0};
    size_t depth = 0;
    unsigned long long last = 0; /* elements of the symbol a repetition would copy */
    for (const char *p = g; *p; p++) {
        unsigned long long n;
        switch (*p) {
        case '#': /* a comment, to the end of its line */
            while (p[1] && p[1] != '\n')
                p++;
            break;
        case '"':
            p = quoted_end(p, '"', &n);
            last = n ? n : 1;
            sh.elements = add(sh.elements, last);
            break;
        case '[': /* a class: one element per character or range, and its end */
            p = quoted_end(p, ']', &n);
            last = n + 1;
            sh.elements = add(sh.elements, last);
            break;
        case '<': /* a token reference <[id]> or <piece> */
            p = quoted_end(p, '>', &n);
            last = 1;
            sh.elements = add(sh.elements, 1);
            break;
        case '(':
            if (++depth > sh.depth) sh.depth = depth;
            last = 0;
            break;
        case ')': /* the group is one reference in the sequence around it */
            if (depth) depth--;
            last = 1;
            sh.elements = add(sh.elements, 1);
            break;
        case '*': /* {0,} */
        case '?': /* {0,1} */ repeat(&sh, &last, 0, 1); break;
        case '+': /* {1,} */ repeat(&sh, &last, 1, 1); break;
        case '{': { /* {m}, {m,}, {m,n}: m copies, then n - m optional ones each in a rule of its own */
            const char *s = p + 1;
            unsigned long long lo, hi;
            bool ranged;
            if (!counts_at(&s, &lo, &hi, &ranged)) break;
            if (hi < lo) sh.inverted++;
            if (lo > sh.repeat_min) sh.repeat_min = lo;
            if (ranged && hi != ULLONG_MAX && hi > sh.repeat_max) sh.repeat_max = hi;
            /* {m}: none optional; {m,n}: n - m; {m,} and an upper bound llama.cpp drops: one rule */
            repeat(&sh, &last, lo,
                   !ranged                                        ? 0
                   : hi != ULLONG_MAX && hi <= CB_GBNF_MAX_REPEAT ? (hi > lo ? hi - lo : 0)
                                                                  : 1);
            p = s;
            break;
        }
        default:
            if (isalpha((unsigned char)*p) || *p == '_' || *p == '.') { /* a rule name, or any character */
                while (isalnum((unsigned char)p[1]) || p[1] == '-' || p[1] == '_')
                    p++;
                last = 1;
                sh.elements = add(sh.elements, 1);
            }
            break;
        }
    }
    return sh;
}

/* ---- widening: repetitions past llama.cpp's 2000, rewritten as rules of counts it keeps ---- */

#define K CB_GBNF_MAX_REPEAT

typedef struct {
    cb_buf *defs;     /* the rules this rewrite adds */
    const char *name; /* its rule's name; the element is name-e, blocks name-b1, name-b2, ... */
    int levels;       /* blocks defined so far: level L is K of level L - 1 (level 0: the element) */
} widen_ctx;

/* A reference to the rule that matches K^level elements, defined on first use. */
static void block(widen_ctx *w, int level, cb_buf *out) {
    while (w->levels < level) {
        w->levels++;
        if (w->levels == 1)
            cb_buf_printf(w->defs, "%s-b1 ::= %s-e{%d}\n", w->name, w->name, K);
        else
            cb_buf_printf(w->defs, "%s-b%d ::= %s-b%d{%d}\n", w->name, w->levels, w->name, w->levels - 1, K);
    }
    if (level)
        cb_buf_printf(out, " %s-b%d", w->name, level);
    else
        cb_buf_printf(out, " %s-e", w->name);
}

/* Exactly q copies of the level's block: q = a x K + b is a blocks of the next level, then b. */
static void exactly(widen_ctx *w, unsigned long long q, int level, cb_buf *out) {
    if (q >= K) exactly(w, q / K, level + 1, out);
    if (q % K) {
        block(w, level, out);
        cb_buf_printf(out, "{%llu}", q % K);
    }
}

/* 0 to m copies of the level's block, one parse for each count: with m = q x K + r, either fewer
 * than q blocks of the next level and then fewer than K, or q of them and then r at most. The two
 * alternatives match disjoint lengths, so llama.cpp's parser keeps a few stacks, not one a count. */
static void up_to(widen_ctx *w, unsigned long long m, int level, cb_buf *out) {
    if (m <= K) {
        if (!m) return;
        block(w, level, out);
        cb_buf_printf(out, "{0,%llu}", m);
        return;
    }
    unsigned long long q = m / K, r = m % K;
    cb_buf_append(out, " (", 2);
    up_to(w, q - 1, level + 1, out);
    block(w, level, out);
    cb_buf_printf(out, "{0,%d} |", K - 1);
    exactly(w, q, level + 1, out);
    up_to(w, r, level, out);
    cb_buf_append(out, " )", 2);
}

/* The first repetition llama.cpp would not keep: where its element starts (s), its '{' (brace),
 * the end of its counts (end) and the counts (hi ULLONG_MAX for {m,}). */
typedef struct {
    size_t s, brace, end;
    unsigned long long lo, hi;
} wide_rep;

static bool wide_counts(unsigned long long lo, unsigned long long hi) {
    return (lo > K || (hi != ULLONG_MAX && hi > K)) && lo <= hi && lo <= CB_GBNF_MAX_WIDE &&
           (hi == ULLONG_MAX || hi <= CB_GBNF_MAX_WIDE);
}

/* Reads g as cb_gbnf_scan does, keeping where the symbol before each repetition starts. */
static bool first_wide(const char *g, wide_rep *out) {
    enum { MAX_OPEN = 1024 };
    size_t open[MAX_OPEN], depth = 0;
    long long last = -1; /* where the symbol a repetition would repeat starts (-1: none) */
    unsigned long long n;
    for (const char *p = g; *p; p++) {
        const char *at = p;
        switch (*p) {
        case '#':
            while (p[1] && p[1] != '\n')
                p++;
            break;
        case '\n':
            if (!depth) last = -1; /* outside groups a line's end ends the rule */
            break;
        case '|':
        case ':':
        case '=': last = -1; break;
        case '"': p = quoted_end(p, '"', &n), last = at - g; break;
        case '[': p = quoted_end(p, ']', &n), last = at - g; break;
        case '<': p = quoted_end(p, '>', &n), last = at - g; break;
        case '!': /* a token's inverse, !<...>: one symbol with it */
            if (p[1] == '<') p = quoted_end(p + 1, '>', &n), last = at - g;
            break;
        case '.': last = at - g; break;
        case '(':
            if (depth < MAX_OPEN) open[depth] = (size_t)(at - g);
            depth++;
            last = -1;
            break;
        case ')':
            last = -1;
            if (depth && --depth < MAX_OPEN) last = (long long)open[depth];
            break;
        case '{': {
            const char *s = p + 1;
            unsigned long long lo, hi;
            bool ranged;
            if (!counts_at(&s, &lo, &hi, &ranged)) break;
            if (last >= 0 && wide_counts(lo, hi)) {
                *out = (wide_rep){(size_t)last, (size_t)(at - g), (size_t)(s + 1 - g), lo, hi};
                return true;
            }
            p = s;
            break;
        }
        default:
            if (isalnum((unsigned char)*p) || *p == '-' || *p == '_') { /* a rule's name */
                while (isalnum((unsigned char)p[1]) || p[1] == '-' || p[1] == '_')
                    p++;
                last = at - g;
            }
            break;
        }
    }
    return false;
}

/* The rules for one repetition, into defs; its rule's body (after "name ::=") into body. */
static void widen_one(const char *t, const wide_rep *r, const char *name, cb_buf *defs, cb_buf *body) {
    size_t e_end = r->brace;
    while (e_end > r->s && isspace((unsigned char)t[e_end - 1]))
        e_end--;
    /* in a group: a group's newlines and comments between a symbol and its repetitions may be in it */
    cb_buf_printf(defs, "%s-e ::= (%.*s\n)\n", name, (int)(e_end - r->s), t + r->s);
    widen_ctx w = {defs, name, 0};
    exactly(&w, r->lo, 0, body);
    if (r->hi == ULLONG_MAX) {
        block(&w, 0, body);
        cb_buf_append(body, "*", 1);
    } else {
        up_to(&w, r->hi - r->lo, 0, body);
    }
}

char *cb_gbnf_widen(const char *gbnf, size_t *n_wide) {
    char prefix[32];
    for (unsigned k = 0;; k++) { /* a name the text does not hold */
        snprintf(prefix, sizeof prefix, "cbwide%u", k);
        if (!strstr(gbnf, prefix)) break;
    }
    cb_buf text = {0}, defs = {0};
    cb_buf_append(&text, gbnf, strlen(gbnf));
    size_t n = 0;
    wide_rep r;
    while (!text.failed && !defs.failed && n < CB_GBNF_MAX_WIDENED && first_wide(cb_buf_str(&text), &r)) {
        char name[48];
        snprintf(name, sizeof name, "%s-%zu", prefix, n++);
        const char *t = cb_buf_str(&text);
        cb_buf body = {0};
        widen_one(t, &r, name, &defs, &body);
        cb_buf_printf(&defs, "%s ::=%s\n", name, cb_buf_str(&body));
        cb_buf next = {0}; /* the text with the repetition replaced by a reference to its rule */
        cb_buf_append(&next, t, r.s);
        cb_buf_printf(&next, " %s ", name);
        cb_buf_append(&next, t + r.end, text.len - r.end);
        next.failed |= body.failed;
        cb_buf_free(&body);
        cb_buf_free(&text);
        text = next;
    }
    /* the rules first: a name llama.cpp's parser meets first inside a group counts as a rule of that
       group, and a group's rules times its repetition count must stay within 2000 */
    if (n) {
        cb_buf_append(&defs, cb_buf_str(&text), text.len);
        cb_buf_free(&text);
        text = defs;
        defs = (cb_buf){0};
    }
    bool failed = text.failed || defs.failed;
    cb_buf_free(&defs);
    char *out = failed ? NULL : cb_buf_take(&text, NULL);
    cb_buf_free(&text);
    if (!failed && !out) out = calloc(1, 1); /* an empty text */
    if (out && n_wide) *n_wide = n;
    return out;
}
