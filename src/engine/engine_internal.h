/* engine_internal.h — the engine's state, shared by the engine thread's files (engine.c, output.c,
 * speculate.c, lane.c, embd.c) and the callers' (api.c, events.c, chat.c, request.c, init.c). Locking: `mu` guards
 * mailboxes, cancel requests, live ids, the queue count, stop and the stats snapshot; `ev_mu` guards the event queue.
 * When both are held, mu is taken first. Everything else belongs to the engine thread. */
#ifndef CB_ENGINE_INTERNAL_H
#define CB_ENGINE_INTERNAL_H

#include "../core/draft.h"
#include "../core/embd.h"
#include "../core/kv.h"
#include "../core/request.h"
#include "../core/scheduler.h"
#include "../core/spec.h"
#include "../core/textout.h"
#include "../runtime/embd.h"
#include "../runtime/model.h"
#include "../runtime/runner.h"

#include <cobatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#define CB_ATTN_WHY 400 /* bytes of the attention path's why line */

/* Per-request state the scheduler does not see (cb_request.rt). Everything its FINISHED event
 * needs is allocated at submit (err_buf, the text buffer, a slot in the event ring), so a request
 * always ends with its event, also when memory runs out. */
typedef struct {
    struct cobatch_sampling sampling;
    struct cobatch_logit_bias *logit_bias; /* (n_logit_bias) a copy of the request's */
    size_t n_logit_bias;
    struct llama_sampler *smpl;    /* created on the engine thread at intake */
    bool invalid;                  /* the request itself failed it (cobatch_event.invalid) */
    struct llama_sampler *grammar; /* the request's grammar (made at submit, which checks it parses), or NULL */
    struct llama_sampler *think;   /* a chat read for reasoning: follows its reasoning block (budget, count), or NULL */
    bool grammar_waits;            /* the grammar is lazy: it sees no token while a reasoning block is open */
    int32_t n_reasoning;           /* tokens generated inside a reasoning block */
    cb_textout text;
    int32_t *shown; /* (n_shown) control tokens whose text the output shows (a chat's tool-call markers) */
    size_t n_shown;
    size_t n_stop; /* the request's own stop strings: the first of er->text's list */
    char *err_buf; /* (CB_ERR_BUF) the FINISHED event's error message, handed over to it */
    void *user_data;
    bool ignore_eos;
    int64_t max_predict_us; /* > 0: a newline generated later than this after the first token ends the output */
    bool logit_margins;
    bool prompt_only;            /* max_tokens 0: the request ends when its prompt is computed */
    bool logprobs;               /* every TOKEN event carries its token's log-probability */
    int32_t n_top;               /* alternatives per position, for generated and prompt tokens */
    struct cobatch_logprob *plp; /* (n_prompt x (1 + n_top)) prompt log-probabilities being
                                    filled (prompt_logprobs), handed to the first event after the prompt */
    bool plp_ready;              /* plp is whole: the next event takes it */
    bool in_lane;                /* runs in the long lane's pool (lane.c), not the main one */
    bool no_spec;                /* checks no drafts (cobatch_request_params.no_speculation) */
    cb_accept acc;               /* how often its drafts held (speculate.c) */
    int32_t n_drafted, n_accepted;
    int32_t pool_learned; /* its tokens [0, pool_learned) are in spec_pool */
    int32_t *pred;        /* (n_pred) the prediction's tokens (cobatch_request_params.prediction), or NULL */
    int32_t n_pred;
    int32_t pred_from;       /* where in pred the output's last match ended (cb_draft_lookup's from), -1: none */
    int32_t pred_at;         /* the step's drafts start at pred[pred_at]; -1: they are not the prediction's */
    uint8_t *pred_seen;      /* (n_pred) the prediction's tokens the output took (each counted once) */
    int32_t n_pred_accepted; /* how many: usage's accepted_prediction_tokens */
    /* A draft not checked still tells whether it would have held: its first token is compared with
     * the token sampled at shadow_at (0: none pending), so a request's rate learns without rows. */
    int32_t shadow_at, shadow_tok;
    atomic_bool cancel; /* cobatch_cancel asked for it (set under mu while the request is live) */
} cb_engine_req;

#define CB_ERR_BUF 160

struct cobatch_engine;

