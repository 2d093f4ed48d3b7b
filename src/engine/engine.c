/* engine.c — the engine thread: intake, cancels, and the step
 *     plan = schedule; run; postprocess
 * Only this thread touches the llama_context, the scheduler and the samplers. */
#include "engine_internal.h"
#include "../runtime/sampling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- request bookkeeping -------- */

void cb_engine_free_request(cb_request *r) {
    if (!r) return;
    cb_engine_req *er = r->rt;
    if (er) {
        cb_sampler_free(er->smpl);
        cb_sampler_free(er->grammar);
        cb_textout_free(&er->text);
        free(er->logit_bias);
        free(er->shown);
        free(er->err_buf);
        free(er->plp);
        free(er);
    }
    cb_request_free(r);
}

/* Whether the request's output shows tok's text although it is a control token. */
static bool shown(const cb_engine_req *er, int32_t tok) {
    for (size_t i = 0; i < er->n_shown; i++)
        if (er->shown[i] == tok) return true;
    return false;
}

static void reqs_remove(cobatch_engine *e, cb_request *r) {
    for (int i = 0; i < e->n_reqs; i++) {
        if (e->reqs[i] == r) {
            e->reqs[i] = e->reqs[--e->n_reqs];
            return;
        }
    }
}

static void live_remove(cobatch_engine *e, cobatch_req_id id) {
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i].id == id) {
            e->live[i] = e->live[--e->n_live];
            break;
        }
    }
    pthread_mutex_unlock(&e->mu);
}

static enum cobatch_finish_reason reason_of(cb_state s) {
    switch (s) {
    case CB_FINISHED_STOP: return COBATCH_FINISH_STOP;
    case CB_FINISHED_LENGTH: return COBATCH_FINISH_LENGTH;
    case CB_FINISHED_CANCELLED: return COBATCH_FINISH_CANCELLED;
    default: return COBATCH_FINISH_ERROR;
    }
}

/* The one way a request ends: leaves the scheduler, emits FINISHED (with any text still held),
 * and is freed. Allocates nothing: the event's strings and its queue slot were reserved at submit,
 * so a request ends with its event even when memory has run out. */
static void finish(cobatch_engine *e, cb_request *r, cb_state st, const char *error) {
    cb_engine_req *er = r->rt;
    if (er->in_lane)
        cb_lane_remove(e, r);
    else if (!CB_STATE_FINISHED(r->state))
        cb_sched_finish(e->sched, r, st);
    r->state = st;
    r->t_finish_us = cobatch_time_us();
    struct cobatch_event ev = {0};
    ev.type = COBATCH_EVENT_FINISHED;
    ev.id = r->id;
    ev.user_data = er->user_data;
    ev.t_us = r->t_finish_us;
    ev.reason = reason_of(st);
    ev.stop = st == CB_FINISHED_STOP && er->text.stop_hit >= 0 && (size_t)er->text.stop_hit < er->n_stop
                  ? (int32_t)er->text.stop_hit
                  : -1;
    ev.text = cb_textout_take_final(&er->text, st == CB_FINISHED_STOP || st == CB_FINISHED_LENGTH, &ev.text_len);
    if (error) {
        snprintf(er->err_buf, CB_ERR_BUF, "%s", error);
        ev.error = er->err_buf;
        er->err_buf = NULL;
        ev.invalid = er->invalid;
    }
    if (er->plp_ready && (st == CB_FINISHED_STOP || st == CB_FINISHED_LENGTH)) { /* a prompt-only request's */
        ev.prompt_logprobs = er->plp;
        er->plp = NULL;
    }
    ev.n_top = er->n_top;
    ev.n_prompt = r->n_prompt;
    ev.n_generated = r->n_generated;
    ev.n_preemptions = r->n_preemptions;
    ev.n_cached = r->n_cached;
    ev.timings.t_submit_us = r->t_submit_us;
    ev.timings.t_scheduled_us = r->t_scheduled_us;
    ev.timings.t_first_token_us = r->t_first_token_us;
    ev.timings.t_finish_us = r->t_finish_us;
    reqs_remove(e, r);
    live_remove(e, r->id);
    cb_engine_push_event(e, &ev);
    cb_engine_free_request(r);
}

void cb_engine_finish(cobatch_engine *e, cb_request *r, cb_state st, const char *error) { finish(e, r, st, error); }

