#include "cache.h"

#include "prefix.h"
#include "streams.h"

#include <stdlib.h>

/* One table per implementation; the public functions below dispatch through it. A function left
 * NULL does nothing (or finds nothing). */
typedef struct {
    cb_cache_hit (*match)(const cb_cache *c, const cb_request *r, cb_request *const *running, int32_t n_running);
    int32_t (*admit)(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding, cb_kv_ops *ops);
    void (*release)(cb_cache *c, cb_request *r, cb_kv_ops *ops);
    void (*publish)(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops);
    bool (*in_flight)(const cb_cache *c, const cb_request *r);
    void (*make_room)(cb_cache *c, int32_t n, cb_kv_ops *ops);
    void (*trim)(cb_cache *c, cb_kv_ops *ops);
    void (*move)(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops); /* split layout only */
    int32_t (*pin)(cb_cache *c, cb_request *r);
    void (*unpin)(cb_cache *c, cb_request *r);
    int32_t (*admit_swapped)(cb_cache *c, cb_request *r, int32_t need, int32_t outstanding, cb_kv_ops *ops);
    int32_t (*drop)(cb_cache *c, cb_kv_ops *ops);
    int32_t (*save_all)(cb_cache *c, cb_kv_ops *ops);
    int32_t (*parked_len)(const cb_cache *c, int32_t seq);
    void (*stats)(const cb_cache *c, cb_cache_stats *out);
    void (*settled)(cb_cache *c);
    bool (*check)(const cb_cache *c);
} cache_impl;

struct cb_cache {
    const cache_impl *impl;
    cb_kv *kv;
    int32_t min_share; /* 0: shares nothing */
    int32_t max_idle;  /* radix: idle cells kept beyond which the least recently used go; 0 = no cap */
    int64_t query_tokens, hit_tokens;
    cb_prefix px;  /* radix */
    cb_streams sc; /* streams */
    int32_t n_run; /* stream ids requests may run on ([0, n_run)); kv->n_seq but for streams */
    bool px_on, sc_on;
    cb_host_cache *host; /* host tier only: the tier (not owned; NULL: none) and its entries' kind */
    int32_t host_kind;
};

/* ---------------------------------------------------------------- no sharing ----------------- */

/* A free id with room for need more cells; in the split layout the one that keeps running ids in
 * one block (cb_kv_seq_acquire_block). */
static int32_t plain_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                           cb_kv_ops *ops) {
    (void)r, (void)ops;
    hit->len = 0;
    if (cb_kv_free_cells(c->kv) - outstanding < need) return -1;
    return c->kv->split ? cb_kv_seq_acquire_block(c->kv, c->kv->n_seq) : cb_kv_seq_acquire(c->kv);
}

static void plain_release(cb_cache *c, cb_request *r, cb_kv_ops *ops) {
    cb_kv_ops_push(ops, r->seq_id, -1, 0, -1);
    cb_kv_seq_release(c->kv, r->seq_id);
}

static void plain_move(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops) {
    int32_t from = r->seq_id;
    cb_kv_ops_push(ops, to, from, 0, -1);
    cb_kv_ops_push(ops, from, -1, 0, -1);
    cb_kv_seq_take(c->kv, to);
    cb_kv_grow(c->kv, to, c->kv->used[from]);
    cb_kv_seq_release(c->kv, from);
}

static bool plain_check(const cb_cache *c) { return cb_kv_check(c->kv); }

static int32_t plain_pin(cb_cache *c, cb_request *r) {
    (void)r;
    return c->kv->split ? -1 : 0;
}

static int32_t plain_admit_swapped(cb_cache *c, cb_request *r, int32_t need, int32_t outstanding, cb_kv_ops *ops) {
    cb_cache_hit hit = {.len = 0, .node = NULL, .src = -1};
    int32_t seq = plain_admit(c, r, &hit, need, outstanding, ops);
    if (seq >= 0) cb_kv_ops_push_ref(ops, seq, CB_KV_OP_RESTORE, 0, r->swap.to, r);
    return seq;
}

static const cache_impl none_impl = {
    .admit = plain_admit,
    .release = plain_release,
    .move = plain_move,
    .pin = plain_pin,
    .admit_swapped = plain_admit_swapped,
    .check = plain_check,
};

/* ---------------------------------------------------------------- radix tree (unified) ------- */