/* A KV pool and what runs on it: a llama.cpp context's cells, their accounting, the prefix cache,
 * the scheduler and its plan, and the runner that turns a plan into a decode. The engine has two,
 * the main pool and the long lane's; a step runs schedule -> run -> postprocess over each
 * (engine.c). */
typedef struct {
    cb_model *model; /* the context its runner decodes in: the engine's, or the lane's own */
    cb_runner runner;
    cb_kv kv;
    cb_cache *cache;
    cb_sched *sched; /* NULL: no such pool (the lane, off) */
    cb_plan plan;
} cb_pool;

/* lane.c. cb_lane_init: the lane's context, pool and scheduler, once the main pool is made. */
int cb_lane_init(struct cobatch_engine *e, const cb_model_params *mp, int32_t cells, int32_t max_seqs, int32_t budget,
                 int32_t prefill_budget, int64_t aging_us, char *err, size_t errlen);
void cb_lane_free(struct cobatch_engine *e);
/* Queues r (not in the main pool) in the lane. */
void cb_lane_add(struct cobatch_engine *e, cb_request *r);
/* Takes r out of the main pool into the lane, its cells carried there through the host tier (the
 * lane loads them) or, without one, recomputed there; false when out of memory (then r is in
 * neither, state CB_FINISHED_ERROR). */
bool cb_lane_migrate(struct cobatch_engine *e, cb_request *r);
/* The main pool's budget for its next step (cb_sched_step): 0 (its own, a prefill step's when nobody
 * in it decodes) unless a lane request decodes, whose gap between tokens the step is too. */
int32_t cb_lane_main_budget(struct cobatch_engine *e);
/* The tokens of the lane's next step: what the main pool's step left of the batch (it ran `used`
 * tokens), at least a row for each running request and a flash-attention tile of prompt, and in
 * time, while anything else runs, what `allow` prompt tokens take in the main pool; 0 (a prefill step's)
 * when the lane runs alone and nobody in it decodes. */
int32_t cb_lane_budget(struct cobatch_engine *e, int32_t used);

/* Prompt rows of one step that may ask for logits (prompt log-probabilities) beyond the one row per
 * running request: sizes llama.cpp's output buffers (n_vocab floats a row; 12 MB for a 49k
 * vocabulary), so a longer prompt's log-probabilities take several steps. */
#define CB_PROMPT_LOGIT_ROWS 64
/* Draft rows one step may check at most (speculate.c), each with logits: sized into the same output
 * buffers. */
#define CB_SPEC_ROWS 64

/* Events not yet polled, beyond which the engine waits before its next step (back-pressure on a
 * poller that does not keep up; the server drains every event at each wake-up). */
#define CB_EVENT_BACKLOG 4096

typedef struct {
    struct cobatch_event *v; /* (cap) ring; cap >= event_backlog + (2 + spec_max) x max_num_seqs + reserved,
                                so pushing never allocates (a step pushes at most a TOKEN event per
                                request of each pool, and one per draft that held) */
    int head, len, cap;
    int reserved; /* live requests whose FINISHED event is not queued yet */
} cb_event_queue;

/* The kinds of work the engine takes. A request of each is posted into its kind's mailbox on the
 * caller's thread (cb_engine_post: one door, one set of bounds, one id and cancel flag), taken by the
 * engine thread whole, and goes through its kind's lifecycle (engine.c, `cb_kinds`): intake, cancels,
 * the end of the requests never run, shutdown. A kind differs only in how it is stepped. */
enum { CB_KIND_GENERATE, CB_KIND_EMBED, CB_N_KINDS };
typedef struct {
    void **items; /* (cap) requests posted, not yet taken */
    int len;
    size_t cap;
    int32_t open;            /* requests accepted and not finished (counted for the kinds that say when they end) */
    int64_t weight;          /* their weight: an embedding request's inputs */
    int64_t max_weight;      /* > 0: a request that would take weight past it is refused while any weighs */
    const char *weight_unit; /* what the weight counts, for that refusal */
} cb_mailbox;

/* A live request: its id and the flag cobatch_cancel sets (its cb_engine_req's or cb_embd_req's). */
typedef struct {
    cobatch_req_id id;
    atomic_bool *cancel;
} cb_live_req;

