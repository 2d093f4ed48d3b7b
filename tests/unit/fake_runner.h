/* fake_runner.h — stands in for llama.cpp under the scheduler tests. It models the cache cell by
 * cell as llama.cpp's unified layout does (each cell: a position, the token computed there, and a
 * set of sequence ids; free when the set is empty), or its split layout (sequence s owns the
 * stream of cells [s * per_seq_cap, (s + 1) * per_seq_cap); a copy between streams must take the
 * whole source, resets the destination's cells at once and copies the data - here the tokens -
 * only at the start of the next decode, in order), applies the plan's cell changes in order,
 * checks every batch the way llama_decode would (a sequence's first position is its length, the
 * batch fits, a free cell exists for every token), and lets the tests check what each sequence
 * really sees: positions 0..n-1 once each, holding the right tokens. */
#ifndef FAKE_RUNNER_H
#define FAKE_RUNNER_H

#include "../../src/core/scheduler.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_SEQ 256

typedef struct {
    int32_t pos, tok;
    uint64_t tag[FAKE_MAX_SEQ / 64];
} fake_cell;

typedef struct {
    int32_t n_seq, capacity, per_seq_cap, budget;
    fake_cell *cell; /* (capacity) */
    int32_t *cnt;    /* (n_seq) cells tagged with each sequence */
    int32_t total;   /* cells with any tag: the physical use */
    int32_t head;    /* where the search for a free cell starts (llama.cpp keeps one too) */
    bool split;
    int32_t pend_src[64], pend_dst[64], n_pend; /* split: stream copies the next decode makes */
    cb_swap *swap;                              /* swap: where restores are counted */
    int fail_saves, fail_restores;              /* the next this many saves / restores fail */
    int fail_loads;                             /* the next this many host-tier loads fail */
    cb_request *restore_failed[64];
    int n_restore_failed;
    char err[256];
} fake_runner;

static inline bool fake_has(const fake_cell *c, int32_t s) { return (c->tag[s / 64] >> (s % 64)) & 1; }
static inline bool fake_empty(const fake_cell *c) {
    for (int i = 0; i < FAKE_MAX_SEQ / 64; i++)
        if (c->tag[i]) return false;
    return true;
}

static inline void fake_init(fake_runner *f, int32_t n_seq, int32_t capacity, int32_t per_seq_cap, int32_t budget,
                             bool split) {
    memset(f, 0, sizeof(*f));
    f->split = split;
    f->n_seq = n_seq;
    f->capacity = capacity;
    f->per_seq_cap = per_seq_cap;
    f->budget = budget;
    f->cell = calloc((size_t)capacity, sizeof(fake_cell));
    f->cnt = calloc((size_t)n_seq, sizeof(int32_t));
}

static inline void fake_free(fake_runner *f) {
    free(f->cell);
    free(f->cnt);
}

static inline void fake_untag(fake_runner *f, fake_cell *c, int32_t s) {
    c->tag[s / 64] &= ~(1ULL << (s % 64));
    f->cnt[s]--;
    if (fake_empty(c)) f->total--;
}

static inline void fake_tag(fake_runner *f, fake_cell *c, int32_t s) {
    if (fake_empty(c)) f->total++;
    c->tag[s / 64] |= 1ULL << (s % 64);
    f->cnt[s]++;
}

static inline fake_cell *fake_free_cell(fake_runner *f, int32_t s);

/* A save (llama_state_seq_get_data): seq's cells before p0 dropped, those in [p0, p1) kept as
 * (position, token) pairs in the request's swap record; exactly p1 - p0 of them, or it is an error. */
