#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#define CB_OPS_RESERVE 1024 /* cb_kv_op: 16 bytes each */

struct cb_sched {
    cb_sched_config cfg;
    cb_kv *kv;
    cb_request **running; /* (max_num_seqs) in admission order */
    int32_t n_running;
    cb_request **waiting; /* (waiting_cap) in run order: see ranks_before */
    int32_t n_waiting, waiting_cap;
    cb_prefix *px;                  /* prefix cache (unified layout), or NULL */
    cb_streams *sc;                 /* prefix cache (split layout), or NULL */
    cb_kv_ops pending;              /* cell changes made between steps (finish, commit), for the next plan */
    cb_kv_ops *cur;                 /* where changes go now: the plan's ops while planning, else pending */
    int32_t group_size, group_left; /* static mode: the current group */
    bool forming;                   /* static mode: this step's admissions start a new group */
    int32_t step_chunk;             /* split layout: this step's prompt chunk length (split_chunk) */
    cb_sched_stats stats;
};

/* ---------------------------------------------------------------- queue order ---------------- */

/* With aging, priority + (now - t_submit) / aging ranks requests; two requests age alike, so their
 * order never changes and this key, fixed at submit, gives it (no re-sorting as time passes). */
static int64_t aged_key(const cb_sched *s, const cb_request *r) {
    return (int64_t)r->priority * s->cfg.priority_aging_us - r->t_submit_us;
}

/* Run order of the waiting queue: higher (aged) priority first; within a priority, preempted
 * requests first (they were running: put back at the front), then oldest first. */
static bool ranks_before(const cb_sched *s, const cb_request *a, const cb_request *b) {
    if (s->cfg.priority_aging_us > 0) {
        int64_t ka = aged_key(s, a), kb = aged_key(s, b);
        if (ka != kb) return ka > kb;
    }
    if (a->priority != b->priority) return a->priority > b->priority;
    bool pa = a->state == CB_PREEMPTED, pb = b->state == CB_PREEMPTED;
    if (pa != pb) return pa;
    return a->arrival < b->arrival;
}

/* O(n) insert, fine: the engine bounds the queue (max_queue) and admissions are per step. */
static bool waiting_insert(cb_sched *s, cb_request *r) {
    if (s->n_waiting == s->waiting_cap) {
        int32_t cap = s->waiting_cap ? s->waiting_cap * 2 : 64;
        cb_request **w = realloc(s->waiting, sizeof(*w) * (size_t)cap);
        if (!w) return false;
        s->waiting = w;
        s->waiting_cap = cap;
    }
    int32_t i = s->n_waiting;
    while (i > 0 && ranks_before(s, r, s->waiting[i - 1]))
        i--;
    memmove(&s->waiting[i + 1], &s->waiting[i], sizeof(*s->waiting) * (size_t)(s->n_waiting - i));
    s->waiting[i] = r;
    s->n_waiting++;
    return true;
}

static void remove_at(cb_request **arr, int32_t *n, int32_t i) {
    memmove(&arr[i], &arr[i + 1], sizeof(*arr) * (size_t)(*n - i - 1));
    (*n)--;
}

static int32_t index_of(cb_request **arr, int32_t n, const cb_request *r) {
    for (int32_t i = 0; i < n; i++)
        if (arr[i] == r) return i;
    return -1;
}

/* ---------------------------------------------------------------- lifecycle ------------------ */

cb_sched *cb_sched_new(const cb_sched_config *cfg, cb_kv *kv) {
    if (!cfg || !kv || cfg->max_num_seqs < 1 || cfg->max_num_seqs > kv->n_seq ||
        cfg->max_batched_tokens < cfg->max_num_seqs || cfg->prefill_chunk < 0 || cfg->kv_reserve < 0)
        return NULL;
    cb_sched *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->cfg = *cfg;
    s->kv = kv;
    s->running = calloc((size_t)cfg->max_num_seqs, sizeof(*s->running));
    s->cur = &s->pending;
    /* the cell changes of a busy step, up front: a lost op could not be repaired, so running out
     * of memory while queueing one aborts (kv.h); this makes that need far more than a step */
    if (!s->running || cb_kv_ops_reserve(&s->pending, CB_OPS_RESERVE) != 0) {
        cb_sched_free(s);
        return NULL;
    }
    return s;
}

