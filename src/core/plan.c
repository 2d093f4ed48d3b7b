#include "plan.h"
#include "../util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CB_OPS_RESERVE 1024 /* cb_kv_op: 24 bytes each */

int cb_plan_init(cb_plan *plan, int32_t max_num_seqs) {
    memset(plan, 0, sizeof(*plan));
    plan->items = calloc((size_t)max_num_seqs, sizeof(*plan->items));
    /* a step stops preempting for want of movers at max_num_seqs; the decode pass may add as many */
    plan->preempted = calloc(2 * (size_t)max_num_seqs, sizeof(*plan->preempted));
    plan->failed = calloc(2 * (size_t)max_num_seqs, sizeof(*plan->failed));
    plan->run_start = calloc((size_t)max_num_seqs + 1, sizeof(*plan->run_start));
    plan->dp_cost = calloc((size_t)max_num_seqs + 1, sizeof(*plan->dp_cost));
    plan->dp_from = calloc((size_t)max_num_seqs + 1, sizeof(*plan->dp_from));
    if (!plan->items || !plan->preempted || !plan->failed || !plan->run_start || !plan->dp_cost || !plan->dp_from ||
        cb_kv_ops_reserve(&plan->ops, CB_OPS_RESERVE) != 0) {
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
    free(plan->run_start);
    free(plan->dp_cost);
    free(plan->dp_from);
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
        while (j < n && piece_seq(p, &v[j]) == piece_seq(p, &v[j - 1]) - 1 && v[j].n == v[i].n &&
               !p->run_start[v[j - 1].item])
            j++;
        reverse(v, i, j - 1);
        i = j;
    }
}

/* The cells a graph run holding this piece attends over for its stream: the stream's cells after
 * it, padded (llama.cpp's n_kv). */
static int64_t piece_cells(const cb_plan *p, const cb_row_piece *x, int32_t pad) {
    const cb_plan_item *it = &p->items[x->item];
    int64_t c = (int64_t)it->pos0 + x->k0 + x->n;
    if (pad > 1) c = (c + pad - 1) / pad * pad;
    return c < pad ? pad : c;
}

/* Cuts v[lo, hi) (whole items, consecutive ids ascending) into the graph runs that cost least:
 * run_cells for each run, plus its rows times the most cells one of them attends over (a dynamic
 * program over where each run starts: tens of items). Marks each run's first item but the first. */
static void cut_by_context(const cb_plan *p, const cb_row_piece *v, int32_t lo, int32_t hi, int32_t pad,
                           double run_cells) {
    double *best = p->dp_cost;
    int32_t *from = p->dp_from;
    best[0] = 0;
    for (int32_t j = 1; j <= hi - lo; j++) { /* best[j]: v[lo, lo + j) in runs */
        best[j] = -1;
        int64_t rows = 0, cells = 0;
        for (int32_t i = j - 1; i >= 0; i--) { /* the last run is v[lo + i, lo + j) */
            rows += v[lo + i].n;
            int64_t c = piece_cells(p, &v[lo + i], pad);
            if (c > cells) cells = c;
            double cost = best[i] + run_cells + (double)rows * (double)cells;
            if (best[j] < 0 || cost < best[j]) {
                best[j] = cost;
                from[j] = i;
            }
        }
    }
    for (int32_t j = hi - lo; j > 0; j = from[j])
        if (from[j] > 0) p->run_start[v[lo + from[j]].item] = true;
}

