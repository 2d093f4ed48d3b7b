/* api.c — the thread-safe public functions of cobatch.h: they validate and tokenize on the
 * caller's thread and talk to the engine thread only through the mailbox and the event queue. */
#include "engine_internal.h"
#include "sizes.h"
#include "testing.h"
#include "../runtime/llama_common.h"
#include "../runtime/sampling.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

_Static_assert((int)COBATCH_REPACK_AUTO == (int)CB_REPACK_AUTO && (int)COBATCH_REPACK_ON == (int)CB_REPACK_ON &&
                   (int)COBATCH_REPACK_OFF == (int)CB_REPACK_OFF,
               "the public repack modes are core's");

/* A chat rendered once (cobatch_chat_new), shared by the requests that name it. */
struct cobatch_chat {
    int32_t *tokens;
    int32_t n_tokens;
    struct llama_sampler *grammar; /* the tool calls' (lazy, or fed its prefill), cloned by each request; or NULL */
    char **stops;                  /* (n_stops) the call format's */
    size_t n_stops;
    int32_t *shown; /* (n_shown) control tokens whose text the output shows (call markers) */
    size_t n_shown;
    cb_chat_parser *parser; /* NULL: the output is its text (no tool calls, no reasoning to read) */
    bool calls;             /* the output may hold tool calls */
    bool lazy;              /* the grammar holds from a trigger on (it waits out a reasoning block) */
    /* the output is read for reasoning: its markers, whether the output starts inside a block, the
       most tokens one may have (< 0: no bound) */
    bool thinks;
    char *think_start, *think_end;
    bool think_open;
    int32_t think_budget;
};

/* ---------------------------------------------------------------- events --------------------- */

void cb_engine_push_event(cobatch_engine *e, struct cobatch_event *ev) {
    pthread_mutex_lock(&e->ev_mu);
    cb_event_queue *q = &e->events;
    if (ev->type == COBATCH_EVENT_FINISHED) q->reserved--;
    if (q->len == q->cap) { /* unreachable while the reservation holds (engine_internal.h) */
        pthread_mutex_unlock(&e->ev_mu);
        fputs("cobatch: the event queue overflowed its reservation\n", stderr);
        abort();
    }
    q->v[(q->head + q->len) % q->cap] = *ev;
    q->len++;
    pthread_mutex_unlock(&e->ev_mu);
    e->ev_unsignalled = true;
}

/* Makes room for one more live request's events: its FINISHED slot, and a step's worth of tokens
 * above the backlog. Called with ev_mu held. Returns false when out of memory. */