/* ---------------------------------------------------------------- intake and cancels --------- */

static void intake(cobatch_engine *e, cb_request **in, int n) {
    for (int i = 0; i < n; i++) {
        cb_request *r = in[i];
        cb_engine_req *er = r->rt;
        er->smpl = cb_sampler_new(&e->model, &er->sampling, er->logit_bias, er->n_logit_bias);
        if (e->n_reqs == e->reqs_cap) {
            int cap = e->reqs_cap ? e->reqs_cap * 2 : 64;
            cb_request **v = realloc(e->reqs, sizeof(*v) * (size_t)cap);
            if (v) {
                e->reqs = v;
                e->reqs_cap = cap;
            }
        }
        if (!er->smpl || e->n_reqs == e->reqs_cap) {
            r->state = CB_FINISHED_ERROR; /* not in the scheduler: finish() skips it */
            finish(e, r, CB_FINISHED_ERROR, "out of memory");
            continue;
        }
        e->reqs[e->n_reqs++] = r;
        if (e->lane.on && !cb_sched_fits(e->sched, r->n_prompt)) { /* longer than a stream */
            if (!cb_lane_add(e, r, false)) {
                r->state = CB_FINISHED_ERROR;
                finish(e, r, CB_FINISHED_ERROR, "out of memory");
            }
            continue;
        }
        cb_sched_add(e->sched, r, e->arrivals++);
        if (r->state == CB_FINISHED_ERROR) finish(e, r, CB_FINISHED_ERROR, "out of memory");
    }
}

/* Ends the requests cobatch_cancel flagged (all of them: a flag is only ever set on a live
 * request, and every live request is in reqs once its intake ran). */
static void apply_cancels(cobatch_engine *e) {
    for (int k = 0; k < e->n_reqs;) {
        cb_engine_req *er = e->reqs[k]->rt;
        if (atomic_load(&er->cancel))
            finish(e, e->reqs[k], CB_FINISHED_CANCELLED, NULL); /* moves the last request into slot k */
        else
            k++;
    }
}

/* Ends every request that is waiting and never ran (cobatch_cancel_waiting). */
static void cancel_never_scheduled(cobatch_engine *e) {
    for (int32_t i = 0; i < e->lane.n_wait;) {
        cb_request *r = e->lane.wait[i];
        if (r->t_scheduled_us == 0)
            finish(e, r, CB_FINISHED_CANCELLED, NULL);
        else
            i++;
    }
    for (int32_t i = 0; i < cb_sched_n_waiting(e->sched);) {
        cb_request *r = cb_sched_waiting_at(e->sched, i);
        if (r->t_scheduled_us == 0 && r->state == CB_WAITING)
            finish(e, r, CB_FINISHED_CANCELLED, NULL);
        else
            i++;
    }
}

/* ---------------------------------------------------------------- one step ------------------- */

/* Queues a TOKEN event, with lp (owned) and the prompt's log-probabilities when they are ready.
 * Returns false when its text cannot be copied (out of memory): the client would miss a piece, so
 * the caller ends the request with an error instead. */
static bool emit_token(cobatch_engine *e, cb_request *r, int32_t tok, float margin, struct cobatch_logprob *lp,
                       const char *text, size_t len, int64_t now) {
    cb_engine_req *er = r->rt;
    struct cobatch_event ev = {0};
    ev.type = COBATCH_EVENT_TOKEN;
    ev.id = r->id;
    ev.user_data = er->user_data;
    ev.token = tok;
    ev.margin = margin;
    ev.logprobs = lp;
    ev.n_top = er->n_top;
    ev.n_prompt = r->n_prompt;
    ev.n_cached = r->n_cached;
    ev.t_us = now;
    ev.text = strndup(text, len);
    if (!ev.text) {
        free(lp);
        return false;
    }
    ev.text_len = len;
    if (er->plp_ready) {
        ev.prompt_logprobs = er->plp;
        er->plp = NULL;
        er->plp_ready = false;
    }
    cb_engine_push_event(e, &ev);
    return true;
}

/* Fills the prompt log-probabilities of this step's rows that wanted them (the logprob of token
 * pos + 1 is in row pos); a prompt computed whole has them all, and its next event takes them. */
