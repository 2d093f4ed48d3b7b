/* Speculation's pure parts: where drafts come from (core/draft.h: lookup in a text, from where a
 * prediction left off, the shared n-gram pool) and how many a step checks (core/spec.h: the fitted
 * row cost, the acceptance rate, the greedy choice that turns itself off under load). Tokens are
 * small integers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "../../src/core/draft.h"
#include "../../src/core/spec.h"

static void check(const int32_t *got, int32_t n, const int32_t *want, int32_t k) {
    assert_int_equal(n, k);
    for (int32_t i = 0; i < k; i++)
        if (got[i] != want[i]) fail_msg("draft token %d: %d, want %d", i, got[i], want[i]);
}

#define LEN(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

static void lookup_finds_what_followed_the_ending(void **state) {
    (void)state;
    int32_t out[8], end;
    int32_t t[] = {1, 2, 3, 4, 5, 9, 9, 1, 2, 3};
    int32_t n = cb_draft_lookup(t, LEN(t), t, LEN(t), 2, 4, -1, 3, out, &end);
    check(out, n, (int32_t[]){4, 5, 9}, 3);
    assert_int_equal(end, 6);
    /* k past the text's end: what there is */
    n = cb_draft_lookup(t, LEN(t), t, LEN(t), 2, 4, -1, 8, out, &end);
    check(out, n, (int32_t[]){4, 5, 9, 9, 1, 2, 3}, 7);
    /* an ending that never occurred before: nothing, and no n-gram shorter than n_min counts */
    int32_t u[] = {1, 2, 3, 4, 5, 9, 9, 7, 3};
    assert_int_equal(cb_draft_lookup(u, LEN(u), u, LEN(u), 2, 4, -1, 3, out, &end), 0);
    assert_int_equal(end, -1);
    check(out, cb_draft_lookup(u, LEN(u), u, LEN(u), 1, 4, -1, 3, out, NULL), (int32_t[]){4, 5, 9}, 3);
}

static void lookup_prefers_longer_then_recent(void **state) {
    (void)state;
    int32_t out[4];
    /* "1 2 3" -> 10 is a longer match than the more recent "2 3" -> 11 */
    int32_t t[] = {5, 1, 2, 3, 10, 6, 2, 3, 11, 8, 1, 2, 3};
    check(out, cb_draft_lookup(t, LEN(t), t, LEN(t), 2, 4, -1, 1, out, NULL), (int32_t[]){10}, 1);
    /* with n_max 2 both are the same length: the most recent wins */
    check(out, cb_draft_lookup(t, LEN(t), t, LEN(t), 2, 2, -1, 1, out, NULL), (int32_t[]){11}, 1);
    /* a text that repeats one token drafts into its own ending */
    int32_t r[] = {4, 4, 4, 4};
    check(out, cb_draft_lookup(r, LEN(r), r, LEN(r), 2, 3, -1, 4, out, NULL), (int32_t[]){4}, 1);
}

static void prediction_lookup_goes_on_from_the_last_match(void **state) {
    (void)state;
    int32_t out[4], end;
    int32_t pred[] = {2, 3, 10, 2, 3, 11, 2, 3, 12};
    int32_t key[] = {7, 2, 3};
    check(out, cb_draft_lookup(key, 3, pred, LEN(pred), 2, 4, 4, 1, out, &end), (int32_t[]){11}, 1);
    assert_int_equal(end, 6);
    check(out, cb_draft_lookup(key, 3, pred, LEN(pred), 2, 4, 0, 2, out, &end), (int32_t[]){10, 2}, 2);
    check(out, cb_draft_lookup(key, 3, pred, LEN(pred), 2, 4, -1, 1, out, NULL), (int32_t[]){12}, 1);
    /* nothing at or after `from`: the last one */
    check(out, cb_draft_lookup(key, 3, pred, LEN(pred), 2, 4, 9, 1, out, NULL), (int32_t[]){12}, 1);
    /* bad arguments draft nothing */
    assert_int_equal(cb_draft_lookup(key, 3, pred, LEN(pred), 0, 4, -1, 1, out, NULL), 0);
    assert_int_equal(cb_draft_lookup(key, 3, pred, LEN(pred), 3, 2, -1, 1, out, NULL), 0);
    assert_int_equal(cb_draft_lookup(key, 1, pred, LEN(pred), 2, 4, -1, 1, out, NULL), 0);
    assert_int_equal(cb_draft_lookup(key, 3, pred, LEN(pred), 2, 4, -1, 0, out, NULL), 0);
}