static bool reserve_event(cobatch_engine *e) {
    cb_event_queue *q = &e->events;
    int need = e->event_backlog + (2 + e->spec_max) * e->params.max_num_seqs + q->reserved + 1;
    if (q->cap < need) {
        int cap = q->cap ? q->cap : 1024;
        while (cap < need)
            cap *= 2;
        struct cobatch_event *v = malloc(sizeof(*v) * (size_t)cap);
        if (!v) return false;
        for (int i = 0; i < q->len; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->cap = cap;
        q->head = 0;
    }
    q->reserved++;
    return true;
}

void cb_engine_wait_for_event_space(cobatch_engine *e) {
    pthread_mutex_lock(&e->ev_mu);
    while (e->events.len >= e->event_backlog && !e->ev_stop)
        pthread_cond_wait(&e->ev_space, &e->ev_mu);
    pthread_mutex_unlock(&e->ev_mu);
}

void cb_engine_wake_pollers(cobatch_engine *e) {
    if (!e->ev_unsignalled) return;
    e->ev_unsignalled = false;
    pthread_mutex_lock(&e->ev_mu);
    pthread_cond_broadcast(&e->ev_cond);
    pthread_mutex_unlock(&e->ev_mu);
    uint64_t one = 1;
    ssize_t w = write(e->event_fd, &one, sizeof(one));
    (void)w; /* the counter saturating only means a reader is already due */
}

int cobatch_poll(cobatch_engine *e, struct cobatch_event *out, int max, int timeout_ms) {
    if (max <= 0) return 0;
    pthread_mutex_lock(&e->ev_mu);
    if (e->events.len == 0 && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (e->events.len == 0)
                pthread_cond_wait(&e->ev_cond, &e->ev_mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            while (e->events.len == 0)
                if (pthread_cond_timedwait(&e->ev_cond, &e->ev_mu, &ts) == ETIMEDOUT) break;
        }
    }
    int n = 0;
    cb_event_queue *q = &e->events;
    while (n < max && q->len > 0) {
        out[n++] = q->v[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    if (n > 0 && q->len < e->event_backlog) pthread_cond_signal(&e->ev_space);
    pthread_mutex_unlock(&e->ev_mu);
    return n;
}

void cobatch_event_clear(struct cobatch_event *ev) {
    free(ev->text);
    free(ev->error);
    free(ev->logprobs);
    free(ev->prompt_logprobs);
    free(ev->embd);
    ev->text = ev->error = NULL;
    ev->logprobs = ev->prompt_logprobs = NULL;
    ev->embd = NULL;
}

int cobatch_event_fd(const cobatch_engine *e) { return e->event_fd; }

/* ---------------------------------------------------------------- init / free ---------------- */

/* A text file's contents (a chat template: at most 1 MiB), malloc'd; NULL with the reason in err. */
static char *read_text_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cb_set_err(err, errlen, "--chat-template: cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    enum { MAX = 1 << 20 };
    char *t = malloc(MAX + 1);
    size_t n = t ? fread(t, 1, MAX + 1, f) : 0;
    fclose(f);
    if (!t || n > MAX || n == 0) {
        cb_set_err(err, errlen,
                   !t  ? "out of memory"
                   : n ? "--chat-template: '%s' is larger than 1 MiB"
                       : "--chat-template: '%s' is empty",
                   path);
        free(t);
        return NULL;
    }
    t[n] = '\0';
    return t;
}

/* An operator's --max-model-len or --long-lane past what the model reaches is refused, not cut
 * short: 0, or -1 with why (and what would serve it). */
static int past_limit(const struct cobatch_engine_params *given, int32_t limit, int32_t trained, char *err,
                      size_t errlen) {
    const char *flag = given->max_model_len > limit ? "max_model_len" : given->long_lane > limit ? "long_lane" : NULL;
    if (limit <= 0 || !flag) return 0;
    int32_t want = given->max_model_len > limit ? given->max_model_len : given->long_lane;
    if (limit == trained)
        cb_set_err(err, errlen,
                   "%s %d is past the model's trained context (%d): positions beyond it are untrained; scale RoPE "
                   "to serve it (--rope-scaling yarn --rope-scale %.3g), at some cost in quality",
                   flag, want, trained, (double)want / trained);
    else
        cb_set_err(err, errlen, "%s %d is past what the RoPE scaling reaches (%d); raise --rope-scale", flag, want,
                   limit);
    return -1;
}

bool cobatch_params_flash_attn(const struct cobatch_engine_params *p) {
    if (p->flash_attn >= 0) return p->flash_attn != 0;
    struct cobatch_engine_params q = *p;
    cb_attn_resolve(&q, NULL, 0);
    return q.flash_attn != 0;
}

void cobatch_params_resolve(struct cobatch_engine_params *p) {
    cb_attn_resolve(p, NULL, 0); /* first: the cells' bytes depend on the types */
    if (p->max_num_seqs == 0 && p->kv_layout != COBATCH_KV_UNIFIED) return; /* (refused by init) */
    p->max_num_seqs = cobatch_params_max_num_seqs(p); /* memory-centric: KV memory limits the batch */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t mem = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    bool default_streams = p->n_ctx == 0 && p->max_model_len == 0;
    int32_t n_ctx_train = 0;
    if (p->kv_layout == COBATCH_KV_SPLIT && p->max_num_seqs > 0) {
        double cell_bytes = cb_model_file_cell_bytes(p->model_path, (enum cobatch_kv_type)p->cache_type_k,
                                                     (enum cobatch_kv_type)p->cache_type_v, &n_ctx_train);
        int64_t gpu = cb_gpu_free_bytes(), kv_mem = gpu > 0 ? gpu : mem; /* where the cells go */
        if (default_streams)
            p->max_model_len =
                cb_default_stream_cells(p->max_num_seqs, cobatch_params_ctx_limit(p, n_ctx_train), cell_bytes, kv_mem);
        if (p->prefix_caching && p->prefix_cache_streams < 0)
            p->prefix_cache_streams = cb_default_cache_streams(
                p->max_num_seqs, cobatch_params_n_ctx(p) / p->max_num_seqs, cell_bytes, kv_mem);
    }
    if (p->long_lane < 0) /* (0: no model file, no lane) */
        p->long_lane = default_streams ? cobatch_params_ctx_limit(p, n_ctx_train) : 0;
    if (p->cache_ram < 0) /* (a value of whole bytes in GiB: exact in a float to 2^24 GiB) */
        p->cache_ram = p->kv_layout == COBATCH_KV_SPLIT && p->prefix_caching
                           ? (float)((double)cb_default_cache_ram(mem) / (1 << 30))
                           : 0.0f;
}

int32_t cobatch_params_max_request_len(const struct cobatch_engine_params *params) {
    struct cobatch_engine_params p = *params;
    cobatch_params_resolve(&p);
    int32_t n_ctx = cobatch_params_n_ctx(&p);
    bool split = p.kv_layout == COBATCH_KV_SPLIT;
    int32_t seq = split && p.max_num_seqs > 0 ? n_ctx / p.max_num_seqs : n_ctx;
    bool lane = split && p.mode == COBATCH_MODE_CONTINUOUS && p.long_lane > seq;
    return lane ? p.long_lane : seq;
}

/* The checks of init's parameters that the sizes leave out (sizes.h checks the counts): 0, or -1
 * with the message. */
static int check_params(const struct cobatch_engine_params *p, char *err, size_t errlen) {
    if (p->max_num_seqs == 0 && p->kv_layout != COBATCH_KV_UNIFIED) {
        cb_set_err(err, errlen,
                   "max_num_seqs auto (as many as KV memory holds) needs the unified KV layout: the split layout "
                   "divides its cells by the sequence count");
        return -1;
    }
    if (p->repack < COBATCH_REPACK_AUTO || p->repack > COBATCH_REPACK_OFF) {
        cb_set_err(err, errlen, "repack must be auto, on or off");
        return -1;
    }
    if ((p->cache_type_k != COBATCH_KV_AUTO && !cobatch_kv_type_name(p->cache_type_k)) ||
        (p->cache_type_v != COBATCH_KV_AUTO && !cobatch_kv_type_name(p->cache_type_v))) {
        cb_set_err(err, errlen,
                   "cache_type_k and cache_type_v must be auto or one of f16, f32, bf16, q8_0, q4_0, q4_1, "
                   "iq4_nl, q5_0, q5_1");
        return -1;
    }
    if (p->flash_attn > 1) {
        cb_set_err(err, errlen, "flash_attn must be 1 (on), 0 (off) or -1 (auto)");
        return -1;
    }
    if (cobatch_kv_type_quantized(p->cache_type_v) && p->flash_attn == 0) {
        cb_set_err(err, errlen, "cache_type_v %s: a quantized V cache needs flash attention (--flash-attn on)",
                   cobatch_kv_type_name(p->cache_type_v));
        return -1;
    }
    if (p->grammar_max_nesting < 1 || p->grammar_max_elements < 1 || p->grammar_max_states < 1) {
        cb_set_err(err, errlen, "grammar_max_nesting, grammar_max_elements and grammar_max_states must be at least 1");
        return -1;
    }
    if ((unsigned)p->reasoning_format > COBATCH_REASONING_NONE) {
        cb_set_err(err, errlen, "reasoning_format must be separated or none");
        return -1;
    }
    if (p->reasoning_format == COBATCH_REASONING_NONE && p->reasoning_budget >= 0) {
        cb_set_err(err, errlen, "a reasoning budget is kept on reasoning read apart: not with reasoning_format none");
        return -1;
    }
    return 0;
}

/* A new engine holding p, with its locks and its own copies of p's strings; nothing loaded. */
static cobatch_engine *engine_alloc(const struct cobatch_engine_params *p) {
    cobatch_engine *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    e->params = *p;
    e->event_fd = -1;
    e->next_id = 1;
    e->event_backlog = CB_EVENT_BACKLOG;
    e->spec_max = p->spec_max > 0 ? p->spec_max : 8; /* a prediction drafts with speculation off too */
    e->spec_ngram = p->spec == COBATCH_SPEC_NGRAM;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cond, NULL);
    pthread_mutex_init(&e->ev_mu, NULL);
    pthread_cond_init(&e->ev_cond, NULL);
    pthread_cond_init(&e->ev_space, NULL);
    e->model_path = p->model_path ? strdup(p->model_path) : NULL;
    e->params.model_path = e->model_path;
    e->rpc_servers = p->rpc_servers ? strdup(p->rpc_servers) : NULL;
    e->params.rpc_servers = e->rpc_servers;
    return e;
}

/* The engine's swap space, host tier, prefix cache, scheduler, plan and runner, once the model is
 * loaded: 0, or -1 with the message. */
static int make_scheduler(cobatch_engine *e, const cb_engine_sizes *z, int32_t budget, bool host_tier_asked, char *err,
                          size_t errlen) {
    const struct cobatch_engine_params *p = &e->params;
    cb_swap_init(&e->swap, (int64_t)((double)p->swap_space * (1 << 30)), e->model.kv_cell_bytes);
    cb_sched_config sc = {.mode = p->mode == COBATCH_MODE_CONTINUOUS ? CB_MODE_CONTINUOUS : CB_MODE_STATIC,
                          .max_num_seqs = z->sched_seqs,
                          .max_batched_tokens = budget,
                          .prefill_chunk = p->prefill_chunk,
                          .kv_reserve = p->kv_reserve,
                          .split_tile = CB_RUNNER_FA_TILE,
                          .exact_hits = p->exact_hits,
                          .max_logit_rows = CB_PROMPT_LOGIT_ROWS,
                          .priority_aging_us = z->aging_us,
                          .swap = &e->swap,
                          .pace = p->step_pacing > 0 ? &e->pace : NULL,
                          .pace_share = p->step_pacing,
                          .spec_cost = cb_model_has_state(&e->model) ? NULL : &e->spec_cost,
                          .max_draft_rows = CB_SPEC_ROWS,
                          .spec_explore = 16};
    /* llama.cpp saves a sliding-window model's sequence without the cells its window has passed,
     * so a load trimmed to a shorter match would lack cells the window needs: no host tier there */
    bool swa = cb_model_has_swa(&e->model);
    if (swa && host_tier_asked) {
        cb_set_err(err, errlen, "cache_ram: the prefix cache's host tier does not hold sliding-window models");
        return -1;
    }
    cb_host_init(&e->host, z->cache == CB_CACHE_STREAMS && !swa ? (int64_t)((double)p->cache_ram * (1 << 30)) : 0,
                 e->model.kv_cell_bytes, CB_HOST_MIN_LEN, &e->swap);
    if (z->cache == CB_CACHE_STREAMS)
        e->main.cache =
            cb_cache_new_streams(&e->main.kv, p->max_num_seqs, CB_STREAM_MIN_SHARE, e->host.cap > 0 ? &e->host : NULL);
    else if (z->cache == CB_CACHE_RADIX)
        e->main.cache = cb_cache_new_radix(&e->main.kv, z->holders, p->prefix_cache_max_idle);
    else
        e->main.cache = cb_cache_new_none(&e->main.kv);
    e->main.sched = e->main.cache ? cb_sched_new(&sc, &e->main.kv, e->main.cache) : NULL;
    e->cand = cb_sampler_scratch_new(&e->model);
    if (!e->main.sched || !e->cand || cb_plan_init(&e->main.plan, p->max_num_seqs) != 0 ||
        cb_runner_init(&e->main.runner, &e->model, p->max_num_seqs) != 0) {
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    e->main.runner.swap = &e->swap;
    e->main.model = &e->model;
    return 0;
}

cobatch_engine *cobatch_engine_init(const struct cobatch_engine_params *params, char *err, size_t errlen) {
    struct cobatch_engine_params p = params ? *params : cobatch_engine_default_params();
    const struct cobatch_engine_params given = p; /* the operator's, before defaults resolve */
    if (check_params(&p, err, errlen) != 0) return NULL;
    char attn_why[CB_ATTN_WHY];
    snprintf(attn_why, sizeof attn_why, "as given");
    cb_attn_resolve(&p, attn_why, sizeof attn_why);
    cobatch_params_resolve(&p);
    cb_engine_sizes z;
    if (cb_engine_resolve(&p, &z, err, errlen) != 0) return NULL;
    p.n_ctx = cobatch_params_n_ctx(&p);
    int32_t budget = z.budget;
    cobatch_engine *e = engine_alloc(&p);
    if (!e) return NULL;
    memcpy(e->attn_why, attn_why, sizeof attn_why);

    char *tmpl = NULL; /* the operator's chat template, read for the model's load */
    if (!p.chat_template && p.chat_template_file && !(tmpl = read_text_file(p.chat_template_file, err, errlen)))
        goto fail;
    e->params.chat_template = e->params.chat_template_file = NULL; /* used here only */
    cb_model_params mp = {.path = e->model_path,
                          .rpc = e->rpc_servers,
                          .chat_template = p.chat_template ? p.chat_template : tmpl,
                          .n_ctx = z.n_ctx,
                          .n_threads = p.n_threads,
                          .n_seq_max = z.n_seq_max,
                          .n_batch = budget,
                          .n_outputs_max = z.n_seq_max + CB_PROMPT_LOGIT_ROWS + CB_RUNNER_FA_TILE + CB_SPEC_ROWS,
                          .split_kv = z.split,
                          .flash_attn = cobatch_params_flash_attn(&p),
                          .type_k = (enum cobatch_kv_type)p.cache_type_k,
                          .type_v = (enum cobatch_kv_type)p.cache_type_v,
                          .repack = (cb_repack_mode)p.repack,
                          .rope = &e->params.rope,
                          .verbose = p.verbose};
    int loaded = cb_model_load(&e->model, &mp, err, errlen);
    free(tmpl);
    if (loaded != 0) goto fail;
    int32_t limit = cobatch_params_ctx_limit(&p, e->model.n_ctx_train); /* trained, or what scaling reaches */
    if (past_limit(&given, limit, e->model.n_ctx_train, err, errlen)) goto fail;
    e->n_ctx_seq = e->model.n_ctx_seq; /* a request's limit: the sequence, never past that */
    if (limit > 0 && e->n_ctx_seq > limit) e->n_ctx_seq = limit;
    if (cb_kv_init(&e->main.kv, e->model.n_ctx, e->model.n_seq_max, z.split) != 0 ||
        e->main.kv.per_seq_cap != e->model.n_ctx_seq) {
        cb_set_err(err, errlen, "KV accounting does not match the context (%d cells, %d per sequence)", e->model.n_ctx,
                   e->model.n_ctx_seq);
        goto fail;
    }
    if (budget > e->model.n_batch) budget = e->model.n_batch; /* llama.cpp caps a step at n_ctx */
    if (budget < p.max_num_seqs) {
        cb_set_err(err, errlen, "a step of %d tokens cannot hold %d sequences (raise --ctx-size)", budget,
                   p.max_num_seqs);
        goto fail;
    }
    if (make_scheduler(e, &z, budget, params && params->cache_ram > 0, err, errlen) != 0) goto fail;
    int32_t lane = p.long_lane; /* the long lane's pool, after the host tier it shares */
    if (limit > 0 && lane > limit) lane = limit;
    if (lane > e->main.kv.per_seq_cap && z.split && p.mode == COBATCH_MODE_CONTINUOUS) {
        if (cb_lane_init(e, &mp, lane, p.max_num_seqs < 4 ? p.max_num_seqs : 4, z.budget, z.aging_us, err, errlen) != 0)
            goto fail;
        e->n_ctx_seq = e->lane.pool.kv.capacity;
    }
    if (p.embeddings && cb_embd_init(e, err, errlen) != 0) goto fail;
    e->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->event_fd < 0) {
        cb_set_err(err, errlen, "eventfd: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&e->thread, NULL, cb_engine_main, e) != 0) {
        cb_set_err(err, errlen, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    return e;
fail:
    cobatch_engine_free(e);
    return NULL;
}

void cobatch_engine_free(cobatch_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->mu);
        pthread_mutex_lock(&e->ev_mu); /* an engine waiting for event space stops waiting */
        e->ev_stop = true;
        pthread_cond_signal(&e->ev_space);
        pthread_mutex_unlock(&e->ev_mu);
        pthread_join(e->thread, NULL);
    }
    struct cobatch_event ev;
    while (cobatch_poll(e, &ev, 1, 0) == 1)
        cobatch_event_clear(&ev);
    free(e->events.v);
    for (int i = 0; i < e->inbox_len; i++)
        cb_engine_free_request(e->inbox[i]);
    free(e->inbox);
    free(e->live);
    free(e->reqs);
    cb_runner_free(&e->main.runner);
    free(e->cand);
    cb_plan_free(&e->main.plan);
    cb_sched_free(e->main.sched);
    cb_cache_free(e->main.cache);
    cb_host_free(&e->host);
    cb_kv_free(&e->main.kv);
    cb_lane_free(e);
    cb_embd_free(e);
    cb_model_free(&e->model);
    if (e->event_fd >= 0) close(e->event_fd);
    free(e->model_path);
    free(e->rpc_servers);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->ev_mu);
    pthread_cond_destroy(&e->ev_cond);
    pthread_cond_destroy(&e->ev_space);
    free(e);
}

/* ---------------------------------------------------------------- submit / cancel ------------ */

/* Refuses a request: err (may be NULL) gets the code, the field at fault and the message. Returns
 * the code. */
__attribute__((format(printf, 4, 5))) static int refuse(struct cobatch_error *err, int code, const char *param,
                                                        const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    err->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return code;
}

/* The sampling field out of its range, with the range in *why; NULL when all are in range. */
static const char *check_sampling(const struct cobatch_sampling *s, const char **why) {
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature)) return *why = ">= 0", "temperature";
    if (s->top_k < 0) return *why = ">= 0", "top_k";
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f)) return *why = "in (0, 1]", "top_p";
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f)) return *why = "in [0, 1]", "min_p";
    if (!(s->repetition_penalty > 0.0f) || !isfinite(s->repetition_penalty)) return *why = "> 0", "repetition_penalty";
    if (!isfinite(s->presence_penalty) || s->presence_penalty < -2 || s->presence_penalty > 2)
        return *why = "in [-2, 2]", "presence_penalty";
    if (!isfinite(s->frequency_penalty) || s->frequency_penalty < -2 || s->frequency_penalty > 2)
        return *why = "in [-2, 2]", "frequency_penalty";
    if (s->penalty_last_n < -1) return *why = ">= -1", "penalty_last_n";
    return NULL;
}

