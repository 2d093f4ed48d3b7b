/* The radix prefix cache (unified layout) through the scheduler: a shared prefix computed once,
 * a full hit, the idle cap, the cache giving way to running requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched_harness.h"

/* Requests arriving together with one prefix: the first computes it, the others wait for its
 * cells and compute only their own parts. */
static void prefix_computed_once(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 8, 64, 32, 2048, false, 16);
    for (int i = 0; i < 8; i++)
        h_add_shared(&h, 100, 10, 5);
    int64_t prompt_rows = h_until_idle(&h);
    assert_int_equal(h_stats(&h).hit_tokens, 7 * 100);
    assert_int_equal(h_stats(&h).query_tokens, 8 * 110);
    /* 100 + 8 x 10 prompt tokens and 8 x 4 decode rows: nothing computed twice */
    assert_int_equal(prompt_rows, 100 + 8 * 10 + 8 * 4);
    h_drain(&h, 10);
    h_check_outputs(&h);
    h_free(&h);
}

/* A prompt found whole in the cache still computes its last token (for the logits). */
static void prefix_full_hit_recomputes_last_token(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 1, 64, 16, 1024, false, 4);
    h_add_shared(&h, 50, 0, 5);
    h_until_idle(&h);
    cb_request *b = h_add_shared(&h, 50, 0, 5);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 1);
    assert_ptr_equal(h.plan.items[0].req, b);
    assert_int_equal(h.plan.items[0].pos0, 49);
    assert_int_equal(h.plan.items[0].n_tokens, 1);
    assert_int_equal(h_stats(&h).hit_tokens, 49);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* Idle cache beyond cache_max_idle goes, least recently used leaves first and the last one only
 * in part: the distinct tails of finished requests go, the prefix they share stays and is hit. */
static void prefix_idle_cap_keeps_the_trunk(void **state) {
    (void)state;
    harness h;
    g_cache_max_idle = 50; /* under one request's 64 cells: only a trim keeps the 40 shared */
    h_init_px(&h, CB_MODE_CONTINUOUS, 1, 64, 32, 1024, false, 8);
    g_cache_max_idle = 0;
    for (int i = 0; i < 3; i++) {
        h_add_shared(&h, 40, 20, 5); /* leaves 40 shared + 20 own + 4 generated cells behind */
        while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
            h_step(&h);
            assert_true(cb_prefix_idle_cells(h.px) <= 50 + 64); /* over the cap for one step at most */
        }
    }
    assert_int_equal(cb_sched_step(h.s, &h.plan, 0, false), 0); /* an empty step applies the cap */
    assert_true(fake_run(&h.f, &h.plan));
    h_check_cells(&h, &h.plan);
    assert_int_equal(cb_prefix_idle_cells(h.px), 50); /* trimmed to the cell, not a whole leaf */
    assert_int_equal(h_stats(&h).hit_tokens, 2 * 40);
    h_drain(&h, 10);
    h_check_outputs(&h);
    h_free(&h);
}

/* The cache fills the KV budget with finished requests' cells, and gives them back to new
 * requests: never a preemption because of it. */
static void prefix_cache_gives_way(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 2, 64, 16, 128, false, 8);
    for (int i = 0; i < 12; i++) {
        h_add(&h, 40, 10, 0);
        if (i % 2) h_drain(&h, 200);
    }
    h_drain(&h, 500);
    h_check_outputs(&h);
    assert_int_equal(cb_sched_get_stats(h.s)->preemptions, 0);
    assert_true(h.px->evicted_cells > 0);
    h_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefix_computed_once),
        cmocka_unit_test(prefix_full_hit_recomputes_last_token),
        cmocka_unit_test(prefix_cache_gives_way),
        cmocka_unit_test(prefix_idle_cap_keeps_the_trunk),
    };
    return cmocka_run_group_tests_name("prefix cache", tests, NULL, NULL);
}