void cb_sched_free(cb_sched *s) {
    if (!s) return;
    free(s->running);
    free(s->waiting);
    cb_kv_ops_free(&s->pending);
    free(s);
}

int cb_plan_init(cb_plan *plan, int32_t max_num_seqs) {
    memset(plan, 0, sizeof(*plan));
    plan->items = calloc((size_t)max_num_seqs, sizeof(*plan->items));
    /* a step stops preempting for want of movers at max_num_seqs; the decode pass may add as many */
    plan->preempted = calloc(2 * (size_t)max_num_seqs, sizeof(*plan->preempted));
    if (!plan->items || !plan->preempted || cb_kv_ops_reserve(&plan->ops, CB_OPS_RESERVE) != 0) {
        cb_plan_free(plan);
        return -1;
    }
    return 0;
}

void cb_plan_free(cb_plan *plan) {
    free(plan->items);
    cb_kv_ops_free(&plan->ops);
    free(plan->preempted);
    memset(plan, 0, sizeof(*plan));
}

void cb_sched_set_prefix(cb_sched *s, cb_prefix *px) { s->px = px; }
void cb_sched_set_streams(cb_sched *s, cb_streams *sc) { s->sc = sc; }

int32_t cb_sched_drop_cache(cb_sched *s) {
    if (s->sc) return cb_streams_drop(s->sc, s->cur);
    return s->px ? cb_prefix_evict(s->px, INT32_MAX, s->cur) : 0;
}

void cb_sched_add(cb_sched *s, cb_request *r, int64_t arrival) {
    r->arrival = arrival;
    r->state = CB_WAITING;
    r->seq_id = -1;
    r->pref_len = 0;
    r->pref_node = NULL;
    r->pref_dead = false;
    r->static_member = false;
    if (!waiting_insert(s, r)) {
        /* Out of memory for the queue: the request ends at once rather than being lost. */
        r->state = CB_FINISHED_ERROR;
    }
}

bool cb_sched_fits(const cb_sched *s, int32_t n_prompt) {
    if (n_prompt < 1 || n_prompt >= s->kv->per_seq_cap) return false;
    if (s->cfg.prefill_chunk == 0 && n_prompt > s->cfg.max_batched_tokens) return false;
    return true;
}

/* ---------------------------------------------------------------- prefix cache ------------- */

/* Hands r's computed tokens [pref_len, to) to the cache. A request that finds its tokens already
 * published by another (it computed duplicates) stops publishing. */
static void publish(cb_sched *s, cb_request *r, int32_t to) {
    if (!s->px || !r->pref_node || r->pref_dead || r->seq_id < 0 || to <= r->pref_len) return;
    if (cb_prefix_insert(s->px, &r->pref_node, r->tokens, r->pref_len, to, r->seq_id, s->cur))
        r->pref_len = to;
    else
        r->pref_dead = true;
}

/* Frees cached cells until n are free; the cache gives way before anyone is preempted. */
static void make_room(cb_sched *s, int32_t n) {
    int32_t short_by = n - cb_kv_free_cells(s->kv);
    if (s->px && short_by > 0) cb_prefix_evict(s->px, short_by, s->cur);
}

/* ---------------------------------------------------------------- one step ------------------- */

static void release_seq(cb_sched *s, cb_request *r) {
    if (r->seq_id < 0) return;
    if (s->sc) { /* its stream stays, as cache */
        cb_streams_park(s->sc, r->seq_id, r->tokens);
        r->seq_id = -1;
        return;
    }
    publish(s, r, r->n_computed); /* what it computed stays as cache (a preempted one finds it) */
    if (r->pref_node) cb_prefix_unlock(s->px, r->pref_node);
    r->pref_node = NULL;
    r->pref_len = 0;
    r->pref_dead = false;
    cb_kv_ops_push(s->cur, r->seq_id, -1, 0, -1);
    cb_kv_seq_release(s->kv, r->seq_id);
    r->seq_id = -1;
}

