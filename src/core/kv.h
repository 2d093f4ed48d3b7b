/* kv.h — KV cache accounting in cells per sequence, and the sequence-id pool.
 * Mirrors what llama.cpp holds, without llama.h: the scheduler asks here before it puts a token
 * in a batch, so llama_decode should never find the cache full (when it does, the engine rolls
 * the step back and retries smaller).
 * Two layouts: unified (one pool of `capacity` cells, any sequence may use any of them) and split
 * (each sequence owns a fixed stream of per_seq_cap cells). */
#ifndef CB_KV_H
#define CB_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cb_kv {
    int32_t capacity;    /* cells in the whole cache */
    int32_t per_seq_cap; /* most cells one sequence may hold (= capacity when unified) */
    int32_t n_seq;       /* sequence ids are 0 .. n_seq-1 */
    bool split;
    int32_t *used;      /* (n_seq) cells held by each sequence alone (its private cells) */
    bool *taken;        /* (n_seq) id handed out */
    int32_t shared;     /* cells owned by the prefix cache (see prefix.h), counted once however many use them */
    int32_t total_used; /* sum of used[] + shared: physical cells in use */
    int32_t peak_used;
} cb_kv;

/* One change to llama.cpp's cells, queued by the scheduler and the prefix cache and applied by the
 * runner in order before the next batch: src >= 0 tags src's cells in [p0, p1) with seq as well
 * (unified layout: no copy; split: a whole-stream copy); src CB_KV_OP_RM removes seq's cells with
 * positions in [p0, p1); CB_KV_OP_SAVE copies seq's cells [p0, p1) to host memory, into the swap
 * record of the request `ref` (swap.h; seq's cells before p0 are dropped first: they stay in the
 * prefix cache); CB_KV_OP_RESTORE puts them back as seq's cells [p0, p1) (seq must hold nothing
 * yet: a shared prefix is tagged after it); CB_KV_OP_NONE does nothing (a save taken back);
 * CB_KV_OP_STASH copies seq's cells [0, p1) (all it holds) to host memory, into the host-tier entry
 * `ref` (hostcache.h), leaving them in place; CB_KV_OP_LOAD puts the host-tier entry of the request
 * `ref` (its cache.host) into seq, which must hold nothing yet, and keeps its cells [0, p1). Stash and load act at
 * once, while a copy across streams is made at the next decode: neither may name a stream such a copy reads or writes
 * before that decode (the stream cache keeps them apart; the runner refuses them). p1 < 0 means "to the end". */
#define CB_KV_OP_RM (-1)
#define CB_KV_OP_SAVE (-2)
#define CB_KV_OP_RESTORE (-3)
#define CB_KV_OP_NONE (-4)
#define CB_KV_OP_STASH (-5)
#define CB_KV_OP_LOAD (-6)
typedef struct {
    int32_t seq, src, p0, p1;
    void *ref; /* SAVE, RESTORE, LOAD: the cb_request; STASH: the cb_host_entry */
} cb_kv_op;

typedef struct {
    cb_kv_op *v; /* (cap) */
    int32_t n;
    size_t cap;
} cb_kv_ops;

/* Appends an op. The list only grows (it is reused step after step), so this allocates only
 * until it reaches the largest step; on allocation failure it aborts: a lost op would leave
 * llama.cpp's cells out of step with the accounting, which nothing could repair. */
void cb_kv_ops_push(cb_kv_ops *o, int32_t seq, int32_t src, int32_t p0, int32_t p1);
/* The same for a SAVE or RESTORE op of request ref. */
void cb_kv_ops_push_ref(cb_kv_ops *o, int32_t seq, int32_t src, int32_t p0, int32_t p1, void *ref);
/* Makes room for n ops up front (so that pushing allocates nothing until a step needs more than
 * n). Returns 0, or -1 on allocation failure. */
int cb_kv_ops_reserve(cb_kv_ops *o, int32_t n);
void cb_kv_ops_free(cb_kv_ops *o);

/* unified: capacity cells shared; split: capacity / n_seq cells per sequence.
 * Returns 0, or -1 on bad sizes or allocation failure (kv is left zeroed). */
int cb_kv_init(cb_kv *kv, int32_t capacity, int32_t n_seq, bool split);
void cb_kv_free(cb_kv *kv);

/* Lowest free sequence id, or -1 when all are taken. */
int32_t cb_kv_seq_acquire(cb_kv *kv);
/* Split layout: llama.cpp gives every block of consecutive sequence ids in a batch its own graph
 * run, so new sequences go where they keep the taken ids in one block. cb_kv_taken_span: the
 * lowest and highest taken ids of [0, n) (-1, -1 when none is). cb_kv_block_fit: 0 when free id s
 * fills a hole inside [lo, hi], 1 when it extends the block (lo - 1 or hi + 1), 2 otherwise or
 * when nothing is taken. cb_kv_seq_acquire_block: takes the free id of [0, n) that fits best
 * (lowest first); -1 when all are taken. */
void cb_kv_taken_span(const cb_kv *kv, int32_t n, int32_t *lo, int32_t *hi);
static inline int cb_kv_block_fit(int32_t lo, int32_t hi, int32_t s) {
    if (lo < 0) return 2;
    if (s > lo && s < hi) return 0;
    return s == lo - 1 || s == hi + 1 ? 1 : 2;
}
int32_t cb_kv_seq_acquire_block(cb_kv *kv, int32_t n);
/* Takes this id if it is free (the split layout's stream cache picks ids itself). */
bool cb_kv_seq_take(cb_kv *kv, int32_t seq);
/* Frees the sequence's cells and its id. */
void cb_kv_seq_release(cb_kv *kv, int32_t seq);

/* Cells the sequence could still add now. */
int32_t cb_kv_room(const cb_kv *kv, int32_t seq);
/* Cells free in the whole cache. */
static inline int32_t cb_kv_free_cells(const cb_kv *kv) { return kv->capacity - kv->total_used; }
/* Adds n cells to seq (n may be negative to undo). Returns false and changes nothing when the
 * cells are not there. */
bool cb_kv_grow(cb_kv *kv, int32_t seq, int32_t n);

/* Moves n of seq's private cells to the prefix cache (they stay in use, now shared). */
void cb_kv_share(cb_kv *kv, int32_t seq, int32_t n);
/* The prefix cache gave back n cells (evicted): they are free. */
void cb_kv_unshare(cb_kv *kv, int32_t n);
/* The prefix cache made n new cells of its own (a copy of a stream, split layout). */
void cb_kv_hold(cb_kv *kv, int32_t n);

/* Debug invariant: used[] plus shared sums to total_used, no sequence exceeds its cap, no free id holds cells. */
bool cb_kv_check(const cb_kv *kv);

#endif
