/* The scheduler: the token budget, chunking, modes, admission, preemption and priorities, and
 * random traces through every configuration. Driven by the fake runner: no model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched_harness.h"

static void budget_and_decode_first(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 8, 64, 16, 4096, false);
    for (int i = 0; i < 12; i++)
        h_add(&h, 10 + i * 13, 5 + i, 0);
    int saw_mixed = 0;
    while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
        h_step(&h);
        saw_mixed += h.plan.n_decode > 0 && h.plan.n_prefill_tokens > 0;
    }
    assert_true(saw_mixed > 0); /* decode rows and prefill chunks shared steps */
    h_check_outputs(&h);
    h_free(&h);
}

static void chunk_cap_and_logits_only_at_end(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 256, 32, 4096, false);
    cb_request *r = h_add(&h, 100, 3, 0);
    int32_t seen[4] = {0};
    for (int s = 0; s < 4; s++) {
        h_step(&h);
        assert_int_equal(h.plan.n_items, 1);
        seen[s] = h.plan.items[0].n_tokens;
        assert_int_equal(h.plan.items[0].logits, s == 3); /* only the final chunk asks for logits */
    }
    assert_int_equal(seen[0], 32);
    assert_int_equal(seen[3], 4);
    assert_int_equal(r->n_generated, 1);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

static void no_chunking_takes_whole_prompts(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 300, 0, 4096, false);
    h_add(&h, 200, 4, 0);
    h_add(&h, 150, 4, 0); /* does not fit the rest of the first step's budget: waits */
    h_step(&h);
    assert_int_equal(h.plan.n_items, 1);
    assert_int_equal(h.plan.items[0].n_tokens, 200);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.items[1].n_tokens, 150);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

static void static_mode_waits_for_group(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_STATIC, 4, 128, 32, 4096, false);
    int outs[10] = {3, 40, 5, 7, 9, 2, 30, 4, 4, 4};
    for (int i = 0; i < 10; i++)
        h_add(&h, 20, outs[i], 0);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 4); /* the whole group is admitted at once */
    h_drain(&h, 1000);
    h_check_outputs(&h);
    /* A member idles from its last token to the group's end: group {3,40,5,7} wastes
     * 37+0+35+33 slot-steps, {9,2,30,4} 21+28+0+26, {4,4} none. */
    assert_int_equal(cb_sched_get_stats(h.s)->wasted_decode_slots, 105 + 75);
    h_free(&h);
}

/* A static group is max_num_seqs requests even when their prompts exceed one step's budget. */
static void static_group_is_whole_past_the_budget(void **state) {
    (void)state;
    for (int chunk = 0; chunk <= 64; chunk += 64) {
        harness h;
        h_init(&h, CB_MODE_STATIC, 4, chunk ? 128 : 256, chunk, 4096, false);
        for (int i = 0; i < 8; i++)
            h_add(&h, 200, 3 + i, 0);
        h_step(&h);
        int members = 0;
        for (int i = 0; i < h.n_req; i++)
            members += h.req[i]->static_member;
        assert_int_equal(members, 4);
        assert_int_equal(cb_sched_n_running(h.s), 4);
        h_drain(&h, 1000);
        h_check_outputs(&h);
        h_free(&h);
    }
}

/* Static: a member of the open group that was preempted comes back before anyone else, even from
 * behind requests of higher priority that arrived meanwhile (they may not join the group). h_step
 * checks that no step on an idle engine comes out empty (the engine would end the queue head). */
static void static_member_comes_back_past_higher_priorities(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_STATIC, 2, 64, 8, 48, false);
    cb_request *m[2] = {h_add(&h, 8, 30, 0), h_add(&h, 8, 30, 0)}; /* 76 cells wanted, 48 there */
    h_step(&h);
    assert_true(m[0]->static_member && m[1]->static_member);
    int steps = 0;
    while (m[0]->n_preemptions + m[1]->n_preemptions == 0) {
        h_step(&h);
        assert_true(++steps < 200);
    }
    for (int i = 0; i < 4; i++)
        h_add(&h, 8, 3, 5); /* urgent, but the group is open */
    h_drain(&h, 2000);
    h_check_outputs(&h);
    assert_int_equal(m[0]->state, CB_FINISHED_STOP);
    assert_int_equal(m[1]->state, CB_FINISHED_STOP);
    h_free(&h);
}

