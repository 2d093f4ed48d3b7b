/* sched_harness.h — the scheduler under test: a scheduler, its prefix cache and KV accounting
 * driven by the fake runner (fake_runner.h), with every invariant checked at every step. Shared by
 * the scheduler, prefix-cache, streams and batch-layout tests. No model. */
#ifndef SCHED_HARNESS_H
#define SCHED_HARNESS_H

#include "fake_runner.h"

#pragma GCC diagnostic ignored "-Wunused-function" /* each test file uses some of the helpers */

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
static bool g_exact_hits;        /* the next h_init's cb_sched_config.exact_hits */
static int64_t g_now_us;         /* t_submit_us of the requests h_add queues */
static cb_swap *g_swap;          /* the next h_init's swap space (cb_sched_config.swap), or NULL */
static cb_host_cache *g_host;    /* the next h_init's host tier (split layout), or NULL */
static cb_step_pace *g_pace;     /* the next h_init's step pace (cb_sched_config.pace, share 1), or NULL */
static int32_t g_prefill_step;   /* the next h_init's cb_sched_config.prefill_step_tokens */
static int32_t g_step_budget;    /* h_step's budget (0: the configured one), and whether it is strict */
static bool g_step_strict;
static int32_t g_lane_wait; /* the next h_init_lane's cb_sched_config.wait_tokens */

/* Unified: holders > 0 turns the prefix cache on, with that many sequence ids of its own.
 * Split: holders >= 0 turns the stream cache on (streams.h), with that many holder streams. */
static void h_init_px(harness *h, cb_mode mode, int32_t seqs, int32_t budget, int32_t chunk, int32_t capacity,
                      bool split, int32_t holders) {
    memset(h, 0, sizeof(*h));
    assert_int_equal(cb_kv_init(&h->kv, capacity, seqs + (holders > 0 ? holders : 0), split), 0);
    h->cfg = (cb_sched_config){.mode = mode,
                               .max_num_seqs = seqs,
                               .max_batched_tokens = budget,
                               .prefill_step_tokens = g_prefill_step,
                               .prefill_chunk = chunk,
                               .kv_reserve = 4,
                               .split_tile = 64,
                               .exact_hits = g_exact_hits,
                               .priority_aging_us = g_aging_us,
                               .swap = g_swap,
                               .pace = g_pace,
                               .pace_share = 1.0};
    if (split && holders >= 0)
        h->cache = cb_cache_new_streams(&h->kv, seqs, 3, g_host);
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
    fake_init(&h->f, h->kv.n_seq, h->kv.capacity, h->kv.per_seq_cap, budget > g_prefill_step ? budget : g_prefill_step,
              split); /* the batch holds a prefill step, as the engine's n_batch */
    h->f.swap = g_swap;
}

/* The long lane's pool: unified, a host-tier-only cache of entries of kind CB_HOST_LANE (host may
 * be NULL), chunks shaped to a tile of 64, admissions waiting as g_lane_wait says. */
