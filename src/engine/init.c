/* init.c — an engine's parameters resolved and checked, the engine made (model, context, pools,
 * scheduler, thread) and freed. */
#include "engine_internal.h"
#include "sizes.h"
#include "../runtime/disk.h"
#include "../runtime/llama_common.h"
#include "../runtime/sampling.h"
#include "../util/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

_Static_assert((int)COBATCH_REPACK_AUTO == (int)CB_REPACK_AUTO && (int)COBATCH_REPACK_ON == (int)CB_REPACK_ON &&
                   (int)COBATCH_REPACK_OFF == (int)CB_REPACK_OFF,
               "the public repack modes are core's");

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
    e->spec_ngram = p->spec == COBATCH_SPEC_NGRAM || p->spec == COBATCH_SPEC_NGRAM_OWN;
    e->spec_shared = p->spec == COBATCH_SPEC_NGRAM;
    e->mail[CB_KIND_EMBED].max_weight = COBATCH_EMBD_MAX_WAITING;
    e->mail[CB_KIND_EMBED].weight_unit = "embedding inputs";
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
static int make_scheduler(cobatch_engine *e, const cb_engine_sizes *z, int32_t budget, int32_t prefill_budget,
                          char *err, size_t errlen) {
    const struct cobatch_engine_params *p = &e->params;
    cb_swap_init(&e->swap, (int64_t)((double)p->swap_space * (1 << 30)), e->model.kv_cell_bytes);
    cb_sched_config sc = {.mode = p->mode == COBATCH_MODE_CONTINUOUS ? CB_MODE_CONTINUOUS : CB_MODE_STATIC,
                          .max_num_seqs = z->sched_seqs,
                          .max_batched_tokens = budget,
                          .prefill_step_tokens = prefill_budget,
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
                          .max_draft_rows = CB_SPEC_ROWS};
    /* A sliding-window model: its streams keep every cell (swa_full), so a stream serves any prefix;
     * llama.cpp saves a sequence without the cells its window has passed, so a host-tier entry
     * serves only a request that continues all of it. In the unified layout llama.cpp gives a cell
     * its window has passed to another sequence's token, though a cached prefix still needs it: no
     * sharing there. */
    bool swa = cb_model_has_swa(&e->model);
    cb_host_init(&e->host, z->cache == CB_CACHE_STREAMS ? (int64_t)((double)p->cache_ram * (1 << 30)) : 0,
                 e->model.kv_cell_bytes, CB_HOST_MIN_LEN, &e->swap);
    e->host.window = cb_model_n_swa(&e->model);
    if (swa && z->cache == CB_CACHE_RADIX) {
        if (p->verbose)
            fprintf(stderr, "cobatch: a sliding-window model in the unified layout shares no prefixes (the split "
                            "layout does)\n");
        e->main.cache = cb_cache_new_none(&e->main.kv);
    } else if (z->cache == CB_CACHE_STREAMS)
        e->main.cache =
            cb_cache_new_streams(&e->main.kv, p->max_num_seqs, CB_STREAM_MIN_SHARE, e->host.cap > 0 ? &e->host : NULL);
    else if (z->cache == CB_CACHE_RADIX)
        e->main.cache = cb_cache_new_radix(&e->main.kv, z->holders, p->prefix_cache_max_idle);
    else
        e->main.cache = cb_cache_new_none(&e->main.kv);
    e->main.sched = e->main.cache ? cb_sched_new(&sc, &e->main.kv, e->main.cache) : NULL;
    e->cand = cb_sampler_scratch_new(&e->model);
    if (!e->main.sched || !e->cand || cb_spec_init(e) != 0 || cb_plan_init(&e->main.plan, p->max_num_seqs) != 0 ||
        cb_runner_init(&e->main.runner, &e->model, p->max_num_seqs) != 0) {
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    e->main.runner.swap = &e->swap;
    e->main.model = &e->model;
    return 0;
}

/* The host tier's disk tier (runtime/disk.h), in a folder of its own for everything that makes
 * the saved cells readable: the model file, llama.cpp's build, the cache's types, flash attention,
 * the contexts' layout and RoPE (K is saved rotated). */
static int open_disk(cobatch_engine *e, const struct cobatch_engine_params *p, const cb_model_params *mp, char *err,
                     size_t errlen) {
    if (e->host.cap == 0) {
        cb_set_err(err, errlen,
                   "cache_disk needs the prefix cache's host tier (the split layout with prefix caching, cache_ram "
                   "above 0)");
        return -1;
    }
    char hash[65], fp[768];
    if (cb_disk_model_hash(e->model_path, hash) != 0) {
        cb_set_err(err, errlen, "cache_disk: cannot read the model file %s", e->model_path);
        return -1;
    }
    const struct cobatch_rope *rp = &p->rope;
    snprintf(fp, sizeof(fp),
             "cobatch KV files 1; llama.cpp %s%s%s; model %s; cache types %d %d; flash attention %d; %d streams of %d "
             "cells; long lane %d cells; rope %d %g %g %g %d %g %g %g %g",
             COBATCH_LLAMA_COMMIT, COBATCH_LLAMA_FLAGS[0] ? " " : "", COBATCH_LLAMA_FLAGS, hash, (int)mp->type_k,
             (int)mp->type_v, (int)e->model.flash_attn, e->model.n_seq_max, e->model.n_ctx_seq,
             cb_lane_on(&e->lane) ? e->lane.pool.kv.capacity : 0, rp->scaling, rp->scale, rp->freq_base, rp->freq_scale,
             rp->yarn_orig_ctx, rp->yarn_ext_factor, rp->yarn_attn_factor, rp->yarn_beta_slow, rp->yarn_beta_fast);
    cb_host_disk_on(&e->host, (int64_t)((double)p->cache_disk_size * (1 << 30)));
    e->disk = cb_disk_open(p->cache_disk, fp, &e->host, cb_engine_disk_wrote, e, err, errlen);
    if (!e->disk) return -1;
    if (p->verbose)
        fprintf(stderr, "cobatch: the prefix cache's disk tier: %s, %d conversations (%.1f MiB) found\n",
                cb_disk_path(e->disk), e->host.n_disk, (double)e->host.disk_used / (1 << 20));
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
                          .n_batch = z.prefill_budget,
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
    int32_t prefill_budget = z.prefill_budget < e->model.n_batch ? z.prefill_budget : e->model.n_batch;
    if (budget < p.max_num_seqs) {
        cb_set_err(err, errlen, "a step of %d tokens cannot hold %d sequences (raise --ctx-size)", budget,
                   p.max_num_seqs);
        goto fail;
    }
    if (make_scheduler(e, &z, budget, prefill_budget, err, errlen) != 0) goto fail;
    int32_t lane = p.long_lane; /* the long lane's pool, after the host tier it shares */
    if (limit > 0 && lane > limit) lane = limit;
    if (lane > e->main.kv.per_seq_cap && z.split && p.mode == COBATCH_MODE_CONTINUOUS) {
        if (cb_lane_init(e, &mp, lane, p.max_num_seqs < 4 ? p.max_num_seqs : 4, z.budget, z.prefill_budget, z.aging_us,
                         err, errlen) != 0)
            goto fail;
        e->n_ctx_seq = e->lane.pool.kv.capacity;
    }
    if (p.embeddings && cb_embd_init(e, err, errlen) != 0) goto fail;
    if (p.cache_disk && open_disk(e, &p, &mp, err, errlen) != 0) goto fail;
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
    for (int k = 0; k < CB_N_KINDS; k++) { /* (no mail once the engine thread has run: it ends it) */
        for (int i = 0; i < e->mail[k].len; i++)
            cb_kinds[k].free_req(e->mail[k].items[i]);
        free(e->mail[k].items);
        free(e->taken[k].items);
    }
    free(e->live);
    free(e->reqs);
    cb_runner_free(&e->main.runner);
    free(e->cand);
    cb_plan_free(&e->main.plan);
    cb_sched_free(e->main.sched);
    cb_cache_free(e->main.cache);
    cb_disk_close(e->disk, &e->host); /* (its writes hold entries of the host tier) */
    cb_host_free(&e->host);
    cb_ngram_pool_free(e->spec_pool);
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
