/* Scheduler + KV accounting driven by a fake runner: no model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_runner.h"

#define MAX_REQ 4096

typedef struct {
    cb_kv kv;
    cb_cache *cache;
    const cb_prefix *px; /* the radix cache's tree (unified layout), or NULL */
    bool px_on;
    const cb_streams *sc; /* the split layout's stream cache, or NULL */
    bool sc_on;
    cb_sched *s;
    cb_plan plan;
    fake_runner f;
    cb_sched_config cfg;
    cb_request *req[MAX_REQ];
    int32_t target[MAX_REQ];  /* tokens each request generates before it stops */
    int32_t *prompt[MAX_REQ]; /* copy of each prompt */
    int n_req, n_finished, n_cancelled;
    int64_t arrivals;
    uint64_t rng;
} harness;

static int32_t gen_token(int64_t id, int32_t k) { return (int32_t)((id * 7919 + k * 31) % 50000); }

static int32_t g_cache_max_idle; /* the next h_init's radix cache's max_idle */
static int64_t g_aging_us;       /* the next h_init's cb_sched_config.priority_aging_us */
static int64_t g_now_us;         /* t_submit_us of the requests h_add queues */

/* Unified: holders > 0 turns the prefix cache on, with that many sequence ids of its own.
 * Split: holders >= 0 turns the stream cache on (streams.h), with that many holder streams. */
static void h_init_px(harness *h, cb_mode mode, int32_t seqs, int32_t budget, int32_t chunk, int32_t capacity,
                      bool split, int32_t holders) {
    memset(h, 0, sizeof(*h));
    assert_int_equal(cb_kv_init(&h->kv, capacity, seqs + (holders > 0 ? holders : 0), split), 0);
    h->cfg = (cb_sched_config){.mode = mode,
                               .max_num_seqs = seqs,
                               .max_batched_tokens = budget,
                               .prefill_chunk = chunk,
                               .kv_reserve = 4,
                               .split_tile = 64,
                               .priority_aging_us = g_aging_us};
    if (split && holders >= 0)
        h->cache = cb_cache_new_streams(&h->kv, seqs, 3);
    else if (!split && holders > 0)
        h->cache = cb_cache_new_radix(&h->kv, holders, g_cache_max_idle);
    else
        h->cache = cb_cache_new_none(&h->kv);
    assert_non_null(h->cache);
    h->px = cb_cache_prefix(h->cache);
    h->sc = cb_cache_streams(h->cache);
    h->px_on = h->px != NULL;
    h->sc_on = h->sc != NULL;
    h->s = cb_sched_new(&h->cfg, &h->kv, h->cache);
    assert_non_null(h->s);
    assert_int_equal(cb_plan_init(&h->plan, seqs), 0);
    fake_init(&h->f, h->kv.n_seq, h->kv.capacity, h->kv.per_seq_cap, budget, split);
}

static void h_init(harness *h, cb_mode mode, int32_t seqs, int32_t budget, int32_t chunk, int32_t capacity,
                   bool split) {
    h_init_px(h, mode, seqs, budget, chunk, capacity, split, split ? -1 : 0);
}

static void h_free(harness *h) {
    for (int i = 0; i < h->n_req; i++) {
        cb_request_free(h->req[i]);
        free(h->prompt[i]);
    }
    cb_plan_free(&h->plan);
    cb_sched_free(h->s);
    cb_cache_free(h->cache);
    cb_kv_free(&h->kv);
    fake_free(&h->f);
}

/* Queues a request with this prompt (copied). */
static cb_request *h_add_tokens(harness *h, const int32_t *p, int32_t n_prompt, int32_t n_out, int32_t priority) {
    assert_true(h->n_req < MAX_REQ);
    cb_request *r = cb_request_new(h->n_req + 1, p, n_prompt, n_out);
    assert_non_null(r);
    h->prompt[h->n_req] = malloc(sizeof(int32_t) * (size_t)n_prompt);
    memcpy(h->prompt[h->n_req], p, sizeof(int32_t) * (size_t)n_prompt);
    assert_true(cb_sched_fits(h->s, n_prompt));
    r->priority = priority;
    r->t_submit_us = g_now_us;
    h->target[h->n_req] = n_out;
    h->req[h->n_req++] = r;
    cb_sched_add(h->s, r, h->arrivals++);
    return r;
}