static void pool_walks_what_it_learned(void **state) {
    (void)state;
    assert_null(cb_ngram_pool_new(4, 2));
    assert_null(cb_ngram_pool_new(16, 0));
    assert_null(cb_ngram_pool_new(16, 17));
    cb_ngram_pool *p = cb_ngram_pool_new(16, 2);
    assert_non_null(p);
    int32_t out[8];
    int32_t t[] = {1, 2, 3, 4, 5, 6, 7};
    cb_ngram_pool_learn(p, t, 5, 0); /* 6 and 7 not yet accepted */
    int32_t q[] = {9, 2, 3};
    check(out, cb_ngram_pool_draft(p, q, 3, 8, out), (int32_t[]){4, 5}, 2);
    cb_ngram_pool_learn(p, t, LEN(t), 5);
    check(out, cb_ngram_pool_draft(p, q, 3, 8, out), (int32_t[]){4, 5, 6, 7}, 4);
    check(out, cb_ngram_pool_draft(p, q, 3, 2, out), (int32_t[]){4, 5}, 2);
    /* the latest follower wins */
    int32_t u[] = {2, 3, 8};
    cb_ngram_pool_learn(p, u, 3, 0);
    check(out, cb_ngram_pool_draft(p, q, 3, 1, out), (int32_t[]){8}, 1);
    assert_int_equal(cb_ngram_pool_draft(p, q, 1, 4, out), 0); /* shorter than an n-gram */
    cb_ngram_pool_free(p);

    /* a small pool full of other n-grams answers an unknown one with nothing (the tag tells them
     * apart), and a known one with its follower */
    p = cb_ngram_pool_new(8, 3);
    enum { N = 20000 };
    int32_t *big = malloc(N * sizeof(int32_t));
    assert_non_null(big);
    srand(7);
    for (int i = 0; i < N; i++)
        big[i] = rand() % 50000;
    cb_ngram_pool_learn(p, big, N, 0);
    int32_t unknown[] = {50001, 50002, 50003};
    assert_int_equal(cb_ngram_pool_draft(p, unknown, 3, 4, out), 0);
    assert_int_equal(cb_ngram_pool_draft(p, big, N - 1, 1, out), 1);
    assert_int_equal(out[0], big[N - 1]); /* the last one learned holds its slot */
    free(big);
    cb_ngram_pool_free(p);
}

static void row_cost_fits_a_line(void **state) {
    (void)state;
    cb_row_cost c = {0};
    double f, r;
    assert_false(cb_row_cost_get(&c, &f, &r));
    cb_row_cost_note(&c, 8, 9000, 0.9);
    cb_row_cost_note(&c, 8, 9100, 0.9);
    assert_false(cb_row_cost_get(&c, &f, &r)); /* one row count: no slope */
    for (int32_t rows = 1; rows <= 16; rows++)
        cb_row_cost_note(&c, rows, 5000 + 300 * rows, 0.9);
    assert_true(cb_row_cost_get(&c, &f, &r));
    assert_true(f > 4500 && f < 5600 && r > 270 && r < 330);
    /* the costs change (a longer context): recent steps win */
    for (int i = 0; i < 60; i++)
        cb_row_cost_note(&c, 1 + i % 16, 5000 + 3000 * (1 + i % 16), 0.9);
    assert_true(cb_row_cost_get(&c, &f, &r));
    assert_true(r > 2800 && r < 3100);
    cb_row_cost_note(&c, 0, 100, 0.9); /* ignored */
    cb_row_cost_note(&c, 4, -1, 0.9);  /* ignored */
    cb_row_cost z = {0};
    for (int32_t rows = 1; rows <= 8; rows++) /* falling with rows: noise, no model */
        cb_row_cost_note(&z, rows, 9000 - 100 * rows, 1);
    assert_false(cb_row_cost_get(&z, &f, &r));
}

/* Steps of one sequence on an AMD EPYC with AVX-512 (2 cores, the default model, x a one-row step):
 * a second row doubles the step, later rows cost a third to a half of one. The table answers the
 * measured counts, the line between them elsewhere, and the choice drafts deep or not at all where
 * the fitted line alone would check a shallow draft that loses. */
