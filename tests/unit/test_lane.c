/* The long lane's pool through the scheduler and the fake runner, as the engine runs it: one
 * unified pool, a cache that keeps what a request computed in the host tier only, chunks shaped
 * to a tile of 64 rows, steps bounded by a budget the engine paces, preemption with swap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched_harness.h"

/* A step's budget the way the engine's pace sets it: anything from a tile and a row to the batch,
 * strict now and then (a step planned again after llama.cpp found no room). */
static void paced_until_idle(harness *h, int max_steps) {
    int steps = 0;
    while (cb_sched_n_running(h->s) + cb_sched_n_waiting(h->s) > 0) {
        g_step_budget = 65 + (int32_t)rnd(h, (uint32_t)h->cfg.max_batched_tokens - 64);
        g_step_strict = rnd(h, 4) == 0;
        h_step(h);
        assert_true(++steps < max_steps);
    }
    g_step_budget = 0;
    g_step_strict = false;
}

/* Chunks: a cut prompt leaves a tile at least (86 then 64, not 100 then 50); beside a decode row a
 * prompt whose cut would leave under a tile goes whole, past the budget by under a tile, unless the
 * step is strict (then it waits a step: under a tile it would leave the tiled kernel). */
static void lane_chunks_keep_to_the_tile(void **state) {
    (void)state;
    harness h;
    h_init_lane(&h, 4, 256, 4096, NULL);
    cb_request *a = h_add(&h, 150, 30, 0);
    g_step_budget = 100;
    h_step(&h);
    assert_int_equal(h.plan.items[0].n_tokens, 86);
    h_step(&h);
    assert_int_equal(h.plan.items[0].n_tokens, 64);
    assert_int_equal(a->n_generated, 1);
    cb_request *b = h_add(&h, 100, 5, 0);
    g_step_budget = 60;
    g_step_strict = true;
    h_step(&h);
    assert_int_equal(h.plan.n_items, 1); /* a's decode row; b waits */
    assert_int_equal(b->n_computed, 0);
    g_step_strict = false;
    h_step(&h);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.items[1].n_tokens, 100); /* 101 rows against a budget of 60 */
    g_step_budget = 0;
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* A prompt that wants its rows' logits keeps to the step's logit rows: the tile's shape never
 * lengthens its chunk past them (59 rows beside a decode row under a budget of 60, not the 100 a
 * tile-shaped chunk would take). */
static void lane_chunks_keep_to_the_logit_rows(void **state) {
    (void)state;
    harness h;
    h_init_lane(&h, 4, 256, 4096, NULL);
    h_add(&h, 20, 30, 0);
    h_step(&h);
    cb_request *b = h_add(&h, 100, 3, 0);
    b->all_logits_from = 0;
    b->all_logits_to = 100;
    g_step_budget = 60;
    h_step(&h);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.items[1].n_tokens, 59);
    assert_int_equal(h.plan.n_logit_rows, 59);
    g_step_budget = 0;
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* Conversations of three turns, four at a time in a pool of two sequences: each turn's request
 * continues the one before (its prompt, answer and a new message). With the host tier a later turn
 * loads what the earlier one computed and computes only what it added; without it, all of it again;
 * a failed load computes it again too. Every token every sequence holds is checked each step.
 * Returns the batch rows of the later turns. */
#define CONV 4
static int64_t run_conversations(cb_host_cache *host, int fail_loads, uint64_t seed) {
    harness h;
    h_init_lane(&h, 2, 256, 2048, host);
    h.rng = seed;
    h.f.fail_loads = fail_loads;
    static int32_t conv[CONV][1024];
    int32_t n[CONV];
    for (int s = 0; s < CONV; s++)
        for (n[s] = 0; n[s] < 200 + 50 * s; n[s]++)
            conv[s][n[s]] = 600000 + s * 1000 + n[s];
    int64_t later = 0;
    for (int t = 0; t < 3; t++) {
        cb_request *r[CONV];
        for (int s = 0; s < CONV; s++)
            r[s] = h_add_tokens(&h, conv[s], n[s], 6, 0);
        int64_t before = 0;
        for (int s = 0; s < CONV; s++)
            before += r[s]->n_computed;
        int steps = 0;
        while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
            h_step(&h);
            if (t > 0) later += h.plan.n_tokens;
            assert_true(++steps < 1000);
        }
        for (int s = 0; s < CONV; s++) {
            for (int32_t k = 0; k < 6; k++)
                conv[s][n[s]++] = gen_token(r[s]->id, k);
            for (int32_t k = 0; k < 30; k++)
                conv[s][n[s]++] = 700000 + s * 1000 + t * 100 + k;
        }
        if (host) assert_true(cb_host_check(host));
    }
    cb_cache_stats st = h_stats(&h);
    if (host && host->cap > 0 && fail_loads == 0) assert_true(st.hit_tokens > 0 && st.hit_tokens <= st.query_tokens);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
    return later;
}