/* A prompt of tokens nobody else has. */
static cb_request *h_add(harness *h, int32_t n_prompt, int32_t n_out, int32_t priority) {
    int32_t *p = malloc(sizeof(int32_t) * (size_t)n_prompt);
    for (int32_t i = 0; i < n_prompt; i++)
        p[i] = h->n_req * 1000 + i;
    cb_request *r = h_add_tokens(h, p, n_prompt, n_out, priority);
    free(p);
    return r;
}

/* Every cached node's cells hold its tokens under its holder. */
static void h_check_tree(harness *h, const cb_pnode *x) {
    for (int32_t i = 0; i < x->n_kids; i++) {
        const cb_pnode *k = x->kids[i];
        for (int32_t c = 0; c < h->f.capacity; c++) {
            const fake_cell *cell = &h->f.cell[c];
            if (fake_has(cell, k->holder) && cell->pos >= k->start && cell->pos < k->start + k->len)
                assert_int_equal(cell->tok, k->tok[cell->pos - k->start]);
        }
        h_check_tree(h, k);
    }
}

/* What llama.cpp would hold is what the accounting says: the physical cells in use, each running
 * request's positions and tokens, each parked stream's tokens, and nothing held by a sequence that
 * is neither running nor a cache holder. Called with the ops applied and the batch not yet
 * decoded (the tokens are checked once the stream copies are made: fake_update). */
static void h_check_cells(harness *h, const cb_plan *p) {
    assert_int_equal(h->f.total, h->kv.total_used - p->n_tokens);
    bool copied = h->f.n_pend == 0;
    bool *running = calloc((size_t)h->kv.n_seq, sizeof(bool));
    for (int32_t i = 0; i < cb_sched_n_running(h->s); i++) {
        cb_request *r = cb_sched_running_at(h->s, i);
        running[r->seq_id] = true;
        assert_int_equal(h->f.cnt[r->seq_id], r->n_computed);
        if (!fake_seq_ok(&h->f, r->seq_id, copied ? r->tokens : NULL)) fail_msg("%s", h->f.err);
    }
    for (int32_t s = 0; s < h->kv.n_seq; s++) {
        if (running[s] || h->f.cnt[s] == 0) continue;
        if (h->sc_on) { /* a parked or held stream: exactly the tokens recorded for it */
            assert_int_equal(h->f.cnt[s], h->sc->len[s]);
            const int32_t *toks = h->sc->tok + (size_t)s * (size_t)h->kv.per_seq_cap;
            if (!fake_seq_ok(&h->f, s, copied ? toks : NULL)) fail_msg("%s", h->f.err);
            continue;
        }
        assert_true(h->px_on && h->px->held[s] > 0); /* a leaked sequence otherwise */
        if (!fake_seq_ok(&h->f, s, NULL)) fail_msg("%s", h->f.err);
    }
    free(running);
    if (h->sc_on) assert_true(cb_streams_check(h->sc));
    if (h->px_on) {
        assert_true(cb_prefix_check(h->px));
        h_check_tree(h, &h->px->root);
    }
}

static cb_cache_stats h_stats(const harness *h) {
    cb_cache_stats st;
    cb_cache_get_stats(h->cache, &st);
    return st;
}

static void h_finish(harness *h, cb_request *r, cb_state st) {
    cb_sched_finish(h->s, r, st);
    h->n_finished++;
    if (st == CB_FINISHED_CANCELLED) h->n_cancelled++;
}