int32_t cb_plan_row_order(const cb_plan *p, int32_t tile, int32_t pad, double run_cells, cb_row_piece *out) {
    int32_t n = p->n_items, n_out = 0;
    cb_row_piece *rest = out + n; /* the second half of out, until the end */
    for (int32_t i = 0; i < n; i++) {
        rest[i] = (cb_row_piece){.item = i, .k0 = 0, .n = p->items[i].n_tokens};
        p->run_start[i] = false;
    }
    sort_by_seq(p, rest, n);
    for (int32_t hi = n; run_cells > 0 && hi > 0;) { /* blocks of consecutive ids cut by context */
        int32_t lo = hi - 1;
        while (lo > 0 && piece_seq(p, &rest[lo - 1]) == piece_seq(p, &rest[lo]) - 1)
            lo--;
        cut_by_context(p, rest, lo, hi, pad, run_cells);
        hi = lo;
    }
    /* A segment (maximal run of consecutive ids not cut above) with a one-row item (a decode row)
     * and longer ones: one graph run takes the first row of every item (split_equal stops at one
     * row a stream there), the rest of each longer item follows in blocks. Else a prompt chunk in
     * the middle of the decode rows would make three graph runs of them. Highest segment first. Only
     * a segment with no next id in the plan: split_equal would take a cut segment's next id into the
     * one-row run from its rest, which comes later in the batch. */
    for (int32_t hi = n; hi > 0;) {
        int32_t lo = hi - 1;
        while (lo > 0 && piece_seq(p, &rest[lo - 1]) == piece_seq(p, &rest[lo]) - 1 && !p->run_start[rest[lo].item])
            lo--;
        bool has_one = false, has_long = false, has_tile = false;
        bool below_next = hi < n && piece_seq(p, &rest[hi]) == piece_seq(p, &rest[hi - 1]) + 1;
        for (int32_t k = lo; k < hi; k++) {
            has_one |= rest[k].n == 1;
            has_long |= rest[k].n > 1;
            has_tile |= rest[k].n == tile; /* its rest would leave the tiled kernel */
        }
        for (int32_t k = lo; k < hi && has_one && has_long && !has_tile && !below_next; k++) {
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

static bool run_continues(const cb_plan *p, const cb_row_piece *v, int32_t j) {
    return j > 0 && piece_seq(p, &v[j]) == piece_seq(p, &v[j - 1]) + 1 && v[j].n == v[j - 1].n;
}

int32_t cb_plan_graph_runs(const cb_plan *p, const cb_row_piece *v, int32_t n) {
    int32_t runs = 0;
    for (int32_t j = 0; j < n; j++)
        runs += !run_continues(p, v, j);
    return runs;
}

int64_t cb_plan_attended(const cb_plan *p, const cb_row_piece *v, int32_t n, int32_t pad) {
    int64_t total = 0, rows = 0, cells = 0;
    for (int32_t j = 0; j <= n; j++) {
        if (j == n || !run_continues(p, v, j)) { /* the run before j ends */
            total += rows * cells;
            rows = cells = 0;
        }
        if (j == n) break;
        int64_t c = piece_cells(p, &v[j], pad);
        rows += v[j].n;
        if (c > cells) cells = c;
    }
    return total;
}

/* ---------------------------------------------------------------- a step's cost by runs ---- */

void cb_run_cost_note(cb_run_cost *c, int32_t runs, int32_t rows, int64_t cells, int64_t us, double keep) {
    if (runs <= 0 || rows <= 0 || cells <= 0 || us <= 0) return;
    if (!(keep > 0 && keep <= 1)) keep = 1;
    const double x[3] = {runs, rows, (double)cells};
    c->w = c->w * keep + 1;
    for (int a = 0; a < 3; a++) {
        c->xy[a] = c->xy[a] * keep + x[a] * (double)us;
        for (int b = 0; b < 3; b++)
            c->xx[a][b] = c->xx[a][b] * keep + x[a] * x[b];
    }
}

static double det3(const double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
}

double cb_run_cost_cells(const cb_run_cost *c) {
    if (c->w < 3) return 0;
    double d = det3(c->xx);
    /* steps whose cells follow their rows (one context) leave the system near singular: no answer */
    if (!(fabs(d) > 1e-9 * c->xx[0][0] * c->xx[1][1] * c->xx[2][2])) return 0;
    double coef[3];
    for (int k = 0; k < 3; k++) { /* Cramer's rule: column k replaced by the right-hand side */
        double m[3][3];
        memcpy(m, c->xx, sizeof(m));
        for (int a = 0; a < 3; a++)
            m[a][k] = c->xy[a];
        coef[k] = det3(m) / d;
    }
    if (!(coef[0] > 0 && coef[2] > 0)) return 0;
    return coef[0] / coef[2];
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