static void continuous_admits_while_others_run(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 128, 32, 4096, false);
    cb_request *a = h_add(&h, 20, 50, 0);
    for (int i = 0; i < 5; i++)
        h_step(&h);
    cb_request *b = h_add(&h, 20, 3, 0);
    h_step(&h);
    assert_int_equal(a->state, CB_RUNNING);
    assert_int_equal(b->state, CB_RUNNING);
    assert_int_equal(cb_sched_get_stats(h.s)->wasted_decode_slots, 0);
    h_drain(&h, 200);
    h_check_outputs(&h);
    h_free(&h);
}

static void tiny_kv_preempts_and_everyone_finishes(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 8, 32, 8, 64, false);
    for (int i = 0; i < 20; i++)
        h_add(&h, 10 + (i * 7) % 21, 5 + (i * 11) % 26, 0);
    h_drain(&h, 20000);
    h_check_outputs(&h);
    assert_true(cb_sched_get_stats(h.s)->preemptions > 0);
    assert_true(h.kv.peak_used <= 64);
    int preempted = 0;
    for (int i = 0; i < h.n_req; i++)
        preempted += h.req[i]->n_preemptions > 0;
    assert_true(preempted > 0);
    h_free(&h);
}

/* The same load with swap space: victims' cells go to host memory and come back (the fake runner
 * checks every sequence holds the right token at every position after a restore), without and
 * with the prefix cache, whose shared prefix a swap leaves in place (pinned) instead of saving. */
static void tiny_kv_swaps_and_keeps_every_cell_right(void **state) {
    (void)state;
    for (int holders = 0; holders <= 8; holders += 8) {
        cb_swap sw;
        cb_swap_init(&sw, 1 << 20, 16);
        g_swap = &sw;
        harness h;
        h_init_px(&h, CB_MODE_CONTINUOUS, 8, 32, 8, 96, false, holders);
        g_swap = NULL;
        int32_t prefix[40];
        for (int i = 0; i < 20; i++) {
            int32_t n = 10 + (i * 7) % 21;
            for (int32_t k = 0; k < n; k++) /* half the requests share their first 8 tokens */
                prefix[k] = i % 2 == 0 && k < 8 ? 777000 + k : i * 1000 + k;
            h_add_tokens(&h, prefix, n, 5 + (i * 11) % 26, 0);
        }
        int32_t pinned = 0, steps = 0;
        while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
            h_step(&h);
            assert_true(++steps < 20000);
            for (int32_t i = 0; i < cb_sched_n_waiting(h.s); i++) {
                const cb_request *r = cb_sched_waiting_at(h.s, i);
                if (r->swap.state == CB_SWAP_SAVED && r->swap.from > pinned) pinned = r->swap.from;
            }
        }
        h_drain(&h, 10);
        h_check_outputs(&h);
        const cb_sched_stats *st = cb_sched_get_stats(h.s);
        printf("# holders %d: %lld preemptions, %lld swapped out, %lld in, %lld recomputed, peak %lld bytes, "
               "longest pinned prefix %d\n",
               holders, (long long)st->preemptions, (long long)sw.swapped_out, (long long)sw.swapped_in,
               (long long)sw.recomputed, (long long)sw.peak, pinned);
        assert_true(st->swaps > 0 && sw.swapped_in > 0);
        assert_int_equal(st->swaps, sw.swapped_out);
        assert_int_equal(sw.used, 0); /* every reservation given back */
        assert_true(sw.peak > 0 && sw.peak <= sw.cap);
        if (holders > 0) assert_true(pinned >= 8); /* the shared prefix stayed cached, not saved */
        h_free(&h);
    }
}

/* A swapped request whose path another request extended: its release publishes its generated tokens
 * under a new holder that must get the whole path, so the save (which drops the shared part from the
 * sequence) may only run after that copy (h_check_tree checks every holder's path every step). */