static cb_cache_hit radix_match(const cb_cache *c, const cb_request *r, cb_request *const *running, int32_t n_running) {
    (void)running, (void)n_running;
    cb_cache_hit h = {.len = 0, .node = NULL, .src = -1};
    cb_pnode *node = NULL;
    h.len = cb_prefix_match(&c->px, r->tokens, cb_request_n_tokens(r) - 1, &node);
    h.node = node;
    return h;
}

/* Hands r's computed tokens [cache.len, to) to the tree. A request that finds its tokens already
 * published by another (it computed duplicates) stops publishing. */
static void radix_publish(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops) {
    cb_pnode *node = r->cache.node;
    if (!node || r->cache.dead || r->seq_id < 0 || to <= r->cache.len) return;
    if (cb_prefix_insert(&c->px, &node, r->tokens, r->cache.len, to, r->seq_id, ops)) {
        r->cache.node = node;
        r->cache.len = to;
    } else {
        r->cache.dead = true;
    }
}

static void radix_make_room(cb_cache *c, int32_t n, cb_kv_ops *ops) {
    int32_t short_by = n - cb_kv_free_cells(c->kv);
    if (short_by > 0) cb_prefix_evict(&c->px, short_by, ops);
}

/* restore: r comes back from swap (cb_cache_admit_swapped): its saved cells go in before the prefix
 * is shared (a restore empties the sequence first). */
static int32_t radix_admit_as(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                              cb_kv_ops *ops, bool restore) {
    cb_pnode *node = hit->node;
    /* the match only is locked: the node's cells past it may be the room r needs */
    if (node && !restore) cb_prefix_cut(&c->px, &node, hit->len);
    hit->node = node;
    if (node) cb_prefix_lock(&c->px, node); /* making room must not evict the match */
    radix_make_room(c, need + outstanding, ops);
    int32_t seq = -1;
    if (cb_kv_free_cells(c->kv) - outstanding >= need) {
        seq = cb_kv_seq_acquire(c->kv);
        if (seq < 0 && cb_prefix_evict_for_id(&c->px, ops)) seq = cb_kv_seq_acquire(c->kv);
    }
    if (seq < 0) {
        if (node) cb_prefix_unlock(&c->px, node);
        return -1;
    }
    r->cache.node = node;
    r->cache.len = hit->len;
    r->cache.dead = false;
    if (restore) cb_kv_ops_push_ref(ops, seq, CB_KV_OP_RESTORE, r->swap.from, r->swap.to, r);
    cb_prefix_share(&c->px, node, hit->len, seq, ops);
    return seq;
}

static int32_t radix_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                           cb_kv_ops *ops) {
    return radix_admit_as(c, r, hit, need, outstanding, ops, false);
}

/* The deepest node of r's path that another request uses too (refs counts r once): its cells stay
 * while r is swapped out, under a lock r keeps. */
static int32_t radix_pin(cb_cache *c, cb_request *r) {
    cb_pnode *x = r->cache.node;
    while (x && x != &c->px.root && x->refs < 2)
        x = x->parent;
    if (!x || x == &c->px.root) return 0;
    cb_prefix_lock(&c->px, x);
    r->swap.pin = x;
    int32_t end = x->start + x->len;
    return end < r->cache.len ? end : r->cache.len;
}

static void radix_unpin(cb_cache *c, cb_request *r) {
    if (r->swap.pin) cb_prefix_unlock(&c->px, r->swap.pin);
    r->swap.pin = NULL;
}

static int32_t radix_admit_swapped(cb_cache *c, cb_request *r, int32_t need, int32_t outstanding, cb_kv_ops *ops) {
    cb_cache_hit hit = {.len = r->swap.from, .node = r->swap.pin ? r->swap.pin : &c->px.root, .src = -1};
    int32_t seq = radix_admit_as(c, r, &hit, need, outstanding, ops, true);
    if (seq >= 0) radix_unpin(c, r); /* the admission holds its own lock on the path now */
    return seq;
}

/* What it computed stays as cache (a preempted request finds it when it comes back). */
static void radix_release(cb_cache *c, cb_request *r, cb_kv_ops *ops) {
    radix_publish(c, r, r->n_computed, ops);
    if (r->cache.node) cb_prefix_unlock(&c->px, r->cache.node);
    r->cache.node = NULL;
    r->cache.len = 0;
    r->cache.dead = false;
    plain_release(c, r, ops);
}

static bool radix_in_flight(const cb_cache *c, const cb_request *r) {
    (void)c;
    return !r->cache.dead;
}

