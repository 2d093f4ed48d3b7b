#include "streams.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- records -------------------- */

static int32_t *toks_of(const cb_streams *sc, int32_t s) { return sc->tok + (size_t)s * (size_t)sc->kv->per_seq_cap; }

static bool parked(const cb_streams *sc, int32_t s) { return s >= 0 && !sc->kv->taken[s] && sc->len[s] > 0; }

int cb_streams_init(cb_streams *sc, cb_kv *kv, int32_t n_run, int32_t min_share, cb_host_cache *host) {
    memset(sc, 0, sizeof(*sc));
    if (!kv || !kv->split || n_run < 1 || n_run > kv->n_seq || min_share < 1) return -1;
    sc->kv = kv;
    sc->n_run = n_run;
    sc->min_share = min_share;
    sc->host = host;
    sc->tok = malloc(sizeof(int32_t) * (size_t)kv->n_seq * (size_t)kv->per_seq_cap);
    sc->len = calloc((size_t)kv->n_seq, sizeof(int32_t));
    sc->last_use = calloc((size_t)kv->n_seq, sizeof(int64_t));
    sc->busy = calloc((size_t)kv->n_seq, 1);
    sc->floor = calloc((size_t)kv->n_seq, sizeof(int32_t));
    if (!sc->tok || !sc->len || !sc->last_use || !sc->busy || !sc->floor) {
        cb_streams_free(sc);
        return -1;
    }
    return 0;
}

void cb_streams_free(cb_streams *sc) {
    free(sc->tok);
    free(sc->len);
    free(sc->last_use);
    free(sc->busy);
    free(sc->floor);
    memset(sc, 0, sizeof(*sc));
}

void cb_streams_park(cb_streams *sc, int32_t seq, const int32_t *toks) {
    cb_kv *kv = sc->kv;
    int32_t n = kv->used[seq];
    if (n > 0) memcpy(toks_of(sc, seq), toks, sizeof(int32_t) * (size_t)n);
    sc->len[seq] = n;
    sc->last_use[seq] = ++sc->clock;
    cb_kv_share(kv, seq, n);
    cb_kv_seq_release(kv, seq);
}

/* O(streams x prompt) per admission: tens of streams, fine next to a decode step. */
void cb_streams_match(const cb_streams *sc, const int32_t *toks, int32_t n, cb_stream_match *m) {
    for (int32_t s = 0; s < sc->kv->n_seq; s++) {
        if (!parked(sc, s)) continue;
        int32_t l = cb_common_prefix(toks, n, toks_of(sc, s), sc->len[s]);
        if (l < sc->floor[s]) continue;
        bool in_place = s < sc->n_run && !(m->src >= 0 && m->src < sc->n_run && parked(sc, m->src));
        if (l > m->len || (l == m->len && l > 0 && in_place)) {
            m->src = s;
            m->len = l;
            m->host = NULL;
            m->floor = sc->floor[s];
        }
    }
    if (!sc->host) return;
    int32_t l;
    cb_host_entry *e = cb_host_match(sc->host, CB_HOST_STREAMS, toks, n, &l);
    if (e && l >= sc->min_share && l > m->len && cb_host_worth(sc->host, e, l - m->len))
        *m = (cb_stream_match){
            .src = m->src, .len = l, .host = e, .src_len = m->len, .floor = cb_host_floor(sc->host, e)};
}

void cb_streams_settled(cb_streams *sc) { memset(sc->busy, 0, (size_t)sc->kv->n_seq); }

/* ---------------------------------------------------------------- moving streams ------------- */

/* Queues the whole-stream copy of src into dst (made at the next decode). */
static void copy_stream(cb_streams *sc, int32_t dst, int32_t src, cb_kv_ops *ops) {
    cb_kv_ops_push(ops, dst, src, 0, -1);
    sc->floor[dst] = sc->floor[src];
    sc->busy[dst] = sc->busy[src] = 1;
}

/* Parked stream s is about to lose its tokens: to the host tier, where there is one and no copy
 * pending on s makes its cells read wrong now. */
static void stash(cb_streams *sc, int32_t s, cb_kv_ops *ops) {
    if (!sc->host || sc->busy[s] || sc->len[s] == 0) return;
    cb_host_entry *e = cb_host_stash(sc->host, CB_HOST_STREAMS, toks_of(sc, s), sc->len[s]);
    if (!e) return;
    cb_kv_ops_push_ref(ops, s, CB_KV_OP_STASH, 0, sc->len[s], e);
}