static void row_cost_table_follows_the_host(void **state) {
    (void)state;
    static const int32_t rows[] = {1, 2, 3, 5, 9, 17};
    static const double x[] = {1, 2.01, 2.63, 3.88, 5.12, 8.43};
    cb_row_cost c = {0};
    double f = 0, r = 0;
    assert_float_equal(cb_row_cost_at(&c, 4, 1000, 100), 1400, 1e-9); /* nothing measured: the line */
    for (int rep = 0; rep < 4; rep++)
        for (int i = 0; i < 6; i++)
            cb_row_cost_note(&c, rows[i], (int64_t)(8500 * x[i]), 0.99);
    assert_true(cb_row_cost_get(&c, &f, &r));
    assert_float_equal(cb_row_cost_at(&c, 2, f, r), 8500 * 2.01, 2);
    assert_float_equal(cb_row_cost_at(&c, 7, f, r), 8500 * (3.88 + 5.12) / 2, 2); /* between 5 and 9 */
    assert_float_equal(cb_row_cost_at(&c, 20, f, r), 8500 * 8.43 + 3 * r, 2);     /* past 17: along the fit */
    assert_float_equal(cb_row_cost_at(NULL, 3, 1000, 100), 1300, 1e-9);
    int32_t avail[1] = {16}, k[1];
    /* drafts that hold 95% of the time: deep, where the step earns the most per time */
    double rate[1] = {0.95};
    cb_spec_choose(1, 1, avail, rate, &c, f, r, 0, 64, k);
    double got = cb_spec_expected(0.95, k[0]) / cb_row_cost_at(&c, 1 + k[0], f, r), best = 0;
    for (int32_t j = 0; j <= 16; j++) {
        double v = cb_spec_expected(0.95, j) / cb_row_cost_at(&c, 1 + j, f, r);
        if (v > best) best = v;
    }
    assert_true(k[0] >= 8 && got >= best * 0.98);
    /* 70%: the line alone would check a few (a row looks cheap), the table sees a second row
     * double the step and none pays */
    rate[0] = 0.7;
    assert_true(cb_spec_choose(1, 1, avail, rate, NULL, f, r, 0, 64, k) > 0);
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, &c, f, r, 0, 64, k), 0);

    /* one step of a count is not a measurement, two are, and a count not seen for a while is forgotten */
    cb_row_cost t = {0};
    cb_row_cost_note(&t, 5, 50000, 0.98);
    assert_float_equal(cb_row_cost_at(&t, 5, 1000, 100), 1500, 1e-9);
    cb_row_cost_note(&t, 5, 50000, 0.98);
    assert_float_equal(cb_row_cost_at(&t, 5, 1000, 100), 50000, 1e-6);
    for (int i = 0; i < 40; i++)
        cb_row_cost_note(&t, 1, 1000, 0.98);
    assert_float_equal(cb_row_cost_at(&t, 5, 1000, 100), 1000 + 4 * 100, 1e-6); /* from 1, along the line */

    /* sixteen rows, seventeen measured cheaper (noise): a draft that holds 30% of the time still pays
     * at least half a fitted row, and does not pay */
    cb_row_cost z = {0};
    for (int i = 0; i < 3; i++)
        cb_row_cost_note(&z, 16, 100000, 1), cb_row_cost_note(&z, 17, 90000, 1);
    int32_t av16[16], k16[16];
    double r16[16];
    for (int i = 0; i < 16; i++)
        av16[i] = 1, r16[i] = 0.3;
    assert_int_equal(cb_spec_choose(16, 16, av16, r16, &z, 10000, 5000, 0, 64, k16), 0);
}

/* The step's own rows count: a draft that pays beside one row does not beside sixteen. */
static void choice_weighs_the_whole_step(void **state) {
    (void)state;
    int32_t avail[1] = {1}, k[1];
    double rate[1] = {0.3};
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, NULL, 10000, 500, 0, 64, k), 1);
    assert_int_equal(cb_spec_choose(1, 16, avail, rate, NULL, 10000, 500, 0, 64, k), 0);
}