/* Split layout: llama.cpp runs every block of consecutive streams in a batch as a graph run of
 * its own (a pass over the weights: a 5-row decode step over 5 scattered streams costs five
 * 1-row steps), so the running requests are kept in one block: those outside the window of
 * n_running ids that already holds most of them (and the fewest parked streams) move into its
 * holes: a whole-stream copy each, plus one to a holder when the hole's parked tokens are worth
 * keeping (a few ms, against a graph run every step they would stay apart). Skipped while
 * requests wait in continuous mode: this step's admissions fill holes first (pick_target in
 * streams.c, cb_kv_seq_acquire_block). */
static void compact_streams(cb_sched *s) {
    cb_kv *kv = s->kv;
    int32_t k = s->n_running, n_run = s->sc ? s->sc->n_run : kv->n_seq;
    if (!kv->split || k < 2 || (s->cfg.mode == CB_MODE_CONTINUOUS && s->n_waiting > 0)) return;
    int32_t best_w = 0, best = -1;
    for (int32_t w = 0; w + k <= n_run; w++) {
        int32_t score = 0; /* running ids in the window first, then fewer parked holes */
        for (int32_t id = w; id < w + k; id++)
            score += kv->taken[id] ? 2 * n_run : (s->sc && s->sc->len[id] > 0 ? -1 : 0);
        if (score > best) {
            best = score;
            best_w = w;
        }
    }
    int32_t hole = best_w;
    for (int32_t i = 0; i < k; i++) {
        cb_request *r = s->running[i];
        if (r->seq_id >= best_w && r->seq_id < best_w + k) continue;
        while (kv->taken[hole])
            hole++;
        int32_t from = r->seq_id;
        if (s->sc) {
            cb_streams_move(s->sc, from, hole, r->tokens, s->cur);
        } else {
            cb_kv_ops_push(s->cur, hole, from, 0, -1);
            cb_kv_ops_push(s->cur, from, -1, 0, -1);
            cb_kv_seq_take(kv, hole);
            cb_kv_grow(kv, hole, kv->used[from]);
            cb_kv_seq_release(kv, from);
        }
        r->seq_id = hole;
        s->stats.stream_moves++;
    }
}

/* Lowest (aged) priority first, then youngest: the request that loses least fairness by waiting. */
static int32_t pick_victim(const cb_sched *s) {
    int32_t v = -1;
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *r = s->running[i], *w = v >= 0 ? s->running[v] : NULL;
        int64_t kr = s->cfg.priority_aging_us > 0 ? aged_key(s, r) : r->priority;
        int64_t kw = w && s->cfg.priority_aging_us > 0 ? aged_key(s, w) : w ? w->priority : 0;
        if (!w || kr < kw || (kr == kw && r->arrival > w->arrival)) v = i;
    }
    return v;
}

static void preempt(cb_sched *s, int32_t i, cb_plan *plan) {
    cb_request *r = s->running[i];
    remove_at(s->running, &s->n_running, i);
    release_seq(s, r);
    r->n_computed = 0;
    r->n_preemptions++;
    r->state = CB_PREEMPTED;
    s->stats.preemptions++;
    plan->preempted[plan->n_preempted++] = r;
    if (!waiting_insert(s, r)) r->state = CB_FINISHED_ERROR; /* cannot grow the queue: say so */
}

static void plan_add(cb_sched *s, cb_plan *plan, cb_request *r, int32_t n) {
    bool ok = cb_kv_grow(s->kv, r->seq_id, n);
    (void)ok; /* callers checked cb_kv_room */
    cb_plan_item *it = &plan->items[plan->n_items++];
    it->req = r;
    it->pos0 = r->n_computed;
    it->n_tokens = n;
    it->logits = r->n_computed + n == cb_request_n_tokens(r);
    r->in_plan = n;
    plan->n_tokens += n;
    if (n == 1 && it->logits && r->n_computed >= r->n_prompt) /* a generated token, not a prompt one */
        plan->n_decode++;
    else
        plan->n_prefill_tokens += n;
}