/* In the unified layout every cell in play costs every row of every step its mask scan. */
static void radix_trim(cb_cache *c, cb_kv_ops *ops) {
    if (c->max_idle <= 0) return;
    int32_t over = cb_prefix_idle_cells(&c->px) - c->max_idle;
    if (over > 0) cb_prefix_evict(&c->px, over, ops);
}

static int32_t radix_drop(cb_cache *c, cb_kv_ops *ops) { return cb_prefix_evict(&c->px, INT32_MAX, ops); }

static void radix_stats(const cb_cache *c, cb_cache_stats *out) {
    out->cells = cb_prefix_cells(&c->px);
    out->idle = cb_prefix_idle_cells(&c->px);
    out->evicted_cells = c->px.evicted_cells;
}

static bool radix_check(const cb_cache *c) { return cb_kv_check(c->kv) && cb_prefix_check(&c->px); }

static const cache_impl radix_impl = {
    .match = radix_match,
    .admit = radix_admit,
    .release = radix_release,
    .publish = radix_publish,
    .in_flight = radix_in_flight,
    .make_room = radix_make_room,
    .trim = radix_trim,
    .pin = radix_pin,
    .unpin = radix_unpin,
    .admit_swapped = radix_admit_swapped,
    .drop = radix_drop,
    .stats = radix_stats,
    .check = radix_check,
};

/* ---------------------------------------------------------------- streams (split) ------------ */

/* Running requests' computed tokens count too: a copy takes them as they are (but not those of one
 * whose load from the host tier this step queued: the load may fail). */
static cb_cache_hit streams_match(const cb_cache *c, const cb_request *r, cb_request *const *running,
                                  int32_t n_running) {
    cb_cache_hit h = {.len = 0, .node = NULL, .src = -1};
    int32_t n = cb_request_n_tokens(r) - 1;
    cb_stream_match m = {.src = -1, .len = 0};
    for (int32_t i = 0; i < n_running; i++) {
        const cb_request *q = running[i];
        if (q->cache.host) continue;
        int32_t l = cb_common_prefix(r->tokens, n, q->tokens, q->n_computed);
        int32_t floor = c->sc.floor[q->seq_id];
        if (l > m.len && l >= floor) m = (cb_stream_match){.src = q->seq_id, .len = l, .floor = floor};
    }
    cb_streams_match(&c->sc, r->tokens, n, &m);
    if (m.len >= c->sc.min_share) { /* shorter ones are not copied (cb_streams_admit) */
        h.len = m.len;
        h.src = m.src;
        h.host = m.host;
        h.src_len = m.src_len;
        h.floor = m.floor;
    }
    return h;
}

/* A stream's cells are its own: any free id of the running range has room. */
static int32_t streams_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                             cb_kv_ops *ops) {
    (void)need, (void)outstanding;
    cb_stream_match m = {
        .src = hit->src, .len = hit->len, .agree = hit->match, .host = hit->host, .src_len = hit->src_len};
    bool loaded;
    cb_host_entry *e = m.host; /* locked first: stashing the target's tokens must not evict it */
    if (e) cb_host_lock(e->owner, e);
    int32_t seq = cb_streams_admit(&c->sc, m, &hit->len, &loaded, ops);
    if (seq < 0 || !loaded) {
        if (e) cb_host_unlock(e->owner, e);
        return seq;
    }
    /* the whole saved stream comes back, then the tail past the hit goes */
    r->cache.host = e;
    r->cache.load_failed = false;
    cb_kv_ops_push_ref(ops, seq, CB_KV_OP_LOAD, 0, hit->len, r);
    return seq;
}

/* Its stream stays, as cache; but a stream whose load is still queued (r leaves in the step that
 * admitted it) is left empty, the load taken back. */
static void streams_release(cb_cache *c, cb_request *r, cb_kv_ops *ops) {
    cb_host_entry *e = r->cache.host;
    if (!e) {
        cb_streams_park(&c->sc, r->seq_id, r->tokens);
        if (c->sc.host && c->sc.host->disk_cap > 0) cb_streams_save(&c->sc, r->seq_id, ops); /* on disk now */
        return;
    }
    for (int32_t i = ops->n - 1; i >= 0; i--)
        if (ops->v[i].src == CB_KV_OP_LOAD && ops->v[i].ref == r) ops->v[i].src = CB_KV_OP_NONE;
    cb_host_unlock(e->owner, e);
    r->cache.host = NULL;
    c->hit_tokens -= c->kv->used[r->seq_id]; /* (counted at its admission) */
    cb_kv_ops_push(ops, r->seq_id, CB_KV_OP_RM, 0, -1);
    cb_kv_seq_release(c->kv, r->seq_id);
}