static inline bool fake_save(fake_runner *f, const cb_kv_op *op) {
    cb_request *r = op->ref;
    if (!r || r->swap.state != CB_SWAP_SAVING || r->swap.from != op->p0 || r->swap.to != op->p1) {
        snprintf(f->err, sizeof(f->err), "save of seq %d [%d, %d) for a request not saving that", op->seq, op->p0,
                 op->p1);
        return false;
    }
    if (f->fail_saves > 0) {
        f->fail_saves--;
        r->swap.state = CB_SWAP_FAILED;
        return true;
    }
    int32_t n = op->p1 - op->p0, k = 0;
    int32_t *d = malloc(sizeof(int32_t) * 2 * (size_t)(n > 0 ? n : 1));
    for (int32_t c = 0; c < f->capacity; c++) {
        fake_cell *cell = &f->cell[c];
        if (!fake_has(cell, op->seq)) continue;
        if (cell->pos < op->p0) {
            fake_untag(f, cell, op->seq);
        } else if (cell->pos < op->p1 && k < n) {
            d[2 * k] = cell->pos;
            d[2 * k + 1] = cell->tok;
            k++;
        }
    }
    if (k != n) {
        snprintf(f->err, sizeof(f->err), "save of seq %d [%d, %d) found %d cells", op->seq, op->p0, op->p1, k);
        free(d);
        return false;
    }
    r->swap.data = (uint8_t *)d;
    r->swap.size = sizeof(int32_t) * 2 * (size_t)n;
    r->swap.state = CB_SWAP_SAVED;
    return true;
}

/* A restore (llama_state_seq_set_data): seq emptied, the saved cells put back in free cells. */
static inline bool fake_restore(fake_runner *f, const cb_kv_op *op) {
    cb_request *r = op->ref;
    if (!r || r->swap.state != CB_SWAP_RESTORING || !r->swap.data || r->swap.from != op->p0 || r->swap.to != op->p1) {
        snprintf(f->err, sizeof(f->err), "restore of seq %d [%d, %d) without its data", op->seq, op->p0, op->p1);
        return false;
    }
    for (int32_t c = 0; c < f->capacity; c++)
        if (fake_has(&f->cell[c], op->seq)) fake_untag(f, &f->cell[c], op->seq);
    const int32_t *d = (const int32_t *)r->swap.data;
    int32_t n = (int32_t)(r->swap.size / (2 * sizeof(int32_t)));
    bool fail = f->fail_restores > 0;
    for (int32_t k = 0; k < n && !fail; k++) {
        fake_cell *c = fake_free_cell(f, op->seq);
        if (!c) {
            snprintf(f->err, sizeof(f->err), "restore of seq %d: no free cell", op->seq);
            return false;
        }
        c->pos = d[2 * k];
        c->tok = d[2 * k + 1];
        fake_tag(f, c, op->seq);
    }
    free(r->swap.data);
    r->swap.data = NULL;
    r->swap.size = 0;
    if (fail) {
        f->fail_restores--;
        r->swap.state = CB_SWAP_FAILED;
        f->restore_failed[f->n_restore_failed++] = r;
        return true;
    }
    if (f->swap) f->swap->swapped_in++;
    memset(&r->swap, 0, sizeof(r->swap));
    return true;
}

/* A host-tier stash (llama_state_seq_get_data of a whole stream): seq's (position, token) pairs as
 * they are now (a stream copy still pending into it would show its old tokens), into the entry. */
static inline bool fake_stash(fake_runner *f, const cb_kv_op *op) {
    cb_host_entry *e = op->ref;
    if (!e || e->state != CB_HOST_SAVING || e->len != op->p1 || f->cnt[op->seq] != op->p1) {
        snprintf(f->err, sizeof(f->err), "stash of seq %d (%d cells) as %d tokens into an entry not saving that",
                 op->seq, f->cnt[op->seq], op->p1);
        return false;
    }
    int32_t n = f->cnt[op->seq], k = 0;
    int32_t *d = malloc(sizeof(int32_t) * 2 * (size_t)(n > 0 ? n : 1));
    for (int32_t c = 0; c < f->capacity; c++) {
        if (!fake_has(&f->cell[c], op->seq)) continue;
        d[2 * k] = f->cell[c].pos;
        d[2 * k + 1] = f->cell[c].tok;
        k++;
    }
    cb_host_saved(e->owner, e, (uint8_t *)d, sizeof(int32_t) * 2 * (size_t)n, n, 1);
    cb_host_unlock(e->owner, e);
    return true;
}