/* The long lane (lane.c): a second pool on the same weights, a llama.cpp context of its own with one
 * unified pool of the model's trained context, for requests longer than a stream of the split
 * layout: prompts beyond a stream, and requests that outgrow theirs (recomputed here from their
 * tokens, as a preemption would be). Its scheduler runs a few requests at once, its chunks shaped to
 * flash attention's tile, its steps bounded in time (cb_lane_budget); its prefix cache keeps what a
 * request computed in the host tier only (cb_cache_new_host): an idle cell in a unified pool costs
 * every row. It decodes as a second graph in a step only while it has work. An admission leaves
 * CB_LANE_ROOM cells to grow, and waits while a request there computes its prompt or has at most
 * CB_LANE_WAIT_TOKENS left to its answer (cb_sched_config.wait_tokens): two 16,000-token prompts at
 * once took 1.24x the wall of one after the other, each token 6x slower; a request with a longer
 * answer to come lets the next one in beside it. */
#define CB_LANE_ROOM 64
#define CB_LANE_WAIT_TOKENS 256

typedef struct {
    cb_pool pool;
    cb_model model;      /* the pool's context */
    cb_pace pace;        /* what a lane token costs: a step's tokens by time (cb_lane_budget) */
    int64_t alone_steps; /* steps that ran the lane's graph and not the main pool's */
} cb_lane;

static inline bool cb_lane_on(const cb_lane *L) { return L->pool.sched != NULL; }

/* An embedding request (embd.c): its inputs' tokens, and what its FINISHED event hands over, allocated
 * at submit (the vectors, the error message's buffer, the event's empty text), so that it ends with
 * its event also when memory runs out. Engine thread once taken from the mailbox. */
typedef struct {
    cobatch_req_id id;
    void *user_data;
    atomic_bool cancel;     /* cobatch_cancel asked for it */
    int32_t n_inputs, done; /* inputs; the first `done` have their vectors */
    bool failed;            /* a pass with its inputs failed: it ends with an error */
    int32_t n_tokens;       /* of all its inputs */
    int32_t *tokens;        /* (n_tokens) the inputs' tokens, one after the other */
    int32_t *off;           /* (n_inputs + 1) input i is tokens [off[i], off[i + 1]) */
    float *out;             /* (n_inputs x n_embd) the vectors */
    char *err_buf;          /* (CB_ERR_BUF) */
    char *text;             /* "" (an event's text is never NULL) */
    int64_t t_submit_us, t_scheduled_us;
} cb_embd_req;

/* The embeddings (embd.c): the embedding context, its pace beside generation, and the requests it has
 * taken, oldest first. A step runs one pass at most, after the generation pools (engine.c). */
typedef struct {
    cb_embd_ctx ctx;     /* ctx.ctx NULL: no embeddings */
    cb_embd_pace pace;   /* how many tokens a pass may take beside generation (core/embd.h) */
    cb_embd_req **queue; /* (queue_cap) taken from the mailbox, not finished; oldest first */
    int n_queue;
    size_t queue_cap;
    cb_embd_req **pass;                           /* (COBATCH_EMBD_PASS_INPUTS) the request of each input of the pass */
    float **pass_out;                             /* (COBATCH_EMBD_PASS_INPUTS) where each input's vector goes */
    int64_t requests, inputs, tokens, passes, us; /* copied into stats */
} cb_embd;

static inline bool cb_embd_on(const cb_embd *E) { return E->ctx.ctx != NULL; }

/* embd.c, engine thread. cb_embd_init: the context, made by init once the model is loaded (0, or -1
 * with the message). cb_embd_step: one pass, whose tokens the pace allows after a step whose
 * generation took gen_us (info gets its tokens and time). Its lifecycle: cb_embd_intake, _end, _busy,
 * _req_free (cb_kind, below). */
int cb_embd_init(struct cobatch_engine *e, char *err, size_t errlen);
void cb_embd_free(struct cobatch_engine *e);
void cb_embd_step(struct cobatch_engine *e, int64_t gen_us, struct cobatch_step_info *info);

/* Test hook (testing.h): a fault injected at the runtime boundary of a kind of work's context. */
typedef struct {
    int decode_rc;             /* != 0: the next decodes return this without running */
    int decode_count;          /* how many decodes fail that way (then the hook clears) */
    int64_t abort_after_nodes; /* > 0: the next decode aborts after this many graph nodes */
} cb_engine_fault;

