/* lane.c — the long lane (engine_internal.h): a second pool, its own context, accounting, cache and
 * scheduler, for requests longer than a stream of the split layout. The engine's step runs it as it
 * runs the main pool; what is the lane's own is here: how it is made, who goes in, and how many
 * tokens its step may take. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cb_lane_init(cobatch_engine *e, const cb_model_params *mp, int32_t cells, int32_t max_seqs, int32_t budget,
                 int32_t prefill_budget, int64_t aging_us, char *err, size_t errlen) {
    cb_lane *L = &e->lane;
    cb_pool *P = &L->pool;
    cb_model_params p = *mp;
    p.n_ctx = cells;
    p.n_seq_max = max_seqs;
    p.n_batch = prefill_budget > budget ? prefill_budget : budget;
    p.n_outputs_max = max_seqs + CB_PROMPT_LOGIT_ROWS;
    p.split_kv = false;
    p.swa_window_only = true; /* nothing in its pool is shared or cut short */
    if (cb_model_new_context(&e->model, &p, &L->model, err, errlen) != 0) return -1;
    P->model = &L->model;
    if (cells > L->model.n_ctx) cells = L->model.n_ctx;
    if (budget > L->model.n_batch) budget = L->model.n_batch;
    cb_sched_config sc = {.mode = CB_MODE_CONTINUOUS,
                          .max_num_seqs = max_seqs,
                          .max_batched_tokens = budget,
                          .prefill_step_tokens = L->model.n_batch,
                          .prefill_chunk = budget,
                          .kv_reserve = CB_LANE_ROOM,
                          .split_tile = CB_RUNNER_FA_TILE,
                          .tile_chunks = true,
                          .wait_tokens = CB_LANE_WAIT_TOKENS,
                          .max_logit_rows = CB_PROMPT_LOGIT_ROWS,
                          .priority_aging_us = aging_us,
                          .swap = &e->swap};
    if (cb_kv_init(&P->kv, cells, max_seqs, false) != 0 ||
        !(P->cache = cb_cache_new_host(&P->kv, e->host.cap > 0 ? &e->host : NULL, CB_HOST_LANE, CB_STREAM_MIN_SHARE)) ||
        !(P->sched = cb_sched_new(&sc, &P->kv, P->cache)) || cb_plan_init(&P->plan, max_seqs) != 0 ||
        cb_runner_init(&P->runner, P->model, max_seqs) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    P->runner.swap = &e->swap;
    return 0;
}

void cb_lane_free(cobatch_engine *e) {
    cb_lane *L = &e->lane;
    cb_pool *P = &L->pool;
    cb_runner_free(&P->runner);
    cb_plan_free(&P->plan);
    cb_sched_free(P->sched);
    cb_cache_free(P->cache);
    cb_kv_free(&P->kv);
    cb_model_free_context(&L->model); /* (none: a no-op) */
    memset(L, 0, sizeof(*L));
}

/* r starts in the lane and may continue a conversation that the main pool holds: a parked stream,
 * or the host tier's copy of one (a conversation that grew past its stream, the turn after). Longer
 * than what the lane's own entries hold, and worth the copies, it goes to the host tier now in the
 * lane's layout, where r's admission finds it, as a moved request's stream does (carry, below).
 * Computed again, 4,000 tokens of it took ~20 s on two cores, in chunks beside every step; the copy
 * takes ~0.1-0.4 s, a pause every running stream sees once. With a window (a sliding-window model)
 * only a source r continues whole serves. Not brought: a running request's stream (its cells change
 * as it runs), an entry on the disk tier only, a source r shares less than half of (the load copies
 * it whole), and for a request that wants its prompt's logits (cached rows have none). */