bool cb_streams_save(cb_streams *sc, int32_t s, cb_kv_ops *ops) {
    int32_t before = ops->n;
    if (parked(sc, s)) stash(sc, s, ops);
    return ops->n > before;
}

int32_t cb_streams_save_all(cb_streams *sc, cb_kv_ops *ops) {
    int32_t queued = 0;
    for (int32_t s = 0; s < sc->kv->n_seq; s++)
        queued += cb_streams_save(sc, s, ops);
    return queued;
}

/* Frees a parked stream's cells (queued) and its record. */
static void empty_stream(cb_streams *sc, int32_t s, cb_kv_ops *ops) {
    if (sc->len[s] == 0) return;
    cb_kv_ops_push(ops, s, -1, 0, -1);
    cb_kv_unshare(sc->kv, sc->len[s]);
    sc->evicted_cells += sc->len[s];
    sc->len[s] = 0;
    sc->floor[s] = 0;
}

/* Some other parked stream holds all of s's tokens but fewer than min_share: saving s adds
 * nothing worth a copy. */
static bool covered(const cb_streams *sc, int32_t s) {
    for (int32_t o = 0; o < sc->kv->n_seq; o++) {
        if (o == s || !parked(sc, o)) continue;
        int32_t l = cb_common_prefix(toks_of(sc, s), sc->len[s], toks_of(sc, o), sc->len[o]);
        if (l + sc->min_share > sc->len[s] && l >= sc->floor[o]) return true; /* (o may serve that much) */
    }
    return false;
}

/* An empty holder, else the least recently used one that is not `avoid`; -1 when none. With a host
 * tier, none a copy pending writes (what it holds is not there to stash yet: the stream goes to the
 * host tier instead). */
static int32_t pick_holder(const cb_streams *sc, int32_t avoid) {
    int32_t best = -1;
    for (int32_t h = sc->n_run; h < sc->kv->n_seq; h++) {
        if (h == avoid || (sc->host && sc->busy[h])) continue;
        if (sc->len[h] == 0) return h;
        if (best < 0 || sc->last_use[h] < sc->last_use[best]) best = h;
    }
    return best;
}

/* Copies parked stream s to a holder (evicting the holder's tokens) so it outlives s's reuse. */
static void save(cb_streams *sc, int32_t s, int32_t avoid, cb_kv_ops *ops) {
    if (sc->len[s] < sc->min_share || covered(sc, s)) return;
    int32_t h = pick_holder(sc, avoid);
    if (h < 0) { /* no holders (free of pending copies): to the host tier, if any */
        stash(sc, s, ops);
        return;
    }
    if (sc->len[h] > 0) { /* the copy resets h's stream in llama.cpp: no removal op */
        stash(sc, h, ops);
        cb_kv_unshare(sc->kv, sc->len[h]);
        sc->evicted_cells += sc->len[h];
    }
    copy_stream(sc, h, s, ops);
    memcpy(toks_of(sc, h), toks_of(sc, s), sizeof(int32_t) * (size_t)sc->len[s]);
    sc->len[h] = sc->len[s];
    sc->last_use[h] = sc->last_use[s];
    cb_kv_hold(sc->kv, sc->len[s]);
    sc->copies++;
}

/* Where a request without an in-place match goes, so that running ids stay one block (a hole
 * costs a graph run a step; cb_kv_block_fit): a hole inside the block, else an id next to it,
 * else any; within each, an empty stream first (no cache lost), else the least recently used
 * parked one; none with a copy pending when not_busy. -1 when there is no such id. */
static int32_t pick_target(const cb_streams *sc, bool not_busy) {
    int32_t lo, hi, best = -1;
    int64_t best_rank = INT64_MAX;
    cb_kv_taken_span(sc->kv, sc->n_run, &lo, &hi);
    for (int32_t s = 0; s < sc->n_run; s++) {
        if (sc->kv->taken[s] || (not_busy && sc->busy[s])) continue;
        bool is_parked = sc->len[s] > 0;
        int64_t rank = (int64_t)(2 * cb_kv_block_fit(lo, hi, s) + is_parked) << 48;
        rank += is_parked ? sc->last_use[s] : s;
        if (rank < best_rank) {
            best = s;
            best_rank = rank;
        }
    }
    return best;
}