static bool streams_in_flight(const cb_cache *c, const cb_request *r) {
    (void)c, (void)r;
    return true;
}

static void streams_move(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops) {
    cb_streams_move(&c->sc, r->seq_id, to, r->tokens, ops);
}

static int32_t streams_drop(cb_cache *c, cb_kv_ops *ops) {
    if (c->sc.host) cb_host_drop(c->sc.host);
    return cb_streams_drop(&c->sc, ops);
}

static void streams_settled(cb_cache *c) { cb_streams_settled(&c->sc); }

static int32_t streams_save_all(cb_cache *c, cb_kv_ops *ops) { return cb_streams_save_all(&c->sc, ops); }

static int32_t streams_parked_len(const cb_cache *c, int32_t seq) { return c->sc.len[seq]; }

static void streams_stats(const cb_cache *c, cb_cache_stats *out) {
    out->cells = c->kv->shared;
    out->idle = c->kv->shared; /* parked streams: nobody runs on them */
    out->evicted_cells = c->sc.evicted_cells;
    out->copies = c->sc.copies;
}

static bool streams_check(const cb_cache *c) {
    return cb_kv_check(c->kv) && cb_streams_check(&c->sc) && (!c->sc.host || cb_host_check(c->sc.host));
}

static const cache_impl streams_impl = {
    .match = streams_match,
    .admit = streams_admit,
    .release = streams_release,
    .in_flight = streams_in_flight,
    .move = streams_move,
    .drop = streams_drop,
    .save_all = streams_save_all,
    .parked_len = streams_parked_len,
    .stats = streams_stats,
    .settled = streams_settled,
    .check = streams_check,
};

/* ---------------------------------------------------------------- host tier only (unified) --- */

/* A pool whose cells nobody shares (the long lane: an idle cell in a unified pool costs every row
 * its mask scan): a request that leaves stashes what it computed in the host tier, and one that
 * continues it loads it back (an agent's next turn), both as ops in order. */
static cb_cache_hit host_match(const cb_cache *c, const cb_request *r, cb_request *const *running, int32_t n_running) {
    (void)running, (void)n_running;
    cb_cache_hit h = {.len = 0, .node = NULL, .src = -1};
    if (!c->host || c->host->cap == 0) return h;
    int32_t len = 0;
    cb_host_entry *e = cb_host_match(c->host, c->host_kind, r->tokens, cb_request_n_tokens(r) - 1, &len);
    if (e && len >= c->min_share && cb_host_worth(c->host, e, len)) {
        h.len = len;
        h.host = e;
    }
    return h;
}

static int32_t host_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                          cb_kv_ops *ops) {
    if (cb_kv_free_cells(c->kv) - outstanding < need + hit->len) return -1;
    int32_t seq = cb_kv_seq_acquire(c->kv);
    if (seq < 0) return -1;
    cb_host_entry *e = hit->host;
    if (!e || hit->len == 0 || hit->len < cb_host_floor(e->owner, e)) {
        hit->len = 0;
        return seq;
    }
    cb_host_lock(e->owner, e); /* the load's lock (the runner drops it) */
    r->cache.host = e;
    r->cache.load_failed = false;
    cb_kv_grow(c->kv, seq, hit->len);
    cb_kv_ops_push_ref(ops, seq, CB_KV_OP_LOAD, 0, hit->len, r);
    return seq;
}

/* What r computed goes to the host tier (not when a swap saves it: that copy is its own), its
 * cells go; a load still queued (r leaves in the step that admitted it) is taken back. */
static void host_release(cb_cache *c, cb_request *r, cb_kv_ops *ops) {
    cb_host_entry *e = r->cache.host;
    if (e) {
        for (int32_t i = ops->n - 1; i >= 0; i--)
            if (ops->v[i].src == CB_KV_OP_LOAD && ops->v[i].ref == r) ops->v[i].src = CB_KV_OP_NONE;
        cb_host_unlock(e->owner, e);
        r->cache.host = NULL;
        c->hit_tokens -= c->kv->used[r->seq_id]; /* (counted at its admission) */
    } else if (c->host && c->host->cap > 0 && r->swap.state != CB_SWAP_SAVING && r->n_computed > 0) {
        cb_host_entry *x = cb_host_stash(c->host, c->host_kind, r->tokens, r->n_computed);
        if (x) cb_kv_ops_push_ref(ops, r->seq_id, CB_KV_OP_STASH, 0, r->n_computed, x);
    }
    plain_release(c, r, ops);
}