/* One step with every invariant checked. Returns the number of plan items. */
static int32_t h_step(harness *h) {
    cb_request *decoders[256];
    int n_dec = 0;
    for (int32_t i = 0; i < cb_sched_n_running(h->s); i++) {
        cb_request *r = cb_sched_running_at(h->s, i);
        if (cb_request_pending(r) == 1) decoders[n_dec++] = r;
    }
    bool static_group_open = false;
    static bool member_before[MAX_REQ];
    for (int i = 0; i < h->n_req; i++) {
        member_before[i] = h->req[i]->static_member;
        if (h->cfg.mode == CB_MODE_STATIC && member_before[i] && !CB_STATE_FINISHED(h->req[i]->state))
            static_group_open = true;
    }

    int32_t waiting_before = cb_sched_n_waiting(h->s);
    int32_t n = cb_sched_step(h->s, &h->plan, 0);
    cb_plan *p = &h->plan;
    /* split layout: with nobody waiting to fill a hole, the running requests hold one block of
     * consecutive ids (compact_streams) unless this very step preempted one */
    if (h->kv.split && waiting_before == 0 && p->n_preempted == 0 && cb_sched_n_running(h->s) > 0) {
        int32_t lo = INT32_MAX, hi = -1;
        for (int32_t i = 0; i < cb_sched_n_running(h->s); i++) {
            int32_t id = cb_sched_running_at(h->s, i)->seq_id;
            lo = id < lo ? id : lo;
            hi = id > hi ? id : hi;
        }
        assert_int_equal(hi - lo + 1, cb_sched_n_running(h->s));
    }
    assert_true(p->n_tokens <= h->cfg.max_batched_tokens);
    assert_true(cb_kv_check(&h->kv));
    /* decode rows first: the requests that were decoding lead the batch */
    int lead = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        bool was_decoding = false;
        for (int k = 0; k < n_dec; k++)
            was_decoding |= decoders[k] == p->items[i].req;
        /* a request preempted by this plan (when nobody could move) may be admitted again in it:
         * it starts over from what the cache kept of it, not as a decode row */
        for (int32_t k = 0; k < p->n_preempted; k++)
            if (p->preempted[k] == p->items[i].req) was_decoding = false;
        if (was_decoding) {
            assert_int_equal(lead, i);
            assert_int_equal(p->items[i].n_tokens, 1);
            lead++;
        }
        if (h->cfg.prefill_chunk > 0) assert_true(p->items[i].n_tokens <= h->cfg.prefill_chunk);
        if (h->cfg.prefill_chunk == 0) /* no chunking: a prompt goes in whole */
            assert_int_equal(p->items[i].pos0 + p->items[i].n_tokens, cb_request_n_tokens(p->items[i].req));
    }
    /* split layout: the cut prompt chunks of a step share one length, under 64 rows (or the chunk
     * cap, or the budget beyond a full set of decode rows, if smaller) only as the plan's first
     * item (split_chunk) */
    if (h->kv.split && h->cfg.prefill_chunk > 0) {
        int32_t len = 0, tile = 64;
        if (tile > h->cfg.prefill_chunk) tile = h->cfg.prefill_chunk;
        if (tile > h->cfg.max_batched_tokens - h->cfg.max_num_seqs)
            tile = h->cfg.max_batched_tokens - h->cfg.max_num_seqs;
        for (int32_t i = 0; i < p->n_items; i++) {
            const cb_plan_item *it = &p->items[i];
            if (it->pos0 + it->n_tokens == cb_request_n_tokens(it->req)) continue; /* a last piece */
            if (len == 0) len = it->n_tokens;
            assert_int_equal(it->n_tokens, len);
            if (it->n_tokens < tile) assert_int_equal(i, 0);
        }
    }
    /* static: nobody new while a group member is unfinished (re-admitting preempted members is fine) */
    if (static_group_open) {
        for (int32_t i = 0; i < p->n_items; i++)
            if (p->items[i].pos0 == 0) assert_true(member_before[p->items[i].req->id - 1]);
    }
    if (!fake_apply_ops(&h->f, p)) fail_msg("fake runner refused the ops: %s", h->f.err);
    if (p->n_items > 0) fake_update(&h->f); /* as llama_decode would, first thing */
    h_check_cells(h, p);
    if (!fake_decode(&h->f, p)) fail_msg("fake runner refused the plan: %s", h->f.err);
    cb_sched_commit(h->s, p, 1);
    for (int32_t i = 0; i < p->n_items; i++) {
        if (!p->items[i].logits) continue;
        cb_request *r = p->items[i].req;
        int idx = (int)r->id - 1;
        assert_true(cb_request_append(r, gen_token(r->id, r->n_generated)));
        if (r->n_generated >= h->target[idx])
            h_finish(h, r, CB_FINISHED_STOP);
        else if (cb_request_n_tokens(r) >= h->kv.per_seq_cap)
            h_finish(h, r, CB_FINISHED_LENGTH);
    }
    return n;
}

