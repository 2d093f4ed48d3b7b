/* test_group.c — the batch runner's pure modules: the prefix tree, the first-level enlargement
 * (seed 004, Algorithm 1), the groups and their order; the custom_id set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/batch/group.h"
#include "../../src/batch/idset.h"

#define TOKS(...)                                                                                                      \
    (const int32_t[]) { __VA_ARGS__ }
#define NTOK(...) ((int32_t)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))
#define P(...)                                                                                                         \
    { TOKS(__VA_ARGS__), NTOK(__VA_ARGS__), 1 }

/* Group k has this prefix length and exactly these members, in this order. */
static void expect_group(const cb_grouping *g, int k, int32_t prefix_len, int32_t n, const int32_t *members) {
    assert_true(k < g->n_groups);
    const cb_group *grp = &g->groups[k];
    assert_int_equal(grp->prefix_len, prefix_len);
    assert_int_equal(grp->n, n);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(g->order[grp->first + i], members[i]);
}

/* ---------------------------------------------------------------- known trees --------------- */

static void first_level_nodes_are_the_groups(void **state) {
    (void)state;
    cb_group_prompt p[] = {P(1, 2, 3, 4), P(1, 2, 3, 5), P(7, 8, 9)};
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 3, true, &g), 0);
    assert_int_equal(g.n_groups, 2);
    expect_group(&g, 0, 3, 2, TOKS(0, 1));
    expect_group(&g, 1, 3, 1, TOKS(2));
    assert_int_equal(g.groups[0].prefill, 5); /* 3 shared + 1 + 1 */
    assert_int_equal(g.groups[1].prefill, 3);
    assert_int_equal(g.logical_tokens, 11);
    assert_int_equal(g.tree_tokens, 8);
    assert_int_equal(g.group_tokens, 8);
    cb_grouping_free(&g);
}

/* C = [1 2 3 4] has children G1 (2 prompts) and [11] (1 prompt). Forking C costs its 4 tokens
 * again; merging G1 saves (2 - 1) * tokens(G1). */
static void merge_when_gain_exceeds_penalty(void **state) {
    (void)state;
    /* tokens(G1) = 5: gain 5 > 4, fork; then [11] holds all C has left, and takes C along */
    cb_group_prompt p[] = {P(1, 2, 3, 4, 5, 6, 7, 8, 12, 9), P(1, 2, 3, 4, 5, 6, 7, 8, 12, 10), P(1, 2, 3, 4, 11)};
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 3, true, &g), 0);
    assert_int_equal(g.n_groups, 2);
    expect_group(&g, 0, 9, 2, TOKS(0, 1));
    expect_group(&g, 1, 5, 1, TOKS(2));
    assert_int_equal(g.group_tokens, 16); /* (9 + 1 + 1) + 5 */
    cb_grouping_free(&g);
    /* the same prompts without the enlargement: one group on C, 4 + 6 + 6 + 1 */
    assert_int_equal(cb_group_build(p, 3, false, &g), 0);
    assert_int_equal(g.n_groups, 1);
    expect_group(&g, 0, 4, 3, TOKS(0, 1, 2));
    assert_int_equal(g.group_tokens, 17);
    cb_grouping_free(&g);
}

static void no_merge_when_gain_equals_penalty(void **state) {
    (void)state;
    /* tokens(G1) = 4: gain 4 = penalty 4, no fork; [11] is not all C has, no fork either */
    cb_group_prompt p[] = {P(1, 2, 3, 4, 5, 6, 7, 8, 9), P(1, 2, 3, 4, 5, 6, 7, 8, 10), P(1, 2, 3, 4, 11)};
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 3, true, &g), 0);
    assert_int_equal(g.n_groups, 1);
    expect_group(&g, 0, 4, 3, TOKS(0, 1, 2));
    assert_int_equal(g.groups[0].prefill, 4 + 5 + 5 + 1);
    cb_grouping_free(&g);
}

/* The paper's Fig. 4 story: under a 1-token first-level node shared by five prompts, two of them
 * share 8 tokens once the lower levels are merged bottom-up.
 *   root - A[1 11 12]: p0
 *        - B[2] - C[3 3 3] - [4]: p1, [5]: p2
 *               - E[6 6] - F[7 7 7 7 7] - [8]: p3, [9]: p4
 *                        - H[10]: p5
 * At B: E forks with F (gain 5 > 2), then H takes the rest of E. At the root: B forks with C
 * (gain 3 > 1) and with E+F (gain 7 > 1), and E+H takes the rest of B. */
