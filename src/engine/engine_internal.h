/* engine_internal.h — the engine's state, shared by engine.c (the loop thread) and api.c (the
 * thread-safe public functions). Locking: `mu` guards inbox, cancels, live ids, stop and the stats
 * snapshot; `ev_mu` guards the event queue. Everything else belongs to the engine thread. */
#ifndef CB_ENGINE_INTERNAL_H
#define CB_ENGINE_INTERNAL_H

#include "../core/kv.h"
#include "../core/request.h"
#include "../core/scheduler.h"
#include "../core/textout.h"
#include "../runtime/model.h"
#include "../runtime/runner.h"

#include <cobatch.h>
#include <pthread.h>

/* Per-request state the scheduler does not see (cb_request.rt). */
typedef struct {
    struct cobatch_sampling sampling;
    struct llama_sampler *smpl; /* created on the engine thread at intake */
    cb_textout text;
    void *user_data;
    bool ignore_eos;
    bool logit_margins;
} engine_req;

typedef struct {
    struct cobatch_event *v; /* (cap) ring */
    int head, len, cap;
} event_queue;

struct cobatch_engine {
    struct cobatch_engine_params params;
    char *model_path;
    cb_model model;
    cb_runner runner;
    cb_kv kv;
    cb_sched *sched;
    cb_prefix prefix; /* when prefix_on */
    bool prefix_on;
    cb_streams streams; /* when streams_on: the split layout's prefix cache */
    bool streams_on;
    cb_plan plan;
    int32_t n_ctx_seq;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    cb_request **inbox; /* (inbox_cap) submitted, not yet seen by the engine thread */
    int inbox_len, inbox_cap;
    cobatch_req_id *cancels; /* (cancel_cap) */
    int n_cancels, cancel_cap;
    cobatch_req_id *live; /* (live_cap) ids with no FINISHED event queued yet */
    int n_live, live_cap;
    bool stop;
    bool drop_cache; /* cobatch_drop_cached_prefixes was called */
    int64_t next_id;
    struct cobatch_stats stats; /* snapshot, updated after every step */

    /* engine thread only */
    cb_request **reqs; /* (reqs_cap) every request the scheduler holds */
    int n_reqs, reqs_cap;
    int64_t arrivals;
    int64_t n_prompt_computed, n_generated, n_retries; /* copied into stats by update_stats */

    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cond;
    event_queue events;
    int event_fd;
    bool ev_unsignalled; /* engine thread only: events queued since the last engine_wake_pollers */
};

void *engine_main(void *arg);
void engine_free_request(cb_request *r);
/* Queues an event (takes ownership of its strings). Pollers are woken by engine_wake_pollers,
 * once per engine iteration: one wake-up per step, not one per token (on a 2-core machine every
 * wake-up of the server thread takes a core from llama.cpp's threads mid-graph). */
void engine_push_event(cobatch_engine *e, struct cobatch_event *ev);
void engine_wake_pollers(cobatch_engine *e);

#endif
