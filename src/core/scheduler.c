#include "scheduler.h"
#include "preempt.h"
#include "sched_internal.h"
#include "../util/buf.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- queue order ---------------- */

/* With aging, priority + (now - t_submit) / aging ranks requests; two requests age alike, so their
 * order never changes and this key, fixed at submit, gives it (no re-sorting as time passes). */
int64_t cb_sched_aged_key(const cb_sched *s, const cb_request *r) {
    return (int64_t)r->priority * s->cfg.priority_aging_us - r->t_submit_us;
}

/* Run order of the waiting queue: higher (aged) priority first; within a priority, preempted
 * requests first (they were running: put back at the front), then oldest first. */
static bool ranks_before(const cb_sched *s, const cb_request *a, const cb_request *b) {
    if (s->cfg.priority_aging_us > 0) {
        int64_t ka = cb_sched_aged_key(s, a), kb = cb_sched_aged_key(s, b);
        if (ka != kb) return ka > kb;
    }
    if (a->priority != b->priority) return a->priority > b->priority;
    bool pa = a->state == CB_PREEMPTED, pb = b->state == CB_PREEMPTED;
    if (pa != pb) return pa;
    return a->arrival < b->arrival;
}

/* O(n) insert, fine: the engine bounds the queue (max_queue) and admissions are per step. */
bool cb_sched_requeue(cb_sched *s, cb_request *r) {
    if (!cb_grow((void **)&s->waiting, &s->waiting_cap, (size_t)s->n_waiting + 1, sizeof(*s->waiting), 64))
        return false;
    int32_t i = s->n_waiting;
    while (i > 0 && ranks_before(s, r, s->waiting[i - 1]))
        i--;
    memmove(&s->waiting[i + 1], &s->waiting[i], sizeof(*s->waiting) * (size_t)(s->n_waiting - i));
    s->waiting[i] = r;
    s->n_waiting++;
    return true;
}

void cb_sched_remove_at(cb_request **arr, int32_t *n, int32_t i) {
    memmove(&arr[i], &arr[i + 1], sizeof(*arr) * (size_t)(*n - i - 1));
    (*n)--;
}

static int32_t index_of(cb_request **arr, int32_t n, const cb_request *r) {
    for (int32_t i = 0; i < n; i++)
        if (arr[i] == r) return i;
    return -1;
}

/* ---------------------------------------------------------------- lifecycle ------------------ */

cb_sched *cb_sched_new(const cb_sched_config *cfg, cb_kv *kv, cb_cache *cache) {
    if (!cfg || !kv || !cache || cfg->max_num_seqs < 1 || cfg->max_num_seqs > kv->n_seq ||
        cfg->max_batched_tokens < cfg->max_num_seqs || cfg->prefill_chunk < 0 || cfg->kv_reserve < 0 ||
        cfg->prefill_step_tokens < 0)
        return NULL;
    cb_sched *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cfg = *cfg;
    if (cfg->prefill_chunk == 0 || cfg->mode != CB_MODE_CONTINUOUS) s->cfg.pace = NULL; /* a pace cuts chunks */
    s->prompt_left = INT32_MAX;
    s->kv = kv;
    s->cache = cache;
    s->running = calloc((size_t)cfg->max_num_seqs, sizeof(*s->running));
    s->sp_item = calloc((size_t)cfg->max_num_seqs, sizeof(int32_t));
    s->sp_avail = calloc((size_t)cfg->max_num_seqs, sizeof(int32_t));
    s->sp_k = calloc((size_t)cfg->max_num_seqs, sizeof(int32_t));
    s->sp_rate = calloc((size_t)cfg->max_num_seqs, sizeof(double));
    s->cur = &s->pending;
    /* the cell changes of a busy step, up front: a lost op could not be repaired, so running out
     * of memory while queueing one aborts (kv.h); this makes that need far more than a step */
    if (!s->running || !s->sp_item || !s->sp_avail || !s->sp_k || !s->sp_rate ||
        cb_kv_ops_reserve(&s->pending, CB_OPS_RESERVE) != 0) {
        cb_sched_free(s);
        return NULL;
    }
    return s;
}