/* Steps until nothing runs or waits (no cache drop, unlike h_drain). Returns the batch rows. */
static int64_t h_until_idle(harness *h) {
    int64_t rows = 0;
    while (cb_sched_n_running(h->s) + cb_sched_n_waiting(h->s) > 0) {
        h_step(h);
        rows += h->plan.n_tokens;
    }
    return rows;
}

static void h_drain(harness *h, int max_steps) {
    int steps = 0;
    while (cb_sched_n_running(h->s) + cb_sched_n_waiting(h->s) > 0) {
        h_step(h);
        assert_true(++steps < max_steps);
    }
    /* one empty step hands the last releases to the runner: what is left is cache */
    assert_int_equal(cb_sched_step(h->s, &h->plan, 0), 0);
    assert_true(fake_run(&h->f, &h->plan));
    h_check_cells(h, &h->plan);
    assert_int_equal(h->kv.total_used, h->kv.shared);
    /* dropping the cache frees every cell */
    cb_sched_drop_cache(h->s);
    assert_int_equal(cb_sched_step(h->s, &h->plan, 0), 0);
    assert_true(fake_run(&h->f, &h->plan));
    assert_int_equal(h->kv.total_used, 0);
    assert_int_equal(h->f.total, 0);
    if (h->px_on) assert_int_equal(h->px->n_nodes, 0);
    if (h->sc_on) assert_true(cb_streams_check(h->sc));
}

/* Every request ended once, and its output is exactly what was "sampled" for it. */
static void h_check_outputs(harness *h) {
    assert_int_equal(h->n_finished, h->n_req);
    for (int i = 0; i < h->n_req; i++) {
        cb_request *r = h->req[i];
        assert_true(CB_STATE_FINISHED(r->state));
        if (r->state == CB_FINISHED_CANCELLED) continue;
        if (r->state == CB_FINISHED_STOP) assert_int_equal(r->n_generated, h->target[i]);
        for (int32_t k = 0; k < r->n_generated; k++)
            assert_int_equal(r->tokens[r->n_prompt + k], gen_token(r->id, k));
        for (int32_t k = 0; k < r->n_prompt; k++)
            assert_int_equal(r->tokens[k], h->prompt[i][k]);
    }
}

/* ---------------------------------------------------------------- tests ---------------------- */

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

/* ---------------------------------------------------------------- prefix cache ------------- */

/* prefix (tokens 500000 + k) then n_own tokens of the request's own */
static cb_request *h_add_shared(harness *h, int32_t n_prefix, int32_t n_own, int32_t n_out) {
    int32_t n = n_prefix + n_own, *p = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++)
        p[i] = i < n_prefix ? 500000 + i : h->n_req * 1000 + i;
    cb_request *r = h_add_tokens(h, p, n, n_out, 0);
    free(p);
    return r;
}

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
    assert_int_equal(cb_sched_step(h.s, &h.plan, 0), 0); /* an empty step applies the cap */
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

/* ---------------------------------------------------------------- split layout's streams ---- */

/* Split layout: requests arriving together with one prefix copy it from the stream computing it,
 * instead of computing it again (a copy takes the whole stream, then a trim). */
static void streams_share_a_running_prefix(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 8, 64, 32, 8 * 160, true, 0);
    for (int i = 0; i < 8; i++)
        h_add_shared(&h, 100, 10, 5);
    int64_t prompt_rows = h_until_idle(&h);
    assert_int_equal(h_stats(&h).hit_tokens, 7 * 100);
    assert_int_equal(h_stats(&h).query_tokens, 8 * 110);
    assert_int_equal(prompt_rows, 100 + 8 * 10 + 8 * 4); /* nothing computed twice */
    assert_int_equal(h.sc->copies, 7);
    h_drain(&h, 10);
    h_check_outputs(&h);
    h_free(&h);
}

