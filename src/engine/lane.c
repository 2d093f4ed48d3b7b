/* lane.c — the long lane (engine_internal.h): requests longer than a stream of the split layout
 * run here, in a second llama.cpp context of one unified pool, beside the scheduler's step. */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cb_lane_init(cobatch_engine *e, const cb_model_params *mp, int32_t cells, int32_t max_seqs, int32_t budget,
                 char *err, size_t errlen) {
    cb_lane *L = &e->lane;
    memset(L, 0, sizeof(*L));
    cb_model_params p = *mp;
    p.n_ctx = cells;
    p.n_seq_max = max_seqs;
    p.n_batch = budget;
    p.n_outputs_max = max_seqs + CB_PROMPT_LOGIT_ROWS;
    p.split_kv = false;
    if (cb_model_new_context(&e->model, &p, &L->model, err, errlen) != 0) return -1;
    L->on = true; /* from here cb_lane_free undoes it all */
    L->cells = L->model.n_ctx < cells ? L->model.n_ctx : cells;
    L->max_seqs = max_seqs;
    L->budget = L->model.n_batch;
    L->run = calloc((size_t)max_seqs, sizeof(*L->run));
    if (!L->run || cb_plan_init(&L->plan, max_seqs) != 0 || cb_runner_init(&L->runner, &L->model, max_seqs) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void cb_lane_free(cobatch_engine *e) {
    cb_lane *L = &e->lane;
    if (!L->on) return;
    cb_runner_free(&L->runner);
    cb_plan_free(&L->plan);
    cb_model_free_context(&L->model);
    free(L->run);
    free(L->wait);
    memset(L, 0, sizeof(*L));
}

/* Room for one more waiting request; false when out of memory. */
static bool grow_wait(cb_lane *L) {
    if (L->n_wait < L->wait_cap) return true;
    int32_t cap = L->wait_cap ? L->wait_cap * 2 : 16;
    cb_request **v = realloc(L->wait, sizeof(*v) * (size_t)cap);
    if (!v) return false;
    L->wait = v;
    L->wait_cap = cap;
    return true;
}

bool cb_lane_add(cobatch_engine *e, cb_request *r, bool first) {
    cb_lane *L = &e->lane;
    if (!grow_wait(L)) return false;
    cb_engine_req *er = r->rt;
    if (!er->in_lane && !first) r->arrival = e->arrivals++; /* new: its place in the order */
    er->in_lane = true;
    r->seq_id = -1;
    r->n_computed = 0;
    r->state = CB_WAITING;
    if (first) {
        memmove(L->wait + 1, L->wait, sizeof(*L->wait) * (size_t)L->n_wait);
        L->wait[0] = r;
    } else {
        L->wait[L->n_wait] = r;
    }
    L->n_wait++;
    return true;
}

bool cb_lane_migrate(cobatch_engine *e, cb_request *r) {
    if (!grow_wait(&e->lane)) return false;
    cb_sched_remove(e->sched, r); /* its cells go to the prefix cache, as a finish's do */
    cb_lane_add(e, r, true);      /* cannot fail now: first, it has run longest */
    r->n_preemptions++;
    return true;
}

/* The prefix cache's host tier (hostcache.h) keeps what a lane request computed when it ends, and
 * gives it back to a request that continues it (an agent's next turn): a copy from and to the
 * lane's pool instead of a prefill of the whole conversation. The lane's pool is unified and makes
 * no lazy stream copies, so both act at once, here. */
static void stash(cobatch_engine *e, cb_request *r) {
    cb_host_entry *x = cb_host_stash(&e->host, CB_HOST_LANE, r->tokens, r->n_computed);
    if (x) cb_runner_stash(&e->lane.runner, r->seq_id, r->n_computed, x);
}

/* r starts on sequence s (empty) with nothing computed: the longest conversation of the lane the
 * host tier holds that r continues comes back, trimmed to what r shares, when copying it costs less
 * than computing it (not past the rows that want their logits: a loaded row has none). */
static void load(cobatch_engine *e, cb_request *r, int32_t s) {
    if (e->host.cap == 0) return;
    int32_t n = cb_request_n_tokens(r) - 1, len;
    e->lane.query_tokens += n + 1;
    cb_host_entry *x = cb_host_match(&e->host, CB_HOST_LANE, r->tokens, n, &len);
    if (r->all_logits_to > 0 && len > r->all_logits_from) return;
    if (!x || x->state != CB_HOST_SAVED || len < CB_STREAM_MIN_SHARE || !cb_host_worth(&e->host, x, len)) return;
    if (!cb_runner_load(&e->lane.runner, s, x, len)) return; /* (the pool had no room: r computes it) */
    r->n_computed = len;
    r->n_cached = len < r->n_prompt ? len : r->n_prompt;
    e->lane.hit_tokens += len;
}

void cb_lane_remove(cobatch_engine *e, cb_request *r) {
    cb_lane *L = &e->lane;
    if (r->seq_id >= 0 && r->seq_id < L->max_seqs && L->run[r->seq_id] == r) {
        stash(e, r);
        cb_runner_trim(&L->runner, r->seq_id, 0);
        L->run[r->seq_id] = NULL;
        L->n_run--;
        r->seq_id = -1;
        return;
    }
    cb_swap_end(&e->swap, r, false);
    for (int32_t i = 0; i < L->n_wait; i++) {
        if (L->wait[i] == r) {
            memmove(L->wait + i, L->wait + i + 1, sizeof(*L->wait) * (size_t)(L->n_wait - i - 1));
            L->n_wait--;
            return;
        }
    }
}

/* Cells the running requests hold once their pending tokens are computed (a unified pool without
 * sharing: a request's cells are its computed tokens). */
static int32_t held(const cb_lane *L) {
    int32_t n = 0;
    for (int32_t s = 0; s < L->max_seqs; s++)
        if (L->run[s]) n += cb_request_n_tokens(L->run[s]);
    return n;
}

/* A request that starts again gets its saved cells back (swap.h), or computes them again. */
static void restore(cobatch_engine *e, cb_request *r) {
    if (r->swap.state == CB_SWAP_SAVED) {
        int32_t to = r->swap.to;
        e->swap.used -= r->swap.reserved; /* freed now */
        r->swap.reserved = 0;
        if (cb_runner_restore(&e->lane.runner, r, r->seq_id)) {
            r->n_computed = to;
            return;
        }
    }
    cb_swap_end(&e->swap, r, false);
}

/* Starts waiting requests in order while a sequence is free and their tokens fit with room to
 * grow (CB_LANE_ROOM cells); the first always starts (one request never exceeds the pool). */
static void admit(cobatch_engine *e) {
    cb_lane *L = &e->lane;
    int32_t h = held(L);
    while (L->n_wait > 0 && L->n_run < L->max_seqs &&
           (L->n_run == 0 || h + cb_request_n_tokens(L->wait[0]) + CB_LANE_ROOM <= L->cells)) {
        cb_request *r = L->wait[0];
        memmove(L->wait, L->wait + 1, sizeof(*L->wait) * (size_t)(L->n_wait - 1));
        L->n_wait--;
        int32_t s = 0;
        while (L->run[s])
            s++;
        L->run[s] = r;
        L->n_run++;
        h += cb_request_n_tokens(r);
        r->seq_id = s;
        r->n_computed = 0;
        r->state = CB_RUNNING;
        restore(e, r);
        if (r->n_computed == 0) load(e, r, s);
    }
}

/* While the running requests' tokens would not fit the pool, the youngest goes back to the head of
 * the queue, its cells freed, to be recomputed (a preemption, as the scheduler's). */
static void make_room(cobatch_engine *e) {
    cb_lane *L = &e->lane;
    while (L->n_run > 1 && held(L) > L->cells) {
        int32_t y = -1;
        for (int32_t s = 0; s < L->max_seqs; s++)
            if (L->run[s] && (y < 0 || L->run[s]->arrival > L->run[y]->arrival)) y = s;
        cb_request *r = L->run[y];
        if (cb_swap_choose(&e->swap, r, r->n_computed)) { /* its cells to host memory (swap.h) */
            r->swap.from = 0;
            r->swap.to = r->n_computed;
            cb_runner_save(&L->runner, r, y, 0, r->n_computed); /* a failure: it is recomputed */
        }
        cb_runner_trim(&L->runner, y, 0);
        L->run[y] = NULL;
        L->n_run--;
        r->n_preemptions++;
        L->preemptions++;
        if (!cb_lane_add(e, r, true)) /* out of memory for the queue: it ends, and says so */
            cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory");
    }
}

/* Decode rows first, then prompt chunks while the budget lasts (and at most CB_PROMPT_LOGIT_ROWS
 * prompt rows wanting logits), shaped by flash attention's tile (cb_plan_tile_chunk): under a tile
 * of rows the lane's one graph leaves the tiled kernel, and each row costs several times more. A
 * chunk may pass the budget by under a tile, within the batch, unless strict. */
static void plan(cobatch_engine *e, int32_t budget, bool strict) {
    cb_lane *L = &e->lane;
    cb_plan *p = &L->plan;
    p->n_items = p->n_tokens = p->n_decode = p->n_prefill_tokens = p->n_paced_tokens = p->n_logit_rows = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t s = 0; s < L->max_seqs; s++) {
            cb_request *r = L->run[s];
            if (!r) continue;
            int32_t pending = cb_request_n_tokens(r) - r->n_computed;
            if (pending <= 0 || (pass == 0) != (pending == 1)) continue;
            int32_t room = budget - p->n_tokens, n = pending < room ? pending : room;
            if (pass == 1)
                n = cb_plan_tile_chunk(pending, room, strict ? room : L->budget - p->n_tokens, CB_RUNNER_FA_TILE,
                                       p->n_tokens == 0);
            while (n > 0 && p->n_logit_rows + cb_request_logit_rows(r, n) > CB_PROMPT_LOGIT_ROWS)
                n = r->all_logits_from > r->n_computed ? r->all_logits_from - r->n_computed
                                                       : CB_PROMPT_LOGIT_ROWS - p->n_logit_rows;
            if (n <= 0) continue;
            cb_plan_item *it = &p->items[p->n_items++];
            *it = (cb_plan_item){.req = r, .pos0 = r->n_computed, .n_tokens = n, .logits = n == pending};
            p->n_tokens += n;
            p->n_logit_rows += cb_request_logit_rows(r, n);
            if (n == 1 && it->logits && r->n_computed >= r->n_prompt)
                p->n_decode++;
            else
                p->n_prefill_tokens += n;
        }
    }
}

