#include "kv.h"
#include "../util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cb_kv_init(cb_kv *kv, int32_t capacity, int32_t n_seq, bool split) {
    memset(kv, 0, sizeof(*kv));
    if (capacity < 1 || n_seq < 1 || (split && capacity / n_seq < 1)) return -1;
    kv->used = calloc((size_t)n_seq, sizeof(int32_t));
    kv->taken = calloc((size_t)n_seq, sizeof(bool));
    if (!kv->used || !kv->taken) {
        cb_kv_free(kv);
        return -1;
    }
    kv->n_seq = n_seq;
    kv->split = split;
    kv->per_seq_cap = split ? capacity / n_seq : capacity;
    kv->capacity = split ? kv->per_seq_cap * n_seq : capacity;
    return 0;
}

void cb_kv_free(cb_kv *kv) {
    free(kv->used);
    free(kv->taken);
    memset(kv, 0, sizeof(*kv));
}

int32_t cb_kv_seq_acquire(cb_kv *kv) {
    for (int32_t s = 0; s < kv->n_seq; s++) { /* O(n_seq), n_seq is max_num_seqs: tens */
        if (!kv->taken[s]) {
            kv->taken[s] = true;
            return s;
        }
    }
    return -1;
}

void cb_kv_taken_span(const cb_kv *kv, int32_t n, int32_t *lo, int32_t *hi) {
    *lo = *hi = -1;
    for (int32_t s = 0; s < n; s++)
        if (kv->taken[s]) {
            if (*lo < 0) *lo = s;
            *hi = s;
        }
}

int32_t cb_kv_seq_acquire_block(cb_kv *kv, int32_t n) {
    int32_t lo, hi, best = -1, best_fit = 3;
    cb_kv_taken_span(kv, n, &lo, &hi);
    for (int32_t s = 0; s < n; s++) {
        int fit = kv->taken[s] ? 3 : cb_kv_block_fit(lo, hi, s);
        if (fit < best_fit) {
            best = s;
            best_fit = fit;
        }
    }
    if (best >= 0) kv->taken[best] = true;
    return best;
}

bool cb_kv_seq_take(cb_kv *kv, int32_t seq) {
    if (seq < 0 || seq >= kv->n_seq || kv->taken[seq]) return false;
    kv->taken[seq] = true;
    return true;
}

void cb_kv_seq_release(cb_kv *kv, int32_t seq) {
    if (seq < 0 || seq >= kv->n_seq) return;
    kv->total_used -= kv->used[seq];
    kv->used[seq] = 0;
    kv->taken[seq] = false;
}

int32_t cb_kv_room(const cb_kv *kv, int32_t seq) {
    int32_t own = kv->per_seq_cap - kv->used[seq];
    int32_t pool = cb_kv_free_cells(kv);
    return own < pool ? own : pool;
}

bool cb_kv_grow(cb_kv *kv, int32_t seq, int32_t n) {
    if (seq < 0 || seq >= kv->n_seq || !kv->taken[seq]) return false;
    if (n > 0 && n > cb_kv_room(kv, seq)) return false;
    if (n < 0 && -n > kv->used[seq]) return false;
    kv->used[seq] += n;
    kv->total_used += n;
    if (kv->total_used > kv->peak_used) kv->peak_used = kv->total_used;
    return true;
}

void cb_kv_share(cb_kv *kv, int32_t seq, int32_t n) {
    kv->used[seq] -= n;
    kv->shared += n;
}

void cb_kv_unshare(cb_kv *kv, int32_t n) {
    kv->shared -= n;
    kv->total_used -= n;
}

void cb_kv_hold(cb_kv *kv, int32_t n) {
    kv->shared += n;
    kv->total_used += n;
    if (kv->total_used > kv->peak_used) kv->peak_used = kv->total_used;
}

void cb_kv_ops_push(cb_kv_ops *o, int32_t seq, int32_t src, int32_t p0, int32_t p1) {
    cb_kv_ops_push_ref(o, seq, src, p0, p1, NULL);
}

void cb_kv_ops_push_ref(cb_kv_ops *o, int32_t seq, int32_t src, int32_t p0, int32_t p1, void *ref) {
    if (!cb_grow((void **)&o->v, &o->cap, (size_t)o->n + 1, sizeof(*o->v), 64)) {
        fputs("cobatch: out of memory queueing a KV operation\n", stderr);
        abort();
    }
    o->v[o->n++] = (cb_kv_op){.seq = seq, .src = src, .p0 = p0, .p1 = p1, .ref = ref};
}

int cb_kv_ops_reserve(cb_kv_ops *o, int32_t n) {
    return n < 0 || cb_grow((void **)&o->v, &o->cap, (size_t)n, sizeof(*o->v), (size_t)n) ? 0 : -1;
}

void cb_kv_ops_free(cb_kv_ops *o) {
    free(o->v);
    o->v = NULL;
    o->n = o->cap = 0;
}

bool cb_kv_check(const cb_kv *kv) {
    int64_t sum = kv->shared;
    if (kv->shared < 0) return false;
    for (int32_t s = 0; s < kv->n_seq; s++) {
        if (kv->used[s] < 0 || kv->used[s] > kv->per_seq_cap) return false;
        if (!kv->taken[s] && kv->used[s] != 0) return false;
        sum += kv->used[s];
    }
    return sum == kv->total_used && kv->total_used <= kv->capacity;
}