void cb_sched_free(cb_sched *s) {
    if (!s) return;
    free(s->running);
    free(s->sp_item);
    free(s->sp_avail);
    free(s->sp_k);
    free(s->sp_rate);
    free(s->waiting);
    cb_kv_ops_free(&s->pending);
    free(s);
}

int32_t cb_sched_drop_cache(cb_sched *s) { return cb_cache_drop(s->cache, s->cur); }

void cb_sched_add(cb_sched *s, cb_request *r, int64_t arrival) {
    r->arrival = arrival;
    r->state = CB_WAITING;
    r->seq_id = -1;
    r->cache.node = NULL;
    r->cache.len = 0;
    r->cache.dead = false;
    r->cache.host = NULL;
    r->cache.load_failed = false;
    r->static_member = false;
    if (!cb_sched_requeue(s, r)) {
        /* Out of memory for the queue: the request ends at once rather than being lost. */
        r->state = CB_FINISHED_ERROR;
    }
}

bool cb_sched_fits(const cb_sched *s, int32_t n_prompt) {
    if (n_prompt < 1 || n_prompt >= s->kv->per_seq_cap) return false;
    if (s->cfg.prefill_chunk == 0 && n_prompt > s->cfg.max_batched_tokens) return false;
    return true;
}

/* ---------------------------------------------------------------- one step ------------------- */

void cb_sched_release_seq(cb_sched *s, cb_request *r) {
    if (r->seq_id < 0) return;
    cb_cache_release(s->cache, r, s->cur);
    r->seq_id = -1;
}

/* Whether a step's pace (cb_step_pace) cuts r's prompt: r's tokens fit a flash-attention tile. A
 * longer one keeps to the budget and the tile (plan.h): cut under a tile its rows would leave the
 * tiled kernel for several times the cost, and past a few thousand cells a tile alone takes longer
 * than the pace allows (an agent's turn: paced, sessions lost 5% of their wall time and half again
 * of their TTFT for it). */
static bool paced_request(const cb_sched *s, const cb_request *r) {
    return cb_request_n_tokens(r) <= s->cfg.split_tile;
}

static void plan_add(cb_sched *s, cb_plan *plan, cb_request *r, int32_t n) {
    bool ok = cb_kv_grow(s->kv, r->seq_id, n);
    (void)ok; /* callers checked cb_kv_room */
    cb_plan_item *it = &plan->items[plan->n_items++];
    it->req = r;
    it->pos0 = r->n_computed;
    it->n_tokens = n;
    it->logits = r->n_computed + n == cb_request_n_tokens(r);
    it->n_draft = 0;
    r->in_plan = n;
    plan->n_tokens += n;
    plan->n_logit_rows += cb_request_logit_rows(r, n);
    if (n == 1 && it->logits && r->n_computed >= r->n_prompt) { /* a generated token, not a prompt one */
        plan->n_decode++;
        return;
    }
    plan->n_prefill_tokens += n;
    if (!paced_request(s, r)) return;
    plan->n_paced_tokens += n;
    if (s->prompt_left != INT32_MAX) s->prompt_left -= n;
}

/* What the step's pace lets r's next chunk take: the paced tokens left; INT32_MAX: unpaced. */
static int32_t paced_chunk(const cb_sched *s, const cb_request *r) {
    if (s->prompt_left == INT32_MAX || !paced_request(s, r)) return INT32_MAX;
    return s->prompt_left > 0 ? s->prompt_left : 0;
}

/* r's prompt tokens per step at most (0: no chunking): prefill_chunk, or in a step nobody decodes in,
 * prefill_step_tokens. Not for a request that wants its prompt's logits: the step's logit rows bound
 * its chunks anyway, and a longer limit only let a tail join a chunk, which computed those rows
 * otherwise (log-probabilities 0.19 nats apart from the unchunked prompt's, where they had agreed). */
static int32_t chunk_limit(const cb_sched *s, const cb_request *r) {
    if (s->cfg.prefill_chunk > 0 && s->prefill_step && r->all_logits_to == 0) return s->cfg.prefill_step_tokens;
    return s->cfg.prefill_chunk;
}

