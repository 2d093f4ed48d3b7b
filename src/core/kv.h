/* kv.h — KV cache accounting in cells per sequence, and the sequence-id pool.
 * Mirrors what llama.cpp holds, without llama.h: the scheduler asks here before it puts a token
 * in a batch, so llama_decode should never find the cache full (when it does, the engine rolls
 * the step back and retries smaller).
 * Two layouts: unified (one pool of `capacity` cells, any sequence may use any of them) and split
 * (each sequence owns a fixed stream of per_seq_cap cells). */
#ifndef CB_KV_H
#define CB_KV_H

#include <stdbool.h>
#include <stdint.h>

typedef struct cb_kv {
    int32_t capacity;    /* cells in the whole cache */
    int32_t per_seq_cap; /* most cells one sequence may hold (= capacity when unified) */
    int32_t n_seq;       /* sequence ids are 0 .. n_seq-1 */
    bool split;
    int32_t *used; /* (n_seq) cells held by each sequence */
    bool *taken;   /* (n_seq) id handed out */
    int32_t total_used;
    int32_t peak_used;
} cb_kv;

/* unified: capacity cells shared; split: capacity / n_seq cells per sequence.
 * Returns 0, or -1 on bad sizes or allocation failure (kv is left zeroed). */
int cb_kv_init(cb_kv *kv, int32_t capacity, int32_t n_seq, bool split);
void cb_kv_free(cb_kv *kv);

/* Lowest free sequence id, or -1 when all are taken. */
int32_t cb_kv_seq_acquire(cb_kv *kv);
/* Frees the sequence's cells and its id. */
void cb_kv_seq_release(cb_kv *kv, int32_t seq);

/* Cells the sequence could still add now. */
int32_t cb_kv_room(const cb_kv *kv, int32_t seq);
/* Cells free in the whole cache. */
static inline int32_t cb_kv_free_cells(const cb_kv *kv) { return kv->capacity - kv->total_used; }
/* Adds n cells to seq (n may be negative to undo). Returns false and changes nothing when the
 * cells are not there. */
bool cb_kv_grow(cb_kv *kv, int32_t seq, int32_t n);

/* Debug invariant: used[] sums to total_used, no sequence exceeds its cap, no free id holds cells. */
bool cb_kv_check(const cb_kv *kv);

#endif
