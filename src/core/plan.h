/* plan.h — one step's plan, and how its rows go into llama.cpp's batch.
 *
 * The scheduler fills a plan (scheduler.h); the runner turns it into a llama_batch. In the split
 * KV layout llama.cpp cuts a batch into graph runs (each a pass over the weights) of consecutive
 * sequence ids taken in row order, each run as many rows per id as its shortest has left
 * (split_equal), and a stream given fewer rows than the flash-attention tile leaves the tiled
 * kernel for one row at a time. Those kernel facts (the tile comes from runtime, the layer that
 * knows ggml) shape the batch here, not in the scheduler: which rows go first (cb_plan_row_order)
 * and how long a step's prompt chunks are (cb_plan_split_chunk). The unified layout needs none of
 * it. No llama.h. */
#ifndef CB_PLAN_H
#define CB_PLAN_H

#include "kv.h"
#include "request.h"

typedef struct {
    cb_request *req;
    int32_t pos0;     /* first token index = the request's n_computed */
    int32_t n_tokens; /* tokens [pos0, pos0 + n_tokens) of req->tokens go in the batch */
    bool logits;      /* the last of them needs logits (it completes the request's pending tokens) */
    int32_t n_draft;  /* of n_tokens, draft tokens after a decode row (each wants logits; the commit counts
                         none of them computed: the engine adds those that hold) */
} cb_plan_item;

typedef struct {
    cb_plan_item *items; /* (max_num_seqs) */
    int32_t n_items;
    int32_t n_tokens;         /* batch rows */
    int32_t n_decode;         /* items of one generated token (decode rows); a prompt token is prefill */
    int32_t n_prefill_tokens; /* the other rows */
    int32_t n_paced_tokens;   /* of them, rows of requests a step pace cuts (scheduler.h: those that fit a tile) */
    int32_t n_draft_rows;     /* draft tokens of the decode items (plan items' n_draft summed) */
    int32_t n_logit_rows;     /* prompt rows wanting logits besides the items' last (cb_request.all_logits_to) */
    cb_kv_ops ops;            /* changes to the cells to apply, in order, before the batch (releases, shares,
                                 publications, evictions); owned by the plan */
    cb_request **preempted;   /* (2 x max_num_seqs) requests preempted by this step, for events */
    int32_t n_preempted;
    cb_request **failed; /* (2 x max_num_seqs) requests this step could not keep (out of memory for
                            the waiting queue): state CB_FINISHED_ERROR, for the engine to end */
    int32_t n_failed;
    /* scratch of cb_plan_row_order (max_num_seqs + 1 each): where a block of consecutive ids is cut
     * into graph runs by context */
    bool *run_start;
    double *dp_cost;
    int32_t *dp_from;
} cb_plan;

/* Returns 0, or -1 on allocation failure (nothing left allocated). */
int cb_plan_init(cb_plan *plan, int32_t max_num_seqs);
void cb_plan_free(cb_plan *plan);

/* Split layout: the length of a cut prompt chunk that keeps a step's graph runs few and tiled.
 * chunks of a step are equal (the first sets the length: step_chunk, 0 at the start of a step; a
 * longer one is cut to it, a shorter one waits), a prompt's last piece goes whole, a cut that
 * would leave a last piece under the tile leaves a tile instead (a last piece of 59 rows after 830
 * cells took 1 s in the one-row kernel, 4x a tiled 64), and a cut chunk under the tile waits unless
 * the plan is empty (or `cap`, the most a configuration allows, is smaller). n: what the budget
 * and cells allow; pending: what the request has left. Returns the chunk, 0 to wait. */
int32_t cb_plan_split_chunk(int32_t *step_chunk, int32_t tile, int32_t cap, bool plan_empty, int32_t n,
                            int32_t pending);

/* One pool (the long lane's unified layout, where a step's rows are one graph): the length of a
 * prompt chunk with `pending` tokens left, `room` in the step's budget, `cap` in its batch (cap >=
 * room). Whole if it fits; a cut chunk is a tile at least and leaves a tail of a tile at least:
 * then up to cap, past room by under a tile, the rest taken whole when two tiles would not fit it
 * (a tail under the tile alone would cost more than the extra rows). 0: it waits (a piece under the
 * tile beside other rows; alone, it runs; or room is spent). */
int32_t cb_plan_tile_chunk(int32_t pending, int32_t room, int32_t cap, int32_t tile, bool alone);

/* Rows [k0, k0 + n) of items[item]: a piece of an item's rows in the batch. */
typedef struct {
    int32_t item, k0, n;
} cb_row_piece;