/* Tokens of r's pending prompt to put in this step, 0 for none. */
static int32_t chunk_for(cb_sched *s, const cb_plan *plan, const cb_request *r, int32_t budget_left) {
    int32_t pending = cb_request_pending(r), limit_chunk = chunk_limit(s, r);
    int32_t n = pending < budget_left ? pending : budget_left;
    if (limit_chunk > 0 && n > limit_chunk) n = limit_chunk;
    int32_t paced = paced_chunk(s, r);
    if (n > paced) n = paced;
    int32_t rows_left = s->cfg.max_logit_rows - plan->n_logit_rows;
    bool logits_cut = cb_request_logit_rows(r, n) > rows_left; /* the step's logit rows bound the chunk */
    if (logits_cut) {
        int32_t limit = n, before = r->all_logits_from - r->n_computed; /* rows that have their logits already */
        n = (before > 0 ? before : 0) + (rows_left > 0 ? rows_left : 0);
        /* split layout: a last piece under the tile would run the one-row kernel over the whole
         * prompt; it goes with this chunk instead (within the budget), up to a tile over the step's
         * logit rows */
        if (s->kv->split && rows_left > 0 && n > 0 && pending - n < s->cfg.split_tile && pending <= limit) n = pending;
    }
    cb_cache_make_room(s->cache, n, s->cur);
    int32_t room = cb_kv_room(s->kv, r->seq_id);
    if (n > room) n = room;
    if (s->cfg.prefill_chunk == 0 && n < pending && !logits_cut) return 0; /* no chunking: all or nothing */
    if (logits_cut) return n > 0 ? n : 0; /* not shaped: it would cut the step's other chunks to it */
    if (n > 0 && s->cfg.tile_chunks) {    /* within the step's cap, the chunk length and its logit rows */
        int32_t cap = s->tile_cap - plan->n_tokens;
        if (cap > room) cap = room;
        if (limit_chunk > 0 && cap > limit_chunk) cap = limit_chunk;
        if (cap < n) cap = n;
        int32_t shaped = cb_plan_tile_chunk(pending, n, cap, s->cfg.split_tile, plan->n_items == 0);
        if (cb_request_logit_rows(r, shaped) <= rows_left) n = shaped;
    }
    if (n > 0 && s->kv->split && s->cfg.prefill_chunk > 0) {
        /* after a full set of decode rows; nobody decodes in a prefill step */
        int32_t cap = s->prefill_step ? s->cfg.prefill_step_tokens : s->cfg.max_batched_tokens - s->cfg.max_num_seqs;
        if (cap > limit_chunk) cap = limit_chunk;
        if (cap > paced) cap = paced;
        n = cb_plan_split_chunk(&s->step_chunk, s->cfg.split_tile, cap, plan->n_items == 0, n, pending);
    }
    return n > 0 ? n : 0;
}

/* Draft rows after the decode rows (cb_sched_config.spec_cost): what cb_spec_choose finds worth
 * checking, each request within its drafts, its stream's cells less one and what the budget and the
 * free cells leave. */
static void schedule_drafts(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    if (!s->cfg.spec_cost || *budget_left <= 0) return;
    int32_t n = 0;
    for (int32_t i = 0; i < plan->n_items; i++) {
        cb_plan_item *it = &plan->items[i];
        cb_request *r = it->req;
        if (it->n_tokens != 1 || !it->logits || r->n_computed < r->n_prompt || r->draft.avail <= 0) continue;
        int32_t avail = r->draft.avail, room = cb_kv_room(s->kv, r->seq_id) - 1;
        int32_t fits = r->cap - cb_request_n_tokens(r) - 1; /* the drafts and the last row's token */
        if (avail > room) avail = room;
        if (avail > fits) avail = fits;
        if (avail <= 0) continue;
        s->sp_item[n] = i;
        s->sp_avail[n] = avail;
        s->sp_rate[n] = r->draft.rate;
        n++;
    }
    if (n == 0) return;
    double fixed, row;
    if (!cb_row_cost_get(s->cfg.spec_cost, &fixed, &row)) { /* until fitted: a row is a tenth of the pass */
        double now = cb_row_cost_at(s->cfg.spec_cost, plan->n_tokens, 10, 1);
        row = now / (10 + plan->n_tokens), fixed = 10 * row;
    }
    int32_t room = *budget_left, cells = cb_kv_free_cells(s->kv) - s->cfg.kv_reserve;
    if (room > cells) room = cells;
    if (s->cfg.max_draft_rows > 0 && room > s->cfg.max_draft_rows) room = s->cfg.max_draft_rows;
    if (room <= 0) return;
    /* split layout: beside other rows a request's drafts make a graph run of their own (plan.h), a
     * pass over the weights more (what a one-row step takes); alone its rows are one run */
    double start = s->kv->split && plan->n_items > 1 ? cb_row_cost_at(s->cfg.spec_cost, 1, fixed, row) : 0;
    cb_spec_choose(n, plan->n_tokens, s->sp_avail, s->sp_rate, s->cfg.spec_cost, fixed, row, start, room, s->sp_k);
    for (int32_t j = 0; j < n; j++) {
        cb_plan_item *it = &plan->items[s->sp_item[j]];
        cb_request *r = it->req;
        int32_t k = s->sp_k[j];
        if (k == 0) continue;
        cb_kv_grow(s->kv, r->seq_id, k);
        it->n_tokens += k;
        it->n_draft = k;
        r->in_plan += k;
        plan->n_tokens += k;
        plan->n_draft_rows += k;
        *budget_left -= k;
    }
}