static int32_t host_drop(cb_cache *c, cb_kv_ops *ops) {
    (void)ops;
    if (c->host) cb_host_drop(c->host);
    return 0; /* no cells of the pool */
}

static bool host_check(const cb_cache *c) { return cb_kv_check(c->kv) && (!c->host || cb_host_check(c->host)); }

static const cache_impl host_impl = {
    .match = host_match,
    .admit = host_admit,
    .release = host_release,
    .pin = plain_pin,
    .admit_swapped = plain_admit_swapped, /* a restore takes a free id, as in no sharing */
    .drop = host_drop,
    .check = host_check,
};

/* ---------------------------------------------------------------- lifecycle ------------------ */

static cb_cache *cache_new(cb_kv *kv, const cache_impl *impl) {
    if (!kv) return NULL;
    cb_cache *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->impl = impl;
    c->kv = kv;
    c->n_run = kv->n_seq;
    return c;
}

cb_cache *cb_cache_new_none(cb_kv *kv) { return cache_new(kv, &none_impl); }

cb_cache *cb_cache_new_radix(cb_kv *kv, int32_t max_holders, int32_t max_idle) {
    if (!kv || kv->split || max_holders < 1 || max_idle < 0) return NULL;
    cb_cache *c = cache_new(kv, &radix_impl);
    if (!c) return NULL;
    if (cb_prefix_init(&c->px, kv, max_holders) != 0) {
        free(c);
        return NULL;
    }
    c->px_on = true;
    c->min_share = 1;
    c->max_idle = max_idle;
    return c;
}

cb_cache *cb_cache_new_streams(cb_kv *kv, int32_t n_run, int32_t min_share, cb_host_cache *host) {
    cb_cache *c = cache_new(kv, &streams_impl);
    if (!c) return NULL;
    if (cb_streams_init(&c->sc, kv, n_run, min_share, host) != 0) {
        free(c);
        return NULL;
    }
    c->sc_on = true;
    c->min_share = min_share;
    c->n_run = n_run;
    return c;
}

cb_cache *cb_cache_new_host(cb_kv *kv, cb_host_cache *host, int32_t kind, int32_t min_share) {
    if (!kv || kv->split || min_share < 1) return NULL;
    cb_cache *c = cache_new(kv, &host_impl);
    if (!c) return NULL;
    c->host = host;
    c->host_kind = kind;
    c->min_share = host && host->cap > 0 ? min_share : 0;
    return c;
}

void cb_cache_free(cb_cache *c) {
    if (!c) return;
    if (c->px_on) cb_prefix_free(&c->px);
    if (c->sc_on) cb_streams_free(&c->sc);
    free(c);
}

/* ---------------------------------------------------------------- the interface -------------- */

cb_cache_hit cb_cache_match(const cb_cache *c, const cb_request *r, cb_request *const *running, int32_t n_running) {
    cb_cache_hit none = {.len = 0, .node = NULL, .src = -1, .host = NULL};
    if (!c->impl->match) return none;
    cb_cache_hit hit = c->impl->match(c, r, running, n_running);
    hit.match = hit.len;
    return r->all_logits_to > 0 && hit.len > r->all_logits_from ? none : hit; /* cached rows have no logits */
}

cb_cache_hit cb_cache_miss(const cb_cache *c) {
    return (cb_cache_hit){.len = 0, .node = c->px_on ? (void *)&c->px.root : NULL, .src = -1, .host = NULL};
}

int32_t cb_cache_admit(cb_cache *c, cb_request *r, cb_cache_hit *hit, int32_t need, int32_t outstanding,
                       cb_kv_ops *ops) {
    int32_t seq = c->impl->admit(c, r, hit, need, outstanding, ops);
    if (seq >= 0 && c->min_share > 0) {
        c->query_tokens += cb_request_n_tokens(r);
        c->hit_tokens += hit->len;
    }
    return seq;
}

void cb_cache_release(cb_cache *c, cb_request *r, cb_kv_ops *ops) { c->impl->release(c, r, ops); }

int32_t cb_cache_pin(cb_cache *c, cb_request *r) { return c->impl->pin ? c->impl->pin(c, r) : -1; }

