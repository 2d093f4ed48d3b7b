/* gbnf.h — the shape of a GBNF text, read before llama.cpp's parser sees it, and the rewrite of the
 * repetitions it would not keep. Pure: text in (the scan: no allocation, O(length), no recursion).
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
#define CB_GBNF_MAX_WIDE                                                                                               \
    2147483647ULL              /* the largest count cb_gbnf_widen rewrites (a JSON schema's                            \
                                  counts are C ints in llama.cpp's converter) */
#define CB_GBNF_MAX_WIDENED 64 /* repetitions one text may have rewritten */

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

/* gbnf with every repetition whose counts llama.cpp's parser would not keep (a lower count or an
 * upper bound above CB_GBNF_MAX_REPEAT, up to CB_GBNF_MAX_WIDE; the first CB_GBNF_MAX_WIDENED of
 * them) rewritten as rules of the same language whose counts it keeps: x{m,n} becomes a rule
 * x{m} x{0,n-m} where a run longer than 2000 is blocks of 2000 copies (blocks of blocks past
 * 2000^2), and 0 to n copies one alternative for each count's block and remainder, so that the
 * parser keeps a few stacks. So a JSON schema's maxLength of 524288 (Claude Code offers one) holds
 * as written. Counts past CB_GBNF_MAX_WIDE, and inverted ones, stay for cb_gbnf_scan to find.
 * Returns a malloc'd text the caller frees (a copy when nothing is rewritten), or NULL when memory
 * runs out; *n_wide (may be NULL) gets the count rewritten. O(length x rewrites). */
char *cb_gbnf_widen(const char *gbnf, size_t *n_wide);

#ifdef __cplusplus
}
#endif

#endif