/* The order of the plan's rows in the batch for the split layout, as pieces (out: room for 2 x
 * n_items; returns how many; an item's pieces come in row order). A block of consecutive ids
 * holding decode rows and prompt chunks first runs one row of each (unless a chunk is exactly one
 * tile: its rest would leave the tiled kernel), then the chunks' rest in blocks of consecutive ids
 * with equal row counts, highest ids first, so different lengths never share a graph run.
 *
 * A graph run attends over the most cells any of its streams holds (llama.cpp pads that to `pad`):
 * without flash attention, which skips masked cells, a decode row of a 256-token chat beside a
 * 4,096-token agent pays for 4,096 cells (a 16-row step 2.6x slower than in two runs: BENCHMARKS.md,
 * 'The attention path'). run_cells > 0: what one more graph run costs, in row-cells of attention
 * (a row attending one cell); a block of consecutive ids is then cut into runs where that minimizes
 * runs x run_cells + the rows x padded cells each run attends. 0: never cut (flash attention). */
int32_t cb_plan_row_order(const cb_plan *plan, int32_t tile, int32_t pad, double run_cells, cb_row_piece *out);

/* Graph runs llama.cpp makes of these pieces in the split layout, when one ubatch holds the whole
 * plan: a run per block of pieces with consecutive ids (each the previous one's + 1) and equal row
 * counts. */
int32_t cb_plan_graph_runs(const cb_plan *plan, const cb_row_piece *pieces, int32_t n_pieces);

/* The attention those graph runs do, in row-cells: each run's rows times the cells it attends over
 * (the most any of its streams holds after the run, padded to `pad`). */
int64_t cb_plan_attended(const cb_plan *plan, const cb_row_piece *pieces, int32_t n_pieces, int32_t pad);

/* A step's cost as graph runs, rows and attended row-cells: a least-squares fit over steps, the sums
 * decaying. What cutting a block into runs weighs (cb_plan_row_order's run_cells). */
typedef struct {
    double xx[3][3], xy[3], w;
} cb_run_cost;

/* A step of `runs` graph runs, `rows` rows and `cells` attended row-cells took `us`; the sums decay
 * by `keep` (in (0, 1]) first. */
void cb_run_cost_note(cb_run_cost *c, int32_t runs, int32_t rows, int64_t cells, int64_t us, double keep);
/* One more graph run's cost in attended row-cells (its fitted time over a row-cell's); 0 until the
 * steps seen fit all three with positive costs (steps of one context fit no cell cost). */
double cb_run_cost_cells(const cb_run_cost *c);

/* A step's length in time. A budget in tokens bounds a step's pause only where a token's cost is
 * known: a row of the long lane attends over a pool of thousands of cells and costs several times a
 * stream's, more as the pool fills. A cb_pace measures what a token of one graph costs (a moving
 * average over its steps, the latest weighing half) and gives the tokens that fit a time. */
typedef struct {
    double token_us; /* one token of a step; 0 until a step is noted */
} cb_pace;

/* A step of `tokens` tokens took `us`. */
void cb_pace_note(cb_pace *p, int32_t tokens, int64_t us);
/* The tokens that take about `us`, at least lo and at most hi (lo <= hi); hi until measured. */
int32_t cb_pace_tokens(const cb_pace *p, double us, int32_t lo, int32_t hi);

/* How long a step's prompt may hold the decoding requests back. Every prompt row of a step
 * lengthens the gap each decoding request sees by its time; a fixed token budget lets one
 * admission triple a full batch's gap. A cb_step_pace measures, in steps with at least half the
 * sequences decoding, a decode row (decode-only steps) and a prompt token (steps whose prompt rows
 * are all paced ones, their decode rows taken off: what a chunk of the size paced costs, a second
 * graph run included), and
 * gives a step with d decode rows the prompt tokens that take, in sum over those d requests, a
 * share of what one full decode step (max_seqs rows) takes them: at share 1 with every sequence
 * decoding the gap at most doubles, with few decoding a prompt goes on nearly at the budget (time
 * to first token comes first there). Both costs are moving averages. */
typedef struct {
    double row_us;   /* a decode row at half a batch or more; 0 until measured */
    double token_us; /* a prompt token beside decode rows; 0 until measured */
} cb_step_pace;

/* A step of decode_rows generated tokens and prompt_tokens prompt tokens took us. */
void cb_step_pace_note(cb_step_pace *p, int32_t decode_rows, int32_t prompt_tokens, int64_t us, int32_t max_seqs);
/* The prompt tokens a step with decode_rows decode rows may take at this share: at least
 * CB_STEP_PACE_MIN, and INT32_MAX when nothing decodes, share <= 0 or a cost is not measured yet. */
int32_t cb_step_pace_prompt(const cb_step_pace *p, int32_t decode_rows, int32_t max_seqs, double share);
#define CB_STEP_PACE_MIN 8

#endif
