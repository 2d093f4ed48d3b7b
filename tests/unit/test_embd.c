/* The embedding passes' pace (src/core/embd.c) with fixed costs: a pass beside generation takes what
 * its share of the time pays for, an input too long for one step waits until the share covers it,
 * nothing is held back with nothing generating, and over any run of steps the passes' time stays
 * within the share, one pass's overdraft at most. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../src/core/embd.h"

static void nothing_generating_takes_the_context(void **state) {
    (void)state;
    cb_embd_pace p;
    cb_embd_pace_init(&p, 0.25);
    assert_int_equal(cb_embd_pace_tokens(&p, 0, 7, 512, 0), 512);
    cb_embd_pace_note(&p, 512, 512000, false, 512); /* a pass alone spends no credit */
    assert_true(p.credit_us == 0);
    assert_int_equal(cb_embd_pace_tokens(&p, 0, 300, 512, 0), 512);
    cb_embd_pace_init(&p, 1); /* share 1: no bound */
    assert_int_equal(cb_embd_pace_tokens(&p, 40000, 7, 512, 1000), 512);
}

static void beside_generation_the_share_pays(void **state) {
    (void)state;
    cb_embd_pace p;
    cb_embd_pace_init(&p, 0.25);
    /* nothing measured, no fallback: one input, to measure it */
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 7, 512, 0), 7);
    cb_embd_pace_init(&p, 0.25);
    /* a token costs 1 ms (the fallback); a step of 30 ms earns 10 ms: 10 tokens */
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 4, 512, 1000), 10);
    cb_embd_pace_note(&p, 10, 10000, true, 512);
    assert_true(cb_embd_pace_cost(&p, 10, 0) == 10000 && p.credit_us == 0);
    /* an input of 25 tokens waits two steps, runs in the third */
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 25, 512, 0), 0);
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 25, 512, 0), 0);
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 25, 512, 0), 30);
    cb_embd_pace_note(&p, 30, 30000, true, 512);
    assert_true(p.credit_us == 0);
}

static void credit_is_capped_both_ways(void **state) {
    (void)state;
    cb_embd_pace p;
    cb_embd_pace_init(&p, 0.5);
    for (int i = 0; i < 1000; i++) /* a long wait buys one full pass, no more */
        cb_embd_pace_tokens(&p, 100000, 600, 64, 1000);
    assert_true(p.credit_us == 64 * 1000.0);
    assert_int_equal(cb_embd_pace_tokens(&p, 100000, 1, 64, 1000), 64);
    cb_embd_pace_note(&p, 64, 10000000, true, 64); /* a pass far over its estimate owes a full pass at most */
    assert_true(p.credit_us >= -cb_embd_pace_cost(&p, 64, 0) - 1e-6);
}

/* A pass costs a fixed part and a part a token (20 ms + 0.5 ms a token here): the fit learns both, so
 * that 30 ms of credit carries 20 tokens, not the 30 ms / 1.1 ms of a 32-token pass's average. */
static void the_fixed_part_is_learned(void **state) {
    (void)state;
    cb_embd_pace p;
    cb_embd_pace_init(&p, 0.5);
    const int sizes[] = {8, 16, 32, 64, 12, 48};
    for (int k = 0; k < 6; k++)
        cb_embd_pace_note(&p, sizes[k], 20000 + 500 * sizes[k], false, 512);
    assert_true(fabs(cb_embd_pace_cost(&p, 100, 0) - 70000) < 1);
    assert_int_equal(cb_embd_pace_tokens(&p, 30000, 12, 512, 0), 20); /* 30 ms earned: 20 ms fixed, 20 tokens */
    /* passes of one size alone cannot tell the parts apart: all of it a token (a larger pass overstated) */
    cb_embd_pace_init(&p, 0.5);
    cb_embd_pace_note(&p, 10, 30000, false, 512);
    cb_embd_pace_note(&p, 10, 30000, false, 512);
    assert_true(fabs(cb_embd_pace_cost(&p, 20, 0) - 60000) < 1);
}

/* Random inputs and step times, costs that are not what the estimate says: the passes' time beside
 * generation stays within share / (1 - share) of generation's, plus one pass. */
static void the_share_holds_over_a_run(void **state) {
    (void)state;
    const double shares[] = {0.1, 0.25, 0.5};
    srand(7);
    for (int k = 0; k < 3; k++) {
        cb_embd_pace p;
        cb_embd_pace_init(&p, shares[k]);
        double gen = 0, embd = 0, longest = 0;
        int waiting = 300, head = 1 + rand() % 200, passes = 0;
        for (int step = 0; step < 100000 && waiting > 0; step++) {
            int64_t g = 20000 + rand() % 40000;
            gen += (double)g;
            int32_t allow = cb_embd_pace_tokens(&p, g, head, 512, 0);
            if (allow <= 0) continue;
            assert_true(allow >= head && allow <= 512);
            int32_t tokens = head;
            while (waiting > 1 && tokens + 20 <= allow) /* more inputs of 20 tokens */
                tokens += 20, waiting--;
            /* 2 ms of fixed cost a pass and 0.5-1.5 ms a token: never what the average said */
            int64_t us = 2000 + (int64_t)tokens * (500 + rand() % 1000);
            embd += (double)us;
            if (us > longest) longest = (double)us;
            cb_embd_pace_note(&p, tokens, us, true, 512);
            waiting--;
            passes++;
            head = 1 + rand() % 200;
        }
        assert_int_equal(waiting, 0);
        double bound = gen * shares[k] / (1 - shares[k]) + longest;
        printf("# share %.2f: %d passes, embeddings %.0f ms against generation %.0f ms (bound %.0f ms)\n", shares[k],
               passes, embd / 1e3, gen / 1e3, bound / 1e3);
        assert_true(embd <= bound);
        assert_true(embd >= 0.8 * gen * shares[k] / (1 - shares[k])); /* and it uses its share */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nothing_generating_takes_the_context), cmocka_unit_test(beside_generation_the_share_pays),
        cmocka_unit_test(credit_is_capped_both_ways),           cmocka_unit_test(the_fixed_part_is_learned),
        cmocka_unit_test(the_share_holds_over_a_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
