/* gbnf.h — the shape of a GBNF text, read before llama.cpp's parser sees it. Pure: text in, no
 * allocation, O(length), no recursion.
 *
 * llama.cpp's grammar parser recurses once per nested group (a 40 KB grammar of 20,000 nested
 * parentheses overflows its stack), copies the symbol before a repetition {m,n} up to n times
 * ("<1 MB literal>"{2000} would be two billion elements), and keeps a repetition count only up to
 * 2000 (a larger upper bound is silently dropped: {m,n} becomes {m,}; a larger lower one fails the
 * parse), and loops without end on {m,n} with n < m. This scan measures all four so that a grammar
 * past a bound is refused before the parser runs. */
#ifndef CB_GBNF_H
#define CB_GBNF_H

#include <stddef.h>

#define CB_GBNF_MAX_REPEAT 2000 /* llama-grammar.cpp's MAX_REPETITION_THRESHOLD */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t depth;                  /* the deepest nesting of parenthesised groups */
    unsigned long long elements;   /* about how many grammar elements parsing makes, repetitions copied
                                      (an upper estimate; saturates near 2^62; a dropped upper bound
                                      counts as llama.cpp's {m,}; a repetition right after another,
                                      x{2000}+, copies everything the first made) */
    unsigned long long repeat_min; /* the largest lower count: m of {m}, {m,}, {m,n} (0: none) */
    unsigned long long repeat_max; /* the largest upper bound: n of {m,n}, {,n} (0: none) */
    size_t inverted;               /* repetitions {m,n} with n below m: llama.cpp's parser counts n - m
                                      optional copies in unsigned arithmetic and makes rules until memory
                                      runs out ("a"{3,2}, 17 bytes, never returns) */
} cb_gbnf_shape;

/* Reads gbnf's groups, symbols and repetitions outside its string literals, character classes,
 * token references (<...>) and comments. */
cb_gbnf_shape cb_gbnf_scan(const char *gbnf);

#ifdef __cplusplus
}
#endif

#endif