/* A host-tier load (llama_state_seq_set_data): the request's entry into its empty stream. */
static inline bool fake_load(fake_runner *f, const cb_kv_op *op) {
    cb_request *r = op->ref;
    cb_host_entry *e = r ? r->cache.host : NULL;
    if (!e || f->cnt[op->seq] != 0 || op->p1 > e->len) {
        snprintf(f->err, sizeof(f->err), "load into seq %d (%d cells) without an entry of %d tokens", op->seq,
                 f->cnt[op->seq], op->p1);
        return false;
    }
    bool ok = e->state == CB_HOST_SAVED && f->fail_loads == 0;
    if (f->fail_loads > 0) f->fail_loads--;
    const int32_t *d = (const int32_t *)e->data;
    int32_t n = ok ? (int32_t)(e->size / (2 * sizeof(int32_t))) : 0;
    for (int32_t k = 0; k < n; k++) {
        fake_cell *c = fake_free_cell(f, op->seq);
        if (!c) {
            snprintf(f->err, sizeof(f->err), "load into seq %d: no free cell", op->seq);
            return false;
        }
        c->pos = d[2 * k];
        c->tok = d[2 * k + 1];
        fake_tag(f, c, op->seq);
    }
    for (int32_t k = 0; ok && k < f->capacity; k++) /* the tail past what the request shares */
        if (fake_has(&f->cell[k], op->seq) && f->cell[k].pos >= op->p1) fake_untag(f, &f->cell[k], op->seq);
    if (ok) e->owner->hit_tokens += op->p1;
    cb_host_loaded(e->owner, e, ok, 1);
    cb_host_unlock(e->owner, e);
    r->cache.host = NULL;
    r->cache.load_failed = !ok;
    if (!ok) f->restore_failed[f->n_restore_failed++] = r;
    return true;
}

/* Applies the plan's cell changes, as llama_memory_seq_rm / seq_cp / the state calls would. */
static inline bool fake_apply_ops(fake_runner *f, const cb_plan *p) {
    f->n_restore_failed = 0;
    for (int32_t i = 0; i < p->ops.n; i++) {
        const cb_kv_op *op = &p->ops.v[i];
        int32_t p1 = op->p1 < 0 ? INT32_MAX : op->p1;
        if (op->src == CB_KV_OP_NONE) continue;
        if (op->src == CB_KV_OP_STASH || op->src == CB_KV_OP_LOAD) {
            if (!(op->src == CB_KV_OP_STASH ? fake_stash(f, op) : fake_load(f, op))) return false;
            continue;
        }
        if (op->src == CB_KV_OP_SAVE || op->src == CB_KV_OP_RESTORE) {
            if (f->split) {
                snprintf(f->err, sizeof(f->err), "op %d: a save or restore in the split layout", i);
                return false;
            }
            if (!(op->src == CB_KV_OP_SAVE ? fake_save(f, op) : fake_restore(f, op))) return false;
            continue;
        }
        if (op->seq < 0 || op->seq >= f->n_seq || op->src >= f->n_seq) {
            snprintf(f->err, sizeof(f->err), "op %d names sequence %d/%d", i, op->seq, op->src);
            return false;
        }
        if (f->split && op->src >= 0 && op->src != op->seq) { /* across streams: the whole stream */
            if (op->p0 > 0 || op->p1 >= 0 || f->n_pend == 64) {
                snprintf(f->err, sizeof(f->err), "op %d: partial copy %d..%d across streams", i, op->p0, op->p1);
                return false;
            }
            fake_cell *src = &f->cell[op->src * f->per_seq_cap], *dst = &f->cell[op->seq * f->per_seq_cap];
            for (int32_t k = 0; k < f->per_seq_cap; k++) {
                if (fake_has(&dst[k], op->seq)) fake_untag(f, &dst[k], op->seq);
                if (fake_has(&src[k], op->src)) {
                    dst[k].pos = src[k].pos;
                    fake_tag(f, &dst[k], op->seq);
                }
            }
            f->pend_src[f->n_pend] = op->src;
            f->pend_dst[f->n_pend++] = op->seq;
            continue;
        }
        for (int32_t k = 0; k < f->capacity; k++) {
            fake_cell *c = &f->cell[k];
            if (c->pos < op->p0 || c->pos >= p1) continue;
            if (op->src == CB_KV_OP_RM && fake_has(c, op->seq)) fake_untag(f, c, op->seq);
            if (op->src >= 0 && fake_has(c, op->src) && !fake_has(c, op->seq)) fake_tag(f, c, op->seq);
        }
    }
    return true;
}

