#include "gbnf.h"

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>

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
            int d1, d2 = 0;
            bool comma = false;
            unsigned long long lo = count_at(&s, &d1), hi = 0;
            if (*s == ',') {
                comma = true;
                s++;
                hi = count_at(&s, &d2);
            }
            if (*s != '}' || !(d1 || d2)) break;
            if (d2 && hi < lo) sh.inverted++;
            if (lo > sh.repeat_min) sh.repeat_min = lo;
            if (comma && d2 && hi > sh.repeat_max) sh.repeat_max = hi;
            /* {m}: none optional; {m,n}: n - m; {m,} and an upper bound llama.cpp drops: one rule */
            repeat(&sh, &last, lo, !comma ? 0 : d2 && hi <= CB_GBNF_MAX_REPEAT ? (hi > lo ? hi - lo : 0) : 1);
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
