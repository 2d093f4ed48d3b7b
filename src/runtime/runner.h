/* runner.h — turns a scheduler plan into one llama_batch and one llama_decode.
 * Engine thread only. The plan's cell changes (cb_kv_op) are applied, in order, before the batch. */
#ifndef CB_RUNNER_H
#define CB_RUNNER_H

#include "../core/hostcache.h"
#include "../core/plan.h"
#include "../core/swap.h"
#include "model.h"

struct llama_batch;

/* Rows under which ggml's CPU flash attention leaves its tiled kernel for a stream (GGML_FA_TILE_Q
 * of the pinned ggml): the split layout's chunks are shaped around it (plan.h). */
#define CB_RUNNER_FA_TILE 64

/* llama.cpp pads the cells a graph run attends over to a multiple of this (llama_kv_cache::get_n_kv:
 * 256 at least), the most any stream of the run holds. */
#define CB_RUNNER_KV_PAD 256

/* A batch row whose logits an item's prompt log-probabilities want: row `row` holds position pos. */
typedef struct {
    int32_t item, pos, row;
} cb_lp_row;

typedef struct {
    cb_model *model;
    struct llama_batch *batch; /* (n_batch rows) reused every step */
    int32_t n_batch;
    int32_t *logit_row; /* (max items) batch row whose logits item i gets, or -1 */
    /* An item with drafts (cb_plan_item.n_draft) has logits on its decode row and each draft row:
     * row j of them (0: the decode row) is draft_row[draft_base[i] + j]. */
    int32_t *draft_base; /* (max items) */
    int32_t *draft_row;  /* (n_batch) */
    cb_row_piece *order; /* (2 x max items) the order the items' rows go in the batch */
    int32_t n_order;
    cb_lp_row *lp; /* (n_batch) rows of prompts that want every row's logits (cb_request.all_logits_to) */
    int32_t n_lp;
    int32_t n_runs;    /* graph runs of the last batch (cb_plan_graph_runs; unified: 1) */
    int64_t attended;  /* the last batch's attention in row-cells (cb_plan_attended; unified: 0) */
    double run_cells;  /* split layout: what one more graph run costs in attended row-cells, set by the
                          engine (cb_plan_row_order); 0: blocks are never cut by context */
    int64_t decode_us; /* time spent inside llama_decode since init, every call counted (a call that
                          found no KV slot too): what the step's report sets apart from host work */
    cb_swap *swap;     /* the engine's swap space: its copy cost follows every save and restore; may be NULL */
    cb_request **restore_failed; /* (max items) requests of the last run whose restore or load failed */
    int32_t n_restore_failed, max_restore_failed; /* restores are admissions: at most max items a step */
    /* (model's n_seq_max) split layout: CB_RUNNER_COPY_READ / _WRITE when a stream copy queued
     * since the last decode reads or writes the sequence's stream (llama.cpp makes it at the next
     * decode, while the host tier's stash and load act at once: they refuse such streams) */
    uint8_t *pending;
    int32_t n_pending;
    /* faults injected by tests (cb_runner_set_fault) */
    int fault_rc, fault_left;
    int64_t abort_after, nodes_seen;
    int64_t last_nodes; /* nodes_seen of the last decode that had an abort count armed */
} cb_runner;

int cb_runner_init(cb_runner *r, cb_model *m, int32_t max_items);
void cb_runner_free(cb_runner *r);

/* Applies the plan's cell changes, then decodes its items. Returns llama_decode's code:
 * 0 ok; 1 no KV slot (the cache is as before the call: roll back and retry smaller);
 * 2 aborted; < 0 error. Returns -100 for a plan larger than the batch, and
 * CB_RUNNER_RESTORE_FAILED without decoding when a restore of saved cells failed (the requests are
 * in restore_failed, their swap state CB_SWAP_FAILED or cache.load_failed set: roll back, let them
 * recompute, plan again). */
#define CB_RUNNER_RESTORE_FAILED (-200)
#define CB_RUNNER_COPY_READ 1
#define CB_RUNNER_COPY_WRITE 2
int cb_runner_run(cb_runner *r, const cb_plan *plan);

/* Swap (swap.h): saves seq's cells [from, to) into req->swap (data, size; state SAVED, or FAILED
 * when llama.cpp or memory refused), dropping seq's cells before `from` first (they stay in the prefix
 * cache). Restores req->swap's cells into seq (which must hold nothing yet): true when done (the
 * data freed, the swap record cleared); false: the data freed, state FAILED, seq empty. */
bool cb_runner_save(cb_runner *r, cb_request *req, int32_t seq, int32_t from, int32_t to);
bool cb_runner_restore(cb_runner *r, cb_request *req, int32_t seq);

/* The prefix cache's host tier (hostcache.h). cb_runner_stash: seq's cells (`cells` of them) out
 * to entry e, which a stash made and locked (the lock is dropped here; e ends saved or failed);
 * refused (failed) while a stream copy queued since the last decode writes seq's stream: its
 * cells would be read before they are there. cb_runner_load: saved entry e into seq (emptied
 * first), keeping its cells [0, keep), the load and the hit counted; refused while such a copy
 * reads or writes seq's stream (it would copy the loaded cells away, or over them). The caller's
 * lock on e stays. false: seq left empty. */
void cb_runner_stash(cb_runner *r, int32_t seq, int32_t cells, cb_host_entry *e);
/* cb_runner_stash, the cells saved as a context of one stream reads them (the long lane's unified
 * pool, from a stream of the split layout): e fails when llama.cpp's saved state is not of the shape
 * this knows (runner.c). */
void cb_runner_stash_one_stream(cb_runner *r, int32_t seq, int32_t cells, cb_host_entry *e);
/* e (as cb_host_stash gave it) gets the cells of saved entry `from` (a stream of the split layout)
 * in the layout of a context of one stream, as cb_runner_stash_one_stream would save them: a copy,
 * no llama.cpp call; e's lock dropped, e failed when `from` holds no data or is not of that shape. */
void cb_runner_stash_converted(const cb_host_entry *from, cb_host_entry *e);
bool cb_runner_load(cb_runner *r, int32_t seq, cb_host_entry *e, int32_t keep);

/* Cells llama.cpp holds for seq (pos_max + 1, or 0): to check our accounting against. */
int32_t cb_runner_seq_len(cb_runner *r, int32_t seq);

/* Removes seq's cells at positions >= p0 (after a failed decode: back to what the accounting holds). */
void cb_runner_trim(cb_runner *r, int32_t seq, int32_t p0);

/* Applies queued cell changes now, in order, and empties the list (changes made after a step, so
 * that llama.cpp's cells match the accounting between steps). */
void cb_runner_apply_ops(cb_runner *r, cb_kv_ops *ops);

/* Test hook: the next `count` decodes return rc without running (rc != 0), and/or the next decode
 * aborts through llama.cpp's abort callback after `abort_after_nodes` graph nodes (> 0), in the
 * middle of a batch of several graph runs when that is larger than one run. 0s clear it. */
void cb_runner_set_fault(cb_runner *r, int rc, int count, int64_t abort_after_nodes);

#endif