void cb_cache_unpin(cb_cache *c, cb_request *r) {
    if (c->impl->unpin) c->impl->unpin(c, r);
}

int32_t cb_cache_admit_swapped(cb_cache *c, cb_request *r, int32_t need, int32_t outstanding, cb_kv_ops *ops) {
    int32_t seq = c->impl->admit_swapped(c, r, need, outstanding, ops);
    if (seq < 0) return -1;
    cb_kv_grow(c->kv, seq, r->swap.to - r->swap.from);
    if (c->min_share > 0) {
        c->query_tokens += cb_request_n_tokens(r);
        c->hit_tokens += r->swap.from;
    }
    return seq;
}

void cb_cache_publish(cb_cache *c, cb_request *r, int32_t to, cb_kv_ops *ops) {
    if (c->impl->publish) c->impl->publish(c, r, to, ops);
}

bool cb_cache_in_flight(const cb_cache *c, const cb_request *r) {
    return c->impl->in_flight && c->impl->in_flight(c, r);
}

int32_t cb_cache_min_share(const cb_cache *c) { return c->min_share; }

void cb_cache_make_room(cb_cache *c, int32_t n, cb_kv_ops *ops) {
    if (c->impl->make_room) c->impl->make_room(c, n, ops);
}

/* Split layout: llama.cpp runs every block of consecutive streams in a batch as a graph run of
 * its own (a pass over the weights: a 5-row decode step over 5 scattered streams costs five
 * 1-row steps), so the running requests are kept in one block: those outside the window of
 * n_running ids that already holds most of them (and the fewest parked streams) move into its
 * holes, a whole-stream copy each (a few ms, against a graph run every step they would stay
 * apart). */
static int32_t compact(cb_cache *c, cb_request *const *running, int32_t k, cb_kv_ops *ops) {
    cb_kv *kv = c->kv;
    int32_t n_run = c->n_run, best_w = 0, best = -1;
    for (int32_t w = 0; w + k <= n_run; w++) {
        int32_t score = 0; /* running ids in the window first, then fewer parked holes */
        for (int32_t id = w; id < w + k; id++)
            score += kv->taken[id] ? 2 * n_run : (cb_cache_parked_len(c, id) > 0 ? -1 : 0);
        if (score > best) {
            best = score;
            best_w = w;
        }
    }
    int32_t hole = best_w, moved = 0;
    for (int32_t i = 0; i < k; i++) {
        cb_request *r = running[i];
        if (r->seq_id >= best_w && r->seq_id < best_w + k) continue;
        while (kv->taken[hole])
            hole++;
        c->impl->move(c, r, hole, ops);
        r->seq_id = hole;
        moved++;
    }
    return moved;
}

int32_t cb_cache_arrange(cb_cache *c, cb_request *const *running, int32_t n_running, bool may_move, cb_kv_ops *ops) {
    int32_t moved = 0;
    if (c->kv->split && c->impl->move && may_move && n_running >= 2) moved = compact(c, running, n_running, ops);
    if (c->impl->trim) c->impl->trim(c, ops);
    return moved;
}

int32_t cb_cache_drop(cb_cache *c, cb_kv_ops *ops) { return c->impl->drop ? c->impl->drop(c, ops) : 0; }

int32_t cb_cache_save_all(cb_cache *c, cb_kv_ops *ops) { return c->impl->save_all ? c->impl->save_all(c, ops) : 0; }

void cb_cache_load_failed(cb_cache *c, int32_t seq, int32_t tokens) {
    c->hit_tokens -= tokens;
    if (c->sc_on) c->sc.floor[seq] = 0; /* the stream holds nothing: the request computes it all */
}

void cb_cache_settled(cb_cache *c) {
    if (c->impl->settled) c->impl->settled(c);
}

void cb_cache_get_stats(const cb_cache *c, cb_cache_stats *out) {
    *out = (cb_cache_stats){.query_tokens = c->query_tokens, .hit_tokens = c->hit_tokens};
    if (c->impl->stats) c->impl->stats(c, out);
}

int32_t cb_cache_parked_len(const cb_cache *c, int32_t seq) {
    return c->impl->parked_len ? c->impl->parked_len(c, seq) : 0;
}

bool cb_cache_check(const cb_cache *c) { return c->impl->check(c); }

const cb_prefix *cb_cache_prefix(const cb_cache *c) { return c->px_on ? &c->px : NULL; }
const cb_streams *cb_cache_streams(const cb_cache *c) { return c->sc_on ? &c->sc : NULL; }
