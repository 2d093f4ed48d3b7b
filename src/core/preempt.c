#include "preempt.h"

/* Lowest (aged) priority first, then youngest: the request that loses least fairness by waiting. */
static int32_t pick_victim(const cb_sched *s) {
    int32_t v = -1;
    for (int32_t i = 0; i < s->n_running; i++) {
        const cb_request *r = s->running[i], *w = v >= 0 ? s->running[v] : NULL;
        int64_t kr = s->cfg.priority_aging_us > 0 ? cb_sched_aged_key(s, r) : r->priority;
        int64_t kw = w && s->cfg.priority_aging_us > 0 ? cb_sched_aged_key(s, w) : w ? w->priority : 0;
        if (!w || kr < kw || (kr == kw && r->arrival > w->arrival)) v = i;
    }
    return v;
}

void cb_preempt_drop_swap(cb_sched *s, cb_request *r) {
    if (r->swap.state == CB_SWAP_NONE) return;
    if (r->swap.state == CB_SWAP_SAVING || r->swap.state == CB_SWAP_RESTORING)
        for (int32_t i = s->cur->n - 1; i >= 0; i--)
            if (s->cur->v[i].ref == r) s->cur->v[i].src = CB_KV_OP_NONE;
    cb_cache_unpin(s->cache, r);
    cb_swap_end(s->cfg.swap, r, false);
}

/* r was restored and preempted in one step: the restore is taken back, the release keeps only the
 * shared part, and it recomputes. */
static void take_back_restore(cb_sched *s, cb_request *r) {
    r->n_computed = r->swap.from;
    cb_preempt_drop_swap(s, r);
    s->cfg.swap->recomputed++;
}

/* Before r leaves its sequence: its cells are saved to host memory (a SAVE op ahead of the
 * release's) when swapping costs less than recomputing and the swap space has room. */
static void swap_out(cb_sched *s, cb_request *r) {
    if (!s->cfg.swap || r->seq_id < 0) return;
    if (r->swap.state == CB_SWAP_RESTORING) {
        take_back_restore(s, r);
        return;
    }
    /* What it computed goes to the cache now, while its sequence still holds all of it: the save
     * drops the shared part from the sequence, and a new holder copies the whole path from it. */
    cb_cache_publish(s->cache, r, r->n_computed, s->cur);
    int32_t from = cb_cache_pin(s->cache, r);
    if (from < 0) {
        s->cfg.swap->recomputed++;
        return;
    }
    if (!cb_swap_choose(s->cfg.swap, r, r->n_computed - from)) {
        cb_cache_unpin(s->cache, r);
        return;
    }
    r->swap.from = from;
    r->swap.to = r->n_computed;
    cb_kv_ops_push_ref(s->cur, r->seq_id, CB_KV_OP_SAVE, from, r->n_computed, r);
    s->stats.swaps++;
}

void cb_preempt_one(cb_sched *s, cb_plan *plan, bool may_swap) {
    int32_t i = pick_victim(s);
    cb_request *r = s->running[i];
    cb_sched_remove_at(s->running, &s->n_running, i);
    if (may_swap) {
        swap_out(s, r);
    } else if (s->cfg.swap && r->swap.state == CB_SWAP_RESTORING) {
        take_back_restore(s, r);
    } else if (s->cfg.swap) {
        s->cfg.swap->recomputed++;
    }
    cb_sched_release_seq(s, r);
    r->n_computed = 0;
    r->n_preemptions++;
    r->state = CB_PREEMPTED;
    s->stats.preemptions++;
    plan->preempted[plan->n_preempted++] = r;
    if (!cb_sched_requeue(s, r)) { /* cannot grow the queue: the request ends, and says so */
        cb_sched_finish(s, r, CB_FINISHED_ERROR);
        plan->failed[plan->n_failed++] = r;
    }
}

bool cb_preempt_unpin_waiting(cb_sched *s) {
    bool any = false;
    for (int32_t i = 0; i < s->n_waiting; i++) {
        cb_request *r = s->waiting[i];
        if (r->swap.state != CB_SWAP_SAVED || !r->swap.pin) continue;
        r->swap.state = CB_SWAP_FAILED;
        cb_preempt_drop_swap(s, r);
        any = true;
    }
    return any;
}

/* (scheduler.h) */
void cb_sched_restore_failed(cb_sched *s, cb_request *r) {
    if (r->cache.load_failed && r->seq_id >= 0) { /* a host-tier load: its stream holds nothing */
        r->cache.load_failed = false;
        cb_cache_load_failed(s->cache, r->seq_id, r->n_computed);
        cb_kv_grow(s->kv, r->seq_id, -r->n_computed);
        r->n_computed = 0;
        if (r->n_preemptions == 0) r->n_cached = 0; /* its first admission: nothing came from the cache */
        return;
    }
    if (r->swap.state != CB_SWAP_FAILED || r->seq_id < 0) return;
    cb_kv_grow(s->kv, r->seq_id, -(r->n_computed - r->swap.from));
    r->n_computed = r->swap.from;
    cb_swap_end(s->cfg.swap, r, false);
}