static void schedule_decodes(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    for (;;) { /* evict cache, then preempt, until every decode row has its cell */
        int32_t need = 0;
        for (int32_t i = 0; i < s->n_running; i++)
            need += cb_request_pending(s->running[i]) == 1;
        cb_cache_make_room(s->cache, need, s->cur);
        if (need <= cb_kv_free_cells(s->kv) || s->n_running == 0) break;
        /* the last one running recomputes: saved, it would leave an idle engine nothing to run */
        cb_preempt_one(s, plan, s->n_running > 1);
    }
    for (int32_t i = 0; i < s->n_running && (*budget_left) > 0; i++) {
        cb_request *r = s->running[i];
        if (cb_request_pending(r) != 1 || cb_kv_room(s->kv, r->seq_id) < 1) continue;
        plan_add(s, plan, r, 1);
        (*budget_left)--;
    }
    schedule_drafts(s, plan, budget_left);
}

static void schedule_prefills(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    for (int32_t i = 0; i < s->n_running && (*budget_left) > 0; i++) {
        cb_request *r = s->running[i];
        if (r->in_plan || cb_request_pending(r) < 2) continue;
        int32_t n = chunk_for(s, plan, r, *budget_left);
        if (n == 0) continue;
        plan_add(s, plan, r, n);
        *budget_left -= n;
    }
}

/* Cells the running requests still need for prompt tokens not yet planned: an admission must not
 * take them, or two long prompts admitted together would preempt each other. */
static int32_t outstanding_cells(const cb_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *r = s->running[i];
        int32_t left = cb_request_pending(r) - r->in_plan;
        if (left > 1) n += left - 1;
    }
    return n;
}

static bool may_admit(cb_sched *s, const cb_request *r) {
    if (s->cfg.mode == CB_MODE_STATIC) return s->forming || r->static_member;
    return true;
}

/* Continuous mode: r shares more tokens than it finds cached with a prompt a running request is
 * still computing (and will publish chunk by chunk). Admitting r now would compute them twice; it
 * waits for those cells instead (BatchLLM §4.3.1: the prefix before the distinct parts), a step
 * or a few. O(running x prompt), only for requests at the head of the queue. */
static bool prefix_in_flight(const cb_sched *s, const cb_request *r, int32_t cached) {
    int32_t least = cb_cache_min_share(s->cache);
    if (least == 0 || s->cfg.mode != CB_MODE_CONTINUOUS || r->all_logits_to > 0) return false; /* it cannot share */
    int32_t n = cb_request_n_tokens(r);
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *q = s->running[i];
        if (q->n_computed >= q->n_prompt || !cb_cache_in_flight(s->cache, q)) continue;
        int32_t lim = n < q->n_prompt ? n : q->n_prompt, l = 0;
        while (l < lim && r->tokens[l] == q->tokens[l])
            l++;
        if (l > cached && l >= least) return true;
    }
    return false;
}

/* Makes r running on sequence seq with its first `cached` tokens shared from the cache. */
static void start_request(cb_sched *s, cb_request *r, int32_t seq, int32_t cached) {
    r->seq_id = seq;
    r->n_computed = cached;
    if (r->n_preemptions == 0) r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
    r->state = CB_RUNNING;
    s->running[s->n_running++] = r;
    s->stats.admitted++;
    if (s->cfg.mode == CB_MODE_STATIC && !r->static_member) {
        r->static_member = true;
        s->group_size++;
        s->group_left++;
    }
}

