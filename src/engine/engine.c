/* engine.c — the engine thread: intake, cancels, and the step, over each pool (the main one, then
 * the long lane's):
 *     plan = schedule; run; postprocess
 * Only this thread touches the llama contexts, the schedulers and the samplers. */
#include "engine_internal.h"
#include "../runtime/disk.h"
#include "../runtime/sampling.h"
#include "../util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- intake and cancels --------- */

static void gen_intake(cobatch_engine *e, void **in, int n) {
    for (int i = 0; i < n; i++) {
        cb_request *r = in[i];
        cb_engine_req *er = r->rt;
        er->smpl = cb_sampler_new(&e->model, &er->sampling, er->logit_bias, er->n_logit_bias);
        if (!er->smpl || !cb_grow((void **)&e->reqs, &e->reqs_cap, (size_t)e->n_reqs + 1, sizeof(*e->reqs), 64)) {
            r->state = CB_FINISHED_ERROR; /* not in the scheduler: cb_engine_finish() skips it */
            cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory");
            continue;
        }
        e->reqs[e->n_reqs++] = r;
        if (cb_lane_on(&e->lane) && !cb_sched_fits(e->main.sched, r->n_prompt)) /* longer than a stream */
            cb_lane_add(e, r);
        else
            cb_sched_add(e->main.sched, r, e->arrivals++);
        if (r->state == CB_FINISHED_ERROR) cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory");
    }
}

/* Ends the requests cobatch_cancel flagged (all of them: a flag is only ever set on a live
 * request, and every live request is in reqs once its intake ran). */
static void apply_cancels(cobatch_engine *e) {
    for (int k = 0; k < e->n_reqs;) {
        cb_engine_req *er = e->reqs[k]->rt;
        if (atomic_load(&er->cancel))
            cb_engine_finish(e, e->reqs[k], CB_FINISHED_CANCELLED, NULL); /* moves the last request into slot k */
        else
            k++;
    }
}

/* Ends every request that is waiting and never ran (cobatch_cancel_waiting). */
static void cancel_never_scheduled(cobatch_engine *e) {
    cb_sched *scheds[2] = {e->main.sched, e->lane.pool.sched};
    for (int k = 0; k < 2 && scheds[k]; k++) {
        for (int32_t i = 0; i < cb_sched_n_waiting(scheds[k]);) {
            cb_request *r = cb_sched_waiting_at(scheds[k], i);
            if (r->t_scheduled_us == 0 && r->state == CB_WAITING)
                cb_engine_finish(e, r, CB_FINISHED_CANCELLED, NULL);
            else
                i++;
        }
    }
}

static void gen_end(cobatch_engine *e, cb_end_which which) {
    if (which == CB_END_FLAGGED) {
        apply_cancels(e);
    } else if (which == CB_END_NEVER_RAN) {
        cancel_never_scheduled(e);
    } else {
        cb_mailbox *t = &e->taken[CB_KIND_GENERATE];
        for (int i = 0; i < t->len; i++) {
            cb_request *r = t->items[i];
            r->state = CB_FINISHED_CANCELLED; /* never in the scheduler */
            cb_engine_finish(e, r, CB_FINISHED_CANCELLED, NULL);
        }
        t->len = 0;
        while (e->n_reqs > 0)
            cb_engine_finish(e, e->reqs[0], CB_FINISHED_CANCELLED, NULL);
    }
}

static bool gen_busy(const cobatch_engine *e) { return e->n_reqs > 0; }

static void gen_free(void *r) { cb_engine_free_request(r); }

static void gen_arm(cobatch_engine *e, const cb_engine_fault *f) {
    cb_runner_set_fault(&e->main.runner, f->decode_rc, f->decode_count, f->abort_after_nodes);
}

const cb_kind cb_kinds[CB_N_KINDS] = {
    [CB_KIND_GENERATE] = {.intake = gen_intake, .end = gen_end, .busy = gen_busy, .free_req = gen_free, .arm = gen_arm},
    [CB_KIND_EMBED] = {.intake = cb_embd_intake,
                       .end = cb_embd_end,
                       .busy = cb_embd_busy,
                       .free_req = cb_embd_req_free,
                       .arm = cb_embd_arm},
};

/* ---------------------------------------------------------------- one step ------------------- */

