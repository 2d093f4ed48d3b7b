/* request.h — one request as the scheduler sees it: token buffer, counters, state.
 * Pure data, no llama.h. Prefill and decode are not phases: a request has tokens
 * [0, n_prompt + n_generated) of which the first n_computed are in the KV cache; what is left to
 * compute (pending) is a prefill when it is more than one token and a decode row when it is one.
 * After a recompute preemption n_computed drops to 0 and the same rule resumes it. */
#ifndef CB_REQUEST_H
#define CB_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Ordered: every finished state compares greater than every live one. */
typedef enum {
    CB_WAITING = 0,
    CB_RUNNING,
    CB_PREEMPTED, /* back in the waiting queue, cells freed, to be recomputed */
    CB_FINISHED_STOP,
    CB_FINISHED_LENGTH,
    CB_FINISHED_CANCELLED,
    CB_FINISHED_ERROR,
} cb_state;

#define CB_STATE_FINISHED(s) ((s) >= CB_FINISHED_STOP)

typedef struct cb_request {
    int64_t id;
    int64_t arrival; /* admission order key: smaller is older; set by cb_sched_add */
    int32_t priority;
    cb_state state;

    int32_t *tokens; /* (cap) prompt then generated tokens; owned */
    int32_t cap;     /* n_prompt + max_tokens, fixed at creation */
    int32_t n_prompt;
    int32_t n_generated;
    int32_t n_computed; /* tokens whose KV is in the cache */
    int32_t max_tokens;

    int32_t seq_id; /* KV sequence while running, else -1 */
    /* the prefix cache's record of the request (cache.c; the scheduler does not read it): radix,
     * tokens [0, len) are cached cells it shares on the path it locked down to node, dead once it
     * cannot publish (it computed duplicates) */
    struct {
        void *node;
        int32_t len;
        bool dead;
        /* streams: the host-tier entry (hostcache.h) its admission queued a load of, until the
         * runner made it; load_failed: the load could not be made (the sequence holds nothing) */
        void *host;
        bool load_failed;
    } cache;
    /* prompt tokens shared from the cache at its first admission: usage's cached tokens. A later
     * admission (after a preemption, a move to the long lane) finds what the request computed itself,
     * which its client was not spared. */
    int32_t n_cached;
    /* Rows [all_logits_from, all_logits_to) of the prompt want logits too (the prompt's
     * log-probabilities; those before all_logits_from have them already). Until they are delivered
     * (then all_logits_to is 0) the request shares no cached prefix longer than all_logits_from: a
     * cached row has no logits. */
    int32_t all_logits_from, all_logits_to;
    int32_t n_preemptions;
    /* Swap (swap.h): when preempted it may keep its KV cells [from, to) in host memory (the first
     * `from` stay in the prefix cache, held by `pin`), to be put back instead of recomputed. */
    struct {
        int state; /* cb_swap_state */
        int32_t from, to;
        int64_t reserved; /* bytes counted against the swap space */
        uint8_t *data;    /* (size) what llama.cpp saved; owned */
        size_t size;
        void *pin; /* the prefix cache's hold on [0, from) (cache.h), or NULL */
    } swap;
    /* Speculation (spec.h): the engine writes `avail` draft tokens after the request's tokens (in
     * tokens[n_tokens, n_tokens + avail), within cap) before a step, with the rate they hold at; the
     * scheduler puts some of them in the step's plan beside its decode row (cb_plan_item.n_draft). */
    struct {
        int32_t avail;
        double rate;
    } draft;
    int32_t in_plan;    /* tokens scheduled in the current (uncommitted) step */
    bool static_member; /* belongs to the current static group */

    int64_t t_submit_us, t_scheduled_us, t_first_token_us, t_finish_us;
    void *rt; /* the engine's per-request state (sampler, text), opaque here */
} cb_request;

/* Allocates a request holding a copy of the prompt. Returns NULL on allocation failure or bad
 * arguments (n_prompt < 1, max_tokens < 1). The caller owns it; free with cb_request_free. */
cb_request *cb_request_new(int64_t id, const int32_t *prompt, int32_t n_prompt, int32_t max_tokens);
void cb_request_free(cb_request *r);

static inline int32_t cb_request_n_tokens(const cb_request *r) { return r->n_prompt + r->n_generated; }
static inline int32_t cb_request_pending(const cb_request *r) { return cb_request_n_tokens(r) - r->n_computed; }
/* Rows among the next n pending tokens that want logits for the prompt's log-probabilities
 * ([all_logits_from, all_logits_to)). */
static inline int32_t cb_request_logit_rows(const cb_request *r, int32_t n) {
    int32_t lo = r->n_computed > r->all_logits_from ? r->n_computed : r->all_logits_from;
    int32_t hi = r->n_computed + n < r->all_logits_to ? r->n_computed + n : r->all_logits_to;
    return hi > lo ? hi - lo : 0;
}

/* Appends a sampled token. Returns false (and appends nothing) when max_tokens is reached. */
bool cb_request_append(cb_request *r, int32_t token);

#endif