static void merges_propagate_bottom_up(void **state) {
    (void)state;
    cb_group_prompt p[] = {
        P(1, 11, 12),  P(2, 3, 3, 3, 4), P(2, 3, 3, 3, 5), P(2, 6, 6, 7, 7, 7, 7, 7, 8), P(2, 6, 6, 7, 7, 7, 7, 7, 9),
        P(2, 6, 6, 10)};
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 6, true, &g), 0);
    assert_int_equal(g.n_groups, 4);
    expect_group(&g, 0, 3, 1, TOKS(0));
    expect_group(&g, 1, 4, 2, TOKS(1, 2));
    expect_group(&g, 2, 8, 2, TOKS(3, 4));
    expect_group(&g, 3, 4, 1, TOKS(5));
    assert_int_equal(g.logical_tokens, 35);
    assert_int_equal(g.tree_tokens, 19);
    assert_int_equal(g.group_tokens, 3 + 6 + 10 + 4);
    cb_grouping_free(&g);
    assert_int_equal(cb_group_build(p, 6, false, &g), 0);
    assert_int_equal(g.n_groups, 2);
    expect_group(&g, 1, 1, 5, TOKS(1, 2, 3, 4, 5));
    assert_int_equal(g.group_tokens, 3 + 1 + 4 + 4 + 8 + 8 + 3);
    cb_grouping_free(&g);
}

static void duplicates_and_prompts_that_prefix_others(void **state) {
    (void)state;
    cb_group_prompt p[] = {P(1, 2, 3), P(1, 2, 3, 4), P(1, 2, 3)};
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 3, true, &g), 0);
    assert_int_equal(g.n_groups, 1);
    expect_group(&g, 0, 3, 3, TOKS(0, 2, 1)); /* prompts ending at a node come before its children */
    assert_int_equal(g.groups[0].prefill, 4);
    assert_int_equal(g.tree_tokens, 4);
    cb_grouping_free(&g);
}

static void groups_ordered_by_decode_over_prefill(void **state) {
    (void)state;
    cb_group_prompt p[] = {{TOKS(1, 2), 2, 10},           /* with p4 below it */
                           {TOKS(3, 4, 5, 6), 4, 4},      /* R = 1 */
                           {TOKS(5), 1, 50},              /* R = 50 */
                           {TOKS(7, 8, 9, 10), 4, 4},     /* R = 1, after the other R = 1 */
                           {TOKS(1, 2, 3, 4, 5), 5, 10}}; /* joins [1 2]: R = 20 / 5 = 4 */
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 5, true, &g), 0);
    assert_int_equal(g.n_groups, 4);
    cb_group_sort_by_ratio(&g);
    expect_group(&g, 0, 1, 1, TOKS(2));
    expect_group(&g, 1, 2, 2, TOKS(0, 4));
    expect_group(&g, 2, 4, 1, TOKS(1));
    expect_group(&g, 3, 4, 1, TOKS(3));
    assert_int_equal(g.groups[1].decode, 20);
    assert_int_equal(g.groups[1].prefill, 5);
    cb_grouping_free(&g);
}

static void bad_input_is_refused(void **state) {
    (void)state;
    cb_grouping g;
    cb_group_prompt p[] = {P(1, 2), {TOKS(1), 0, 1}};
    assert_int_equal(cb_group_build(p, 2, true, &g), -1);
    assert_null(g.order);
    assert_int_equal(g.n_groups, 0);
    assert_int_equal(cb_group_build(p, 0, true, &g), 0);
    assert_int_equal(g.n_groups, 0);
    assert_int_equal(g.logical_tokens, 0);
    cb_grouping_free(&g);
}

/* ---------------------------------------------------------------- random prompt sets -------- */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Distinct non-empty prefixes of the prompts = tokens of the compact prefix tree (brute force). */
static int64_t distinct_prefixes(const cb_group_prompt *p, int32_t n) {
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t longest = 0; /* longest prefix of p[i] an earlier prompt has */
        for (int32_t k = 0; k < i; k++) {
            int32_t m = p[i].n_tokens < p[k].n_tokens ? p[i].n_tokens : p[k].n_tokens, j = 0;
            while (j < m && p[i].tokens[j] == p[k].tokens[j])
                j++;
            if (j > longest) longest = j;
        }
        total += p[i].n_tokens - longest;
    }
    return total;
}