/* The tokens of p's messages rendered with the chat template and its tools; *extra (may be NULL)
 * gets the rest of the rendering (cb_model_chat_tokens). */
static int32_t *chat_tokens(cobatch_engine *e, const struct cobatch_request_params *p, const cb_common_reasoning *rs,
                            cb_common_rendered *extra, int32_t *n, struct cobatch_error *err) {
    if (p->n_messages == 0) {
        refuse(err, COBATCH_ERR_INVALID, "messages", "messages is empty");
        return NULL;
    }
    if ((unsigned)p->tool_choice > COBATCH_TOOL_CHOICE_NONE) {
        refuse(err, COBATCH_ERR_INVALID, "tool_choice", "tool_choice: not a choice");
        return NULL;
    }
    cb_common_msg *msgs = calloc(p->n_messages, sizeof(*msgs));
    bool any = false;
    int32_t *t = NULL;
    for (size_t i = 0; msgs && i < p->n_messages; i++) {
        const struct cobatch_chat_message *m = &p->messages[i];
        msgs[i] = (cb_common_msg){.role = m->role ? m->role : "user",
                                  .content = m->content ? m->content : "",
                                  .tool_calls = m->tool_calls,
                                  .tool_call_id = m->tool_call_id,
                                  .name = m->name,
                                  .reasoning = m->reasoning};
        any |= msgs[i].content[0] != '\0' || m->tool_calls || (m->reasoning && m->reasoning[0]);
    }
    cb_common_tools tools = {.tools = p->tools,
                             .choice = p->tool_choice == COBATCH_TOOL_CHOICE_AUTO       ? CB_TOOLS_AUTO
                                       : p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? CB_TOOLS_REQUIRED
                                                                                        : CB_TOOLS_NONE,
                             .function = p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? p->tool_function : NULL,
                             .single = p->single_tool_call};
    char why[256] = "";
    bool tools_at_fault = false;
    if (msgs && any)
        t = cb_model_chat_tokens(&e->model, msgs, p->n_messages, p->tools ? &tools : NULL, rs, extra, n, why,
                                 sizeof(why));
    if (!t && why[0] && p->tools && !strstr(why, "out of memory")) { /* the messages alone render: the tools failed */
        char none[8];
        int32_t k = 0,
                *alone = cb_model_chat_tokens(&e->model, msgs, p->n_messages, NULL, rs, NULL, &k, none, sizeof(none));
        tools_at_fault = alone != NULL;
        free(alone);
    }
    bool oom = !msgs;
    free(msgs);
    if (!any && !oom) {
        refuse(err, COBATCH_ERR_INVALID, "messages", "the prompt is empty");
    } else if (!t && why[0] && !strstr(why, "out of memory")) { /* the template refused them */
        refuse(err, COBATCH_ERR_INVALID, tools_at_fault && p->tools ? "tools" : "messages", "%s", why);
    } else if (!t && (oom || cb_model_has_chat_template(&e->model))) {
        refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory rendering the chat template");
    } else if (!t) {
        refuse(err, COBATCH_ERR_INVALID, "messages", "the model has no built-in chat template this engine can apply");
    }
    return t;
}