/* What llama_decode does first: the stream copies queued since the last decode, in order. */
static inline void fake_update(fake_runner *f) {
    for (int32_t i = 0; i < f->n_pend; i++) {
        fake_cell *src = &f->cell[f->pend_src[i] * f->per_seq_cap], *dst = &f->cell[f->pend_dst[i] * f->per_seq_cap];
        for (int32_t k = 0; k < f->per_seq_cap; k++)
            dst[k].tok = src[k].tok;
    }
    f->n_pend = 0;
}

/* A free cell for sequence s (in its stream when split), or NULL. */
static inline fake_cell *fake_free_cell(fake_runner *f, int32_t s) {
    int32_t lo = f->split ? s * f->per_seq_cap : 0, n = f->split ? f->per_seq_cap : f->capacity;
    for (int32_t tries = 0; tries < n; tries++) {
        int32_t k = lo + (f->head + tries) % n;
        if (fake_empty(&f->cell[k])) {
            f->head = (f->head + tries) % n;
            return &f->cell[k];
        }
    }
    return NULL;
}

/* Decodes the plan's tokens into free cells (after fake_update when the plan has items: llama.cpp
 * is not called for an empty one). Returns false (f->err set) where llama_decode would refuse
 * the batch or find no free cell. */
static inline bool fake_decode(fake_runner *f, const cb_plan *p) {
    if (p->n_tokens > f->budget) {
        snprintf(f->err, sizeof(f->err), "batch of %d tokens over budget %d", p->n_tokens, f->budget);
        return false;
    }
    int32_t sum = 0;
    for (int32_t i = 0; i < p->n_items; i++) {
        const cb_plan_item *it = &p->items[i];
        int32_t s = it->req->seq_id;
        if (s < 0 || s >= f->n_seq) {
            snprintf(f->err, sizeof(f->err), "item %d has no sequence", i);
            return false;
        }
        if (it->pos0 != f->cnt[s]) {
            snprintf(f->err, sizeof(f->err), "seq %d: batch starts at %d but the cache holds %d", s, it->pos0,
                     f->cnt[s]);
            return false;
        }
        if (it->n_tokens < 1) {
            snprintf(f->err, sizeof(f->err), "empty item");
            return false;
        }
        if (f->cnt[s] + it->n_tokens > f->per_seq_cap) {
            snprintf(f->err, sizeof(f->err), "seq %d over its %d cells", s, f->per_seq_cap);
            return false;
        }
        for (int32_t k = 0; k < it->n_tokens; k++) {
            fake_cell *c = fake_free_cell(f, s);
            if (!c) {
                snprintf(f->err, sizeof(f->err), "seq %d: no free cell (%d in all)", s, f->capacity);
                return false;
            }
            c->pos = it->pos0 + k;
            c->tok = it->req->tokens[it->pos0 + k];
            fake_tag(f, c, s);
        }
        sum += it->n_tokens;
    }
    if (sum != p->n_tokens) {
        snprintf(f->err, sizeof(f->err), "plan says %d tokens, items hold %d", p->n_tokens, sum);
        return false;
    }
    return true;
}

static inline bool fake_run(fake_runner *f, const cb_plan *p) {
    if (!fake_apply_ops(f, p)) return false;
    if (p->n_items > 0) fake_update(f);
    return fake_decode(f, p);
}

/* Sequence s holds positions 0..cnt-1 once each and, where toks is given, toks[pos] in each. */
static inline bool fake_seq_ok(fake_runner *f, int32_t s, const int32_t *toks) {
    int32_t n = f->cnt[s];
    unsigned char *seen = calloc((size_t)n + 1, 1);
    bool ok = seen != NULL;
    for (int32_t k = 0; ok && k < f->capacity; k++) {
        const fake_cell *c = &f->cell[k];
        if (!fake_has(c, s)) continue;
        ok = c->pos >= 0 && c->pos < n && !seen[c->pos] && (!toks || toks[c->pos] == c->tok);
        if (ok)
            seen[c->pos] = 1;
        else
            snprintf(f->err, sizeof(f->err), "seq %d: cell at position %d (token %d) is wrong", s, c->pos, c->tok);
    }
    free(seen);
    return ok;
}

#endif