/* Split layout: a hit leaves at least its prompt's last tile (64 tokens) to compute, so that the
 * rows that give the first token its logits run ggml's tiled flash-attention kernel, as they did
 * when the prompt was computed cold. Under the tile a row is computed alone with its sum in f16, in
 * the tile in f32 (ggml-cpu ops.cpp): a hit whose rest were under a tile answered otherwise than the
 * cold prompt (logprobs 0.1-0.3 nats apart, greedy answers diverging in 7 of 8 ~800-token prompts),
 * and a hit must not change an answer (RELIABILITY.md, "Repeatable across cache hits"). The price: up
 * to a tile computed again (~250 ms with ~600 cells on two cores; a rest of one row took ~15 ms in
 * the one-row kernel, a rest of 62 rows 850 ms). A prompt under the tile runs the one-row kernel cold
 * too, whose rows do not depend on each other. A hit cut under the least share is computed whole.
 * Without exact_hits the whole hit is taken, and so is a hit that may not be cut (a sliding-window
 * model's conversation loaded from the host tier: its cells before the window are not there). */
static void pad_to_tile(const cb_sched *s, const cb_request *r, cb_cache_hit *hit) {
    int32_t tile = s->cfg.split_tile, n = cb_request_n_tokens(r);
    if (s->cfg.exact_hits && s->kv->split && tile > 0 && hit->len > 0 && n - hit->len < tile && n >= tile &&
        n - tile >= hit->floor)
        hit->len = n - tile;
}

/* A sequence id for r with the cells it needs beyond what it shares; -1 when r cannot start now. */
static int32_t admit_seq(cb_sched *s, cb_request *r, cb_cache_hit *hit, int32_t budget_left) {
    int32_t pending = cb_request_n_tokens(r) - hit->len;
    int32_t need = pending + (s->n_running > 0 ? s->cfg.kv_reserve : 0);
    if (need > s->kv->per_seq_cap) need = s->kv->per_seq_cap;
    if (s->cfg.prefill_chunk == 0 && pending > budget_left && !s->forming) return -1;
    return cb_cache_admit(s->cache, r, hit, need, outstanding_cells(s), s->cur);
}

/* r comes back from swap: its saved cells are restored (and its pinned prefix shared) instead of
 * computed; its next token is a decode row. false when it cannot start now. */
static bool admit_swapped(cb_sched *s, cb_plan *plan, cb_request *r, int32_t w, int32_t *budget_left) {
    int32_t need = cb_request_n_tokens(r) - r->swap.from + (s->n_running > 0 ? s->cfg.kv_reserve : 0);
    if (need > s->kv->per_seq_cap) need = s->kv->per_seq_cap;
    int32_t seq = cb_cache_admit_swapped(s->cache, r, need, outstanding_cells(s), s->cur);
    if (seq < 0) return false;
    cb_sched_remove_at(s->waiting, &s->n_waiting, w);
    start_request(s, r, seq, r->swap.from);
    r->n_computed = r->swap.to;
    /* the bytes are free once the restore runs (the runner frees the data then) */
    s->cfg.swap->used -= r->swap.reserved;
    r->swap.reserved = 0;
    r->swap.state = CB_SWAP_RESTORING;
    int32_t n = chunk_for(s, plan, r, *budget_left);
    if (n > 0) {
        plan_add(s, plan, r, n);
        *budget_left -= n;
    }
    return true;
}

/* cb_sched_config.wait_tokens: a running request computes cells it has tokens for (a prompt, or an
 * answer again after a preemption), or ends within wait_tokens: the queue waits for it. */
static bool wait_for_running(const cb_sched *s) {
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *r = s->running[i];
        if (r->n_computed < r->n_prompt || r->n_computed + 1 < cb_request_n_tokens(r)) return true;
        if (r->max_tokens - r->n_generated <= s->cfg.wait_tokens) return true;
    }
    return false;
}