/* Fills the prompt log-probabilities of this step's rows that wanted them (the logprob of token
 * pos + 1 is in row pos); a prompt computed whole has them all, and its next event takes them. */
static void record_prompt_logprobs(const cb_runner *runner, const cb_model *m, const cb_plan *plan) {
    for (int32_t i = 0; i < runner->n_lp; i++) {
        const cb_lp_row *x = &runner->lp[i];
        cb_request *r = plan->items[x->item].req;
        cb_engine_req *er = r->rt;
        int32_t w = 1 + er->n_top;
        cb_logprobs(m, x->row, r->tokens[x->pos + 1], w - 1, er->plp + (size_t)(x->pos + 1) * (size_t)w);
    }
    for (int32_t i = 0; i < plan->n_items; i++) {
        cb_request *r = plan->items[i].req;
        cb_engine_req *er = r->rt;
        if (r->all_logits_to > 0 && r->n_computed > r->all_logits_from) /* rows are filled in order */
            r->all_logits_from = r->n_computed < r->all_logits_to ? r->n_computed : r->all_logits_to;
        if (er->plp && !er->plp_ready && r->n_computed >= r->n_prompt) {
            er->plp_ready = true;
            r->all_logits_to = 0; /* a recompute after a preemption may share cached cells again */
        }
    }
}

/* Samples every item that asked for logits, appends, checks stops, emits, retires. */
static void sample_and_emit(cobatch_engine *e, cb_pool *pool, cb_plan *plan) {
    int64_t now = cobatch_time_us();
    for (int32_t i = 0; i < plan->n_items; i++) {
        if (plan->items[i].n_draft > 0)
            cb_spec_check(e, pool, plan, i, now);
        else if (plan->items[i].logits)
            cb_engine_sample_one(e, plan->items[i].req, pool->model, pool->runner.logit_row[i], now);
    }
}

/* A decode that failed (aborted, or an error) may have kept some of the step's cells: llama.cpp
 * takes back those of the graph run that failed, not those of earlier runs of the same batch.
 * Every sequence of the step is trimmed to the tokens it had before the step (what the accounting
 * believes after the rollback), then the step's requests end; the others go on. */
static void fail_plan(cobatch_engine *e, cb_pool *pool, cb_plan *plan, int rc) {
    char msg[96];
    snprintf(msg, sizeof(msg), "llama_decode failed with code %d", rc);
    e->n_decode_failures++;
    for (int32_t i = 0; i < plan->n_items; i++)
        cb_runner_trim(&pool->runner, plan->items[i].req->seq_id, plan->items[i].pos0);
    for (int32_t i = 0; i < plan->n_items; i++)
        cb_engine_finish(e, plan->items[i].req, CB_FINISHED_ERROR, msg);
}

/* Sequences of a pool whose cells in llama.cpp are not what the accounting says: a running
 * request holds its computed tokens, a parked stream (split layout) its recorded tokens, any other
 * id nothing. The unified layout's prefix-cache holders are not checked. Called between steps, when
 * every queued cell change has been applied. O(sequences). */
static int32_t kv_mismatches(cb_pool *pool) {
    if (!pool->sched) return 0;
    int32_t bad = 0;
    for (int32_t i = 0; i < cb_sched_n_running(pool->sched); i++) {
        const cb_request *r = cb_sched_running_at(pool->sched, i);
        bad += cb_runner_seq_len(&pool->runner, r->seq_id) != r->n_computed;
    }
    if (cb_cache_prefix(pool->cache)) return bad;
    for (int32_t s = 0; s < pool->kv.n_seq; s++)
        if (!pool->kv.taken[s]) bad += cb_runner_seq_len(&pool->runner, s) != cb_cache_parked_len(pool->cache, s);
    return bad;
}

/* Cells llama.cpp shows the main pool's running requests, summed over them (a cell shared by k of
 * them is counted k times): a check that their sequences hold what the scheduler thinks. */
static int32_t cells_in_llama(cobatch_engine *e) {
    int32_t n = 0;
    for (int32_t i = 0; i < cb_sched_n_running(e->main.sched); i++)
        n += cb_runner_seq_len(&e->main.runner, cb_sched_running_at(e->main.sched, i)->seq_id);
    return n;
}

