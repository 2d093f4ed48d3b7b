/* scheduler.h — one token budget per step: decode rows first, then prefill chunks, then
 * admissions while max_num_seqs, the budget and the KV budget allow. Preempts instead of failing
 * when a decode step would not fit: the victim's cells are saved to host memory (swap.h) or
 * dropped, to be recomputed. No llama.h, no I/O, no clock: the engine passes
 * time in, so a fake runner can drive it through thousands of steps in a unit test.
 *
 * A step is: cb_sched_step -> (run the plan) -> cb_sched_commit, or cb_sched_rollback if the run
 * failed. Finished requests leave through cb_sched_finish. Not thread-safe: the engine thread
 * owns a scheduler. */
#ifndef CB_SCHEDULER_H
#define CB_SCHEDULER_H

#include "cache.h"
#include "kv.h"
#include "plan.h"
#include "request.h"
#include "spec.h"
#include "swap.h"

typedef enum { CB_MODE_CONTINUOUS = 0, CB_MODE_STATIC = 1 } cb_mode;

typedef struct {
    cb_mode mode;
    int32_t max_num_seqs;        /* running at once; also the number of KV sequence ids */
    int32_t max_batched_tokens;  /* token budget of one step (>= max_num_seqs) */
    int32_t prefill_step_tokens; /* > max_batched_tokens: a step in which no request decodes (prompts alone: no
                                    gap between tokens to keep short) takes up to this many, a request's chunk
                                    too, past prefill_chunk; 0: max_batched_tokens (cb_sched_step) */
    int32_t prefill_chunk;       /* per-request prompt tokens per step; 0 = whole prompt at once */
    int32_t kv_reserve;          /* cells an admission leaves free for decode growth */
    int32_t split_tile;          /* split layout: rows under which a stream's attention leaves its tiled kernel
                                    (the runtime's CB_RUNNER_FA_TILE; plan.h) */
    bool exact_hits;             /* split layout: a hit computes its prompt's last split_tile tokens again (its
                                    first logits then come from the tiled kernel, as cold: bit for bit) */
    bool tile_chunks;            /* unified layout, one graph a step (the long lane): a cut prompt chunk is a
                                    split_tile at least and leaves a tile at least (cb_plan_tile_chunk); one may
                                    pass a step's budget by under a tile, within max_batched_tokens, unless strict */
    int32_t wait_tokens;         /* > 0, unified layout (the long lane): nobody is admitted while a running
                                    request computes its prompt, or decodes with at most this many tokens left
                                    to its max_tokens (every row attends every cell in play: two long requests
                                    at once make each one's rows attend both); one with more left lets the
                                    queue's head in beside it (no head-of-line wait behind a long answer) */
    int32_t max_logit_rows;      /* prompt rows of a step that may want logits (cb_request.all_logits_to); a
                                    request wanting more is chunked, whatever prefill_chunk says (in the
                                    split layout a prompt's last piece may add up to split_tile - 1) */
    int64_t priority_aging_us;   /* > 0: a request gains a priority point per this much time since its
                                    t_submit_us (for order and for preemption victims); 0 = fixed priorities */
    cb_swap *swap;               /* swap space for preempted requests' cells (swap.h; not owned); NULL: none */
    const cb_step_pace *pace;    /* continuous mode with prefill_chunk > 0: a step's tokens of requests that fit
                                    split_tile, beside decode rows, are bounded by time too, at pace_share
                                    (plan.h; not owned, the engine measures it); NULL: by the budget alone */
    double pace_share;
    /* Speculation (spec.h): what a step's rows cost, fitted by the engine on its steps (not owned);
     * NULL: no draft rows. Decoding requests with drafts ready (cb_request.draft) get the draft rows
     * cb_spec_choose finds worth their time, within the budget and the cells; until the costs are
     * fitted a row is taken to cost a tenth of a step's fixed part. (A request whose drafts are not
     * checked still learns their rate: the engine compares its first draft with what came.) */
    const cb_row_cost *spec_cost;
    int32_t max_draft_rows; /* draft rows of a step at most (each wants logits); 0: no bound */
} cb_sched_config;