static void schedule_admissions(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    s->forming = s->group_left == 0;
    if (s->forming) s->group_size = 0;
    /* A static group is formed whole, up to max_num_seqs, even past this step's budget: its
     * members wait for prompt budget in later steps, but nobody else joins until it is done. */
    if (s->cfg.mode == CB_MODE_STATIC && !s->forming && s->n_running >= s->group_left) return; /* all run */
    int32_t w = 0;
    while (w < s->n_waiting && s->n_running < s->cfg.max_num_seqs && ((*budget_left) > 0 || s->forming)) {
        cb_request *r = s->waiting[w];
        if (!may_admit(s, r)) { /* static: the group's members go first, wherever priority put them */
            w++;
            continue;
        }
        if (r->swap.state == CB_SWAP_SAVING) break; /* this step's ops save it: from the next step on */
        if (s->cfg.wait_tokens > 0 && wait_for_running(s)) break;
        cb_cache_hit hit = cb_cache_match(s->cache, r, s->running, s->n_running);
        /* a failed save, or the cache still holds all of it: no restore */
        if (r->swap.state == CB_SWAP_FAILED || (r->swap.state == CB_SWAP_SAVED && hit.len >= r->swap.to))
            cb_preempt_drop_swap(s, r);
        if (r->swap.state == CB_SWAP_SAVED) {
            if (!admit_swapped(s, plan, r, w, budget_left)) break;
            continue;
        }
        if (prefix_in_flight(s, r, hit.len)) { /* it waits for cells in the making: others go by */
            if (++w >= 2 * s->cfg.max_num_seqs) break;
            continue;
        }
        pad_to_tile(s, r, &hit);
        int32_t seq = admit_seq(s, r, &hit, *budget_left);
        if (seq < 0 && hit.len > 0 && s->n_running == 0) {
            /* an idle engine: what keeps the match may be the room r needs (a tree node the match
             * ends in is cut there, but a cut can fail to allocate); r is computed whole rather than
             * never */
            hit = cb_cache_miss(s->cache);
            seq = admit_seq(s, r, &hit, *budget_left);
        }
        if (seq < 0) break; /* the first that does not fit waits, nobody overtakes it */
        cb_sched_remove_at(s->waiting, &s->n_waiting, w);
        start_request(s, r, seq, hit.len);
        int32_t n = chunk_for(s, plan, r, *budget_left);
        if (n > 0) {
            plan_add(s, plan, r, n);
            *budget_left -= n;
        }
    }
}

int32_t cb_sched_step(cb_sched *s, cb_plan *plan, int32_t budget, bool strict) {
    plan->n_items = plan->n_tokens = plan->n_decode = plan->n_prefill_tokens = plan->n_paced_tokens = 0;
    plan->n_preempted = plan->n_failed = 0;
    plan->n_logit_rows = plan->n_draft_rows = 0;
    /* the plan starts with the changes made since the last one; this step's follow them */
    cb_kv_ops done = plan->ops;
    plan->ops = s->pending;
    s->pending = done;
    s->pending.n = 0;
    s->cur = &plan->ops;
    for (int32_t i = 0; i < s->n_running; i++)
        s->running[i]->in_plan = 0;
    s->step_chunk = 0;
    /* running requests move into one block of streams (split layout), unless this step's
     * admissions are about to fill the holes; idle cache beyond its cap goes */
    bool may_move = s->cfg.mode != CB_MODE_CONTINUOUS || s->n_waiting == 0;
    s->stats.stream_moves += cb_cache_arrange(s->cache, s->running, s->n_running, may_move, s->cur);
    /* a step nobody decodes in keeps no gap short: prompts take the prefill step's tokens */
    int32_t cap = s->cfg.max_batched_tokens;
    s->prefill_step = s->cfg.prefill_step_tokens > cap && (budget <= 0 || budget > cap) && cb_sched_n_decoding(s) == 0;
    if (s->prefill_step) cap = s->cfg.prefill_step_tokens;
    int32_t full = budget > 0 && budget < cap ? budget : cap;
    s->tile_cap = strict ? full : cap;
    for (;;) {
        int32_t budget_left = full;
        s->prompt_left = INT32_MAX;
        schedule_decodes(s, plan, &budget_left);
        if (s->cfg.pace)
            s->prompt_left = cb_step_pace_prompt(s->cfg.pace, plan->n_decode, s->cfg.max_num_seqs, s->cfg.pace_share);
        schedule_prefills(s, plan, &budget_left);
        schedule_admissions(s, plan, &budget_left);
        /* Running requests that cannot move (prompts stuck on a full cache, which admission
         * control should prevent) would stall the engine: free the youngest and plan again. */
        if (plan->n_items > 0) break;
        if (s->n_running == 0) {
            /* a save runs with this plan (it may be what blocks the head, or the head itself): the
             * next step admits or unpins */
            if (cb_sched_saving(s)) break;
            /* the queue head does not fit an idle engine: swapped requests' pinned prefixes give
             * way (they recompute) */
            if (cb_preempt_unpin_waiting(s)) continue;
            break;
        }
        if (plan->n_preempted >= s->cfg.max_num_seqs) break; /* no livelock: try again next step */
        cb_preempt_one(s, plan, false);
    }
    s->cur = &s->pending;
    return plan->n_items;
}