static void acceptance_counts_from_a_prior(void **state) {
    (void)state;
    cb_accept a = {0};
    assert_float_equal(cb_accept_rate(&a, 1, 2), 0.5, 1e-9);
    cb_accept_note(&a, 10, 9, 1);
    assert_float_equal(cb_accept_rate(&a, 1, 2), 10.0 / 12, 1e-9);
    cb_accept_note(&a, 3, 7, 1); /* more held than tried: counted as all */
    assert_float_equal(cb_accept_rate(&a, 1, 2), 13.0 / 15, 1e-9);
    for (int i = 0; i < 100; i++)
        cb_accept_note(&a, 4, 0, 0.8); /* drafts stop holding: the rate follows */
    assert_true(cb_accept_rate(&a, 1, 2) < 0.1);
    assert_float_equal(cb_spec_expected(0.5, 2), 1.75, 1e-9);
    assert_float_equal(cb_spec_expected(0.9, 0), 1, 1e-9);
}

static void choice_runs_deep_alone_and_stops_under_load(void **state) {
    (void)state;
    int32_t k[16], avail[16];
    double rate[16];
    for (int i = 0; i < 16; i++)
        avail[i] = 8, rate[i] = 0.9;
    /* one request, a pass over the weights 20x a row: every draft it has */
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, NULL, 10000, 500, 0, 64, k), 8);
    assert_int_equal(k[0], 8);
    /* the step's budget bounds it */
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, NULL, 10000, 500, 0, 3, k), 3);
    /* sixteen decoding at a long context (a row costs 3x the fixed part): drafts that hold half the
     * time do not pay, and none is checked */
    for (int i = 0; i < 16; i++)
        rate[i] = 0.5;
    assert_int_equal(cb_spec_choose(16, 16, avail, rate, NULL, 10000, 30000, 0, 256, k), 0);
    for (int i = 0; i < 16; i++)
        assert_int_equal(k[i], 0);
    /* the same batch with cheap rows (short context): some drafts pay, the likeliest first */
    rate[3] = 0.95;
    int32_t total = cb_spec_choose(16, 16, avail, rate, NULL, 40000, 500, 0, 256, k);
    assert_true(total > 0);
    assert_true(k[3] >= k[0] && k[3] > 0);
    /* drafts that never hold, an unknown row cost, nothing decoding: none */
    for (int i = 0; i < 16; i++)
        rate[i] = 0;
    assert_int_equal(cb_spec_choose(16, 16, avail, rate, NULL, 10000, 500, 0, 256, k), 0);
    rate[0] = 0.9;
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, NULL, 10000, 0, 0, 256, k), 0);
    assert_int_equal(cb_spec_choose(0, 0, avail, rate, NULL, 10000, 500, 0, 256, k), 0);
    /* no drafts ready: none, whatever the rate */
    avail[0] = 0;
    assert_int_equal(cb_spec_choose(1, 1, avail, rate, NULL, 10000, 500, 0, 256, k), 0);
}

/* The choice maximizes the step's expected tokens per unit of time: no single draft more or less
 * does better (checked against the model by brute force on small cases). */
static void choice_is_the_best_rate(void **state) {
    (void)state;
    double rates[3][3] = {{0.9, 0.6, 0.3}, {0.5, 0.5, 0.5}, {0.99, 0.1, 0.7}};
    double costs[3][2] = {{10000, 500}, {10000, 5000}, {2000, 4000}};
    for (int st = 0; st <= 1; st++) /* without and with a start cost of a pass for each drafting request */
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 3; c++) {
                int32_t avail[3] = {4, 4, 4}, k[3];
                double start = st ? costs[c][0] : 0;
                cb_spec_choose(3, 3, avail, rates[a], NULL, costs[c][0], costs[c][1], start, 64, k);
                double best = 0;
                int32_t bk[3] = {0};
                for (int32_t x = 0; x <= 4; x++)
                    for (int32_t y = 0; y <= 4; y++)
                        for (int32_t z = 0; z <= 4; z++) {
                            double tok = cb_spec_expected(rates[a][0], x) + cb_spec_expected(rates[a][1], y) +
                                         cb_spec_expected(rates[a][2], z);
                            double v = tok / (costs[c][0] + costs[c][1] * (3 + x + y + z) +
                                              start * ((x > 0) + (y > 0) + (z > 0)));
                            if (v > best + 1e-12) best = v, bk[0] = x, bk[1] = y, bk[2] = z;
                        }
                double got = (cb_spec_expected(rates[a][0], k[0]) + cb_spec_expected(rates[a][1], k[1]) +
                              cb_spec_expected(rates[a][2], k[2])) /
                             (costs[c][0] + costs[c][1] * (3 + k[0] + k[1] + k[2]) +
                              start * ((k[0] > 0) + (k[1] > 0) + (k[2] > 0)));
                /* greedy is exact without a start cost; with one, within 2% of the best */
                if (got < best * (st ? 0.98 : 1 - 1e-9))
                    fail_msg("start %d rates %d costs %d: chose %d %d %d (%.4g), best %d %d %d (%.4g)", st, a, c, k[0],
                             k[1], k[2], got, bk[0], bk[1], bk[2], best);
            }
    /* sixteen decoding, rows cheap: with a pass for each drafting request, only near-certain drafts
     * pay, and fewer requests draft than without it */
    int32_t avail[16], k0[16], k1[16];
    double rate[16];
    for (int i = 0; i < 16; i++)
        avail[i] = 8, rate[i] = i == 5 ? 0.98 : 0.7;
    int32_t without = cb_spec_choose(16, 16, avail, rate, NULL, 10000, 2000, 0, 256, k0);
    int32_t with = cb_spec_choose(16, 16, avail, rate, NULL, 10000, 2000, 10000, 256, k1);
    int32_t n0 = 0, n1 = 0;
    for (int i = 0; i < 16; i++)
        n0 += k0[i] > 0, n1 += k1[i] > 0;
    assert_true(without > 0 && n1 < n0);
    assert_true(with == 0 || (n1 == 1 && k1[5] > 0));
}