/* Split layout: llama.cpp runs a batch as graph runs of equally many rows per stream
 * (split_equal), and under CB_SPLIT_TILE rows a stream the CPU's flash attention leaves its tiled
 * kernel for one row at a time (several times slower per token with 1000 cells of context:
 * BENCHMARKS session 5). cb_plan_row_order gives each block of consecutive streams with equal
 * chunks a graph run of its own (after one run of their first rows when decode rows are in the
 * block); here chunks are kept equal and not tiny: a prompt's last piece
 * goes whole, every cut chunk of a step has the first one's length (longer ones are cut to it,
 * shorter ones wait), and a cut chunk under CB_SPLIT_TILE waits unless the plan is empty (or the
 * chunk cap or the budget left after a full set of decode rows is smaller).
 * Returns the chunk, 0 to wait. */
#define CB_SPLIT_TILE 64 /* GGML_FA_TILE_Q of the pinned ggml */
static int32_t split_chunk(cb_sched *s, const cb_plan *plan, int32_t n, int32_t pending) {
    if (n == pending) return n;
    /* never more than a configuration allows: a chunk cap or a step with room for less */
    int32_t tile = CB_SPLIT_TILE, room = s->cfg.max_batched_tokens - s->cfg.max_num_seqs;
    if (tile > s->cfg.prefill_chunk) tile = s->cfg.prefill_chunk;
    if (tile > room) tile = room;
    if (n < tile && plan->n_items > 0) return 0;
    if (s->step_chunk == 0) s->step_chunk = n;
    if (n > s->step_chunk) return s->step_chunk;
    if (n < s->step_chunk) return 0;
    return n;
}

/* Tokens of r's pending prompt to put in this step, 0 for none. */
static int32_t chunk_for(cb_sched *s, const cb_plan *plan, const cb_request *r, int32_t budget_left) {
    int32_t pending = cb_request_pending(r);
    int32_t n = pending < budget_left ? pending : budget_left;
    if (s->cfg.prefill_chunk > 0 && n > s->cfg.prefill_chunk) n = s->cfg.prefill_chunk;
    make_room(s, n);
    int32_t room = cb_kv_room(s->kv, r->seq_id);
    if (n > room) n = room;
    if (s->cfg.prefill_chunk == 0 && n < pending) return 0; /* no chunking: all or nothing */
    if (n > 0 && s->kv->split && s->cfg.prefill_chunk > 0) n = split_chunk(s, plan, n, pending);
    return n > 0 ? n : 0;
}

static void schedule_decodes(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    for (;;) { /* evict cache, then preempt, until every decode row has its cell */
        int32_t need = 0;
        for (int32_t i = 0; i < s->n_running; i++)
            need += cb_request_pending(s->running[i]) == 1;
        make_room(s, need);
        if (need <= cb_kv_free_cells(s->kv) || s->n_running == 0) break;
        preempt(s, pick_victim(s), plan);
    }
    for (int32_t i = 0; i < s->n_running && (*budget_left) > 0; i++) {
        cb_request *r = s->running[i];
        if (cb_request_pending(r) != 1 || cb_kv_room(s->kv, r->seq_id) < 1) continue;
        plan_add(s, plan, r, 1);
        (*budget_left)--;
    }
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

/* Where r's prefix can come from now: a node of the prefix tree, or a stream (split layout). */
typedef struct {
    int32_t len;    /* tokens shared: all but r's last at most (that one is computed again for its logits) */
    cb_pnode *node; /* unified: the node the match ends in */
    int32_t src;    /* split: the stream holding them, running or parked */
} cache_hit;

/* Split layout: running requests' computed tokens count too (a copy takes them as they are). */
static cache_hit cache_match(const cb_sched *s, const cb_request *r) {
    cache_hit h = {.len = 0, .node = NULL, .src = -1};
    int32_t n = cb_request_n_tokens(r) - 1;
    if (s->px) h.len = cb_prefix_match(s->px, r->tokens, n, &h.node);
    if (!s->sc) return h;
    cb_stream_match m = {.src = -1, .len = 0};
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *q = s->running[i];
        int32_t l = cb_common_prefix(r->tokens, n, q->tokens, q->n_computed);
        if (l > m.len) m = (cb_stream_match){.src = q->seq_id, .len = l};
    }
    cb_streams_match(s->sc, r->tokens, n, &m);
    if (m.len >= s->sc->min_share) { /* shorter ones are not copied (cb_streams_admit) */
        h.len = m.len;
        h.src = m.src;
    }
    return h;
}