static void check_grouping(const cb_group_prompt *p, int32_t n, const cb_grouping *g) {
    int32_t *seen = calloc((size_t)n, sizeof(*seen));
    assert_non_null(seen);
    int64_t sum = 0;
    int32_t members = 0;
    for (int32_t k = 0; k < g->n_groups; k++) {
        const cb_group *grp = &g->groups[k];
        assert_true(grp->n >= 1 && grp->prefix_len >= 1);
        const cb_group_prompt *ref = &p[g->order[grp->first]];
        int64_t prefill = grp->prefix_len, decode = 0;
        for (int32_t i = 0; i < grp->n; i++) {
            const cb_group_prompt *m = &p[g->order[grp->first + i]];
            seen[g->order[grp->first + i]]++;
            assert_true(m->n_tokens >= grp->prefix_len);
            assert_memory_equal(m->tokens, ref->tokens, (size_t)grp->prefix_len * sizeof(int32_t));
            prefill += m->n_tokens - grp->prefix_len;
            decode += m->max_tokens;
        }
        assert_int_equal(grp->prefill, prefill);
        assert_int_equal(grp->decode, decode);
        sum += prefill;
        members += grp->n;
    }
    assert_int_equal(members, n);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(g->group_tokens, sum);
    assert_true(g->tree_tokens <= g->group_tokens && g->group_tokens <= g->logical_tokens);
    free(seen);
}

/* Prompts made of a few shared "documents" and short random tails over a tiny alphabet, so that
 * sharing happens at several levels and by accident. */
static void every_prompt_in_one_group_with_a_true_prefix(void **state) {
    (void)state;
    enum { MAXP = 80, MAXT = 48 };
    static int32_t toks[MAXP][MAXT];
    cb_group_prompt p[MAXP];
    for (uint64_t seed = 1; seed <= 300; seed++) {
        rng_state = seed * 0x9E3779B97F4A7C15ull;
        int32_t docs[4][24], dlen[4];
        for (int d = 0; d < 4; d++) {
            dlen[d] = (int32_t)rnd(24);
            for (int32_t j = 0; j < dlen[d]; j++)
                docs[d][j] = (int32_t)rnd(4);
        }
        int32_t n = 1 + (int32_t)rnd(MAXP);
        for (int32_t i = 0; i < n; i++) {
            int d = (int)rnd(4);
            int32_t len = 0, tail = 1 + (int32_t)rnd(12);
            memcpy(toks[i], docs[d], (size_t)dlen[d] * sizeof(int32_t));
            len = dlen[d];
            for (int32_t j = 0; j < tail; j++)
                toks[i][len++] = (int32_t)rnd(3);
            p[i] = (cb_group_prompt){toks[i], len, (int32_t)rnd(100)};
        }
        cb_grouping g, raw;
        assert_int_equal(cb_group_build(p, n, true, &g), 0);
        assert_int_equal(cb_group_build(p, n, false, &raw), 0);
        check_grouping(p, n, &g);
        check_grouping(p, n, &raw);
        assert_int_equal(g.tree_tokens, distinct_prefixes(p, n));
        assert_true(g.group_tokens <= raw.group_tokens); /* enlarging never computes more */
        cb_group_sort_by_ratio(&g);
        check_grouping(p, n, &g);
        for (int32_t k = 1; k < g.n_groups; k++) /* R never increases */
            assert_true((double)g.groups[k - 1].decode * (double)g.groups[k].prefill >=
                        (double)g.groups[k].decode * (double)g.groups[k - 1].prefill);
        cb_grouping_free(&g);
        cb_grouping_free(&raw);
    }
}

/* ---------------------------------------------------------------- idset --------------------- */

static void idset_adds_once_and_grows(void **state) {
    (void)state;
    cb_idset s;
    cb_idset_init(&s);
    assert_false(cb_idset_has(&s, "a"));
    assert_int_equal(cb_idset_add(&s, "a"), 1);
    assert_int_equal(cb_idset_add(&s, "a"), 0);
    assert_true(cb_idset_has(&s, "a"));
    assert_false(cb_idset_has(&s, "b"));
    assert_int_equal(cb_idset_add(&s, ""), 1);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "request-%d", i);
        assert_int_equal(cb_idset_add(&s, key), 1);
    }
    assert_int_equal(s.n, 5002);
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "request-%d", i);
        assert_true(cb_idset_has(&s, key));
        assert_int_equal(cb_idset_add(&s, key), 0);
    }
    assert_false(cb_idset_has(&s, "request-5000"));
    assert_int_equal(s.n, 5002);
    cb_idset_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_level_nodes_are_the_groups),
        cmocka_unit_test(merge_when_gain_exceeds_penalty),
        cmocka_unit_test(no_merge_when_gain_equals_penalty),
        cmocka_unit_test(merges_propagate_bottom_up),
        cmocka_unit_test(duplicates_and_prompts_that_prefix_others),
        cmocka_unit_test(groups_ordered_by_decode_over_prefill),
        cmocka_unit_test(bad_input_is_refused),
        cmocka_unit_test(every_prompt_in_one_group_with_a_true_prefix),
        cmocka_unit_test(idset_adds_once_and_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