/* Running and waiting requests of both pools. */
static int32_t n_running(const cobatch_engine *e) {
    return cb_sched_n_running(e->main.sched) + (e->lane.pool.sched ? cb_sched_n_running(e->lane.pool.sched) : 0);
}
static int32_t n_waiting(const cobatch_engine *e) {
    return cb_sched_n_waiting(e->main.sched) + (e->lane.pool.sched ? cb_sched_n_waiting(e->lane.pool.sched) : 0);
}

static void update_stats(cobatch_engine *e) {
    const cb_sched_stats *ss = cb_sched_get_stats(e->main.sched);
    cb_sched_stats ls = {0};
    cb_cache_stats cs, lcs = {0};
    if (cb_lane_on(&e->lane)) {
        ls = *cb_sched_get_stats(e->lane.pool.sched);
        cb_cache_get_stats(e->lane.pool.cache, &lcs);
    }
    cb_cache_get_stats(e->main.cache, &cs);
    pthread_mutex_lock(&e->mu);
#define AT_READ 0 /* cobatch_engine_stats sets it */
#define CB_STAT_SET(type, field, kind, metric, help, source) e->stats.field = (source);
    COBATCH_STATS(CB_STAT_SET) /* each from its source in the one list (cobatch.h) */
#undef CB_STAT_SET
#undef AT_READ
    e->n_queued = e->mail[CB_KIND_GENERATE].len + n_waiting(e) + e->mail[CB_KIND_EMBED].open;
    e->nodes_seen = e->main.runner.last_nodes;
    pthread_mutex_unlock(&e->mu);
}

static void report_step(cobatch_engine *e, struct cobatch_step_info *info) {
    if (!e->params.on_step) return;
    info->t_end_us = cobatch_time_us();
    info->running = cb_sched_n_running(e->main.sched);
    info->waiting = cb_sched_n_waiting(e->main.sched);
    info->kv_used = e->main.kv.total_used;
    e->params.on_step(info, e->params.on_step_user);
}

/* The queue count max_queue is checked against, exact once a step has made its admissions (submit
 * adds to it meanwhile). */
static void note_queue(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->n_queued = e->mail[CB_KIND_GENERATE].len + n_waiting(e) + e->mail[CB_KIND_EMBED].open;
    pthread_mutex_unlock(&e->mu);
}

/* Plans a pool's step of at most budget tokens (0: the configured one; strict: see
 * cb_sched_step), and ends the requests the scheduler could not keep (out of memory for its queue). */
static cb_plan *schedule(cobatch_engine *e, cb_pool *pool, int32_t budget, bool strict) {
    cb_plan *plan = &pool->plan;
    cb_sched_step(pool->sched, plan, budget, strict);
    note_queue(e);
    for (int32_t i = 0; i < plan->n_failed; i++)
        cb_engine_finish(e, plan->failed[i], CB_FINISHED_ERROR, "out of memory");
    return plan;
}

/* Applies the plan's cell changes and decodes it (an empty plan only applies them). When
 * llama.cpp finds no KV slot (code 1) the step is rolled back and planned again at half the
 * tokens; any other failure is rolled back and returned, the plan's items kept for the failure
 * path. Returns 0 or llama_decode's code. */
static int run_plan(cobatch_engine *e, cb_pool *pool, cb_plan **plan, int32_t budget) {
    for (;;) {
        int rc = cb_runner_run(&pool->runner, *plan);
        if (rc == 0) return 0;
        cb_sched_rollback(pool->sched, *plan);
        if (rc == CB_RUNNER_RESTORE_FAILED) { /* those requests compute their cells again */
            for (int32_t i = 0; i < pool->runner.n_restore_failed; i++)
                cb_sched_restore_failed(pool->sched, pool->runner.restore_failed[i]);
            *plan = schedule(e, pool, budget, false);
            continue;
        }
        if (rc != 1 || (*plan)->n_tokens <= 1) return rc; /* aborted, an error, or not even one token fits */
        e->n_retries++;
        *plan = schedule(e, pool, (*plan)->n_tokens / 2, true);
    }
}

/* What a step of the main pool tells: its report's fields, and the costs the next steps weigh (a
 * prompt token against a swap, decode rows and short prompts for the pace). */