void cb_engine_record_prompt_logprobs(cobatch_engine *e, const cb_runner *runner, const cb_model *m,
                                      const cb_plan *plan) {
    (void)e;
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

void cb_engine_sample_one(cobatch_engine *e, cb_request *r, const cb_model *m, int32_t row, int64_t now) {
    cb_engine_req *er = r->rt;
    char piece[CB_TEXTOUT_PIECE_MAX];
    if (er->prompt_only) {
        finish(e, r, CB_FINISHED_LENGTH, NULL);
        return;
    }
    float margin = 0;
    int32_t tok = cb_sampler_sample(er->smpl, er->grammar, m, row, er->logit_margins ? &margin : NULL, e->cand);
    if (tok < 0) {
        const char *why = "the grammar allows no token here (the vocabulary cannot spell it)";
        if (tok == -2) cb_common_grammar_blown(er->grammar, &why);
        er->invalid = true;
        finish(e, r, CB_FINISHED_ERROR, why);
        return;
    }
    struct cobatch_logprob *lp = NULL;
    if (er->logprobs) {
        lp = malloc(sizeof(*lp) * (size_t)(1 + er->n_top));
        if (!lp) {
            finish(e, r, CB_FINISHED_ERROR, "out of memory: the log-probabilities could not be kept");
            return;
        }
        cb_logprobs(m, row, tok, er->n_top, lp);
    }
    if (!r->t_first_token_us) r->t_first_token_us = now;
    cb_request_append(r, tok);
    e->n_generated++;
    cb_state end = CB_RUNNING;
    const char *out = "";
    size_t out_len = 0;
    if ((!er->ignore_eos || er->grammar) && cb_model_is_eog(m, tok)) { /* a grammar's end is the end */
        end = CB_FINISHED_STOP;
    } else {
        int32_t n = shown(er, tok) ? cb_model_token_text(m, tok, piece, (int32_t)sizeof(piece))
                                   : cb_model_piece(m, tok, piece, (int32_t)sizeof(piece));
        if (n > 0 && cb_textout_push(&er->text, piece, (size_t)n, &out, &out_len)) end = CB_FINISHED_STOP;
    }
    if (er->text.failed) free(lp);
    if (er->text.failed || !emit_token(e, r, tok, margin, lp, out, out_len, now)) {
        finish(e, r, CB_FINISHED_ERROR, "out of memory: the output could not be kept whole");
        return;
    }
    if (end == CB_RUNNING && (r->n_generated >= r->max_tokens || cb_request_n_tokens(r) >= e->n_ctx_seq))
        end = CB_FINISHED_LENGTH;
    if (end != CB_RUNNING) {
        finish(e, r, end, NULL);
    } else if (!er->in_lane && e->lane.on && cb_request_n_tokens(r) >= e->kv.per_seq_cap &&
               !cb_lane_migrate(e, r)) { /* its stream is full: on in the long lane */
        finish(e, r, CB_FINISHED_ERROR, "out of memory: the request could not move to the long lane");
    }
}

/* Samples every item that asked for logits, appends, checks stops, emits, retires. */
static void sample_and_emit(cobatch_engine *e, cb_plan *plan) {
    int64_t now = cobatch_time_us();
    for (int32_t i = 0; i < plan->n_items; i++)
        if (plan->items[i].logits) cb_engine_sample_one(e, plan->items[i].req, &e->model, e->runner.logit_row[i], now);
}

/* A decode that failed (aborted, or an error) may have kept some of the step's cells: llama.cpp
 * takes back those of the graph run that failed, not those of earlier runs of the same batch.
 * Every sequence of the step is trimmed to the tokens it had before the step (what the accounting
 * believes after the rollback), then the step's requests end; the others go on. */
static void fail_plan(cobatch_engine *e, cb_plan *plan, int rc) {
    char msg[96];
    snprintf(msg, sizeof(msg), "llama_decode failed with code %d", rc);
    e->n_decode_failures++;
    for (int32_t i = 0; i < plan->n_items; i++)
        cb_runner_trim(&e->runner, plan->items[i].req->seq_id, plan->items[i].pos0);
    for (int32_t i = 0; i < plan->n_items; i++)
        finish(e, plan->items[i].req, CB_FINISHED_ERROR, msg);
}

/* Sequences whose cells in llama.cpp are not what the accounting says: a running request holds
 * its computed tokens, a parked stream (split layout) its recorded tokens, any other id of the
 * split layout nothing. The unified layout's prefix-cache holders are not checked. Called between
 * steps, when every queued cell change has been applied. O(sequences). */
static int32_t kv_mismatches(cobatch_engine *e) {
    int32_t bad = 0;
    for (int32_t i = 0; i < cb_sched_n_running(e->sched); i++) {
        const cb_request *r = cb_sched_running_at(e->sched, i);
        bad += cb_runner_seq_len(&e->runner, r->seq_id) != r->n_computed;
    }
    if (!e->kv.split) return bad;
    for (int32_t s = 0; s < e->kv.n_seq; s++) {
        if (e->kv.taken[s]) continue;
        int32_t want = cb_cache_parked_len(e->cache, s);
        bad += cb_runner_seq_len(&e->runner, s) != want;
    }
    return bad;
}

/* Cells llama.cpp shows the running requests, summed over them (a cell shared by k of them is
 * counted k times): a check that their sequences hold what the scheduler thinks. O(running). */
static int32_t cells_in_llama(cobatch_engine *e) {
    int32_t n = 0;
    for (int32_t i = 0; i < cb_sched_n_running(e->sched); i++)
        n += cb_runner_seq_len(&e->runner, cb_sched_running_at(e->sched, i)->seq_id);
    return n;
}

static void update_stats(cobatch_engine *e) {
    const cb_sched_stats *ss = cb_sched_get_stats(e->sched);
    pthread_mutex_lock(&e->mu);
    e->stats.running = cb_sched_n_running(e->sched) + e->lane.n_run;
    e->stats.waiting = cb_sched_n_waiting(e->sched) + e->lane.n_wait;
    e->n_queued = e->inbox_len + e->stats.waiting;
    e->stats.kv_used = e->kv.total_used;
    e->stats.kv_total = e->kv.capacity;
    e->stats.kv_peak = e->kv.peak_used;
    e->stats.kv_cells_llama = cells_in_llama(e);
    e->stats.kv_mismatches = kv_mismatches(e);
    e->stats.decode_failures = e->n_decode_failures;

    e->nodes_seen = e->runner.last_nodes;
    e->stats.steps = ss->steps + e->lane.alone_steps; /* a step running both graphs counts once */
    e->stats.preemptions = ss->preemptions + e->lane.preemptions;
    e->stats.swapped_out = e->swap.swapped_out;
    e->stats.swapped_in = e->swap.swapped_in;
    e->stats.recomputed = e->swap.recomputed;
    e->stats.swap_used_bytes = e->swap.used;
    e->stats.swap_peak_bytes = e->swap.peak;
    e->stats.swap_lost = e->swap.lost;
    e->stats.swap_copied_bytes = e->swap.copied_bytes;
    e->stats.swap_copy_us = e->swap.copy_us;
    e->stats.host_cache_bytes = e->host.used;
    e->stats.host_cache_cap_bytes = e->host.cap;
    e->stats.host_cache_entries = e->host.n;
    e->stats.host_cache_hit_tokens = e->host.hit_tokens;
    e->stats.host_cache_saves = e->host.saves;
    e->stats.host_cache_loads = e->host.loads;
    e->stats.host_cache_failed = e->host.failed;
    e->stats.host_cache_evicted = e->host.evicted;
    e->stats.host_cache_copied_bytes = e->host.copied_bytes;
    e->stats.host_cache_copy_us = e->host.copy_us;
    e->stats.wasted_decode_slots = ss->wasted_decode_slots;
    e->stats.requests_finished = ss->finished;
    e->stats.stream_moves = ss->stream_moves;
    e->stats.prompt_tokens = e->n_prompt_computed;
    e->stats.generated_tokens = e->n_generated;
    e->stats.decode_retries = e->n_retries;
    cb_cache_stats cs;
    cb_cache_get_stats(e->cache, &cs);
    e->stats.kv_cached = cs.idle;
    e->stats.prefix_query_tokens = cs.query_tokens + e->lane.query_tokens; /* the lane's from the host tier */
    e->stats.prefix_hit_tokens = cs.hit_tokens + e->lane.hit_tokens;
    pthread_mutex_unlock(&e->mu);
}

static void report_step(cobatch_engine *e, struct cobatch_step_info *info) {
    if (!e->params.on_step) return;
    info->t_end_us = cobatch_time_us();
    info->running = cb_sched_n_running(e->sched);
    info->waiting = cb_sched_n_waiting(e->sched);
    info->kv_used = e->kv.total_used;
    e->params.on_step(info, e->params.on_step_user);
}

/* The queue count max_queue is checked against, exact once a step has made its admissions (submit
 * adds to it meanwhile). */
static void note_queue(cobatch_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->n_queued = e->inbox_len + cb_sched_n_waiting(e->sched) + e->lane.n_wait;
    pthread_mutex_unlock(&e->mu);
}

/* Plans a step of at most budget tokens (0: the configured one), and ends the requests the
 * scheduler could not keep (out of memory for its queue). */
static cb_plan *schedule(cobatch_engine *e, int32_t budget) {
    cb_plan *plan = &e->plan;
    cb_sched_step(e->sched, plan, budget);
    note_queue(e);
    for (int32_t i = 0; i < plan->n_failed; i++)
        finish(e, plan->failed[i], CB_FINISHED_ERROR, "out of memory");
    return plan;
}

/* Applies the plan's cell changes and decodes it (an empty plan only applies them). When
 * llama.cpp finds no KV slot (code 1) the step is rolled back and planned again at half the
 * tokens; any other failure is rolled back and returned, the plan's items kept for the failure
 * path. Returns 0 or llama_decode's code. */
static int run_plan(cobatch_engine *e, cb_plan **plan) {
    for (;;) {
        int rc = cb_runner_run(&e->runner, *plan);
        if (rc == 0) return 0;
        cb_sched_rollback(e->sched, *plan);
        if (rc == CB_RUNNER_RESTORE_FAILED) { /* those requests compute their cells again */
            for (int32_t i = 0; i < e->runner.n_restore_failed; i++)
                cb_sched_restore_failed(e->sched, e->runner.restore_failed[i]);
            *plan = schedule(e, 0);
            continue;
        }
        if (rc != 1 || (*plan)->n_tokens <= 1) return rc; /* aborted, an error, or not even one token fits */
        e->n_retries++;
        *plan = schedule(e, (*plan)->n_tokens / 2);
    }
}

/* The plan ran (rc 0): its tokens are committed, sampled and emitted. Or it failed: its requests
 * end, the rest go on. run_us: the plan's decode time, without its cell copies to and from swap (the
 * prefill cost the swap choice weighs against them). Returns whether the plan ran and had requests
 * (then *info is filled for the step's report); false for a failed or empty plan. */
static bool postprocess(cobatch_engine *e, cb_plan *plan, int rc, int64_t run_us, int64_t swapped,
                        struct cobatch_step_info *info) {
    if (rc != 0) {
        fail_plan(e, plan, rc);
        return false;
    }
    if (plan->n_items == 0) {
        /* Nothing runnable with nobody running: the queue head can never fit. End it rather than
         * spin (cb_sched_fits at submit should make this unreachable). */
        if (cb_sched_n_running(e->sched) == 0 && cb_sched_n_waiting(e->sched) > 0 && !cb_sched_saving(e->sched))
            finish(e, cb_sched_waiting_at(e->sched, 0), CB_FINISHED_ERROR, "request cannot be scheduled");
        return false;
    }
    cb_sched_commit(e->sched, plan, cobatch_time_us());
    e->n_prompt_computed += plan->n_prefill_tokens;
    info->decode_rows = plan->n_decode;
    info->prefill_tokens = plan->n_prefill_tokens;
    info->n_requests = plan->n_items;
    info->preempted = plan->n_preempted;
    info->swapped = (int32_t)swapped;
    info->graph_runs = e->runner.n_runs;
    for (int32_t i = 0; i < plan->n_items; i++)
        info->context_cells += plan->items[i].pos0 + plan->items[i].n_tokens;
    /* the cost of a token computed again, against which a preemption weighs a copy (swap.h) */
    if (plan->n_prefill_tokens >= 32) cb_swap_note_prefill(&e->swap, plan->n_tokens, run_us);
    /* what the pace cuts: steps of decode rows and short prompts only (a long prompt's row at an
     * agent's context costs several times a short one's) */
    if (plan->n_paced_tokens == plan->n_prefill_tokens)
        cb_step_pace_note(&e->pace, plan->n_decode, plan->n_prefill_tokens, run_us,
                          cb_sched_get_config(e->sched)->max_num_seqs);
    cb_engine_record_prompt_logprobs(e, &e->runner, &e->model, plan);
    sample_and_emit(e, plan);
    return true;
}

/* One step. With nothing to run it still applies the cell changes made since the last one (a
 * cancel's release). */
static void step(cobatch_engine *e) {
    int64_t t0 = cobatch_time_us(), swapped = e->swap.swapped_out, steps = cb_sched_get_stats(e->sched)->steps;
    cb_plan *plan = schedule(e, 0);
    int64_t t_run = cobatch_time_us(), copy_us = e->swap.copy_us + e->host.copy_us;
    int rc = run_plan(e, &plan);
    int64_t run_us = cobatch_time_us() - t_run - (e->swap.copy_us + e->host.copy_us - copy_us);
    int32_t used = rc == 0 ? plan->n_tokens : 0;
    struct cobatch_step_info info = {.t_start_us = t0};
    bool ran = postprocess(e, plan, rc, run_us, e->swap.swapped_out - swapped, &info);
    info.lane_tokens = cb_lane_step(e, used, &info.lane_us); /* a second graph, only while the lane has work */
    if (info.lane_tokens > 0 && cb_sched_get_stats(e->sched)->steps == steps) e->lane.alone_steps++;
    if (ran || info.lane_tokens > 0) report_step(e, &info);
}

/* ---------------------------------------------------------------- the thread ----------------- */

/* Takes what the API threads left in the mailbox: new requests (into in, swapped with the inbox so
 * the lock is held for O(1) work), and the flags. Returns false when the engine must stop. */
static bool take_mail(cobatch_engine *e, cb_request ***in, int *in_cap, int *n_in, bool *cancels, bool *drop,
                      bool *cancel_waiting) {
    pthread_mutex_lock(&e->mu);
    while (!e->stop && e->inbox_len == 0 && e->n_cancels == 0 && e->n_reqs == 0 && !e->drop_cache && !e->cancel_waiting)
        pthread_cond_wait(&e->cond, &e->mu);
    if (e->stop) {
        pthread_mutex_unlock(&e->mu);
        return false;
    }
    cb_request **t = *in;
    int t_cap = *in_cap;
    *in = e->inbox;
    *in_cap = e->inbox_cap;
    *n_in = e->inbox_len;
    e->inbox = t;
    e->inbox_cap = t_cap;
    e->inbox_len = 0;
    *cancels = e->n_cancels > 0;
    e->n_cancels = 0;
    *drop = e->drop_cache;
    e->drop_cache = false;
    *cancel_waiting = e->cancel_waiting;
    e->cancel_waiting = false;
    if (e->fault_set) {
        cb_runner_set_fault(&e->runner, e->fault.decode_rc, e->fault.decode_count, e->fault.abort_after_nodes);
        e->fault_set = false;
    }
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* What the API threads asked for since the last step: new requests queued, cancels and the
 * cache drop applied. Returns false when the engine must stop. */
static bool take_and_apply_mail(cobatch_engine *e, cb_request ***in, int *in_cap) {
    int n_in = 0;
    bool cancels, drop, cancel_waiting;
    if (!take_mail(e, in, in_cap, &n_in, &cancels, &drop, &cancel_waiting)) return false;
    intake(e, *in, n_in);
    if (cancels) apply_cancels(e);
    if (cancel_waiting) cancel_never_scheduled(e);
    if (drop) cb_sched_drop_cache(e->sched); /* the removals run with this step's plan */
    return true;
}

void *cb_engine_main(void *arg) {
    cobatch_engine *e = arg;
    cb_request **in = NULL;
    int in_cap = 0, n_in = 0;
    for (;;) {
        cb_engine_wait_for_event_space(e); /* a poller that does not keep up holds the engine here */
        if (!take_and_apply_mail(e, &in, &in_cap)) break;
        step(e);
        cb_runner_apply_ops(&e->runner, cb_sched_pending_ops(e->sched)); /* what this step's ends freed */
        update_stats(e);
        cb_engine_wake_pollers(e);
    }
    /* shutting down: whatever is left ends as cancelled, inbox included */
    pthread_mutex_lock(&e->mu);
    n_in = e->inbox_len;
    e->inbox_len = 0;
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < n_in; i++) {
        e->inbox[i]->state = CB_FINISHED_CANCELLED;
        finish(e, e->inbox[i], CB_FINISHED_CANCELLED, NULL);
    }
    while (e->n_reqs > 0)
        finish(e, e->reqs[0], CB_FINISHED_CANCELLED, NULL);
    cb_engine_wake_pollers(e);
    free(in);
    return NULL;
}