/* A sampled check keeps the target's distribution: over many uniform draws, each token comes out
 * as often as its probability says, whichever token was drafted (one the target likes, one it
 * dislikes, one it rules out), and the draft holds as often as the target gives it. */
static void sampled_check_keeps_the_target_distribution(void **state) {
    (void)state;
    int32_t ids[] = {10, 11, 12, 13};
    float probs[] = {0.5f, 0.3f, 0.15f, 0.05f};
    int32_t drafts[] = {10, 13, 99};
    srand(11);
    for (int di = 0; di < 3; di++) {
        enum { DRAWS = 200000 };
        long count[4] = {0}, held_n = 0;
        for (int t = 0; t < DRAWS; t++) {
            bool held;
            double u = rand() / (RAND_MAX + 1.0), u2 = rand() / (RAND_MAX + 1.0);
            int32_t tok = cb_spec_check_sampled(ids, probs, 4, drafts[di], u, u2, &held);
            assert_true(tok >= 10 && tok <= 13);
            assert_true(held == (tok == drafts[di]));
            count[tok - 10]++;
            held_n += held;
        }
        for (int i = 0; i < 4; i++) {
            double f = (double)count[i] / DRAWS;
            if (f < probs[i] - 0.005 || f > probs[i] + 0.005)
                fail_msg("draft %d: token %d came out %.4f of the time, want %.2f", drafts[di], ids[i], f, probs[i]);
        }
        double want = drafts[di] == 10 ? 0.5 : drafts[di] == 13 ? 0.05 : 0;
        assert_true(fabs((double)held_n / DRAWS - want) < 0.005);
    }
    /* a target certain of one token: a draft of it always holds, any other never does */
    int32_t one[] = {7};
    float sure[] = {1.0f};
    bool held;
    assert_int_equal(cb_spec_check_sampled(one, sure, 1, 7, 0.999, 0.5, &held), 7);
    assert_true(held);
    assert_int_equal(cb_spec_check_sampled(one, sure, 1, 8, 0.2, 0.5, &held), 7);
    assert_false(held);
    /* nothing left once the draft is taken out: -1 */
    assert_int_equal(cb_spec_check_sampled(one, (float[]){0.4f}, 1, 7, 0.9, 0.5, &held), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lookup_finds_what_followed_the_ending),
        cmocka_unit_test(lookup_prefers_longer_then_recent),
        cmocka_unit_test(prediction_lookup_goes_on_from_the_last_match),
        cmocka_unit_test(pool_walks_what_it_learned),
        cmocka_unit_test(row_cost_fits_a_line),
        cmocka_unit_test(row_cost_table_follows_the_host),
        cmocka_unit_test(choice_weighs_the_whole_step),
        cmocka_unit_test(acceptance_counts_from_a_prior),
        cmocka_unit_test(choice_runs_deep_alone_and_stops_under_load),
        cmocka_unit_test(choice_is_the_best_rate),
        cmocka_unit_test(sampled_check_keeps_the_target_distribution),
    };
    return cmocka_run_group_tests_name("spec", tests, NULL, NULL);
}