static void bring_prefix(cobatch_engine *e, cb_request *r) {
    const cb_streams *sc = cb_cache_streams(e->main.cache);
    if (e->host.cap == 0 || !sc || r->all_logits_to > 0) return;
    int32_t n = r->n_prompt - 1, have = 0; /* (the last prompt token is computed, as on any hit) */
    cb_host_match(&e->host, CB_HOST_LANE, r->tokens, n, &have);
    cb_stream_match m = {.src = -1};
    cb_streams_match(sc, r->tokens, n, &m);
    const cb_host_entry *from = m.host;
    const int32_t *toks = from ? from->tok : m.src >= 0 ? sc->tok + (size_t)m.src * (size_t)sc->kv->per_seq_cap : NULL;
    int32_t len = from ? from->len : m.src >= 0 ? sc->len[m.src] : 0;
    if (!toks || (e->host.window > 0 && m.len < len) || 2 * m.len < len ||
        !cb_host_worth_new(&e->host, len, m.len - have))
        return;
    if (from && from->state != CB_HOST_SAVED) return;
    if (from) cb_host_lock(&e->host, m.host); /* making room for the new entry must not evict it */
    cb_host_entry *x = cb_host_stash(&e->host, CB_HOST_LANE, toks, len);
    if (x && from)
        cb_runner_stash_converted(from, x);
    else if (x)
        cb_runner_stash_one_stream(&e->main.runner, m.src, len, x);
    if (from) cb_host_unlock(&e->host, m.host);
}

void cb_lane_add(cobatch_engine *e, cb_request *r) {
    bring_prefix(e, r);
    ((cb_engine_req *)r->rt)->in_lane = true;
    cb_sched_add(e->lane.pool.sched, r, e->arrivals++);
}

/* What r computed in its stream goes to the host tier at once, in the lane's layout (one stream), as
 * the lane's own requests' conversations do when they end: the lane's admission loads it (a copy of
 * a few ms) and r goes on at its next token. Computed again, every token r holds would be a pause
 * r's stream sees (~4 s for 1,023 tokens on two cores) beside the steps that run meanwhile. Without a
 * host tier, or when the copy fails, the lane computes it again. */
static void carry(cobatch_engine *e, cb_request *r) {
    if (e->host.cap == 0 || r->seq_id < 0 || r->n_computed == 0) return;
    cb_host_entry *x = cb_host_stash(&e->host, CB_HOST_LANE, r->tokens, r->n_computed);
    if (x) cb_runner_stash_one_stream(&e->main.runner, r->seq_id, r->n_computed, x);
}

bool cb_lane_migrate(cobatch_engine *e, cb_request *r) {
    carry(e, r);
    cb_sched_remove(e->main.sched, r); /* its cells go to the prefix cache, as a finish's do */
    ((cb_engine_req *)r->rt)->in_lane = true;
    r->n_computed = 0;
    r->n_preemptions++;
    cb_sched_add(e->lane.pool.sched, r, r->arrival); /* its place in the order: it came first */
    return r->state != CB_FINISHED_ERROR;
}

int32_t cb_lane_main_budget(cobatch_engine *e) {
    if (!cb_lane_on(&e->lane) || cb_sched_n_decoding(e->lane.pool.sched) == 0) return 0;
    return cb_sched_get_config(e->main.sched)->max_batched_tokens; /* a lane request's gap stays short */
}

int32_t cb_lane_budget(cobatch_engine *e, int32_t used) {
    cb_lane *L = &e->lane;
    int32_t batch = cb_sched_get_config(L->pool.sched)->max_batched_tokens, n_run = cb_sched_n_running(L->pool.sched);
    /* the lane alone and nobody in it decoding: its scheduler's prefill step (scheduler.h) */
    if (used == 0 && cb_sched_n_running(e->main.sched) == 0 && cb_sched_n_decoding(L->pool.sched) == 0) return 0;
    /* a step's length is the pause every stream sees: what the main pool's step left of the batch,
     * and at least a row for each running request and a flash-attention tile of prompt, so that the
     * lane goes on beside a busy step, in its tiled kernel */
    int32_t least = n_run + CB_RUNNER_FA_TILE < batch ? n_run + CB_RUNNER_FA_TILE : batch;
    int32_t allow = batch - used > least ? batch - used : least;
    /* and in time, while anything else is running (a stream, another lane request): the tokens that
     * take, at the lane's own measured cost a token (its rows attend over the whole pool), the time
     * `allow` prompt tokens take in the streams (swap.h measures it) */
    if (cb_sched_n_running(e->main.sched) > 0 || n_run > 1)
        return cb_pace_tokens(&L->pace, allow * e->swap.token_us, least, allow);
    return allow;
}