/* Continuous mode: r shares more tokens than it finds cached with a prompt a running request is
 * still computing (and will publish chunk by chunk). Admitting r now would compute them twice; it
 * waits for those cells instead (seed 004 §4.3.1: the prefix before the distinct parts), a step
 * or a few. O(running x prompt), only for requests at the head of the queue. */
static bool prefix_in_flight(const cb_sched *s, const cb_request *r, int32_t cached) {
    if ((!s->px && !s->sc) || s->cfg.mode != CB_MODE_CONTINUOUS) return false;
    int32_t n = cb_request_n_tokens(r);
    int32_t least = s->sc ? s->sc->min_share : 1; /* split: shorter matches are not copied anyway */
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *q = s->running[i];
        if (q->pref_dead || q->n_computed >= q->n_prompt) continue;
        int32_t lim = n < q->n_prompt ? n : q->n_prompt, l = 0;
        while (l < lim && r->tokens[l] == q->tokens[l])
            l++;
        if (l > cached && l >= least) return true;
    }
    return false;
}

/* Makes r running on sequence seq with its first `cached` tokens shared from the cache. */
static void start_request(cb_sched *s, cb_request *r, int32_t seq, cb_pnode *node, int32_t cached) {
    r->seq_id = seq;
    r->n_computed = cached;
    r->state = CB_RUNNING;
    s->running[s->n_running++] = r;
    s->stats.admitted++;
    if (s->sc) {
        s->sc->query_tokens += cb_request_n_tokens(r);
        s->sc->hit_tokens += cached;
        r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
    }
    if (s->px) {
        r->pref_node = node; /* locked by the caller */
        r->pref_len = cached;
        r->pref_dead = false;
        cb_prefix_share(s->px, node, cached, seq, s->cur);
        s->px->query_tokens += cb_request_n_tokens(r);
        s->px->hit_tokens += cached;
        r->n_cached = cached < r->n_prompt ? cached : r->n_prompt;
    }
    if (s->cfg.mode == CB_MODE_STATIC && !r->static_member) {
        r->static_member = true;
        s->group_size++;
        s->group_left++;
    }
}

/* A sequence id, and the cells r needs beyond what it shares (evicting cache for them); -1 when
 * r cannot start now. */
static int32_t admit_seq(cb_sched *s, const cb_request *r, cache_hit *hit, int32_t budget_left) {
    int32_t cached = hit->len;
    int32_t pending = cb_request_n_tokens(r) - cached;
    int32_t need = pending + (s->n_running > 0 ? s->cfg.kv_reserve : 0);
    if (need > s->kv->per_seq_cap) need = s->kv->per_seq_cap;
    if (s->cfg.prefill_chunk == 0 && pending > budget_left && !s->forming) return -1;
    if (s->sc) { /* split: a stream's cells are its own, any free id has room */
        cb_stream_match m = {.src = hit->src, .len = hit->len};
        return cb_streams_admit(s->sc, m, &hit->len, s->cur);
    }
    int32_t outstanding = outstanding_cells(s);
    make_room(s, need + outstanding);
    if (cb_kv_free_cells(s->kv) - outstanding < need) return -1;
    int32_t seq = s->kv->split ? cb_kv_seq_acquire_block(s->kv, s->kv->n_seq) : cb_kv_seq_acquire(s->kv);
    if (seq < 0 && s->px && cb_prefix_evict_for_id(s->px, s->cur)) seq = cb_kv_seq_acquire(s->kv);
    return seq;
}