static void note_main(cobatch_engine *e, const cb_plan *plan, int64_t run_us, int64_t swapped,
                      struct cobatch_step_info *info) {
    info->decode_rows = plan->n_decode;
    info->prefill_tokens = plan->n_prefill_tokens;
    info->draft_rows = plan->n_draft_rows;
    e->spec_steps += plan->n_draft_rows > 0;
    /* what speculation weighs a draft row against: steps of decode rows and drafts alone, in one graph
     * run (drafts beside other rows run apart in the split layout: the choice adds that run's cost
     * itself, and must not find it in the table too) */
    if (plan->n_prefill_tokens == 0 && (plan->n_draft_rows == 0 || e->main.runner.n_runs == 1))
        cb_row_cost_note(&e->spec_cost, plan->n_tokens, run_us, 0.98);
    info->n_requests = plan->n_items;
    info->preempted = plan->n_preempted;
    info->swapped = (int32_t)swapped;
    info->graph_runs = e->main.runner.n_runs;
    for (int32_t i = 0; i < plan->n_items; i++)
        info->context_cells += plan->items[i].pos0 + plan->items[i].n_tokens;
    info->attended_cells = e->main.runner.attended;
    /* What cutting a block of streams into graph runs by context weighs (cb_plan_row_order), fitted
     * from steps of decode rows; until steps tell runs, rows and cells apart, what both read: one
     * more run reads the weights, a row over a cell its K and V. Only without flash attention: its
     * kernel skips a short stream's masked cells, so a run padded to a long stream's cells costs it
     * little (a 16-row step 161 ms in one run, 175 ms in two; 468 and 181 ms without it). */
    if (plan->n_prefill_tokens == 0 && e->main.runner.attended > 0)
        cb_run_cost_note(&e->run_cost, e->main.runner.n_runs, plan->n_tokens, e->main.runner.attended, run_us, 0.98);
    double run_cells = cb_run_cost_cells(&e->run_cost);
    if (run_cells <= 0 && e->model.kv_cell_bytes > 0) run_cells = e->model.weight_bytes / e->model.kv_cell_bytes;
    e->main.runner.run_cells = e->model.flash_attn ? 0 : run_cells;
    /* the cost of a token computed again, against which a preemption weighs a copy (swap.h) */
    if (plan->n_prefill_tokens >= 32) cb_swap_note_prefill(&e->swap, plan->n_tokens, run_us);
    /* what the pace cuts: steps of decode rows and short prompts only (a long prompt's row at an
     * agent's context costs several times a short one's) */
    if (plan->n_paced_tokens == plan->n_prefill_tokens && plan->n_draft_rows == 0)
        cb_step_pace_note(&e->pace, plan->n_decode, plan->n_prefill_tokens, run_us,
                          cb_sched_get_config(e->main.sched)->max_num_seqs);
}

/* What a step of the lane tells: its tokens and time, and (a tile of rows or more) a token's cost;
 * a few decode rows alone are a pass over the weights for little, and rows under the tile leave the
 * tiled kernel: either would make a chunk's token look dearer than it is. */
static void note_lane(cobatch_engine *e, const cb_plan *plan, int64_t run_us, struct cobatch_step_info *info) {
    info->lane_tokens = plan->n_tokens;
    info->lane_us = run_us;
    if (plan->n_tokens >= CB_RUNNER_FA_TILE) cb_pace_note(&e->lane.pace, plan->n_tokens, run_us);
}

/* The plan ran (rc 0): its tokens are committed, sampled and emitted. Or it failed: its requests
 * end, the rest go on. run_us: the plan's decode time, without its cell copies to and from host
 * memory. Returns whether the plan ran and had requests (then *info has the pool's part of the
 * step's report); false for a failed or empty plan. */
static bool postprocess(cobatch_engine *e, cb_pool *pool, cb_plan *plan, int rc, int64_t run_us, int64_t swapped,
                        struct cobatch_step_info *info) {
    if (rc != 0) {
        fail_plan(e, pool, plan, rc);
        return false;
    }
    if (plan->n_items == 0) {
        /* Nothing runnable with nobody running: the queue head can never fit. End it rather than
         * spin (cb_sched_fits at submit should make this unreachable). */
        cb_sched *s = pool->sched;
        if (cb_sched_n_running(s) == 0 && cb_sched_n_waiting(s) > 0 && !cb_sched_saving(s))
            cb_engine_finish(e, cb_sched_waiting_at(s, 0), CB_FINISHED_ERROR, "request cannot be scheduled");
        return false;
    }
    cb_sched_commit(pool->sched, plan, cobatch_time_us());
    e->n_prompt_computed += plan->n_prefill_tokens;
    if (pool == &e->main)
        note_main(e, plan, run_us, swapped, info);
    else
        note_lane(e, plan, run_us, info);
    record_prompt_logprobs(&pool->runner, pool->model, plan);
    int64_t held = e->spec_accepted;
    sample_and_emit(e, pool, plan);
    info->draft_accepted += (int32_t)(e->spec_accepted - held);
    return true;
}