struct cobatch_engine {
    struct cobatch_engine_params params;
    char *model_path;
    char *rpc_servers; /* params.rpc_servers, copied */
    cb_model model;    /* the weights, the vocabulary, and the main pool's context */
    cb_pool main;      /* the main pool (split layout: a stream per request) */
    cb_lane lane;
    cb_embd embd;         /* engine thread, but for its context's facts (fixed at init) */
    cb_swap swap;         /* host memory for preempted requests' cells, the scheduler's and the lane's (swap.h) */
    cb_step_pace pace;    /* what a decode row and a prompt token of a step cost (plan.h), for step_pacing */
    cb_host_cache host;   /* the prefix cache's host tier (hostcache.h; cap 0: none) */
    struct cb_disk *disk; /* its disk tier's files (runtime/disk.h), or NULL */
    bool disk_done;       /* (mu) a write of the disk tier ended: the engine takes it */
    /* speculation (speculate.c): drafts a request checks in a step at most; whether requests draft
     * from their own text (else only from a prediction); what a main-pool step's rows cost (decode
     * steps); how often all requests' drafts held; the totals */
    int32_t spec_max;
    bool spec_ngram, spec_shared;
    cb_ngram_pool *spec_pool;   /* with spec_shared: what followed each n-gram of every request's
                                   computed text (draft.h), for requests whose own text has none */
    char attn_why[CB_ATTN_WHY]; /* how the attention path was chosen (attn.c) */
    cb_row_cost spec_cost;
    cb_run_cost run_cost; /* a main step's time by graph runs, rows and attended cells (cb_plan_row_order) */
    cb_accept spec_all;
    int64_t spec_drafted, spec_accepted, spec_steps;
    int32_t n_ctx_seq;             /* a request's limit: its stream, or the long lane's pool */
    struct llama_token_data *cand; /* (n_vocab) engine thread: candidates of a constrained request's row */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    cb_mailbox mail[CB_N_KINDS]; /* each kind's requests posted and not yet taken by the engine thread */
    int n_cancels;     /* cobatch_cancel calls since the engine last looked (the flags are on cb_engine_req) */
    cb_live_req *live; /* (live_cap) requests with no FINISHED event queued yet */
    int n_live;
    size_t live_cap;
    int n_queued; /* requests not yet running (mail + waiting): what max_queue bounds; exact */
    bool stop;
    bool drop_cache;                   /* cobatch_drop_cached_prefixes was called */
    bool cancel_waiting;               /* cobatch_cancel_waiting was called */
    cb_engine_fault fault[CB_N_KINDS]; /* set by the test hook, armed by the engine thread at its next iteration */
    bool fault_set[CB_N_KINDS];
    int64_t nodes_seen; /* testing.h: graph nodes of the last decode with an abort count armed */
    int64_t next_id;
    struct cobatch_stats stats; /* snapshot, updated after every step */

    /* engine thread only */
    cb_mailbox taken[CB_N_KINDS]; /* each kind's mail as the engine thread took it (swapped with mail) */
    cb_request **reqs;            /* (reqs_cap) every request the scheduler holds */
    int n_reqs;
    size_t reqs_cap;
    int64_t arrivals;
    int64_t n_prompt_computed, n_generated, n_retries; /* copied into stats by update_stats */
    int64_t n_decode_failures;

    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cond;
    pthread_cond_t ev_space; /* signalled when a poll leaves the queue under CB_EVENT_BACKLOG */
    bool ev_stop;            /* under ev_mu: the engine stops, do not wait for space */
    int event_backlog;       /* CB_EVENT_BACKLOG unless a test lowers it */
    cb_event_queue events;
    int event_fd;
    bool ev_unsignalled; /* engine thread only: events queued since the last cb_engine_wake_pollers */
};

void *cb_engine_main(void *arg);
/* The disk tier's writer ended a write (its thread): the engine wakes to take it. */
void cb_engine_disk_wrote(void *arg);
/* output.c: the one way a request ends: leaves the scheduler, emits FINISHED (with any text still held),
 * and is freed. Allocates nothing: the event's strings and its queue slot were reserved at submit,
 * so a request ends with its event even when memory has run out. */
