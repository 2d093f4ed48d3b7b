/* A code-infill prompt assembled as llama-server's /infill assembles it (core/fim.h): the order of
 * the parts, the repo-level pattern and its fallback, what each budget takes and from which end,
 * BOS and SPM order. Tokens are small integers: 1000+ the FIM tokens, others text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/core/fim.h"

enum { PRE = 1000, SUF, MID, REP, SEP, BOS };

static cb_tokens span(const int32_t *t, int32_t n) { return (cb_tokens){t, n}; }

static void check(const int32_t *got, int32_t n, const int32_t *want, int32_t k) {
    assert_int_equal(n, k);
    for (int32_t i = 0; i < k; i++)
        if (got[i] != want[i]) fail_msg("token %d: %d, want %d", i, got[i], want[i]);
}

static void parts_in_order_with_the_repo_pattern(void **state) {
    (void)state;
    cb_fim_vocab v = {PRE, SUF, MID, REP, SEP, BOS, false, false};
    int32_t prefix[] = {1, 2, 3}, suffix[] = {4, 5}, prompt[] = {6}, repo[] = {7}, f0[] = {8}, t0[] = {9, 10},
            cur[] = {11};
    cb_tokens files[] = {span(f0, 1)}, texts[] = {span(t0, 2)};
    cb_fim_request r = {.prefix = span(prefix, 3),
                        .suffix = span(suffix, 2),
                        .prompt = span(prompt, 1),
                        .files = files,
                        .texts = texts,
                        .n_extra = 1,
                        .repo = span(repo, 1),
                        .cur_file = span(cur, 1),
                        .n_batch = 2048,
                        .n_ctx = 8192};
    int32_t n = 0;
    int32_t *t = cb_fim_assemble(&v, &r, &n);
    /* [REP]myproject [SEP]file0 text0 [SEP]filename [PRE]prefix prompt [SUF]suffix [MID] */
    int32_t want[] = {REP, 7, SEP, 8, 9, 10, SEP, 11, PRE, 1, 2, 3, 6, SUF, 4, 5, MID};
    check(t, n, want, sizeof(want) / sizeof(want[0]));
    free(t);
    v.spm = true; /* suffix first */
    v.add_bos = true;
    t = cb_fim_assemble(&v, &r, &n);
    int32_t spm[] = {REP, 7, SEP, 8, 9, 10, SEP, 11, BOS, SUF, 4, 5, PRE, 1, 2, 3, 6, MID};
    check(t, n, spm, sizeof(spm) / sizeof(spm[0]));
    free(t);
}

/* Without FIM_REP and FIM_SEP each chunk follows a snippet separator; without FIM tokens at all,
 * nothing. */
static void snippets_without_the_repo_tokens(void **state) {
    (void)state;
    cb_fim_vocab v = {PRE, SUF, MID, -1, -1, -1, false, false};
    int32_t prefix[] = {1}, t0[] = {9}, t1[] = {10}, snip[] = {50, 51}, f[] = {8};
    cb_tokens files[] = {span(f, 1), span(f, 1)}, texts[] = {span(t0, 1), span(t1, 1)};
    cb_fim_request r = {.prefix = span(prefix, 1),
                        .files = files,
                        .texts = texts,
                        .n_extra = 2,
                        .snippet = span(snip, 2),
                        .n_batch = 2048,
                        .n_ctx = 8192};
    int32_t n = 0;
    int32_t *t = cb_fim_assemble(&v, &r, &n);
    int32_t want[] = {50, 51, 9, 50, 51, 10, PRE, 1, SUF, MID};
    check(t, n, want, sizeof(want) / sizeof(want[0]));
    free(t);
    cb_fim_vocab none = {-1, -1, -1, -1, -1, -1, false, false};
    assert_false(cb_fim_can(&none));
    assert_null(cb_fim_assemble(&none, &r, &n));
}

/* Budgets: the prefix's last 3/4 of the batch, the suffix's first quarter less the prompt and 2,
 * the extra context's last (context - batch - 2 x output). */
static void budgets_take_from_the_right_ends(void **state) {
    (void)state;
    cb_fim_vocab v = {PRE, SUF, MID, -1, SEP, -1, false, false};
    int32_t prefix[20], suffix[20], prompt[] = {99}, text[30], cur[] = {77};
    for (int i = 0; i < 20; i++)
        prefix[i] = 100 + i, suffix[i] = 200 + i;
    for (int i = 0; i < 30; i++)
        text[i] = 300 + i;
    cb_tokens files[] = {span(cur, 1)}, texts[] = {span(text, 30)};
    cb_fim_request r = {.prefix = span(prefix, 20),
                        .suffix = span(suffix, 20),
                        .prompt = span(prompt, 1),
                        .files = files,
                        .texts = texts,
                        .n_extra = 1,
                        .cur_file = span(cur, 1),
                        .n_batch = 16,  /* prefix 12, suffix 4 - 3 = 1 */
                        .n_predict = 2, /* extra: 40 - 16 - 4 = 20 of [SEP 77 text(30) SEP 77] */
                        .n_ctx = 40};
    int32_t n = 0;
    int32_t *t = cb_fim_assemble(&v, &r, &n);
    assert_int_equal(n, 20 + 1 + 12 + 1 + 1 + 1 + 1);
    assert_int_equal(t[0], 300 + 12); /* the extra context's last 20: text[12..29], SEP, 77 */
    assert_int_equal(t[18], SEP);
    assert_int_equal(t[19], 77);
    assert_int_equal(t[20], PRE);
    assert_int_equal(t[21], 108); /* the prefix's last 12 */
    assert_int_equal(t[32], 119);
    assert_int_equal(t[33], 99); /* the prompt */
    assert_int_equal(t[34], SUF);
    assert_int_equal(t[35], 200); /* the suffix's first 1 */
    assert_int_equal(t[36], MID);
    free(t);
    r.n_ctx = 10; /* no room for extra context */
    t = cb_fim_assemble(&v, &r, &n);
    assert_int_equal(t[0], PRE);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parts_in_order_with_the_repo_pattern),
        cmocka_unit_test(snippets_without_the_repo_tokens),
        cmocka_unit_test(budgets_take_from_the_right_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