/* schedule -> run -> postprocess over one pool, at most budget tokens (0: its configured budget).
 * Returns the tokens it ran (0: none, or it failed). */
static int32_t pool_step(cobatch_engine *e, cb_pool *pool, int32_t budget, struct cobatch_step_info *info) {
    int64_t swapped = e->swap.swapped_out;
    if (pool == &e->main) cb_spec_prepare(e);         /* decoding requests' drafts (speculate.c) */
    cb_plan *plan = schedule(e, pool, budget, false); /* cb_sched_step: who runs, how many tokens */
    int64_t t_run = cobatch_time_us(), copy_us = e->swap.copy_us + e->host.copy_us, decode_us = pool->runner.decode_us;
    int rc = run_plan(e, pool, &plan, budget); /* one llama_batch, one llama_decode */
    int64_t run_us = cobatch_time_us() - t_run - (e->swap.copy_us + e->host.copy_us - copy_us);
    info->decode_us += pool->runner.decode_us - decode_us; /* (a failed or retried decode's time too) */
    return postprocess(e, pool, plan, rc, run_us, e->swap.swapped_out - swapped, info) ? plan->n_tokens : 0;
}

/* One step: the main pool, then the lane in what the main pool's step left (a second graph, only
 * while the lane has work), then an embeddings pass in what the pace allows beside the generation the
 * step ran (embd.c). With nothing to run it still applies the cell changes made since the last one (a
 * cancel's release). */
static void step(cobatch_engine *e) {
    struct cobatch_step_info info = {.t_start_us = cobatch_time_us()};
    int64_t steps = cb_sched_get_stats(e->main.sched)->steps;
    int32_t used = pool_step(e, &e->main, cb_lane_main_budget(e), &info);
    if (cb_lane_on(&e->lane) && pool_step(e, &e->lane.pool, cb_lane_budget(e, used), &info) > 0 &&
        cb_sched_get_stats(e->main.sched)->steps == steps)
        e->lane.alone_steps++;
    if (cb_embd_on(&e->embd)) /* one embeddings pass, in its share of the time */
        cb_embd_step(e, used > 0 || info.lane_tokens > 0 ? cobatch_time_us() - info.t_start_us : 0, &info);
    info.decode_us += info.embd_us;
    if (used > 0 || info.lane_tokens > 0 || info.embd_tokens > 0) report_step(e, &info);
}

/* ---------------------------------------------------------------- the thread ----------------- */

/* Whether any kind has mail, a fault to arm or requests in work. */
static bool work_for_engine(const cobatch_engine *e) {
    for (int k = 0; k < CB_N_KINDS; k++)
        if (e->mail[k].len > 0 || e->fault_set[k] || cb_kinds[k].busy(e)) return true;
    return false;
}

/* With mu held: every kind's mail into e->taken, swapped in O(1). */
static void swap_mail(cobatch_engine *e) {
    for (int k = 0; k < CB_N_KINDS; k++) {
        cb_mailbox *m = &e->mail[k], *t = &e->taken[k];
        void **items = t->items;
        size_t cap = t->cap;
        t->items = m->items, t->cap = m->cap, t->len = m->len;
        m->items = items, m->cap = cap, m->len = 0;
    }
}

/* Takes what the API threads left: every kind's new requests (into e->taken), whether cancels,
 * a cache drop or a cancel of the waiting were asked for; a test's faults armed. Waits while there is
 * nothing to do. false: the engine is stopping. */