/* One running stream and one holder. A finished request's stream stays parked; an unrelated
 * request reuses it after its tokens are saved to the holder (one copy); a request sharing the
 * held prompt copies it from there; a request continuing the last conversation (its prompt and
 * what it generated) takes its parked stream over in place: no copy. */
static void streams_park_take_over_and_hold(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 1, 64, 32, 2 * 128, true, 1);
    int32_t a[60];
    for (int32_t k = 0; k < 60; k++)
        a[k] = 700000 + k;
    h_add_tokens(&h, a, 60, 5, 0); /* leaves 64 cells: its prompt and 4 generated tokens */
    h_until_idle(&h);
    assert_int_equal(h.sc->len[0], 64);
    h_add_shared(&h, 0, 30, 5); /* shares nothing */
    h_step(&h);
    assert_int_equal(h.sc->len[1], 64);
    assert_int_equal(h.sc->copies, 1);
    h_until_idle(&h);
    cb_request *c = h_add_tokens(&h, a, 40, 5, 0); /* a prefix of the held prompt */
    h_step(&h);
    assert_int_equal(h.sc->copies, 2);
    assert_int_equal(h_stats(&h).hit_tokens, 39);
    assert_int_equal(h.plan.items[0].pos0, 39);
    h_until_idle(&h);
    int32_t next[44];
    memcpy(next, a, sizeof(int32_t) * 40);
    for (int32_t k = 0; k < 4; k++)
        next[40 + k] = gen_token(c->id, k);
    h_add_tokens(&h, next, 44, 5, 0);
    h_step(&h);
    assert_int_equal(h.sc->copies, 2);
    assert_int_equal(h_stats(&h).hit_tokens, 39 + 43);
    assert_int_equal(h.plan.items[0].req->seq_id, 0);
    assert_int_equal(h.plan.items[0].pos0, 43);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* Split layout with a chunk cap under 64 (and decode rows in every step): long prompts still
 * move several at a time, at the cap. */
static void split_small_chunk_cap_keeps_prompts_moving(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 128, 16, 4 * 256, true, -1);
    h_add(&h, 10, 100, 0); /* decodes throughout */
    h_step(&h);
    h_add(&h, 100, 4, 0);
    h_add(&h, 100, 4, 0);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 3); /* the decode row and two 16-token chunks */
    assert_int_equal(h.plan.items[1].n_tokens, 16);
    assert_int_equal(h.plan.items[2].n_tokens, 16);
    h_drain(&h, 300);
    h_check_outputs(&h);
    h_free(&h);
}

/* Split layout: prompts of 300, 200 and 150 tokens, chunk 256, budget 512. The first chunk (256)
 * sets the step's length; the 200-token prompt goes whole (it ends there); the third would get
 * only 56 tokens and waits, then goes whole in the next step. */
static void split_chunks_share_one_length(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 512, 256, 4 * 1024, true, -1);
    h_add(&h, 300, 4, 0);
    h_add(&h, 200, 4, 0);
    cb_request *c = h_add(&h, 150, 4, 0);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.items[0].n_tokens, 256);
    assert_int_equal(h.plan.items[1].n_tokens, 200);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 3); /* the 300's last 44, the 200's decode row, all of c */
    assert_ptr_equal(h.plan.items[2].req, c);
    assert_int_equal(h.plan.items[2].n_tokens, 150);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* Adds n requests (10-token prompts, outs[i] tokens each) and steps until r[until] has finished. */
static void h_add_run_until(harness *h, cb_request **r, const int32_t *outs, int n, int until) {
    for (int i = 0; i < n; i++)
        r[i] = h_add(h, 10, outs[i], 0);
    while (!CB_STATE_FINISHED(r[until]->state))
        h_step(h);
}

/* Split layout: a request that finishes in the middle of the running block leaves a hole; with
 * nobody waiting, the highest running request moves into it (one whole-stream copy), so the next
 * decode step is one graph run. With the stream cache the old stream stays parked with the moved
 * request's tokens; without it the old stream is emptied. Outputs and cells are checked by the
 * harness (h_check_cells reads every stream after the copy). */