/* Whether p's text could never fit: refused before it is tokenized (llama.cpp's tokenizer is
 * quadratic in the number of special-token texts, and a megabyte of them takes half a minute). */
static bool too_long(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    size_t bytes = 0, most = cobatch_max_prompt_bytes(e);
    for (size_t i = 0; p->messages && i < p->n_messages; i++)
        bytes += (p->messages[i].content ? strlen(p->messages[i].content) : 0) +
                 (p->messages[i].tool_calls ? strlen(p->messages[i].tool_calls) : 0);
    if (p->messages && p->tools) bytes += strlen(p->tools);
    if (p->prompt) bytes = strlen(p->prompt);
    if (bytes > most) {
        refuse(err, COBATCH_ERR_TOO_LONG, p->prompt ? "prompt" : "messages",
               "the prompt has %zu bytes; no prompt of more than %zu fits this engine's context (%d tokens of at most "
               "%d bytes)",
               bytes, most, e->n_ctx_seq, e->model.max_piece);
        return true;
    }
    return false;
}

/* Produces the prompt tokens of p (malloc'd) or NULL with a message. */
static int reasoning_of(const cobatch_engine *e, const struct cobatch_request_params *p, cb_common_reasoning *rs,
                        struct cobatch_error *err);

static int32_t *prompt_tokens(cobatch_engine *e, const struct cobatch_request_params *p, int32_t *n,
                              struct cobatch_error *err) {
    int given = (p->prompt != NULL) + (p->prompt_tokens != NULL) + (p->messages != NULL);
    if (given != 1) {
        refuse(err, COBATCH_ERR_INVALID, "prompt", "give exactly one of prompt, prompt tokens or messages");
        return NULL;
    }
    if (p->prompt_tokens) {
        if (p->n_prompt_tokens < 1) {
            refuse(err, COBATCH_ERR_INVALID, "prompt_tokens", "the prompt is empty");
            return NULL;
        }
        for (int32_t i = 0; i < p->n_prompt_tokens; i++) {
            if (p->prompt_tokens[i] < 0 || p->prompt_tokens[i] >= e->model.n_vocab) {
                refuse(err, COBATCH_ERR_INVALID, "prompt_tokens",
                       "prompt token %d at index %d is outside the vocabulary (0..%d)", p->prompt_tokens[i], i,
                       e->model.n_vocab - 1);
                return NULL;
            }
        }
        int32_t *t = malloc(sizeof(int32_t) * (size_t)p->n_prompt_tokens);
        if (!t) {
            refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
            return NULL;
        }
        memcpy(t, p->prompt_tokens, sizeof(int32_t) * (size_t)p->n_prompt_tokens);
        *n = p->n_prompt_tokens;
        return t;
    }
    if (too_long(e, p, err)) return NULL;
    if (p->messages) {
        cb_common_reasoning rs;
        if (reasoning_of(e, p, &rs, err) != COBATCH_OK) return NULL;
        rs.extract = false; /* the prompt alone */
        return chat_tokens(e, p, &rs, NULL, n, err);
    }
    if (p->prompt[0] == '\0') {
        refuse(err, COBATCH_ERR_INVALID, "prompt", "the prompt is empty");
        return NULL;
    }
    /* a text prompt is the client's own: special tokens in it are parsed, as llama-server does */
    int32_t *t = cb_model_tokenize(&e->model, p->prompt, strlen(p->prompt), true, true, n);
    if (!t) refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory tokenizing the prompt");
    return t;
}

int32_t *cobatch_prompt_tokens(cobatch_engine *e, const struct cobatch_request_params *p, int32_t *n,
                               struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!e || !p || !n) {
        refuse(err, COBATCH_ERR_INVALID, NULL, "no engine, parameters or count");
        return NULL;
    }
    return prompt_tokens(e, p, n, err ? err : &mine);
}

/* A fresh seed for a request that asked for none: from the kernel's generator, never
 * COBATCH_SEED_RANDOM itself. */