static void schedule_admissions(cb_sched *s, cb_plan *plan, int32_t *budget_left) {
    s->forming = s->group_left == 0;
    if (s->forming) s->group_size = 0;
    /* A static group is formed whole, up to max_num_seqs, even past this step's budget: its
     * members wait for prompt budget in later steps, but nobody else joins until it is done. */
    int32_t w = 0;
    while (w < s->n_waiting && s->n_running < s->cfg.max_num_seqs && ((*budget_left) > 0 || s->forming)) {
        cb_request *r = s->waiting[w];
        if (!may_admit(s, r)) break;
        cache_hit hit = cache_match(s, r);
        if (prefix_in_flight(s, r, hit.len)) { /* it waits for cells in the making: others go by */
            if (++w >= 2 * s->cfg.max_num_seqs) break;
            continue;
        }
        if (hit.node) cb_prefix_lock(s->px, hit.node); /* making room must not evict the match */
        int32_t seq = admit_seq(s, r, &hit, *budget_left);
        if (seq < 0) { /* FCFS: the first that does not fit waits, nobody overtakes it */
            if (hit.node) cb_prefix_unlock(s->px, hit.node);
            break;
        }
        remove_at(s->waiting, &s->n_waiting, w);
        start_request(s, r, seq, hit.node, hit.len);
        int32_t n = chunk_for(s, plan, r, *budget_left);
        if (n > 0) {
            plan_add(s, plan, r, n);
            *budget_left -= n;
        }
    }
}

int32_t cb_sched_step(cb_sched *s, cb_plan *plan, int32_t budget) {
    plan->n_items = plan->n_tokens = plan->n_decode = plan->n_prefill_tokens = 0;
    plan->n_preempted = 0;
    /* the plan starts with the changes made since the last one; this step's follow them */
    cb_kv_ops done = plan->ops;
    plan->ops = s->pending;
    s->pending = done;
    s->pending.n = 0;
    s->cur = &plan->ops;
    for (int32_t i = 0; i < s->n_running; i++)
        s->running[i]->in_plan = 0;
    s->step_chunk = 0;
    compact_streams(s);

    /* idle cache beyond its cap goes first (in the unified layout every cell in play costs every
     * row of every step its mask scan) */
    if (s->px && s->cfg.cache_max_idle > 0) {
        int32_t over = cb_prefix_idle_cells(s->px) - s->cfg.cache_max_idle;
        if (over > 0) cb_prefix_evict(s->px, over, s->cur);
    }
    int32_t full = budget > 0 && budget < s->cfg.max_batched_tokens ? budget : s->cfg.max_batched_tokens;
    for (;;) {
        int32_t budget_left = full;
        schedule_decodes(s, plan, &budget_left);
        schedule_prefills(s, plan, &budget_left);
        schedule_admissions(s, plan, &budget_left);
        /* Running requests that cannot move (prompts stuck on a full cache, which admission
         * control should prevent) would stall the engine: free the youngest and plan again. */
        if (plan->n_items > 0 || s->n_running == 0) break;
        if (plan->n_preempted >= s->cfg.max_num_seqs) break; /* no livelock: try again next step */
        preempt(s, pick_victim(s), plan);
    }
    s->cur = &s->pending;
    return plan->n_items;
}