static void split_moves_requests_into_one_block(void **state) {
    (void)state;
    for (int with_cache = 0; with_cache < 2; with_cache++) {
        harness h;
        h_init_px(&h, CB_MODE_CONTINUOUS, 4, 64, 32, 5 * 128, true, with_cache ? 1 : -1);
        int32_t outs[4] = {20, 3, 20, 20};
        cb_request *r[4];
        h_add_run_until(&h, r, outs, 4, 1);
        assert_int_equal(r[3]->seq_id, 3);
        int32_t n_computed = r[3]->n_computed;
        h_step(&h);
        assert_int_equal(r[3]->seq_id, 1);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 1);
        cb_row_piece order[8];
        int32_t np = cb_plan_row_order(&h.plan, 64, order);
        assert_int_equal(h.plan.n_items, 3);
        assert_int_equal(cb_plan_graph_runs(&h.plan, order, np), 1); /* {0, 1, 2}, one row each */
        if (with_cache) assert_int_equal(h.sc->len[3], n_computed);  /* parked: the same tokens */
        if (!with_cache) assert_int_equal(h.f.cnt[3], 0);
        h_drain(&h, 100);
        h_check_outputs(&h);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 1); /* the others left from the top */
        h_free(&h);
    }
}

/* With a request waiting, the hole goes to its admission instead (no copy), before an empty id
 * above the block. */
static void split_admission_fills_a_hole(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 5, 64, 32, 6 * 128, true, 1);
    cb_request *r[4];
    int32_t outs[4] = {20, 3, 20, 20};
    h_add_run_until(&h, r, outs, 4, 1);
    cb_request *late = h_add(&h, 10, 5, 0);
    h_step(&h);
    assert_int_equal(late->seq_id, 1);
    assert_int_equal(r[3]->seq_id, 3);
    assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 0);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* A new request goes next to the running block, not to the lowest (or least recently used) free
 * stream below it: with 2..5 running and 0, 1 free, it takes 1 and nothing needs to move. */
static void split_admission_extends_the_block(void **state) {
    (void)state;
    for (int with_cache = 0; with_cache < 2; with_cache++) {
        harness h;
        h_init_px(&h, CB_MODE_CONTINUOUS, 6, 64, 32, 7 * 128, true, with_cache ? 1 : -1);
        int32_t outs[6] = {3, 4, 30, 30, 30, 30};
        cb_request *r[6];
        h_add_run_until(&h, r, outs, 6, 1);
        assert_int_equal(r[2]->seq_id, 2);
        cb_request *late = h_add(&h, 10, 5, 0);
        h_step(&h);
        assert_int_equal(late->seq_id, 1);
        h_drain(&h, 100);
        h_check_outputs(&h);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 0);
        h_free(&h);
    }
}

/* llama.cpp's split_equal(n_ubatch, sequential) on a batch of rows (each row: its sequence id),
 * as the pinned tree does it: the sequences of one graph run are taken in row order, each the
 * previous one's id + 1, and every one gets as many rows as the shortest has left. Fills
 * ub_rows[item] with the rows each graph run gave each sequence, run after run. */
enum { SIM_MAX = 64 };
static uint32_t rnd(harness *h, uint32_t n);
static int32_t sim_split_equal(const int32_t *row_seq, int32_t n_rows, int32_t n_ubatch, int32_t runs[][SIM_MAX],
                               int32_t max_runs) {
    bool used[1024] = {false};
    int32_t n_used = 0, n_runs = 0;
    while (n_used < n_rows && n_runs < max_runs) {
        int32_t set[SIM_MAX], n_set = 0, last = -1;
        for (int32_t i = 0; i < n_rows; i++) {
            if (used[i]) continue;
            bool in = false;
            for (int32_t k = 0; k < n_set; k++)
                in |= set[k] == row_seq[i];
            if (in || (n_set > 0 && row_seq[i] != last + 1)) continue;
            set[n_set++] = last = row_seq[i];
        }
        for (int32_t k = 0; k < SIM_MAX; k++)
            runs[n_runs][k] = 0;
        for (int32_t round = 0;; round++) {
            bool all = true; /* every sequence of the set has an unused row left */
            for (int32_t k = 0; k < n_set && all; k++) {
                bool has = false;
                for (int32_t i = 0; i < n_rows && !has; i++)
                    has = !used[i] && row_seq[i] == set[k];
                all = has;
            }
            if (!all) break;
            for (int32_t k = 0; k < n_set; k++)
                for (int32_t i = 0; i < n_rows; i++)
                    if (!used[i] && row_seq[i] == set[k]) {
                        used[i] = true;
                        n_used++;
                        runs[n_runs][set[k]]++;
                        break;
                    }
            if ((round + 2) * n_set > n_ubatch) break;
        }
        n_runs++;
    }
    return n_runs;
}