static uint32_t random_seed(void) {
    uint32_t x = 0;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) { /* no entropy yet: clock and counter */
        static atomic_uint_fast64_t ctr;
        uint64_t z = (uint64_t)cobatch_time_us() + 0x9E3779B97F4A7C15ull * (atomic_fetch_add(&ctr, 1) + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        x = (uint32_t)(z ^ (z >> 31));
    }
    return x == COBATCH_SEED_RANDOM ? x - 1 : x;
}

/* The request's engine-side state, with what its FINISHED event needs allocated now. */
static cb_engine_req *cb_engine_req_new(const struct cobatch_request_params *p) {
    cb_engine_req *er = calloc(1, sizeof(*er));
    if (!er) return NULL;
    er->err_buf = malloc(CB_ERR_BUF);
    const cobatch_chat *c = p->chat;
    const char **stops = (const char **)p->stop;
    size_t n_stop = p->n_stop;
    if (c && c->n_stops) { /* the request's stop strings and its call format's */
        stops = malloc(sizeof(char *) * (p->n_stop + c->n_stops));
        if (stops) {
            for (size_t i = 0; i < p->n_stop; i++)
                stops[i] = p->stop[i];
            for (size_t i = 0; i < c->n_stops; i++)
                stops[p->n_stop + i] = c->stops[i];
            n_stop += c->n_stops;
        }
    }
    if (c && c->n_shown && (er->shown = malloc(sizeof(int32_t) * c->n_shown))) {
        memcpy(er->shown, c->shown, sizeof(int32_t) * c->n_shown);
        er->n_shown = c->n_shown;
    }
    bool ok = er->err_buf && (stops || n_stop == 0) && (!c || !c->n_shown || er->shown) &&
              cb_textout_init(&er->text, stops, n_stop) == 0;
    if (stops != (const char **)p->stop) free(stops);
    er->n_stop = p->n_stop;
    if (!ok) {
        free(er->shown);
        free(er->err_buf);
        free(er);
        return NULL;
    }
    if (p->n_logit_bias > 0) {
        er->logit_bias = malloc(sizeof(*er->logit_bias) * p->n_logit_bias);
        if (!er->logit_bias) {
            cb_textout_free(&er->text);
            free(er->shown);
            free(er->err_buf);
            free(er);
            return NULL;
        }
        memcpy(er->logit_bias, p->logit_bias, sizeof(*er->logit_bias) * p->n_logit_bias);
        er->n_logit_bias = p->n_logit_bias;
    }
    er->sampling = p->sampling;
    if (er->sampling.seed == COBATCH_SEED_RANDOM) er->sampling.seed = random_seed();
    if (p->min_indent > 0) cb_textout_set_indent(&er->text, (size_t)p->min_indent);
    er->max_predict_us = p->max_predict_ms > 0 ? (int64_t)p->max_predict_ms * 1000 : 0;
    er->user_data = p->user_data;
    er->ignore_eos = p->ignore_eos;
    er->logit_margins = p->logit_margins;
    er->prompt_only = p->max_tokens == 0;
    er->logprobs = p->logprobs;
    er->n_top = p->top_logprobs;
    er->no_spec = p->no_speculation;
    er->pred_from = 0; /* a prediction is matched from its start */
    er->pred_at = -1;
    atomic_init(&er->cancel, false);
    return er;
}

/* The prompt's log-probabilities, to be filled as its rows are computed: row 0 (nothing before it)
 * is NAN now. */
static bool prompt_logprobs_new(cb_engine_req *er, cb_request *r, const int32_t *toks) {
    int32_t w = 1 + er->n_top;
    er->plp = malloc(sizeof(*er->plp) * (size_t)w * (size_t)r->n_prompt);
    if (!er->plp) return false;
    er->plp[0] = (struct cobatch_logprob){.token = toks[0], .logprob = NAN};
    for (int32_t j = 1; j < w; j++)
        er->plp[j] = (struct cobatch_logprob){.token = -1, .logprob = NAN};
    r->all_logits_to = r->n_prompt - 1;
    return true;
}

/* ---------------------------------------------------------------- chats ---------------------- */

void cobatch_chat_free(cobatch_chat *c) {
    if (!c) return;
    free(c->tokens);
    cb_sampler_free(c->grammar);
    for (size_t i = 0; i < c->n_stops; i++)
        free(c->stops[i]);
    free(c->stops);
    free(c->shown);
    cb_chat_parser_free(c->parser);
    free(c->think_start);
    free(c->think_end);
    free(c);
}

/* The limits of a grammar for an answer of up to max_tokens tokens (<= 0: the context's). */
static cb_grammar_limits grammar_limits(const cobatch_engine *e, int32_t max_tokens) {
    int32_t n = max_tokens > 0 && max_tokens < e->n_ctx_seq ? max_tokens : e->n_ctx_seq;
    return (cb_grammar_limits){.max_nesting = e->params.grammar_max_nesting,
                               .max_elements = e->params.grammar_max_elements,
                               .max_states = e->params.grammar_max_states,
                               .reach = (unsigned long long)n * (unsigned long long)e->model.max_piece};
}

/* The reasoning p asks of the engine's chat template, as the rendering's inputs: COBATCH_OK, or a
 * refusal naming the field (thinking the template cannot do, an effort it does not read, a budget
 * beside a grammar that holds the whole output). extract: the output is to be read for reasoning. */
static int reasoning_of(const cobatch_engine *e, const struct cobatch_request_params *p, cb_common_reasoning *rs,
                        struct cobatch_error *err) {
    static const cb_common_thinking none = {false, false, false};
    const struct cobatch_reasoning *q = &p->reasoning;
    const cb_common_thinking *th = e->model.tmpls ? cb_common_template_thinking(e->model.tmpls) : &none;
    enum cobatch_think want = q->think;
    const char *effort = q->effort;
    if ((unsigned)want > COBATCH_THINK_ON)
        return refuse(err, COBATCH_ERR_INVALID, "reasoning", "reasoning: not a choice");
    if (effort && !strcmp(effort, "none")) { /* no reasoning at all */
        if (want == COBATCH_THINK_ON)
            return refuse(err, COBATCH_ERR_INVALID, "reasoning_effort",
                          "reasoning_effort none asks for no thinking, and thinking was asked for");
        want = COBATCH_THINK_OFF;
        effort = NULL;
    }
    if (want == COBATCH_THINK_ON && !th->thinks)
        return refuse(err, COBATCH_ERR_INVALID, "reasoning",
                      "the chat template does not think (it has no reasoning markers): thinking cannot be turned on");
    if (want == COBATCH_THINK_OFF && th->thinks && !th->can_switch)
        return refuse(err, COBATCH_ERR_INVALID, "reasoning",
                      "the chat template always thinks: its enable_thinking cannot turn thinking off");
    if (effort && th->thinks && !th->takes_effort)
        return refuse(err, COBATCH_ERR_INVALID, "reasoning_effort",
                      "the chat template thinks but reads no reasoning effort ('none' turns thinking off; a reasoning "
                      "budget bounds it)");
    *rs = (cb_common_reasoning){.extract = th->thinks && want != COBATCH_THINK_OFF && !q->keep &&
                                           e->params.reasoning_format == COBATCH_REASONING_SEPARATED,
                                .think = want == COBATCH_THINK_DEFAULT ? -1 : want == COBATCH_THINK_ON,
                                .effort = th->takes_effort ? effort : NULL,
                                .kwargs = p->template_kwargs,
                                .json_schema = p->json_schema};
    if (rs->extract && q->has_budget && (p->grammar || p->parsed_grammar))
        return refuse(err, COBATCH_ERR_INVALID, "reasoning_budget",
                      "a reasoning budget cannot be kept with a grammar of the request's own: it holds the whole "
                      "output, reasoning included");
    if (th->thinks && want != COBATCH_THINK_OFF && !rs->extract && q->has_budget && q->budget >= 0)
        return refuse(err, COBATCH_ERR_INVALID, "reasoning_budget",
                      "a reasoning budget is kept on reasoning read apart, not on reasoning left in the text");
    return COBATCH_OK;
}