static void swap_after_a_prefix_was_extended(void **state) {
    (void)state;
    cb_swap sw;
    cb_swap_init(&sw, 1 << 20, 16);
    g_swap = &sw;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 32, 8, 80, false, 4);
    g_swap = NULL;
    int32_t p[16];
    for (int32_t k = 0; k < 16; k++)
        p[k] = 5000 + k;
    cb_request *a = h_add_tokens(&h, p, 10, 40, 0); /* the victim: lowest priority */
    for (int i = 0; i < 4; i++)
        h_step(&h);
    assert_true(a->n_generated > 0);
    h_add_tokens(&h, p, 16, 40, 5); /* a's prompt and six more: it extends a's node */
    int32_t from = -1, steps = 0;
    while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
        h_step(&h);
        assert_true(++steps < 2000);
        if (a->swap.state == CB_SWAP_SAVED) from = a->swap.from;
    }
    h_drain(&h, 10);
    h_check_outputs(&h);
    assert_true(sw.swapped_out > 0);
    assert_int_equal(from, 10); /* the shared prompt stayed in the cache, the rest was saved */
    assert_int_equal(sw.used, 0);
    h_free(&h);
}

/* A swapped request's pinned prefix holds cells; when the queue head needs them and nothing runs,
 * the pin gives way (that request recomputes) instead of the head never being scheduled. */
static void pinned_prefix_gives_way_to_the_queue_head(void **state) {
    (void)state;
    cb_swap sw;
    cb_swap_init(&sw, 1 << 20, 16);
    g_swap = &sw;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 32, 8, 64, false, 4);
    g_swap = NULL;
    int32_t p[60];
    for (int32_t k = 0; k < 60; k++)
        p[k] = k < 8 ? 7000 + k : 8000 + k;
    cb_request *a = h_add_tokens(&h, p, 12, 30, 0); /* the victim */
    p[9] = 9999;
    h_add_tokens(&h, p, 12, 30, 1); /* shares a's first 9 tokens */
    int steps = 0;
    while (a->swap.state != CB_SWAP_SAVED) {
        h_step(&h);
        assert_true(++steps < 200);
    }
    assert_non_null(a->swap.pin);
    for (int32_t k = 0; k < 60; k++)
        p[k] = 6000 + k;
    cb_request *b = h_add_tokens(&h, p, 60, 2, 10); /* ahead of a; needs the pinned cells */
    while (cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
        int32_t n = h_step(&h);
        assert_true(n > 0 || cb_sched_n_running(h.s) > 0); /* never stuck with nothing running */
        assert_true(++steps < 2000);
    }
    h_drain(&h, 10);
    h_check_outputs(&h);
    assert_int_equal(b->state, CB_FINISHED_STOP);
    assert_int_equal(sw.lost, 1); /* a's swap was given up: it recomputed */
    assert_int_equal(sw.used, 0);
    h_free(&h);
}

/* Swap space too small for every victim: the rest recompute; saves and restores that fail leave the
 * request to recompute too, and nothing is lost. */
static void swap_space_full_or_failing_falls_back_to_recompute(void **state) {
    (void)state;
    cb_swap sw;
    cb_swap_init(&sw, 30 * 16 + 4096 + 1000, 16); /* about one victim at a time */
    g_swap = &sw;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 8, 32, 8, 64, false, 4);
    g_swap = NULL;
    h.f.fail_saves = 2;
    h.f.fail_restores = 2;
    for (int i = 0; i < 24; i++)
        h_add(&h, 10 + (i * 7) % 21, 5 + (i * 11) % 26, 0);
    h_drain(&h, 20000);
    h_check_outputs(&h);
    printf("# %lld swapped out, %lld in, %lld recomputed (%lld for want of space), %lld lost\n",
           (long long)sw.swapped_out, (long long)sw.swapped_in, (long long)sw.recomputed, (long long)sw.refused,
           (long long)sw.lost);
    assert_true(sw.refused > 0);
    assert_int_equal(sw.lost, 4);
    assert_int_equal(h.f.fail_saves + h.f.fail_restores, 0);
    assert_true(sw.swapped_in > 0);
    assert_int_equal(sw.used, 0);
    assert_true(sw.peak <= sw.cap);
    h_free(&h);
}