void cb_sched_commit(cb_sched *s, cb_plan *plan, int64_t now_us) {
    for (int32_t i = 0; i < plan->n_items; i++) {
        cb_request *r = plan->items[i].req;
        r->n_computed += plan->items[i].n_tokens;
        r->in_plan = 0;
        if (!r->t_scheduled_us) r->t_scheduled_us = now_us;
        /* prompt cells go to the cache as they are made, so a request sharing them can start */
        publish(s, r, r->n_computed < r->n_prompt ? r->n_computed : r->n_prompt);
    }
    if (plan->n_items > 0) {
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

int32_t cb_sched_finish(cb_sched *s, cb_request *r, cb_state final_state) {
    int32_t i = index_of(s->running, s->n_running, r);
    if (i >= 0) {
        remove_at(s->running, &s->n_running, i);
    } else if ((i = index_of(s->waiting, s->n_waiting, r)) >= 0) {
        remove_at(s->waiting, &s->n_waiting, i);
    }
    int32_t seq = r->seq_id;
    release_seq(s, r);
    if (r->static_member && s->group_left > 0) s->group_left--;
    r->static_member = false;
    r->state = final_state;
    s->stats.finished++;
    return seq;
}

/* ---------------------------------------------------------------- batch row order ----------- */

static int32_t piece_seq(const cb_plan *p, const cb_row_piece *x) { return p->items[x->item].req->seq_id; }

static void sort_by_seq(const cb_plan *p, cb_row_piece *v, int32_t n) {
    for (int32_t i = 1; i < n; i++) { /* insertion sort: tens of pieces */
        cb_row_piece x = v[i];
        int32_t k = i;
        while (k > 0 && piece_seq(p, &v[k - 1]) > piece_seq(p, &x)) {
            v[k] = v[k - 1];
            k--;
        }
        v[k] = x;
    }
}

static void reverse(cb_row_piece *v, int32_t a, int32_t b) { /* v[a .. b] inclusive */
    for (; a < b; a++, b--) {
        cb_row_piece t = v[a];
        v[a] = v[b];
        v[b] = t;
    }
}

/* Blocks of consecutive ids with equal row counts, highest block first, each ascending: then
 * split_equal never takes the next id of another block into a block's graph run (it would give
 * it the shorter one's row count). */
static void order_blocks(const cb_plan *p, cb_row_piece *v, int32_t n) {
    sort_by_seq(p, v, n);
    reverse(v, 0, n - 1);
    for (int32_t i = 0; i < n;) { /* each block is now backwards: turn it around */
        int32_t j = i + 1;
        while (j < n && piece_seq(p, &v[j]) == piece_seq(p, &v[j - 1]) - 1 && v[j].n == v[i].n)
            j++;
        reverse(v, i, j - 1);
        i = j;
    }
}

int32_t cb_plan_row_order(const cb_plan *p, cb_row_piece *out) {
    int32_t n = p->n_items, n_out = 0;
    cb_row_piece *rest = out + n; /* the second half of out, until the end */
    for (int32_t i = 0; i < n; i++)
        rest[i] = (cb_row_piece){.item = i, .k0 = 0, .n = p->items[i].n_tokens};
    sort_by_seq(p, rest, n);
    /* A segment (maximal run of consecutive ids) with a one-row item (a decode row) and longer
     * ones: one graph run takes the first row of every item (split_equal stops at one row a
     * stream there), the rest of each longer item follows in blocks. Else a prompt chunk in the
     * middle of the decode rows would make three graph runs of them. Highest segment first. */
    for (int32_t hi = n; hi > 0;) {
        int32_t lo = hi - 1;
        while (lo > 0 && piece_seq(p, &rest[lo - 1]) == piece_seq(p, &rest[lo]) - 1)
            lo--;
        bool has_one = false, has_long = false, has_tile = false;
        for (int32_t k = lo; k < hi; k++) {
            has_one |= rest[k].n == 1;
            has_long |= rest[k].n > 1;
            has_tile |= rest[k].n == CB_SPLIT_TILE; /* its rest would leave the tiled kernel */
        }
        for (int32_t k = lo; k < hi && has_one && has_long && !has_tile; k++) {
            out[n_out++] = (cb_row_piece){.item = rest[k].item, .k0 = 0, .n = 1};
            rest[k].k0 = 1;
            rest[k].n--;
        }
        hi = lo;
    }
    int32_t n_rest = 0;
    for (int32_t k = 0; k < n; k++)
        if (rest[k].n > 0) rest[n_rest++] = rest[k];
    order_blocks(p, rest, n_rest);
    memmove(out + n_out, rest, sizeof(*out) * (size_t)n_rest);
    return n_out + n_rest;
}

int32_t cb_plan_graph_runs(const cb_plan *p, const cb_row_piece *v, int32_t n) {
    int32_t runs = 0;
    for (int32_t j = 0; j < n; j++)
        if (j == 0 || piece_seq(p, &v[j]) != piece_seq(p, &v[j - 1]) + 1 || v[j].n != v[j - 1].n) runs++;
    return runs;
}

cb_kv_ops *cb_sched_pending_ops(cb_sched *s) { return &s->pending; }
int32_t cb_sched_n_running(const cb_sched *s) { return s->n_running; }
int32_t cb_sched_n_waiting(const cb_sched *s) { return s->n_waiting; }
cb_request *cb_sched_running_at(const cb_sched *s, int32_t i) { return i < s->n_running ? s->running[i] : NULL; }
cb_request *cb_sched_waiting_at(const cb_sched *s, int32_t i) { return i < s->n_waiting ? s->waiting[i] : NULL; }
const cb_sched_stats *cb_sched_get_stats(const cb_sched *s) { return &s->stats; }
const cb_sched_config *cb_sched_get_config(const cb_sched *s) { return &s->cfg; }