int32_t cb_sched_n_decoding(const cb_sched *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *r = s->running[i];
        n += r->n_computed >= r->n_prompt; /* (one recomputing its answer after a preemption too) */
    }
    return n;
}

void cb_sched_commit(cb_sched *s, cb_plan *plan, int64_t now_us) {
    for (int32_t i = 0; i < plan->n_items; i++) {
        cb_request *r = plan->items[i].req;
        r->n_computed += plan->items[i].n_tokens - plan->items[i].n_draft; /* held drafts: the engine */
        r->in_plan = 0;
        if (!r->t_scheduled_us) r->t_scheduled_us = now_us;
        /* prompt cells go to the cache as they are made, so a request sharing them can start */
        cb_cache_publish(s->cache, r, r->n_computed < r->n_prompt ? r->n_computed : r->n_prompt, s->cur);
    }
    if (plan->n_items > 0) {
        cb_cache_settled(s->cache); /* the decode made the stream copies queued before it */
        s->stats.steps++;
        if (s->cfg.mode == CB_MODE_STATIC && s->group_left > 0)
            s->stats.wasted_decode_slots += s->group_size - s->group_left;
    }
}

void cb_sched_rollback(cb_sched *s, cb_plan *plan) {
    for (int32_t i = 0; i < plan->n_items; i++) {
        cb_request *r = plan->items[i].req;
        if (r->seq_id >= 0) cb_kv_grow(s->kv, r->seq_id, -plan->items[i].n_tokens);
        r->in_plan = 0;
    }
}

void cb_sched_remove(cb_sched *s, cb_request *r) {
    int32_t i = index_of(s->running, s->n_running, r);
    if (i >= 0)
        cb_sched_remove_at(s->running, &s->n_running, i);
    else if ((i = index_of(s->waiting, s->n_waiting, r)) >= 0)
        cb_sched_remove_at(s->waiting, &s->n_waiting, i);
    cb_sched_release_seq(s, r);
    cb_preempt_drop_swap(s, r);
    if (r->static_member && s->group_left > 0) s->group_left--;
    r->static_member = false;
}

int32_t cb_sched_finish(cb_sched *s, cb_request *r, cb_state final_state) {
    int32_t seq = r->seq_id;
    cb_sched_remove(s, r);
    r->state = final_state;
    s->stats.finished++;
    return seq;
}

bool cb_sched_saving(const cb_sched *s) {
    for (int32_t i = 0; i < s->n_waiting; i++)
        if (s->waiting[i]->swap.state == CB_SWAP_SAVING) return true;
    return false;
}

cb_kv_ops *cb_sched_pending_ops(cb_sched *s) { return &s->pending; }
int32_t cb_sched_n_running(const cb_sched *s) { return s->n_running; }
int32_t cb_sched_n_waiting(const cb_sched *s) { return s->n_waiting; }
cb_request *cb_sched_running_at(const cb_sched *s, int32_t i) { return i < s->n_running ? s->running[i] : NULL; }
cb_request *cb_sched_waiting_at(const cb_sched *s, int32_t i) { return i < s->n_waiting ? s->waiting[i] : NULL; }
const cb_sched_stats *cb_sched_get_stats(const cb_sched *s) { return &s->stats; }
const cb_sched_config *cb_sched_get_config(const cb_sched *s) { return &s->cfg; }