/* Copying costs more than computing (a fast prefill): the victim is recomputed. */
static void swap_chooses_by_cost(void **state) {
    (void)state;
    cb_swap sw;
    cb_swap_init(&sw, 1 << 30, 20000);
    cb_request *r = cb_request_new(1, (int32_t[]){1, 2, 3}, 3, 4);
    assert_true(cb_swap_choose(&sw, r, 1000)); /* 20 MB at 2 GB/s both ways: 20 ms against 2 s */
    cb_swap_end(&sw, r, false);
    for (int i = 0; i < 40; i++) /* a prefill measured at 5 us a token */
        cb_swap_note_prefill(&sw, 1000, 5000);
    assert_false(cb_swap_choose(&sw, r, 1000));
    assert_int_equal(sw.recomputed, 1);
    assert_int_equal(sw.refused, 0);
    assert_int_equal(sw.used, 0);
    cb_request_free(r);
}

static void victim_is_lowest_priority_youngest(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 64, 16, 40, false);
    cb_request *hi = h_add(&h, 8, 30, 5);
    cb_request *old = h_add(&h, 8, 30, 0);
    cb_request *young = h_add(&h, 8, 30, 0);
    while (hi->n_preemptions + old->n_preemptions + young->n_preemptions == 0 &&
           cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0)
        h_step(&h);
    assert_int_equal(young->n_preemptions, 1);
    assert_int_equal(old->n_preemptions, 0);
    assert_int_equal(hi->n_preemptions, 0);
    assert_ptr_equal(cb_sched_waiting_at(h.s, 0), young); /* back at the front */
    h_drain(&h, 1000);
    h_check_outputs(&h);
    h_free(&h);
}

/* Higher priority is admitted first; within a priority, first come first served. */
static void priority_then_fcfs_admission(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 1, 64, 16, 4096, false);
    cb_request *a = h_add(&h, 8, 2, 0), *b = h_add(&h, 8, 2, 3), *c = h_add(&h, 8, 2, 0), *d = h_add(&h, 8, 2, 3);
    cb_request *order[4];
    int k = 0;
    while (k < 4) {
        h_step(&h);
        for (int32_t i = 0; i < h.plan.n_items; i++)
            if (h.plan.items[i].pos0 == 0) order[k++] = h.plan.items[i].req;
    }
    assert_ptr_equal(order[0], b);
    assert_ptr_equal(order[1], d);
    assert_ptr_equal(order[2], a);
    assert_ptr_equal(order[3], c);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* Under a steady stream of higher-priority arrivals (more than one slot serves), a low-priority
 * request starves with fixed priorities and runs within a bounded wait with aging: after
 * (priority gap x aging) it ranks before every later arrival. */
static int low_priority_wait(int64_t aging_us) {
    harness h;
    g_aging_us = aging_us;
    h_init(&h, CB_MODE_CONTINUOUS, 1, 64, 16, 4096, false);
    g_aging_us = 0;
    g_now_us = 0;
    cb_request *low = h_add(&h, 8, 2, 0);
    int steps = 0;
    for (; steps < 400 && low->n_computed == 0 && !CB_STATE_FINISHED(low->state); steps++) {
        g_now_us = steps * 1000; /* a step a millisecond, a high-priority arrival each step */
        h_add(&h, 8, 2, 10);
        h_step(&h);
    }
    g_now_us = 0;
    h_drain(&h, 10000);
    h_check_outputs(&h);
    h_free(&h);
    return steps;
}

static void aging_bounds_the_wait(void **state) {
    (void)state;
    int fixed = low_priority_wait(0), aged = low_priority_wait(1000);
    printf("# low priority admitted after %d steps with aging (1 point a ms, gap 10), %d without (400 = never)\n", aged,
           fixed);
    assert_int_equal(fixed, 400);
    assert_true(aged <= 40); /* 10 ms to catch up with new arrivals, then the backlog ahead of it */
}

static void split_layout_caps_sequences(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 64, 16, 128, true); /* 32 cells per sequence */
    assert_false(cb_sched_fits(h.s, 32));
    cb_request *r = h_add(&h, 20, 100, 0);
    h_drain(&h, 1000);
    assert_int_equal(r->state, CB_FINISHED_LENGTH);
    assert_int_equal(cb_request_n_tokens(r), 32);
    h_free(&h);
}