static void lane_conversations_come_back_from_the_host_tier(void **state) {
    (void)state;
    /* a later turn: the answer's last token, the new message, the prompt's last token again, then
     * its answer's decode rows */
    int64_t bound = CONV * 2 * (1 + 30 + 1 + 5);
    int64_t without = run_conversations(NULL, 0, 1);
    assert_true(without > bound + CONV * 2 * 200);

    cb_host_cache host;
    assert_int_equal(cb_host_init(&host, 1 << 24, 8, 32, NULL), 0);
    int64_t with = run_conversations(&host, 0, 1);
    assert_true(with <= bound);
    assert_int_equal(host.loads, CONV * 2);
    assert_int_equal(host.failed, 0);
    assert_true(host.evicted > 0); /* a turn's entry supersedes the turn before's */
    assert_int_equal(host.n, 0);   /* the cache drop at the end emptied it */
    cb_host_free(&host);

    assert_int_equal(cb_host_init(&host, 1 << 24, 8, 32, NULL), 0);
    int64_t failing = run_conversations(&host, 3, 1);
    assert_true(failing > with + 3 * 200);
    assert_int_equal(host.failed, 3);
    cb_host_free(&host);
}

/* Long requests that outgrow a small pool under paced budgets: the scheduler preempts (the lowest
 * priority, then the youngest), saving the victim's cells to swap or leaving them to the host tier
 * to load back, or computing them again; every request ends with exactly its own tokens, and the
 * pool is empty at the end. */
static void lane_outgrown_pool_preempts(void **state) {
    (void)state;
    for (int round = 0; round < 24; round++) {
        cb_swap sw;
        cb_host_cache host;
        cb_swap_init(&sw, round % 3 == 0 ? 0 : 1 << 22, 8);
        assert_int_equal(cb_host_init(&host, round % 2 ? 1 << 24 : 0, 8, 32, NULL), 0);
        g_swap = &sw;
        g_lane_wait = round % 4 >= 2 ? 60 : 0;
        harness h;
        h_init_lane(&h, 3, 256, 900, &host);
        g_swap = NULL;
        g_lane_wait = 0;
        h.rng = 77 + (uint64_t)round;
        for (int i = 0; i < 10; i++)
            h_add(&h, 100 + (int32_t)rnd(&h, 300), 20 + (int32_t)rnd(&h, 200), (int32_t)rnd(&h, 2));
        paced_until_idle(&h, 5000);
        const cb_sched_stats *ss = cb_sched_get_stats(h.s);
        assert_true(ss->preemptions > 0);
        if (round % 3 != 0) assert_true(ss->swaps > 0 && sw.swapped_in == ss->swaps);
        if (round % 3 == 0 && round % 2) assert_true(host.loads > 0); /* recomputed: loaded back */
        h_drain(&h, 10);
        h_check_outputs(&h);
        assert_int_equal(sw.used, 0);
        h_free(&h);
        cb_host_free(&host);
    }
}

/* Admission waits (cb_sched_config.wait_tokens): nobody joins while a request computes its prompt,
 * or while one has at most wait_tokens left to its answer; one with more left lets the queue's head
 * in beside it. */
static void lane_waits_for_prompts_and_short_answers(void **state) {
    (void)state;
    harness h;
    g_lane_wait = 50;
    h_init_lane(&h, 4, 256, 4096, NULL);
    g_lane_wait = 0;
    /* a's answer is short: b waits for all of a, then runs alone */
    cb_request *a = h_add(&h, 600, 40, 0), *b = h_add(&h, 300, 40, 0);
    int steps = 0;
    while (!CB_STATE_FINISHED(a->state)) {
        assert_int_equal(b->n_computed, 0);
        assert_true(cb_sched_n_running(h.s) <= 1);
        h_step(&h);
        assert_true(++steps < 100);
    }
    h_drain(&h, 100);
    /* x's answer is long: y joins once x decodes; z waits for y's prompt and short answer, then joins
     * beside x; w waits for x's last 50 tokens */
    cb_request *x = h_add(&h, 300, 200, 0), *y = h_add(&h, 200, 30, 0), *z = h_add(&h, 100, 30, 0);
    steps = 0;
    while (x->n_computed < x->n_prompt) {
        assert_int_equal(y->n_computed + z->n_computed, 0);
        h_step(&h);
        assert_true(++steps < 100);
    }
    h_step(&h); /* x decodes with 199 left */
    assert_true(y->n_computed > 0);
    while (!CB_STATE_FINISHED(y->state)) {
        assert_int_equal(z->n_computed, 0);
        h_step(&h);
        assert_true(++steps < 300);
    }
    h_step(&h);
    assert_true(z->n_computed > 0 && !CB_STATE_FINISHED(x->state));
    while (x->max_tokens - x->n_generated > 50) {
        h_step(&h);
        assert_true(++steps < 500);
    }
    cb_request *w = h_add(&h, 100, 10, 0);
    while (!CB_STATE_FINISHED(x->state)) {
        assert_int_equal(w->n_computed, 0);
        h_step(&h);
        assert_true(++steps < 600);
    }
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lane_chunks_keep_to_the_tile),
        cmocka_unit_test(lane_chunks_keep_to_the_logit_rows),
        cmocka_unit_test(lane_conversations_come_back_from_the_host_tier),
        cmocka_unit_test(lane_outgrown_pool_preempts),
        cmocka_unit_test(lane_waits_for_prompts_and_short_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