/* The row order keeps items of different lengths out of one graph run: every item runs whole in
 * one graph run, or gives its first row to the one-row run of its block of consecutive ids and
 * the rest in one more. With rows simply by sequence id (the order before cb_plan_row_order) a
 * 76-row chunk next to a 100-row one left a 24-row run, and decode rows next to a chunk took a row
 * of it. The count of graph runs is what the simulator finds, never more than one per block of
 * consecutive ids with equal row counts (the bound of the order's first version, one run a block),
 * and fewer when decode rows surround a chunk. */
static void row_order_gives_each_chunk_its_graph_run(void **state) {
    (void)state;
    uint64_t rng = 12345;
    cb_plan plan;
    assert_int_equal(cb_plan_init(&plan, SIM_MAX), 0);
    static cb_request reqs[SIM_MAX];
    cb_row_piece pieces[2 * SIM_MAX];
    int32_t row_seq[1024];
    static int32_t runs[256][SIM_MAX];
    int bad_by_id = 0, fewer = 0;
    for (int trial = 0; trial < 2000; trial++) {
        harness tmp = {.rng = rng + (uint64_t)trial * 7919};
        int32_t n = 1 + (int32_t)rnd(&tmp, 12), total = 0;
        bool taken[SIM_MAX] = {false};
        plan.n_items = n;
        for (int32_t i = 0; i < n; i++) {
            int32_t id;
            do
                id = (int32_t)rnd(&tmp, 16);
            while (taken[id]);
            taken[id] = true;
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].seq_id = id;
            plan.items[i].req = &reqs[i];
            int32_t kind = (int32_t)rnd(&tmp, 3); /* decode rows, or chunks of a few lengths */
            plan.items[i].n_tokens = kind == 0 ? 1 : kind == 1 ? 40 : 1 + (int32_t)rnd(&tmp, 80);
            total += plan.items[i].n_tokens;
        }
        /* the first version's bound: blocks of consecutive ids with equal row counts */
        int32_t blocks = 0;
        for (int32_t id = 0; id < 16; id++) {
            int32_t i = -1, prev = -1;
            for (int32_t k = 0; k < n; k++) {
                if (reqs[k].seq_id == id) i = k;
                if (id > 0 && reqs[k].seq_id == id - 1) prev = k;
            }
            if (i >= 0 && (prev < 0 || plan.items[prev].n_tokens != plan.items[i].n_tokens)) blocks++;
        }
        for (int pass = 0; pass < 2; pass++) {
            int32_t np;
            if (pass == 0) {
                np = cb_plan_row_order(&plan, 64, pieces);
            } else { /* whole items by id alone */
                np = n;
                for (int32_t i = 0; i < n; i++)
                    pieces[i] = (cb_row_piece){.item = i, .k0 = 0, .n = plan.items[i].n_tokens};
                for (int32_t i = 1; i < n; i++)
                    for (int32_t k = i; k > 0 && reqs[pieces[k - 1].item].seq_id > reqs[pieces[k].item].seq_id; k--) {
                        cb_row_piece t = pieces[k];
                        pieces[k] = pieces[k - 1];
                        pieces[k - 1] = t;
                    }
            }
            int32_t next_row[SIM_MAX] = {0}, n_rows = 0; /* each item's rows once, in order */
            for (int32_t j = 0; j < np; j++) {
                assert_int_equal(pieces[j].k0, next_row[pieces[j].item]);
                assert_true(pieces[j].n >= 1);
                next_row[pieces[j].item] += pieces[j].n;
                for (int32_t k = 0; k < pieces[j].n; k++)
                    row_seq[n_rows++] = reqs[pieces[j].item].seq_id;
            }
            for (int32_t i = 0; i < n; i++)
                assert_int_equal(next_row[i], plan.items[i].n_tokens);
            assert_int_equal(n_rows, total);
            int32_t nr = sim_split_equal(row_seq, n_rows, total, runs, 256);
            bool ok = true;
            for (int32_t i = 0; i < n; i++) {
                int32_t id = reqs[i].seq_id, in = 0, first = -1;
                for (int32_t u = 0; u < nr; u++)
                    if (runs[u][id] > 0) {
                        in++;
                        if (first < 0) first = runs[u][id];
                    }
                ok &= in == 1 || (in == 2 && first == 1);
                /* a chunk of 64 rows or more keeps 64 a run beyond its first row (the tiled kernel) */
                for (int32_t u = 0; u < nr && plan.items[i].n_tokens >= 64; u++)
                    if (pass == 0 && runs[u][id] > 1) assert_true(runs[u][id] >= 64);
            }
            if (pass == 0) {
                assert_true(ok);
                assert_int_equal(cb_plan_graph_runs(&plan, pieces, np), nr);
                assert_true(nr <= blocks);
                fewer += nr < blocks;
            }
            if (pass == 1 && (!ok || nr > blocks)) bad_by_id++;
        }
    }
    cb_plan_free(&plan);
    assert_true(bad_by_id > 100); /* the simulator tells the orders apart */
    assert_true(fewer > 100);     /* and the first-row runs save graph runs */
}