/* Random configurations, arrivals, priorities and cancels in every state; thousands of steps. */
static void randomized_traces(void **state) {
    (void)state;
    int64_t total_swapped_in = 0;
    int64_t total_steps = 0, total_preempt = 0, total_hits = 0, total_evicted = 0, split_hits = 0, split_copies = 0;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        if (getenv("TRACE_SEEDS")) fprintf(stderr, "seed %d\n", (int)seed);
        harness h;
        uint64_t rng = seed * 0x9E3779B97F4A7C15ULL;
        harness tmp = {.rng = rng};
        int32_t seqs = 1 + (int32_t)rnd(&tmp, 8);
        int32_t budget = seqs + (int32_t)rnd(&tmp, 100);
        int32_t chunk = rnd(&tmp, 4) == 0 ? 0 : 1 + (int32_t)rnd(&tmp, 40);
        bool split = rnd(&tmp, 3) == 0;
        /* split: the stream cache on two times in three, with 0-3 holder streams */
        int32_t split_holders = split && rnd(&tmp, 3) > 0 ? (int32_t)rnd(&tmp, 4) : -1;
        int32_t capacity = split ? (seqs + (split_holders > 0 ? split_holders : 0)) * (24 + (int32_t)rnd(&tmp, 64))
                                 : 48 + (int32_t)rnd(&tmp, 400);
        cb_mode mode = rnd(&tmp, 3) == 0 ? CB_MODE_STATIC : CB_MODE_CONTINUOUS;
        if (chunk == 0 && budget < capacity) budget = capacity; /* as the engine does */
        int32_t holders = split ? split_holders : rnd(&tmp, 2) == 0 ? 1 + (int32_t)rnd(&tmp, 12) : 0;
        int32_t family_len[4];
        for (int f = 0; f < 4; f++)
            family_len[f] = 1 + (int32_t)rnd(&tmp, 50);
        g_cache_max_idle = holders > 0 && rnd(&tmp, 2) == 0 ? 1 + (int32_t)rnd(&tmp, 60) : 0; /* trims */
        cb_swap sw; /* swap space half the time, from a few victims' worth to plenty */
        cb_swap_init(&sw, (int64_t)rnd(&tmp, 8) * 2000 + 4096, 8);
        g_swap = rnd(&tmp, 2) == 0 ? &sw : NULL;
        /* a third of the traces paced, from a pace of a few tokens to one of dozens (not from the
         * rng: the other traces stay as they were) */
        cb_step_pace pace = {.row_us = 1000.0 * (double)(1 + seed % 4), .token_us = 400.0 * (double)(1 + seed % 7)};
        g_pace = seed % 3 == 0 ? &pace : NULL;
        g_prefill_step = seed % 4 == 1 ? budget + 1 + (int32_t)(seed * 37 % 150) : 0; /* a quarter: prefill steps */
        h_init_px(&h, mode, seqs, budget, chunk, capacity, split, holders);
        g_cache_max_idle = 0;
        g_swap = NULL;
        g_pace = NULL;
        g_prefill_step = 0;
        if (h.f.swap && rnd(&tmp, 3) == 0) h.f.fail_saves = h.f.fail_restores = 1;
        h.rng = tmp.rng;
        int to_add = 30 + (int)rnd(&h, 60), steps = 0;
        while (to_add > 0 || cb_sched_n_running(h.s) + cb_sched_n_waiting(h.s) > 0) {
            if (to_add > 0 && rnd(&h, 3) == 0) {
                int32_t maxp = h.kv.per_seq_cap - 1;
                if (chunk == 0 && maxp > budget) maxp = budget;
                int32_t np = 1 + (int32_t)rnd(&h, (uint32_t)(maxp < 60 ? maxp : 60));
                int32_t prompt[64];
                int f = (int)rnd(&h, 5); /* 4: a prompt of its own; else one of 4 shared prefixes */
                for (int32_t k = 0; k < np; k++)
                    prompt[k] = f < 4 && k < family_len[f] ? 900000 + f * 1000 + k : h.n_req * 1000 + k;
                h_add_tokens(&h, prompt, np, 1 + (int32_t)rnd(&h, 40), (int32_t)rnd(&h, 3));
                to_add--;
            }
            if (rnd(&h, 25) == 0) { /* cancel someone, in whatever state */
                int32_t nr = cb_sched_n_running(h.s), nw = cb_sched_n_waiting(h.s);
                if (nr + nw > 0) {
                    uint32_t k = rnd(&h, (uint32_t)(nr + nw));
                    cb_request *v = k < (uint32_t)nr ? cb_sched_running_at(h.s, (int32_t)k)
                                                     : cb_sched_waiting_at(h.s, (int32_t)k - nr);
                    h_finish(&h, v, CB_FINISHED_CANCELLED);
                }
            }
            h_step(&h);
            assert_true(++steps < 200000);
        }
        h_drain(&h, 10);
        h_check_outputs(&h);
        total_steps += steps;
        total_preempt += cb_sched_get_stats(h.s)->preemptions;
        total_swapped_in += h.f.swap ? sw.swapped_in : 0;
        if (h.f.swap) assert_int_equal(sw.used, 0);
        total_hits += h.px_on ? h_stats(&h).hit_tokens : 0;
        total_evicted += h.px_on ? h.px->evicted_cells : 0;
        split_hits += h.sc_on ? h_stats(&h).hit_tokens : 0;
        split_copies += h.sc_on ? h.sc->copies : 0;
        h_free(&h);
    }
    assert_true(total_steps > 2000);
    assert_true(total_preempt > 0);
    assert_true(total_swapped_in > 0);
    assert_true(total_hits > 0 && total_evicted > 0); /* the cache was exercised, evictions included */
    assert_true(split_hits > 0 && split_copies > 0);  /* and the split layout's streams */
}