static void h_init_lane(harness *h, int32_t seqs, int32_t budget, int32_t capacity, cb_host_cache *host) {
    h_init_px(h, CB_MODE_CONTINUOUS, seqs, budget, budget, capacity, false, 0);
    cb_sched_free(h->s);
    cb_cache_free(h->cache);
    h->cfg.tile_chunks = true;
    h->cfg.wait_tokens = g_lane_wait;
    h->cfg.max_logit_rows = 64;
    h->cache = cb_cache_new_host(&h->kv, host, CB_HOST_LANE, 8);
    assert_non_null(h->cache);
    h->s = cb_sched_new(&h->cfg, &h->kv, h->cache);
    assert_non_null(h->s);
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

/* Every cached node's holder holds its whole path, [0, end of the node), each position once with
 * the path's token there (a holder stands for the path: a request sharing it gets all of it). */
static void h_check_path(harness *h, const cb_pnode *x, int32_t *path) {
    for (int32_t i = 0; i < x->n_kids; i++) {
        const cb_pnode *k = x->kids[i];
        int32_t end = k->start + k->len;
        memcpy(path + k->start, k->tok, sizeof(int32_t) * (size_t)k->len);
        int32_t seen = 0;
        for (int32_t c = 0; c < h->f.capacity; c++) {
            const fake_cell *cell = &h->f.cell[c];
            if (!fake_has(cell, k->holder) || cell->pos >= end) continue;
            assert_int_equal(cell->tok, path[cell->pos]);
            seen++;
        }
        if (seen != end)
            fail_msg("holder %d of a node ending at %d holds %d of its path's cells", k->holder, end, seen);
        h_check_path(h, k, path);
    }
}

static void h_check_tree(harness *h, const cb_pnode *root) {
    int32_t *path = calloc((size_t)h->kv.capacity + 1, sizeof(int32_t));
    h_check_path(h, root, path);
    free(path);
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
    bool anyone_decodes = false; /* a generated token computed, or to compute again after a preemption */
    for (int32_t i = 0; i < cb_sched_n_running(h->s); i++) {
        cb_request *r = cb_sched_running_at(h->s, i);
        if (cb_request_pending(r) == 1) decoders[n_dec++] = r;
        anyone_decodes |= r->n_computed >= r->n_prompt;
    }
    /* a step nobody decodes in takes the prefill step's tokens, a chunk too, unless a budget is given
     * below it; every other keeps to the step budget and the chunk cap */
    int32_t step_cap = h->cfg.max_batched_tokens, chunk_cap = h->cfg.prefill_chunk;
    if (!anyone_decodes && h->cfg.prefill_step_tokens > step_cap && (g_step_budget <= 0 || g_step_budget > step_cap)) {
        step_cap = h->cfg.prefill_step_tokens;
        if (chunk_cap > 0) chunk_cap = step_cap;
    }
    bool static_group_open = false;
    static bool member_before[MAX_REQ];
    for (int i = 0; i < h->n_req; i++) {
        member_before[i] = h->req[i]->static_member;
        if (h->cfg.mode == CB_MODE_STATIC && member_before[i] && !CB_STATE_FINISHED(h->req[i]->state))
            static_group_open = true;
    }

    int32_t waiting_before = cb_sched_n_waiting(h->s);
    int32_t n = cb_sched_step(h->s, &h->plan, g_step_budget, g_step_strict);
    cb_plan *p = &h->plan;
    /* a step keeps to its budget; a chunk shaped to the tile may pass it by under a tile unless strict */
    if (g_step_budget > 0) assert_true(p->n_tokens <= g_step_budget + (h->cfg.tile_chunks && !g_step_strict ? 63 : 0));
    if (h->cfg.max_logit_rows > 0) assert_true(p->n_logit_rows <= h->cfg.max_logit_rows);
    /* tile-shaped chunks: a cut one is a tile at least, unless it is the step's first item */
    for (int32_t i = 1; h->cfg.tile_chunks && i < p->n_items; i++) {
        const cb_plan_item *it = &p->items[i];
        if (it->pos0 + it->n_tokens < cb_request_n_tokens(it->req) && it->req->all_logits_to == 0)
            assert_true(it->n_tokens >= 64);
    }
    /* an empty plan on an idle engine ends the queue head (it can never fit), unless a waiting
     * request is being saved by this very plan (the next step admits or unpins) */
    if (n == 0 && cb_sched_n_running(h->s) == 0 && cb_sched_n_waiting(h->s) > 0) assert_true(cb_sched_saving(h->s));
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
    assert_true(p->n_tokens <= step_cap);
    assert_true(cb_kv_check(&h->kv));
    /* decode rows first: the requests that were decoding lead the batch */
    int lead = 0, paced_rows = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        /* a prompt piece of a request that fits a tile: what a pace cuts and measures */
        const cb_request *q = p->items[i].req;
        if (!(p->items[i].n_tokens == 1 && q->n_computed >= q->n_prompt) && cb_request_n_tokens(q) <= 64)
            paced_rows += p->items[i].n_tokens;
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
        if (chunk_cap > 0) assert_true(p->items[i].n_tokens <= chunk_cap);
        if (h->cfg.prefill_chunk == 0) /* no chunking: a prompt goes in whole */
            assert_int_equal(p->items[i].pos0 + p->items[i].n_tokens, cb_request_n_tokens(p->items[i].req));
    }
    assert_int_equal(paced_rows, p->n_paced_tokens);
    /* split layout: the cut prompt chunks of a step share one length, under 64 rows (or the chunk
     * cap, or the budget beyond a full set of decode rows, if smaller) only as the plan's first
     * item (split_chunk), or when a pace cuts a prompt no longer than a tile */
    if (h->kv.split && h->cfg.prefill_chunk > 0) {
        int32_t len = 0, tile = 64;
        if (tile > chunk_cap) tile = chunk_cap;
        if (step_cap == h->cfg.max_batched_tokens && tile > step_cap - h->cfg.max_num_seqs)
            tile = step_cap - h->cfg.max_num_seqs;
        for (int32_t i = 0; i < p->n_items; i++) {
            const cb_plan_item *it = &p->items[i];
            if (it->pos0 + it->n_tokens == cb_request_n_tokens(it->req)) continue; /* a last piece */
            if (len == 0) len = it->n_tokens;
            assert_int_equal(it->n_tokens, len);
            if (it->n_tokens < tile && !(h->cfg.pace && cb_request_n_tokens(it->req) <= 64)) assert_int_equal(i, 0);
        }
    }
    /* static: nobody new while a group member is unfinished (re-admitting preempted members is fine) */
    if (static_group_open) {
        for (int32_t i = 0; i < p->n_items; i++)
            if (p->items[i].pos0 == 0) assert_true(member_before[p->items[i].req->id - 1]);
    }
    if (!fake_apply_ops(&h->f, p)) fail_msg("fake runner refused the ops: %s", h->f.err);
    if (h->f.n_restore_failed > 0) { /* as the engine does: roll back, recompute those, plan again */
        cb_sched_rollback(h->s, p);
        for (int i = 0; i < h->f.n_restore_failed; i++) {
            cb_request *r = h->f.restore_failed[i];
            cb_sched_restore_failed(h->s, r);
            assert_int_equal(r->swap.state, CB_SWAP_NONE);
            assert_false(r->cache.load_failed);
            assert_int_equal(h->f.cnt[r->seq_id], r->n_computed); /* its shared prefix only */
        }
        return h_step(h);
    }
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
    assert_int_equal(cb_sched_step(h->s, &h->plan, 0, false), 0);
    assert_true(fake_run(&h->f, &h->plan));
    h_check_cells(h, &h->plan);
    assert_int_equal(h->kv.total_used, h->kv.shared);
    /* dropping the cache frees every cell */
    cb_sched_drop_cache(h->s);
    assert_int_equal(cb_sched_step(h->s, &h->plan, 0, false), 0);
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

static uint32_t rnd(harness *h, uint32_t n) {
    h->rng = h->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(h->rng >> 33) % n;
}

/* prefix (tokens 500000 + k) then n_own tokens of the request's own */
static cb_request *h_add_shared(harness *h, int32_t n_prefix, int32_t n_own, int32_t n_out) {
    int32_t n = n_prefix + n_own, *p = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++)
        p[i] = i < n_prefix ? 500000 + i : h->n_req * 1000 + i;
    cb_request *r = h_add_tokens(h, p, n, n_out, 0);
    free(p);
    return r;
}

#endif