static bool take_mail(cobatch_engine *e, bool *cancels, bool *drop, bool *cancel_waiting) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && e->n_cancels == 0 && !e->drop_cache && !e->cancel_waiting && !e->disk_done &&
           !work_for_engine(e))
        pthread_cond_wait(&e->cond, &e->mu);
    e->disk_done = false;
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    swap_mail(e);
    *cancels = e->n_cancels > 0;
    e->n_cancels = 0;
    *drop = e->drop_cache;
    e->drop_cache = false;
    *cancel_waiting = e->cancel_waiting;
    e->cancel_waiting = false;
    for (int k = 0; k < CB_N_KINDS; k++) {
        if (e->fault_set[k]) cb_kinds[k].arm(e, &e->fault[k]);
        e->fault_set[k] = false;
    }
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* One request lifecycle for every kind: the mail in, the cancels asked for. */
static bool take_and_apply_mail(cobatch_engine *e) {
    bool cancels, drop, cancel_waiting;
    if (!take_mail(e, &cancels, &drop, &cancel_waiting)) return false;
    for (int k = 0; k < CB_N_KINDS; k++) {
        cb_kinds[k].intake(e, e->taken[k].items, e->taken[k].len);
        e->taken[k].len = 0;
    }
    for (int k = 0; k < CB_N_KINDS && cancels; k++)
        cb_kinds[k].end(e, CB_END_FLAGGED);
    for (int k = 0; k < CB_N_KINDS && cancel_waiting; k++)
        cb_kinds[k].end(e, CB_END_NEVER_RAN);
    if (drop) cb_sched_drop_cache(e->main.sched); /* the removals run with this step's plan */
    return true;
}

void cb_engine_disk_wrote(void *arg) {
    cobatch_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    e->disk_done = true;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* Whether cell changes wait to be made (apply_pending): a request that ended this step left its cells
 * to the cache, and a long conversation's copy to the host tier takes a while (5,000 cells of the
 * default model, 115 MB: 0.15-0.4 s on two cores), which its last token must not wait for. */
static bool ops_pending(cobatch_engine *e) {
    return cb_sched_pending_ops(e->main.sched)->n > 0 ||
           (cb_lane_on(&e->lane) && cb_sched_pending_ops(e->lane.pool.sched)->n > 0);
}

/* The cell changes queued since the last step, made now in both pools. */
static void apply_pending(cobatch_engine *e) {
    cb_runner_apply_ops(&e->main.runner, cb_sched_pending_ops(e->main.sched));
    if (cb_lane_on(&e->lane)) cb_runner_apply_ops(&e->lane.pool.runner, cb_sched_pending_ops(e->lane.pool.sched));
}

/* A drain with a disk tier: the conversations the streams hold go to the host tier, and every one
 * there without a file is written, before the process goes. */
static void save_to_disk(cobatch_engine *e) {
    apply_pending(e); /* the ends' releases: their streams parked */
    int32_t streams = cb_cache_save_all(e->main.cache, cb_sched_pending_ops(e->main.sched));
    apply_pending(e);
    int32_t more = cb_host_write_all(&e->host);
    cb_disk_flush(e->disk, &e->host);
    if (e->params.verbose)
        fprintf(stderr, "cobatch: the disk tier holds %d conversations (%d streams saved, %d written again)\n",
                e->host.n_disk, streams, more);
}

void *cb_engine_main(void *arg) {
    cobatch_engine *e = arg;
    update_stats(e); /* what the start found (the disk tier's files) before any step */
    for (;;) {
        cb_engine_wait_for_event_space(e); /* a poller that does not keep up holds the engine here */
        if (!take_and_apply_mail(e)) break;
        cb_disk_pump(e->disk, &e->host); /* writes ended, other replicas' files */
        step(e);
        if (ops_pending(e)) { /* the step's tokens go out first: its ends' cell changes may take a while */
            update_stats(e);
            cb_engine_wake_pollers(e);
        }
        apply_pending(e);                /* what this step's ends freed */
        cb_disk_pump(e->disk, &e->host); /* the step's saves to the writer */
        update_stats(e);
        cb_engine_wake_pollers(e);
    }
    /* shutting down: whatever is left ends as cancelled, the mail included */
    pthread_mutex_lock(&e->mu);
    swap_mail(e);
    pthread_mutex_unlock(&e->mu);
    for (int k = 0; k < CB_N_KINDS; k++)
        cb_kinds[k].end(e, CB_END_ALL);
    if (e->disk) save_to_disk(e);
    update_stats(e);
    cb_engine_wake_pollers(e);
    return NULL;
}