/* The plan's prompt tokens of request r (0 when r is not in it). */
static int32_t prompt_in_plan(const harness *h, const cb_request *r) {
    for (int32_t i = 0; i < h->plan.n_items; i++)
        if (h->plan.items[i].req == r) return h->plan.items[i].n_tokens;
    return 0;
}

/* A paced step (cb_step_pace, share 1): beside 13 decoding requests a short prompt takes what
 * keeps them waiting about one full decode step, the rest in the next; of two short prompts the
 * second waits for the pace; a prompt longer than a tile keeps to the budget. Without a pace the
 * budget alone bounds them all. */
static void pacing_bounds_a_steps_prompt_beside_decodes(void **state) {
    (void)state;
    for (int paced = 1; paced >= 0; paced--) {
        cb_step_pace pace = {.row_us = 3000, .token_us = 2500};
        g_pace = paced ? &pace : NULL;
        harness h;
        h_init(&h, CB_MODE_CONTINUOUS, 16, 128, 256, 16 * 1024, true);
        g_pace = NULL;
        for (int i = 0; i < 13; i++)
            h_add(&h, 10, 1000, 0);
        while (h.plan.n_decode < 13)
            h_step(&h);
        cb_request *r1 = h_add(&h, 35, 1000, 0);
        h_step(&h);
        assert_int_equal(h.plan.n_decode, 13);
        assert_int_equal(prompt_in_plan(&h, r1), paced ? 23 : 35); /* 16 x 16 x 3 / (13 x 2.5) = 23.6 */
        if (paced) {
            h_step(&h);
            assert_int_equal(prompt_in_plan(&h, r1), 12); /* the rest, whole */
        }
        h_step(&h); /* r1 decodes */
        cb_request *r2 = h_add(&h, 30, 10, 0), *r3 = h_add(&h, 30, 10, 0);
        h_step(&h);
        assert_int_equal(h.plan.n_decode, 14);
        assert_int_equal(prompt_in_plan(&h, r2), paced ? 21 : 30); /* 256 x 3 / (14 x 2.5) = 21.9 */
        assert_int_equal(prompt_in_plan(&h, r3), paced ? 0 : 30);
        h_finish(&h, r2, CB_FINISHED_CANCELLED);
        h_finish(&h, r3, CB_FINISHED_CANCELLED);
        cb_request *r4 = h_add(&h, 500, 10, 0);
        h_step(&h);
        assert_int_equal(h.plan.n_decode, 14);
        assert_int_equal(prompt_in_plan(&h, r4), 114); /* the budget after 14 decode rows */
        h_drain(&h, 100000);
        h_check_outputs(&h);
        h_free(&h);
    }
}