typedef struct cb_sched cb_sched;

typedef struct {
    int64_t steps, preemptions, wasted_decode_slots, admitted, finished;
    int64_t swaps;        /* preemptions whose cells were saved to host memory (the rest recompute) */
    int64_t stream_moves; /* split layout: running requests moved to close a gap (compact_streams) */
} cb_sched_stats;

/* Returns NULL on a bad config (zeros, budget < max_num_seqs) or allocation failure. The
 * scheduler keeps pointers to kv, to the prefix cache (cache.h; cb_cache_new_none for none) and to
 * every added request but owns none of them. */
cb_sched *cb_sched_new(const cb_sched_config *cfg, cb_kv *kv, cb_cache *cache);
void cb_sched_free(cb_sched *s);

/* Evicts every cached prefix no running request uses (the removals go in the next plan's ops).
 * Returns the cells freed. */
int32_t cb_sched_drop_cache(cb_sched *s);

/* Queues a request (state WAITING). The caller checks it can ever fit (cb_sched_fits). */
void cb_sched_add(cb_sched *s, cb_request *r, int64_t arrival);
/* Whether a request of n_total tokens (prompt + what it may generate) could ever be run. */
bool cb_sched_fits(const cb_sched *s, int32_t n_prompt);

/* Plans one step into plan, spending at most budget tokens (<= 0: the configured budget, which is
 * prefill_step_tokens when no running request decodes; a budget given is never raised); strict:
 * not a token more, also for tile_chunks (a step planned again after llama.cpp found no room must
 * be smaller). Returns the number of items (0 when there is nothing to run). */
int32_t cb_sched_step(cb_sched *s, cb_plan *plan, int32_t budget, bool strict);
/* Running requests whose next row is a generated token's (decode rows of the next step). */
int32_t cb_sched_n_decoding(const cb_sched *s);
/* The plan ran: every item's tokens are now in the cache. */
void cb_sched_commit(cb_sched *s, cb_plan *plan, int64_t now_us);
/* The plan did not run: give its cells back (requests stay where they are; plan->items stay
 * readable until the next step). */
void cb_sched_rollback(cb_sched *s, cb_plan *plan);

/* Takes a running or waiting request out with a final state; its sequence id (or -1) is returned.
 * Its computed tokens go to the prefix cache (when on) and the removal of its cells is queued for
 * the next plan's ops. */
int32_t cb_sched_finish(cb_sched *s, cb_request *r, cb_state final_state);

/* A restore of r's saved cells failed (the runner set r->swap.state to CB_SWAP_FAILED; its
 * sequence holds its shared prefix only), or its load from the prefix cache's host tier did (the
 * runner set r->cache.load_failed; its sequence holds nothing), after the plan was rolled back: r
 * computes the rest again. */
void cb_sched_restore_failed(cb_sched *s, cb_request *r);

/* Takes a running or waiting request out to run elsewhere (the engine's long lane), not finished:
 * its computed tokens go to the prefix cache as a finish's do, its sequence id is released. */
void cb_sched_remove(cb_sched *s, cb_request *r);

/* Cell changes made since the last plan (finishes, commits): the engine may apply them before the
 * next step (then it empties the list), or leave them for the next plan's ops. */
cb_kv_ops *cb_sched_pending_ops(cb_sched *s);

int32_t cb_sched_n_running(const cb_sched *s);
int32_t cb_sched_n_waiting(const cb_sched *s);
/* Whether a waiting request is being saved by the plan just made (an empty plan on an idle engine is
 * then not a dead end: the next step admits or unpins). */
bool cb_sched_saving(const cb_sched *s);
cb_request *cb_sched_running_at(const cb_sched *s, int32_t i);
cb_request *cb_sched_waiting_at(const cb_sched *s, int32_t i);
const cb_sched_stats *cb_sched_get_stats(const cb_sched *s);
const cb_sched_config *cb_sched_get_config(const cb_sched *s);

#endif