void cb_engine_finish(cobatch_engine *e, cb_request *r, cb_state st, const char *error);
/* output.c: samples r's next token from batch row `row` of m's context, appends, checks its stops,
 * emits it. Returns whether r goes on in its pool (false: it ended, and is freed, or it moved to the
 * long lane). */
bool cb_engine_sample_one(cobatch_engine *e, cb_request *r, const cb_model *m, int32_t row, int64_t now);
/* speculate.c, main pool. cb_spec_prepare: before a step is planned, the drafts of its decoding
 * requests (cb_request.draft). cb_spec_check: after the decode, item i's decode row and drafts are
 * sampled in order while the drafts hold; the cells of those that did not are dropped. */
void cb_spec_prepare(cobatch_engine *e);
/* The shared n-gram pool, with n-gram speculation on: 0, or -1 when memory ran out. */
int cb_spec_init(cobatch_engine *e);
void cb_spec_check(cobatch_engine *e, cb_pool *pool, const cb_plan *plan, int32_t i, int64_t now);
void cb_engine_free_request(cb_request *r);
/* Refuses a request: err (may be NULL) gets the code, the field at fault and the message. Returns
 * the code. */
__attribute__((format(printf, 4, 5))) static inline int cb_engine_refuse(struct cobatch_error *err, int code,
                                                                         const char *param, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    err->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return code;
}
/* Posts req, a request of `kind`, into its mailbox, on the caller's thread: refused when the engine is
 * stopping, when its kind's weight bound or max_queue is reached, or out of memory; else its FINISHED
 * event's slot is reserved, it is live with its cancel flag (a new id, written to *id_out before the
 * engine thread can see it), counted as queued and open, and the engine thread woken. Returns the id,
 * or the code with err filled (the caller frees req). */
cobatch_req_id cb_engine_post(cobatch_engine *e, int kind, void *req, cobatch_req_id *id_out, atomic_bool *cancel,
                              int64_t weight, struct cobatch_error *err);
/* Engine thread, as request id of `kind` posted with `weight` ends: no longer live (it can no longer
 * be cancelled), nor open. */
void cb_engine_done(cobatch_engine *e, int kind, cobatch_req_id id, int64_t weight);

/* Which of a kind's requests cb_kind.end ends, as cancelled: those whose flag cobatch_cancel set, those
 * never scheduled (cobatch_cancel_waiting), or all (shutdown; the mail taken and not yet in too). */
typedef enum { CB_END_FLAGGED, CB_END_NEVER_RAN, CB_END_ALL } cb_end_which;
/* A kind's lifecycle on the engine thread (engine.c's cb_kinds, one entry a kind). */
typedef struct {
    void (*intake)(cobatch_engine *e, void **reqs, int n); /* the mail taken, into its queue */
    void (*end)(cobatch_engine *e, cb_end_which which);
    bool (*busy)(const cobatch_engine *e); /* it has requests in work (the engine thread does not sleep) */
    void (*arm)(cobatch_engine *e, const cb_engine_fault *f); /* testing.h: a fault at its context */
    void (*free_req)(void *req);                              /* a request never taken (freed with the engine) */
} cb_kind;
extern const cb_kind cb_kinds[CB_N_KINDS];
void cb_embd_intake(cobatch_engine *e, void **reqs, int n);
void cb_embd_end(cobatch_engine *e, cb_end_which which);
bool cb_embd_busy(const cobatch_engine *e);
void cb_embd_req_free(void *req);
void cb_embd_arm(cobatch_engine *e, const cb_engine_fault *f);
/* Queues an event (takes ownership of its strings) into space reserved at submit: never fails.
 * Pollers are woken by cb_engine_wake_pollers,
 * once per engine iteration: one wake-up per step, not one per token (on a 2-core machine every
 * wake-up of the server thread takes a core from llama.cpp's threads mid-graph). */
void cb_engine_push_event(cobatch_engine *e, struct cobatch_event *ev);
void cb_engine_wake_pollers(cobatch_engine *e);
/* Waits while CB_EVENT_BACKLOG events are queued and the engine is not stopping. */
void cb_engine_wait_for_event_space(cobatch_engine *e);

/* attn.c: the params' auto flash attention and cache types made one path, measured on this host (or
 * its cached times); why (may be NULL) gets the line the server logs. Paths already given stay. */
void cb_attn_resolve(struct cobatch_engine_params *p, char *why, size_t cap);

#endif
