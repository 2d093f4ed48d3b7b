/* fake_runner.h — stands in for llama.cpp under the scheduler tests: it keeps its own cells per
 * sequence, checks every plan the way llama_decode would (no gaps in positions, a sequence's
 * first position is its length, the batch fits, the cache is never over capacity), and produces
 * a deterministic "sampled" token for every row that asked for logits. */
#ifndef FAKE_RUNNER_H
#define FAKE_RUNNER_H

#include "../../src/core/scheduler.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t n_seq, capacity, per_seq_cap, budget;
    int32_t *len; /* (n_seq) cells held, as llama.cpp would */
    int32_t total;
    char err[256];
} fake_runner;

static inline void fake_init(fake_runner *f, int32_t n_seq, int32_t capacity, int32_t per_seq_cap, int32_t budget) {
    memset(f, 0, sizeof(*f));
    f->n_seq = n_seq;
    f->capacity = capacity;
    f->per_seq_cap = per_seq_cap;
    f->budget = budget;
    f->len = calloc((size_t)n_seq, sizeof(int32_t));
}

static inline void fake_free(fake_runner *f) { free(f->len); }

/* Returns true when the plan is one llama_decode would accept; else false with f->err set. */
static inline bool fake_run(fake_runner *f, const cb_plan *p) {
    for (int32_t i = 0; i < p->n_freed; i++) {
        f->total -= f->len[p->freed[i]];
        f->len[p->freed[i]] = 0;
    }
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
        if (it->pos0 != f->len[s]) {
            snprintf(f->err, sizeof(f->err), "seq %d: batch starts at %d but the cache holds %d", s, it->pos0,
                     f->len[s]);
            return false;
        }
        if (it->n_tokens < 1) {
            snprintf(f->err, sizeof(f->err), "empty item");
            return false;
        }
        f->len[s] += it->n_tokens;
        f->total += it->n_tokens;
        sum += it->n_tokens;
        if (f->len[s] > f->per_seq_cap) {
            snprintf(f->err, sizeof(f->err), "seq %d over its %d cells", s, f->per_seq_cap);
            return false;
        }
    }
    if (sum != p->n_tokens) {
        snprintf(f->err, sizeof(f->err), "plan says %d tokens, items hold %d", p->n_tokens, sum);
        return false;
    }
    if (f->total > f->capacity) {
        snprintf(f->err, sizeof(f->err), "cache over capacity: %d > %d", f->total, f->capacity);
        return false;
    }
    return true;
}

#endif
