/* scheduler.h — one token budget per step: decode rows first, then prefill chunks, then
 * admissions while max_num_seqs, the budget and the KV budget allow. Preempts (recompute) instead
 * of failing when a decode step would not fit. No llama.h, no I/O, no clock: the engine passes
 * time in, so a fake runner can drive it through thousands of steps in a unit test.
 *
 * A step is: cb_sched_step -> (run the plan) -> cb_sched_commit, or cb_sched_rollback if the run
 * failed. Finished requests leave through cb_sched_finish. Not thread-safe: the engine thread
 * owns a scheduler. */
#ifndef CB_SCHEDULER_H
#define CB_SCHEDULER_H

#include "kv.h"
#include "prefix.h"
#include "request.h"
#include "streams.h"

typedef enum { CB_MODE_CONTINUOUS = 0, CB_MODE_STATIC = 1 } cb_mode;

typedef struct {
    cb_mode mode;
    int32_t max_num_seqs;       /* running at once; also the number of KV sequence ids */
    int32_t max_batched_tokens; /* token budget of one step (>= max_num_seqs) */
    int32_t prefill_chunk;      /* per-request prompt tokens per step; 0 = whole prompt at once */
    int32_t kv_reserve;         /* cells an admission leaves free for decode growth */
    int32_t cache_max_idle;     /* idle prefix-cache cells kept, LRU leaves beyond go; 0 = no limit */
    int64_t priority_aging_us;  /* > 0: a request gains a priority point per this much time since its
                                   t_submit_us (for order and for preemption victims); 0 = fixed priorities */
} cb_sched_config;

typedef struct {
    cb_request *req;
    int32_t pos0;     /* first token index = the request's n_computed */
    int32_t n_tokens; /* tokens [pos0, pos0 + n_tokens) of req->tokens go in the batch */
    bool logits;      /* the last of them needs logits (it completes the request's pending tokens) */
} cb_plan_item;

typedef struct {
    cb_plan_item *items; /* (max_num_seqs) */
    int32_t n_items;
    int32_t n_tokens;         /* batch rows */
    int32_t n_decode;         /* items of one generated token (decode rows); a prompt token is prefill */
    int32_t n_prefill_tokens; /* the other rows */
    cb_kv_ops ops;            /* changes to the cells to apply, in order, before the batch (releases, shares,
                                 publications, evictions); owned by the plan */
    cb_request **preempted;   /* (2 x max_num_seqs) requests preempted by this step, for events */
    int32_t n_preempted;
} cb_plan;

typedef struct cb_sched cb_sched;

typedef struct {
    int64_t steps, preemptions, wasted_decode_slots, admitted, finished;
    int64_t stream_moves; /* split layout: running requests moved to close a gap (compact_streams) */
} cb_sched_stats;

/* Returns NULL on a bad config (zeros, budget < max_num_seqs) or allocation failure. The
 * scheduler keeps pointers to kv and to every added request but owns neither. */
cb_sched *cb_sched_new(const cb_sched_config *cfg, cb_kv *kv);
void cb_sched_free(cb_sched *s);

/* Shares cached prefixes through px (unified layout: prefix.h; NULL = off, the default). Call before the
 * first step; the scheduler does not own px. */
void cb_sched_set_prefix(cb_sched *s, cb_prefix *px);

/* Shares prefixes through sc instead (split layout: streams as cache entries, streams.h). Call
 * before the first step; not owned. At most one of px and sc. */
void cb_sched_set_streams(cb_sched *s, cb_streams *sc);

/* Evicts every cached prefix no running request uses (the removals go in the next plan's ops).
 * Returns the cells freed. */
int32_t cb_sched_drop_cache(cb_sched *s);

/* Queues a request (state WAITING). The caller checks it can ever fit (cb_sched_fits). */
void cb_sched_add(cb_sched *s, cb_request *r, int64_t arrival);
/* Whether a request of n_total tokens (prompt + what it may generate) could ever be run. */
bool cb_sched_fits(const cb_sched *s, int32_t n_prompt);

/* Plans one step into plan, spending at most budget tokens (<= 0: the configured budget).
 * Returns the number of items (0 when there is nothing to run). */
int32_t cb_sched_step(cb_sched *s, cb_plan *plan, int32_t budget);
/* The plan ran: every item's tokens are now in the cache. */
void cb_sched_commit(cb_sched *s, cb_plan *plan, int64_t now_us);
/* The plan did not run: give its cells back (requests stay where they are; plan->items stay
 * readable until the next step). */
void cb_sched_rollback(cb_sched *s, cb_plan *plan);

/* Takes a running or waiting request out with a final state; its sequence id (or -1) is returned.
 * Its computed tokens go to the prefix cache (when on) and the removal of its cells is queued for
 * the next plan's ops. */
int32_t cb_sched_finish(cb_sched *s, cb_request *r, cb_state final_state);

/* Cell changes made since the last plan (finishes, commits): the engine may apply them before the
 * next step (then it empties the list), or leave them for the next plan's ops. */
cb_kv_ops *cb_sched_pending_ops(cb_sched *s);

int32_t cb_sched_n_running(const cb_sched *s);
int32_t cb_sched_n_waiting(const cb_sched *s);
cb_request *cb_sched_running_at(const cb_sched *s, int32_t i);
cb_request *cb_sched_waiting_at(const cb_sched *s, int32_t i);
const cb_sched_stats *cb_sched_get_stats(const cb_sched *s);
const cb_sched_config *cb_sched_get_config(const cb_sched *s);

/* Rows [k0, k0 + n) of items[item]: a piece of an item's rows in the batch. */
typedef struct {
    int32_t item, k0, n;
} cb_row_piece;

/* The order of the plan's rows in the batch for the split layout, as pieces (out: room for 2 x
 * n_items; returns how many; an item's pieces come in row order). llama.cpp cuts a batch into
 * graph runs of consecutive sequence ids taken in row order, each run as many rows per id as its
 * shortest has left (split_equal). Here a block of consecutive ids holding decode rows and prompt
 * chunks first runs one row of each, then the chunks' rest in blocks of consecutive ids with equal
 * row counts, highest ids first, so different lengths never share a graph run. The unified layout
 * ignores the order. */
int32_t cb_plan_row_order(const cb_plan *plan, cb_row_piece *out);

/* Graph runs llama.cpp makes of these pieces in the split layout, when one ubatch holds the whole
 * plan: a run per block of pieces with consecutive ids (each the previous one's + 1) and equal row
 * counts. */
int32_t cb_plan_graph_runs(const cb_plan *plan, const cb_row_piece *pieces, int32_t n_pieces);

int cb_plan_init(cb_plan *plan, int32_t max_num_seqs);
void cb_plan_free(cb_plan *plan);

#endif