/* What chat c takes of its rendering x: the grammar (the tools', or the schema's after the reasoning;
 * else a schema of p's own), stop strings, parser, reasoning markers. false with err filled. */
static bool chat_take(cobatch_engine *e, cobatch_chat *c, const struct cobatch_request_params *p, cb_common_rendered *x,
                      struct cobatch_error *err) {
    cb_grammar_limits lim = grammar_limits(e, p->max_tokens);
    bool ok = true;
    if (x->grammar) {
        ok = (c->grammar = cb_common_grammar_sampler(e->model.vocab, x, &lim, err->message, sizeof(err->message)));
        if (!ok) { /* the message is in place */
            err->code = strstr(err->message, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID;
            err->param = c->calls ? "tools" : "json_schema";
        }
    } else if (p->json_schema && !c->calls) { /* held from the first token, as a grammar of its own would be */
        char why[240] = "";
        char *g = cb_common_schema_to_grammar(p->json_schema, why, sizeof(why));
        ok = g && (c->grammar = cb_grammar_new(&e->model, g, &lim, why, sizeof(why)));
        free(g);
        if (!ok)
            refuse(err, strstr(why, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID, "json_schema",
                   "json_schema: %s", why);
    }
    c->lazy = x->lazy;
    c->stops = x->stops; /* taken over */
    c->n_stops = x->n_stops;
    x->stops = NULL;
    x->n_stops = 0;
    c->parser = x->parser;
    x->parser = NULL;
    if (x->thinks) {
        c->thinks = true;
        c->think_start = x->think_start;
        c->think_end = x->think_end;
        x->think_start = x->think_end = NULL;
        c->think_open = x->think_open;
        c->think_budget = p->reasoning.has_budget ? p->reasoning.budget : e->params.reasoning_budget;
    }
    if (ok && x->n_preserved && !(c->shown = malloc(sizeof(int32_t) * x->n_preserved))) {
        ok = false;
        refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
    }
    for (size_t i = 0; ok && i < x->n_preserved; i++) { /* those that are one control token */
        int32_t one[2];
        char piece[8];
        int32_t k = cb_model_tokenize_into(&e->model, x->preserved[i], strlen(x->preserved[i]), false, true, one, 2);
        if (k == 1 && cb_model_piece(&e->model, one[0], piece, sizeof(piece)) == 0) c->shown[c->n_shown++] = one[0];
    }
    return ok;
}

cobatch_chat *cobatch_chat_new(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !p || !p->messages || p->prompt || p->prompt_tokens || p->chat) {
        refuse(err, COBATCH_ERR_INVALID, "messages", "a chat is rendered from messages alone");
        return NULL;
    }
    bool calls = p->tools && p->tool_choice != COBATCH_TOOL_CHOICE_NONE;
    if ((calls || p->json_schema) && (p->grammar || p->parsed_grammar)) {
        refuse(err, COBATCH_ERR_INVALID, "grammar",
               calls ? "grammar: a request that may call tools has the tool-call grammar; give no other"
                     : "grammar: a request held to a JSON schema has its grammar; give no other");
        return NULL;
    }
    if (calls && p->json_schema) {
        refuse(err, COBATCH_ERR_INVALID, "json_schema",
               "json_schema: a request that may call tools has the tool-call grammar; give no other");
        return NULL;
    }
    cb_common_reasoning rs;
    if (reasoning_of(e, p, &rs, err) != COBATCH_OK) return NULL;
    cobatch_chat *c = calloc(1, sizeof(*c));
    cb_common_rendered x = {0};
    if (!c) {
        refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    int32_t n = 0;
    int32_t *t = too_long(e, p, err) ? NULL : chat_tokens(e, p, &rs, &x, &n, err);
    if (!t) {
        free(c);
        return NULL;
    }
    c->tokens = t;
    c->n_tokens = n;
    c->calls = calls;
    bool ok = chat_take(e, c, p, &x, err);
    cb_common_rendered_clear(&x);
    if (!ok) {
        cobatch_chat_free(c);
        return NULL;
    }
    return c;
}

const int32_t *cobatch_chat_tokens(const cobatch_chat *c, int32_t *n) {
    *n = c->n_tokens;
    return c->tokens;
}

bool cobatch_chat_calls_tools(const cobatch_chat *c) { return c && c->calls; }
bool cobatch_chat_thinks(const cobatch_chat *c) { return c && c->thinks; }
bool cobatch_chat_parses(const cobatch_chat *c) { return c && c->parser; }

int cobatch_chat_parse(const cobatch_chat *c, const char *text, size_t len, bool partial,
                       struct cobatch_chat_output *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (!c->parser) { /* nothing to read out: the output is the answer */
        out->content = strndup(text, len);
        out->reasoning = strdup("");
        if (!out->content || !out->reasoning) {
            cobatch_chat_output_clear(out);
            cb_set_err(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    cb_common_call *calls = NULL;
    size_t n = 0;
    if (cb_common_parse(c->parser, text, len, partial, &out->reasoning, &out->content, &calls, &n, err, errlen) != 0)
        return -1;
    if (n && !(out->calls = calloc(n, sizeof(*out->calls)))) {
        cb_common_calls_free(calls, n);
        cobatch_chat_output_clear(out);
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) { /* taken over */
        out->calls[i] = (struct cobatch_tool_call){calls[i].name, calls[i].arguments};
        calls[i] = (cb_common_call){0};
    }
    out->n_calls = n;
    cb_common_calls_free(calls, n);
    return 0;
}

void cobatch_chat_output_clear(struct cobatch_chat_output *out) {
    free(out->reasoning);
    free(out->content);
    for (size_t i = 0; i < out->n_calls; i++) {
        free(out->calls[i].name);
        free(out->calls[i].arguments);
    }
    free(out->calls);
    memset(out, 0, sizeof(*out));
}

/* ---------------------------------------------------------------- submit --------------------- */

/* The checks of p's own fields (not its prompt): COBATCH_OK, or the code with err filled. */
static int check_request(const cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    if (p->max_tokens < 0)
        return refuse(err, COBATCH_ERR_INVALID, "max_tokens", "max_tokens must be at least 0 (got %d)", p->max_tokens);
    if (p->top_logprobs < 0 || p->top_logprobs > COBATCH_MAX_LOGPROBS)
        return refuse(err, COBATCH_ERR_INVALID, "top_logprobs", "top_logprobs is from 0 to %d (got %d)",
                      COBATCH_MAX_LOGPROBS, p->top_logprobs);
    const char *range = NULL, *field = check_sampling(&p->sampling, &range);
    if (field) return refuse(err, COBATCH_ERR_INVALID, field, "%s must be %s", field, range);
    if (p->n_logit_bias > 0 && (!p->logit_bias || p->n_logit_bias > (size_t)e->model.n_vocab))
        return refuse(err, COBATCH_ERR_INVALID, "logit_bias", "logit_bias: %s",
                      p->logit_bias ? "more entries than tokens" : "no list given");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct cobatch_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= e->model.n_vocab)
            return refuse(err, COBATCH_ERR_INVALID, "logit_bias",
                          "logit_bias: token %d is not in the vocabulary (0 to %d)", b->token, e->model.n_vocab - 1);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return refuse(err, COBATCH_ERR_INVALID, "logit_bias", "logit_bias: biases are from -100 to 100");
    }
    if (p->priority != 0 && e->params.sched_policy != COBATCH_SCHED_PRIORITY)
        return refuse(err, COBATCH_ERR_INVALID, "priority",
                      "priority needs the priority scheduling policy (the engine runs first come, first served)");
    const cobatch_chat *chat = p->chat;
    if (chat && (p->prompt || p->prompt_tokens || p->messages || p->tools || p->json_schema))
        return refuse(err, COBATCH_ERR_INVALID, "chat",
                      "a chat comes instead of a prompt, prompt tokens, messages, tools or a JSON schema");
    if (p->json_schema && !p->messages && !chat)
        return refuse(err, COBATCH_ERR_INVALID, "json_schema",
                      "json_schema: a chat's (give a prompt a grammar: cobatch_json_schema_grammar)");
    if (chat && chat->grammar && (p->grammar || p->parsed_grammar))
        return refuse(err, COBATCH_ERR_INVALID, "grammar",
                      "grammar: the chat has its grammar (its tool calls' or its JSON schema's); give no other");
    if (chat && chat->thinks && chat->think_budget >= 0 && (p->grammar || p->parsed_grammar))
        return refuse(err, COBATCH_ERR_INVALID, "reasoning_budget",
                      "a reasoning budget cannot be kept with a grammar of the request's own: it holds the whole "
                      "output, reasoning included");
    return COBATCH_OK;
}

/* The prediction's tokens (as text: no special tokens parsed), into er; false with err filled. */
static bool prediction_tokens(cobatch_engine *e, cb_engine_req *er, const char *text, struct cobatch_error *err) {
    size_t len = strlen(text);
    if (len / 8 > (size_t)e->n_ctx_seq) { /* (a token is rarely 8 bytes: no need to tokenize to know) */
        refuse(err, COBATCH_ERR_INVALID, "prediction", "the prediction is longer than this engine's context");
        return false;
    }
    int32_t n = 0;
    er->pred = len ? cb_model_tokenize(&e->model, text, len, false, false, &n) : NULL;
    er->pred_seen = n > 0 ? calloc((size_t)n, 1) : NULL;
    if (len && (!er->pred || (n > 0 && !er->pred_seen))) {
        refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return false;
    }
    if (n > e->n_ctx_seq) {
        refuse(err, COBATCH_ERR_INVALID, "prediction", "the prediction has %d tokens; this engine's context holds %d",
               n, e->n_ctx_seq);
        return false;
    }
    er->n_pred = n;
    return true;
}

/* The request p asks for, its prompt tokens taken from its chat or made from its prompt, its
 * grammar and log-probability rows ready; NULL with err filled. */
static cb_request *request_new(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    const cobatch_chat *chat = p->chat;
    int32_t n = 0, *toks = NULL;
    if (chat) {
        n = chat->n_tokens;
        if (!(toks = malloc(sizeof(int32_t) * (size_t)n))) {
            refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
            return NULL;
        }
        memcpy(toks, chat->tokens, sizeof(int32_t) * (size_t)n);
    } else if (!(toks = prompt_tokens(e, p, &n, err))) {
        return NULL;
    }
    if (n >= e->n_ctx_seq || !(cb_sched_fits(e->main.sched, n) || cb_lane_on(&e->lane))) {
        refuse(err, COBATCH_ERR_TOO_LONG,
               chat || p->messages ? "messages"
               : p->prompt         ? "prompt"
                                   : "prompt_tokens",
               "the prompt has %d tokens; this engine's context holds %d per sequence (prompt plus at least one "
               "generated token)",
               n, e->n_ctx_seq);
        free(toks);
        return NULL;
    }
    /* Never allocate more than the context can hold, whatever max_tokens says. */
    int32_t max_tokens = p->max_tokens < e->n_ctx_seq - n ? p->max_tokens : e->n_ctx_seq - n;
    cb_request *r = cb_request_new(0, toks, n, max_tokens > 0 ? max_tokens : 1); /* 0: ends before sampling */
    cb_engine_req *er = r ? cb_engine_req_new(p) : NULL;
    if (r) r->rt = er;
    bool ok = er && (!p->prompt_logprobs || prompt_logprobs_new(er, r, toks));
    free(toks);
    if (ok && p->prediction && !p->no_speculation && !prediction_tokens(e, er, p->prediction, err)) {
        cb_engine_free_request(r);
        return NULL;
    }
    const struct llama_sampler *shared = chat && chat->grammar ? chat->grammar : (const void *)p->parsed_grammar;
    char why[240] = "";
    cb_grammar_limits lim = grammar_limits(e, p->max_tokens);
    if (ok && chat && chat->thinks) { /* followed from its first token: its budget, the lazy grammar's wait */
        ok = (er->think = cb_common_think_new(e->model.vocab, chat->think_start, chat->think_end, chat->think_budget,
                                              chat->think_open, why, sizeof(why))) != NULL;
        er->grammar_waits = chat->lazy;
    }
    if (ok && shared && !(er->grammar = cb_sampler_clone(shared))) {
        ok = false;
    } else if (ok && !shared && p->grammar &&
               !(er->grammar = cb_grammar_new(&e->model, p->grammar, &lim, why, sizeof(why)))) {
        cb_engine_free_request(r);
        refuse(err, strstr(why, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID, "grammar", "grammar: %s",
               why);
        return NULL;
    }
    if (!ok) {
        if (r) cb_engine_free_request(r);
        refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    r->priority = p->priority;
    r->t_submit_us = cobatch_time_us();
    return r;
}

int cb_engine_accept(cobatch_engine *e, void **inbox, size_t *cap, int len, size_t elem, struct cobatch_error *err) {
    if (e->stop) return refuse(err, COBATCH_ERR_SHUTDOWN, NULL, "the engine is shutting down");
    if (e->n_queued >= e->params.max_queue)
        return refuse(err, COBATCH_ERR_QUEUE_FULL, NULL, "too many requests waiting (%d); retry later",
                      e->params.max_queue);
    pthread_mutex_lock(&e->ev_mu);
    bool reserved = reserve_event(e);
    pthread_mutex_unlock(&e->ev_mu);
    if (reserved && cb_grow(inbox, cap, (size_t)len + 1, elem, 64) &&
        cb_grow((void **)&e->live, &e->live_cap, (size_t)e->n_live + 1, sizeof(*e->live), 64))
        return COBATCH_OK;
    if (reserved) {
        pthread_mutex_lock(&e->ev_mu);
        e->events.reserved--;
        pthread_mutex_unlock(&e->ev_mu);
    }
    return refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
}

cobatch_req_id cb_engine_register(cobatch_engine *e, atomic_bool *cancel) {
    cobatch_req_id id = e->next_id++;
    e->live[e->n_live++] = (cb_live_req){.id = id, .cancel = cancel};
    e->n_queued++;
    pthread_cond_signal(&e->cond);
    return id;
}

/* Puts r in the mailbox with its final event reserved; returns its id, or the code with err filled
 * (r is then freed). */
static cobatch_req_id enqueue(cobatch_engine *e, cb_request *r, struct cobatch_error *err) {
    pthread_mutex_lock(&e->mu);
    cobatch_req_id id = 0;
    int status = cb_engine_accept(e, (void **)&e->inbox, &e->inbox_cap, e->inbox_len, sizeof(*e->inbox), err);
    if (status == COBATCH_OK) {
        id = r->id = cb_engine_register(e, &((cb_engine_req *)r->rt)->cancel);
        e->inbox[e->inbox_len++] = r;
    }
    pthread_mutex_unlock(&e->mu);
    if (status != COBATCH_OK) {
        cb_engine_free_request(r);
        return status;
    }
    return id; /* r may be gone: the engine thread owns it */
}

cobatch_req_id cobatch_submit(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !p) return refuse(err, COBATCH_ERR_INVALID, NULL, "no engine or parameters");
    int rc = check_request(e, p, err);
    if (rc != COBATCH_OK) return rc;
    if (p->messages && !p->chat) { /* rendered here, for this request alone */
        cobatch_chat *c = cobatch_chat_new(e, p, err);
        if (!c) return err->code;
        struct cobatch_request_params q = *p;
        q.messages = NULL;
        q.n_messages = 0;
        q.tools = NULL;
        q.json_schema = NULL;
        q.chat = c;
        cobatch_req_id id = cobatch_submit(e, &q, err);
        cobatch_chat_free(c);
        return id;
    }
    cb_request *r = request_new(e, p, err);
    return r ? enqueue(e, r, err) : err->code;
}

void cobatch_drop_cached_prefixes(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->drop_cache = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

int cobatch_cancel(cobatch_engine *e, cobatch_req_id id) {
    int rc = COBATCH_ERR_NOT_FOUND;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i].id == id) { /* live: its request is not freed before this entry goes */
            atomic_store(e->live[i].cancel, true);
            e->n_cancels++;
            pthread_cond_signal(&e->cond);
            rc = COBATCH_OK;
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void cobatch_cancel_waiting(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->cancel_waiting = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- facts ---------------------- */

void cobatch_engine_stats(cobatch_engine *e, struct cobatch_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->waiting = e->n_queued;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&e->ev_mu); /* now, not at the last step: the poller may have taken them since */
    out->events_queued = e->events.len;
    pthread_mutex_unlock(&e->ev_mu);
}

int32_t cobatch_n_vocab(const cobatch_engine *e) { return e->model.n_vocab; }
void cobatch_vocab_info(const cobatch_engine *e, struct cobatch_vocab_info *out) {
    cb_model_vocab_info(&e->model, out);
}
int32_t cobatch_n_ctx_seq(const cobatch_engine *e) { return e->n_ctx_seq; }
size_t cobatch_max_prompt_bytes(const cobatch_engine *e) { return (size_t)e->n_ctx_seq * (size_t)e->model.max_piece; }
const char *cobatch_model_name(const cobatch_engine *e) { return e->model.name; }
void cobatch_weights_info(const cobatch_engine *e, struct cobatch_weights_info *out) {
    out->buffer_types = e->model.weight_bufts;
    out->repack = cb_repack_mode_name(e->model.repack_mode);
    out->amx = e->model.repack.amx;
    out->why = e->model.repack.why;
}
void cobatch_kv_info(const cobatch_engine *e, struct cobatch_kv_info *out) {
    memset(out, 0, sizeof(*out));
    out->split = e->main.kv.split;
    out->seqs = e->params.max_num_seqs;
    out->seq_cells = e->main.kv.per_seq_cap;
    out->cache_streams = e->main.kv.split ? e->main.kv.n_seq - e->params.max_num_seqs : 0;
    out->lane_cells = cb_lane_on(&e->lane) ? e->lane.pool.kv.capacity : 0;
    out->kv_bytes = (int64_t)(e->model.kv_cell_bytes * ((double)e->model.n_ctx + out->lane_cells));
    out->host_cache_bytes = e->host.cap;
    out->n_ctx_train = e->model.n_ctx_train;
    out->ctx_limit = cobatch_params_ctx_limit(&e->params, e->model.n_ctx_train);
    out->flash_attn = e->params.flash_attn != 0;
    out->type_k = e->params.cache_type_k;
    out->type_v = e->params.cache_type_v;
    out->attention = e->attn_why;
}
int32_t cobatch_max_queue(const cobatch_engine *e) { return e->params.max_queue; }

void cobatch_model_desc(const cobatch_engine *e, struct cobatch_model_desc *out) {
    cb_model_describe(&e->model, out);
    const char *tmpl = e->model.tmpls ? cb_common_template_source(e->model.tmpls) : NULL;
    out->tools = tmpl && strstr(tmpl, "tools") != NULL; /* a Jinja template that reads its tools */
    out->thinking = e->model.tmpls && cb_common_template_thinking(e->model.tmpls)->thinks;
}

int32_t cobatch_tokenize(const cobatch_engine *e, const char *text, int32_t *out, int32_t max) {
    return cobatch_tokenize_ext(e, text, true, true, out, max);
}

int32_t cobatch_tokenize_ext(const cobatch_engine *e, const char *text, bool add_special, bool parse_special,
                             int32_t *out, int32_t max) {
    int32_t n = cb_model_tokenize_into(&e->model, text, strlen(text), add_special, parse_special, out, max);
    return n == INT32_MIN ? -1 : n < 0 ? -n : n;
}

/* A cobatch_grammar is the llama.cpp grammar sampler itself, never run: requests clone it. */
cobatch_grammar *cobatch_grammar_new(const cobatch_engine *e, const char *gbnf, int32_t max_tokens, char *err,
                                     size_t errlen) {
    char why[240] = "no grammar given";
    cb_grammar_limits lim = grammar_limits(e, max_tokens);
    struct llama_sampler *g = gbnf ? cb_grammar_new(&e->model, gbnf, &lim, why, sizeof(why)) : NULL;
    if (!g) cb_set_err(err, errlen, "grammar: %s", why);
    return (cobatch_grammar *)g;
}

void cobatch_grammar_free(cobatch_grammar *g) { cb_sampler_free((struct llama_sampler *)g); }

char *cobatch_json_schema_grammar(const char *schema, char *err, size_t errlen) {
    return cb_common_schema_to_grammar(schema, err, errlen);
}

int32_t cobatch_token_piece(const cobatch_engine *e, int32_t token, char *out, int32_t max) {
    if (token < 0 || token >= e->model.n_vocab) return -1;
    int32_t k = cb_model_token_text(&e->model, token, out, max);
    return k < 0 ? -k : k;
}

int32_t cobatch_detokenize(const cobatch_engine *e, const int32_t *tokens, int32_t n, char *out, int32_t max) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->model.n_vocab) return -1;
    int32_t k = cb_model_detokenize(&e->model, tokens, n, out, max);
    return k < 0 ? -k : k;
}

/* ---------------------------------------------------------------- test hooks (testing.h) ----- */

void cobatch_test_fault(cobatch_engine *e, int decode_rc, int count, int64_t abort_after_nodes) {
    pthread_mutex_lock(&e->mu);
    e->fault = (cb_engine_fault){.decode_rc = decode_rc, .decode_count = count, .abort_after_nodes = abort_after_nodes};
    e->fault_set = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

int64_t cobatch_test_nodes_seen(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    int64_t n = e->nodes_seen;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void cobatch_test_embd_fault(cobatch_engine *e, int rc, int count) {
    pthread_mutex_lock(&e->mu);
    e->embd_fault_rc = rc;
    e->embd_fault_count = count;
    e->embd_fault_set = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

void cobatch_test_set_event_backlog(cobatch_engine *e, int n) {
    pthread_mutex_lock(&e->ev_mu);
    e->event_backlog = n > 0 ? n : CB_EVENT_BACKLOG;
    pthread_mutex_unlock(&e->ev_mu);
}