/* Unified layout, an idle engine: a prompt that matches the start of a cached node locks only what
 * it matches (the node is cut there), so the node's tail is room it can take (the whole node was
 * locked and, where it held the cells the prompt needed, the engine ended the request as one that
 * can never be scheduled). */
static void a_partial_match_never_blocks_an_idle_engine(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 1, 64, 16, 40, false, 1);
    int32_t a[30], b[37];
    for (int32_t i = 0; i < 37; i++) {
        if (i < 30) a[i] = 500 + i;
        b[i] = i < 7 ? 500 + i : 900 + i;
    }
    h_add_tokens(&h, a, 30, 1, 0);
    h_until_idle(&h);
    assert_int_equal(h_stats(&h).cells, 30); /* a's prompt stays as cache: 10 cells free */
    cb_request *r = h_add_tokens(&h, b, 37, 2, 0);
    h_until_idle(&h); /* h_step fails an empty plan on an idle engine */
    assert_int_equal(r->state, CB_FINISHED_STOP);
    assert_int_equal(r->n_cached, 7);        /* it shares the match */
    assert_int_equal(h_stats(&h).cells, 38); /* and what it computed stays as cache, as any request's does */
    h_check_outputs(&h);
    h_free(&h);
}

/* A step in which nobody decodes (prefill_step_tokens) computes a lone prompt in passes of 512, not
 * of the step budget 128; once the prompt's request decodes, the next prompt keeps to 128 beside it;
 * a budget given below the prefill step is never raised. */
static void a_step_nobody_decodes_in_takes_the_prefill_tokens(void **state) {
    (void)state;
    for (int split = 0; split <= 1; split++) {
        g_prefill_step = 512;
        harness h;
        h_init(&h, CB_MODE_CONTINUOUS, 4, 128, 256, 4 * 2048, split);
        g_prefill_step = 0;
        cb_request *a = h_add(&h, 1200, 3, 0);
        int32_t seen[3];
        for (int s = 0; s < 3; s++) {
            h_step(&h);
            assert_int_equal(h.plan.n_decode, 0);
            seen[s] = prompt_in_plan(&h, a);
        }
        assert_int_equal(seen[0], 512);
        assert_int_equal(seen[1], 512);
        assert_int_equal(seen[2], 176);
        assert_int_equal(a->n_generated, 1);
        cb_request *b = h_add(&h, 1200, 3, 0);
        h_step(&h);
        assert_int_equal(h.plan.n_decode, 1);
        assert_true(prompt_in_plan(&h, b) > 0);
        assert_true(h.plan.n_tokens <= 128);
        h_drain(&h, 1000);
        cb_request *c = h_add(&h, 1200, 3, 0);
        g_step_budget = 100;
        h_step(&h);
        g_step_budget = 0;
        assert_int_equal(h.plan.n_decode, 0);
        assert_true(prompt_in_plan(&h, c) > 0 && prompt_in_plan(&h, c) <= 100);
        h_drain(&h, 1000);
        h_check_outputs(&h);
        h_free(&h);
    }
}

/* Draft rows (cb_sched_config.spec_cost): after the decode rows, as many as the choice finds worth
 * it within the budget; the commit counts the decode row computed and leaves the drafts to the
 * engine, which gives back the cells of those that did not hold. */
