#include "plan.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

#define CB_OPS_RESERVE 1024 /* cb_kv_op: 24 bytes each */

int cb_plan_init(cb_plan *plan, int32_t max_num_seqs) {
    memset(plan, 0, sizeof(*plan));
    plan->items = calloc((size_t)max_num_seqs, sizeof(*plan->items));
    /* a step stops preempting for want of movers at max_num_seqs; the decode pass may add as many */
    plan->preempted = calloc(2 * (size_t)max_num_seqs, sizeof(*plan->preempted));
    plan->failed = calloc(2 * (size_t)max_num_seqs, sizeof(*plan->failed));
    if (!plan->items || !plan->preempted || !plan->failed || cb_kv_ops_reserve(&plan->ops, CB_OPS_RESERVE) != 0) {
        cb_plan_free(plan);
        return -1;
    }
    return 0;
}

void cb_plan_free(cb_plan *plan) {
    free(plan->items);
    cb_kv_ops_free(&plan->ops);
    free(plan->preempted);
    free(plan->failed);
    memset(plan, 0, sizeof(*plan));
}

/* ---------------------------------------------------------------- chunk shaping -------------- */

/* Under the tile a stream's flash attention runs one row at a time: several times slower per
 * token with 1000 cells of context (BENCHMARKS.md, KV layouts). */
int32_t cb_plan_split_chunk(int32_t *step_chunk, int32_t tile, int32_t cap, bool plan_empty, int32_t n,
                            int32_t pending) {
    if (n == pending) return n;
    if (tile > cap) tile = cap; /* never more than a configuration allows */
    if (pending - n < tile && pending - tile >= tile && pending - tile >= *step_chunk)
        n = pending - tile; /* the tail a tile, not less (unless that would make the chunk wait) */
    if (n < tile && !plan_empty) return 0;
    if (*step_chunk == 0) *step_chunk = n;
    if (n > *step_chunk) return *step_chunk;
    if (n < *step_chunk) return 0;
    return n;
}

int32_t cb_plan_tile_chunk(int32_t pending, int32_t room, int32_t cap, int32_t tile, bool alone) {
    if (room <= 0) return 0; /* the budget is spent */
    if (pending <= room) return pending;
    int32_t n = room;
    if (pending - n < tile) { /* the tail would be under the tile */
        if (pending - tile >= tile)
            n = pending - tile; /* leave a tile */
        else if (pending <= cap)
            n = pending; /* under two tiles: all of it, past the budget by under a tile */
    }
    return n < tile && !alone ? 0 : n;
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

int32_t cb_plan_row_order(const cb_plan *p, int32_t tile, cb_row_piece *out) {
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
            has_tile |= rest[k].n == tile; /* its rest would leave the tiled kernel */
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

void cb_pace_note(cb_pace *p, int32_t tokens, int64_t us) {
    if (tokens <= 0 || us <= 0) return;
    double t = (double)us / tokens;
    p->token_us = cb_ewma(p->token_us, t, 0.5);
}

int32_t cb_pace_tokens(const cb_pace *p, double us, int32_t lo, int32_t hi) {
    if (p->token_us <= 0) return hi;
    double n = us / p->token_us;
    return n < lo ? lo : n > hi ? hi : (int32_t)n;
}

void cb_step_pace_note(cb_step_pace *p, int32_t decode_rows, int32_t prompt_tokens, int64_t us, int32_t max_seqs) {
    if (us <= 0 || decode_rows <= 0 || 2 * decode_rows < max_seqs) return;
    if (prompt_tokens == 0) {
        double t = (double)us / decode_rows;
        p->row_us = cb_ewma(p->row_us, t, 0.2);
    } else if (p->row_us > 0) {
        double t = ((double)us - decode_rows * p->row_us) / prompt_tokens;
        if (t <= 0) return; /* a step shorter than its decode rows' share: noise */
        p->token_us = cb_ewma(p->token_us, t, 0.2);
    }
}

int32_t cb_step_pace_prompt(const cb_step_pace *p, int32_t decode_rows, int32_t max_seqs, double share) {
    if (share <= 0 || decode_rows <= 0 || p->row_us <= 0 || p->token_us <= 0) return INT32_MAX;
    double n = share * max_seqs * max_seqs * p->row_us / ((double)decode_rows * p->token_us);
    if (n >= INT32_MAX) return INT32_MAX;
    return n < CB_STEP_PACE_MIN ? CB_STEP_PACE_MIN : (int32_t)n;
}