/* A lane step that failed: its requests' cells past what they had go, and they end. */
static void fail(cobatch_engine *e, int rc) {
    char msg[96];
    snprintf(msg, sizeof(msg), "llama_decode failed with code %d", rc);
    e->n_decode_failures++;
    cb_plan *p = &e->lane.plan;
    for (int32_t i = 0; i < p->n_items; i++)
        cb_engine_finish(e, p->items[i].req, CB_FINISHED_ERROR, msg);
}

int32_t cb_lane_step(cobatch_engine *e, int32_t used, int64_t *us) {
    cb_lane *L = &e->lane;
    *us = 0;
    if (!L->on) return 0;
    make_room(e);
    admit(e);
    if (L->n_run == 0) return 0;
    /* what the scheduler's step left of the budget (a step's length is the pause every stream
     * sees), and at least a row for each running request and a flash-attention tile of prompt, so
     * that the lane goes on beside a busy step, in its tiled kernel */
    int32_t least = L->n_run + CB_RUNNER_FA_TILE < L->budget ? L->n_run + CB_RUNNER_FA_TILE : L->budget;
    int32_t allow = L->budget - used > least ? L->budget - used : least;
    /* and in time, while anything else is running (a stream, another lane request): the tokens that
     * take, at the lane's own measured cost a token (its rows attend over the whole pool), the time
     * `allow` prompt tokens take in the streams (swap.h measures it) */
    int32_t budget = allow;
    if (cb_sched_n_running(e->sched) > 0 || L->n_run > 1)
        budget = cb_pace_tokens(&L->pace, allow * e->swap.token_us, least, allow);
    int rc;
    int64_t t0;
    for (bool retry = false;; retry = true) { /* a retry keeps to its smaller budget strictly */
        plan(e, budget, retry);
        if (L->plan.n_items == 0) return 0;
        t0 = cobatch_time_us();
        rc = cb_runner_run(&L->runner, &L->plan);
        if (rc == 0) break;
        for (int32_t i = 0; i < L->plan.n_items; i++) /* what the failed decode may have kept */
            cb_runner_trim(&L->runner, L->plan.items[i].req->seq_id, L->plan.items[i].pos0);
        if (rc != 1 || L->plan.n_tokens <= L->plan.n_items) { /* not a full pool, or nothing smaller to try */
            fail(e, rc);
            return 0;
        }
        e->n_retries++;
        budget = L->plan.n_tokens / 2 > L->plan.n_items ? L->plan.n_tokens / 2 : L->plan.n_items;
    }
    *us = cobatch_time_us() - t0;
    /* a step of a tile of prompt rows or more measures a token's cost (a few decode rows alone are
     * a pass over the weights for little, and rows under the tile leave the tiled kernel: either
     * would make a chunk's token look dearer than it is) */
    if (L->plan.n_tokens >= CB_RUNNER_FA_TILE) cb_pace_note(&L->pace, L->plan.n_tokens, *us);
    int64_t now = cobatch_time_us();
    cb_plan *p = &L->plan;
    for (int32_t i = 0; i < p->n_items; i++) {
        cb_request *r = p->items[i].req;
        int32_t prompt_rows = r->n_prompt - r->n_computed;
        if (prompt_rows > p->items[i].n_tokens) prompt_rows = p->items[i].n_tokens;
        if (prompt_rows > 0) e->n_prompt_computed += prompt_rows;
        r->n_computed += p->items[i].n_tokens;
        if (!r->t_scheduled_us) r->t_scheduled_us = now;
    }
    cb_engine_record_prompt_logprobs(e, &L->runner, &L->model, p);
    for (int32_t i = 0; i < p->n_items; i++)
        if (p->items[i].logits) cb_engine_sample_one(e, p->items[i].req, &L->model, L->runner.logit_row[i], now);
    return p->n_tokens;
}
