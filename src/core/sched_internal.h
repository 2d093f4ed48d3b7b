/* sched_internal.h — the scheduler's state, shared by its two files: scheduler.c (match, admit,
 * chunk: who runs and how much) and preempt.c (who gives way, and where its cells go). Core only. */
#ifndef CB_SCHED_INTERNAL_H
#define CB_SCHED_INTERNAL_H

#include "scheduler.h"

#define CB_OPS_RESERVE 1024 /* cb_kv_op: 24 bytes each */

struct cb_sched {
    cb_sched_config cfg;
    cb_kv *kv;
    cb_request **running; /* (max_num_seqs) in admission order */
    int32_t n_running;
    cb_request **waiting; /* (waiting_cap) in run order: see ranks_before */
    int32_t n_waiting;
    size_t waiting_cap;
    cb_cache *cache;                /* not owned */
    cb_kv_ops pending;              /* cell changes made between steps (finish, commit), for the next plan */
    cb_kv_ops *cur;                 /* where changes go now: the plan's ops while planning, else pending */
    int32_t group_size, group_left; /* static mode: the current group */
    bool forming;                   /* static mode: this step's admissions start a new group */
    int32_t step_chunk;             /* split layout: this step's prompt chunk length (split_chunk) */
    bool prefill_step;              /* this step runs at prefill_step_tokens: nobody decodes */
    int32_t tile_cap;               /* tile_chunks: the step's tokens a tile-shaped chunk may reach */
    int32_t prompt_left;            /* short prompts' tokens this step may still take by its pace; INT32_MAX: unpaced */
    cb_sched_stats stats;
    /* (max_num_seqs) scratch of a step's draft choice (schedule_drafts) */
    int32_t *sp_item, *sp_avail, *sp_k;
    double *sp_rate;
};

/* The aged rank key of r (cfg.priority_aging_us > 0). */
int64_t cb_sched_aged_key(const cb_sched *s, const cb_request *r);
/* Puts r back in the waiting queue in run order; false when the queue cannot grow. */
bool cb_sched_requeue(cb_sched *s, cb_request *r);
/* Takes arr[i] out of an array of n requests, keeping the order. */
void cb_sched_remove_at(cb_request **arr, int32_t *n, int32_t i);
/* r leaves its sequence (its cells go back to the cache); no-op without one. */
void cb_sched_release_seq(cb_sched *s, cb_request *r);

#endif