static void drafts_follow_decode_rows_within_the_budget(void **state) {
    (void)state;
    harness h;
    h_init(&h, CB_MODE_CONTINUOUS, 4, 64, 32, 4096, false);
    cb_sched_free(h.s);
    cb_row_cost cost = {0}; /* not fitted: a row is taken as a tenth of a step */
    h.cfg.spec_cost = &cost;
    h.s = cb_sched_new(&h.cfg, &h.kv, h.cache);
    assert_non_null(h.s);
    cb_request *a = h_add(&h, 10, 20, 0), *b = h_add(&h, 12, 20, 0);
    h_step(&h); /* both prompts, then a token each: both decode */
    assert_int_equal(cb_request_pending(a), 1);
    assert_int_equal(cb_request_pending(b), 1);
    a->draft.avail = 6, a->draft.rate = 1.0; /* drafts that always hold: every one pays */
    b->draft.avail = 0;
    int32_t used = h.kv.used[a->seq_id], computed = a->n_computed;
    cb_sched_step(h.s, &h.plan, 0, false);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.n_decode, 2);
    assert_int_equal(h.plan.n_draft_rows, 6);
    assert_int_equal(h.plan.n_tokens, 8);
    for (int32_t i = 0; i < 2; i++) {
        const cb_plan_item *it = &h.plan.items[i];
        assert_int_equal(it->n_draft, it->req == a ? 6 : 0);
        assert_int_equal(it->n_tokens, 1 + it->n_draft);
        assert_true(it->logits);
    }
    assert_int_equal(h.kv.used[a->seq_id], used + 7);
    cb_sched_commit(h.s, &h.plan, 1);
    assert_int_equal(a->n_computed, computed + 1); /* the drafts: the engine's to count */
    /* two held: their cells stay, the other four go; the last row's token comes on top */
    cb_kv_grow(&h.kv, a->seq_id, -4);
    a->n_computed += 2;
    for (int32_t k = 0; k < 3; k++)
        assert_true(cb_request_append(a, 7));
    assert_true(cb_request_append(b, 7));
    assert_int_equal(cb_request_pending(a), 1);
    assert_int_equal(h.kv.used[a->seq_id], a->n_computed);
    /* a budget of 4 strict: two decode rows, two drafts */
    cb_sched_step(h.s, &h.plan, 4, true);
    assert_int_equal(h.plan.n_tokens, 4);
    assert_int_equal(h.plan.n_draft_rows, 2);
    cb_sched_rollback(h.s, &h.plan);
    assert_int_equal(h.kv.used[a->seq_id], a->n_computed);
    /* drafts that never hold: none, whatever the budget */
    a->draft.rate = 0;
    cb_sched_step(h.s, &h.plan, 0, false);
    assert_int_equal(h.plan.n_draft_rows, 0);
    assert_int_equal(h.plan.n_tokens, 2);
    cb_sched_rollback(h.s, &h.plan);
    h_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budget_and_decode_first),
        cmocka_unit_test(chunk_cap_and_logits_only_at_end),
        cmocka_unit_test(no_chunking_takes_whole_prompts),
        cmocka_unit_test(static_mode_waits_for_group),
        cmocka_unit_test(static_group_is_whole_past_the_budget),
        cmocka_unit_test(static_member_comes_back_past_higher_priorities),
        cmocka_unit_test(continuous_admits_while_others_run),
        cmocka_unit_test(tiny_kv_preempts_and_everyone_finishes),
        cmocka_unit_test(tiny_kv_swaps_and_keeps_every_cell_right),
        cmocka_unit_test(swap_after_a_prefix_was_extended),
        cmocka_unit_test(pinned_prefix_gives_way_to_the_queue_head),
        cmocka_unit_test(swap_space_full_or_failing_falls_back_to_recompute),
        cmocka_unit_test(swap_chooses_by_cost),
        cmocka_unit_test(victim_is_lowest_priority_youngest),
        cmocka_unit_test(priority_then_fcfs_admission),
        cmocka_unit_test(aging_bounds_the_wait),
        cmocka_unit_test(split_layout_caps_sequences),
        cmocka_unit_test(pacing_bounds_a_steps_prompt_beside_decodes),
        cmocka_unit_test(drafts_follow_decode_rows_within_the_budget),
        cmocka_unit_test(a_step_nobody_decodes_in_takes_the_prefill_tokens),
        cmocka_unit_test(a_partial_match_never_blocks_an_idle_engine),
        cmocka_unit_test(randomized_traces),
    };
    return cmocka_run_group_tests_name("scheduler", tests, NULL, NULL);
}