static uint32_t rnd(harness *h, uint32_t n) {
    h->rng = h->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(h->rng >> 33) % n;
}

/* Random configurations, arrivals, priorities and cancels in every state; thousands of steps. */
static void randomized_traces(void **state) {
    (void)state;
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
        h_init_px(&h, mode, seqs, budget, chunk, capacity, split, holders);
        g_cache_max_idle = 0;
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
        total_hits += h.px_on ? h_stats(&h).hit_tokens : 0;
        total_evicted += h.px_on ? h.px->evicted_cells : 0;
        split_hits += h.sc_on ? h_stats(&h).hit_tokens : 0;
        split_copies += h.sc_on ? h.sc->copies : 0;
        h_free(&h);
    }
    assert_true(total_steps > 2000);
    assert_true(total_preempt > 0);
    assert_true(total_hits > 0 && total_evicted > 0); /* the cache was exercised, evictions included */
    assert_true(split_hits > 0 && split_copies > 0);  /* and the split layout's streams */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(budget_and_decode_first),
        cmocka_unit_test(chunk_cap_and_logits_only_at_end),
        cmocka_unit_test(no_chunking_takes_whole_prompts),
        cmocka_unit_test(static_mode_waits_for_group),
        cmocka_unit_test(static_group_is_whole_past_the_budget),
        cmocka_unit_test(continuous_admits_while_others_run),
        cmocka_unit_test(tiny_kv_preempts_and_everyone_finishes),
        cmocka_unit_test(victim_is_lowest_priority_youngest),
        cmocka_unit_test(priority_then_fcfs_admission),
        cmocka_unit_test(aging_bounds_the_wait),
        cmocka_unit_test(split_layout_caps_sequences),
        cmocka_unit_test(prefix_computed_once),
        cmocka_unit_test(prefix_full_hit_recomputes_last_token),
        cmocka_unit_test(prefix_cache_gives_way),
        cmocka_unit_test(prefix_idle_cap_keeps_the_trunk),
        cmocka_unit_test(split_chunks_share_one_length),
        cmocka_unit_test(split_small_chunk_cap_keeps_prompts_moving),
        cmocka_unit_test(row_order_gives_each_chunk_its_graph_run),
        cmocka_unit_test(streams_share_a_running_prefix),
        cmocka_unit_test(streams_park_take_over_and_hold),
        cmocka_unit_test(split_moves_requests_into_one_block),
        cmocka_unit_test(split_admission_fills_a_hole),
        cmocka_unit_test(split_admission_extends_the_block),
        cmocka_unit_test(randomized_traces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