/* A host match's way back: the stream's match, if one is worth it (len may have been lowered to
 * compute some of it again: no more than that). */
static cb_stream_match stream_only(cb_stream_match m) {
    int32_t l = m.src_len < m.len ? m.src_len : m.len;
    return (cb_stream_match){.src = m.src, .len = m.src >= 0 ? l : 0};
}

int32_t cb_streams_admit(cb_streams *sc, cb_stream_match m, int32_t *shared, bool *loaded, cb_kv_ops *ops) {
    cb_kv *kv = sc->kv;
    *shared = 0;
    *loaded = false;
    if ((m.src < 0 && !m.host) || m.len < sc->min_share) m = (cb_stream_match){.src = -1, .len = 0};
    if (m.host && m.len < cb_host_floor(sc->host, m.host)) m = stream_only(m); /* (cut under what it serves) */
    if (m.host) { /* a stream no copy touches before the load, its parked tokens to the host tier */
        int32_t t = pick_target(sc, true);
        if (t >= 0) {
            if (sc->len[t] > 0 && !covered(sc, t)) stash(sc, t, ops);
            empty_stream(sc, t, ops);
            cb_kv_seq_take(kv, t);
            cb_kv_grow(kv, t, m.len);
            sc->floor[t] = cb_host_floor(sc->host, m.host) > 0 ? m.len : 0;
            *shared = m.len;
            *loaded = true;
            return t;
        }
        m = stream_only(m); /* every stream it could load into has a copy pending */
    }
    /* a stream missing cells before its floor cannot keep less (a sliding-window model's load) */
    if (m.src < 0 || m.len < sc->min_share || m.len < sc->floor[m.src]) m = (cb_stream_match){.src = -1, .len = 0};
    int32_t agree = m.agree > m.len ? m.agree : m.len;
    bool in_place = m.src >= 0 && m.src < sc->n_run && parked(sc, m.src);
    int32_t t = in_place ? m.src : pick_target(sc, false);
    if (t < 0) return -1;
    if (in_place) { /* take it over: its tail beyond the match goes (to a holder when worth it) */
        if (sc->len[t] - agree >= sc->min_share) save(sc, t, -1, ops);
        if (sc->len[t] > m.len) cb_kv_ops_push(ops, t, -1, m.len, -1);
        sc->evicted_cells += sc->len[t] - m.len;
        cb_kv_unshare(kv, sc->len[t]);
        sc->len[t] = 0;
    } else {
        if (sc->len[t] > 0) save(sc, t, m.src, ops);
        empty_stream(sc, t, ops);
        if (m.src >= 0) { /* whole-stream copy, then trim to the match */
            copy_stream(sc, t, m.src, ops);
            cb_kv_ops_push(ops, t, -1, m.len, -1);
            sc->copies++;
        }
    }
    if (m.src >= 0 && parked(sc, m.src)) sc->last_use[m.src] = ++sc->clock;
    if (m.src < 0) sc->floor[t] = 0; /* (a copy or a take-over keeps the source's) */
    cb_kv_seq_take(kv, t);
    cb_kv_grow(kv, t, m.len);
    *shared = m.len;
    return t;
}

void cb_streams_move(cb_streams *sc, int32_t from, int32_t to, const int32_t *toks, cb_kv_ops *ops) {
    cb_kv *kv = sc->kv;
    if (parked(sc, to)) save(sc, to, -1, ops);
    empty_stream(sc, to, ops);
    copy_stream(sc, to, from, ops);
    sc->moves++;
    cb_kv_seq_take(kv, to);
    cb_kv_grow(kv, to, kv->used[from]);
    cb_streams_park(sc, from, toks);
}

int32_t cb_streams_drop(cb_streams *sc, cb_kv_ops *ops) {
    int64_t before = sc->evicted_cells;
    for (int32_t s = 0; s < sc->kv->n_seq; s++)
        if (parked(sc, s)) empty_stream(sc, s, ops);
    return (int32_t)(sc->evicted_cells - before);
}

bool cb_streams_check(const cb_streams *sc) {
    int64_t sum = 0;
    for (int32_t s = 0; s < sc->kv->n_seq; s++) {
        if (sc->len[s] < 0 || sc->len[s] > sc->kv->per_seq_cap) return false;
        if (sc->kv->taken[s] && (sc->len[s] != 0 || s >= sc->n_run)) return false;
        sum += sc->len[s];
    }
    return sum == sc->kv->shared;
}
