/* output.c — a request's output on the engine thread: a row sampled (its grammar, reasoning and
 * log-probabilities), its token appended and emitted, and the one way a request ends
 * (cb_engine_finish). The step (engine.c) and speculation's checks (speculate.c) sample through it. */
#include "engine_internal.h"
#include "../runtime/sampling.h"

#include <stdlib.h>
#include <string.h>

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

static enum cobatch_finish_reason reason_of(cb_state s) {
    switch (s) {
    case CB_FINISHED_STOP: return COBATCH_FINISH_STOP;
    case CB_FINISHED_LENGTH: return COBATCH_FINISH_LENGTH;
    case CB_FINISHED_CANCELLED: return COBATCH_FINISH_CANCELLED;
    default: return COBATCH_FINISH_ERROR;
    }
}

/* The pool r runs in: the long lane's or the main one. */
static cb_pool *pool_of(cobatch_engine *e, const cb_request *r) {
    return ((const cb_engine_req *)r->rt)->in_lane ? &e->lane.pool : &e->main;
}

void cb_engine_finish(cobatch_engine *e, cb_request *r, cb_state st, const char *error) {
    cb_engine_req *er = r->rt;
    if (!CB_STATE_FINISHED(r->state)) cb_sched_finish(pool_of(e, r)->sched, r, st);
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
    ev.n_reasoning = r->rt ? ((cb_engine_req *)r->rt)->n_reasoning : 0;
    ev.n_drafted = er->n_drafted;
    ev.n_accepted = er->n_accepted;
    ev.n_prediction = er->n_pred;
    ev.n_prediction_accepted = er->n_pred_accepted;
    ev.timings.t_submit_us = r->t_submit_us;
    ev.timings.t_scheduled_us = r->t_scheduled_us;
    ev.timings.t_first_token_us = r->t_first_token_us;
    ev.timings.t_finish_us = r->t_finish_us;
    reqs_remove(e, r);
    cb_engine_done(e, CB_KIND_GENERATE, r->id, 0);
    cb_engine_push_event(e, &ev);
    cb_engine_free_request(r);
}

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

bool cb_engine_sample_one(cobatch_engine *e, cb_request *r, const cb_model *m, int32_t row, int64_t now) {
    cb_engine_req *er = r->rt;
    char piece[CB_TEXTOUT_PIECE_MAX];
    if (er->prompt_only) {
        cb_engine_finish(e, r, CB_FINISHED_LENGTH, NULL);
        return false;
    }
    float margin = 0;
    bool inside = er->think && cb_common_think_inside(er->think);
    /* a lazy grammar (tool calls) waits out a reasoning block: a call marker there is reasoning text */
    struct llama_sampler *g = inside && er->grammar_waits ? NULL : er->grammar;
    int32_t tok = cb_sampler_sample(er->smpl, g, er->think, m, row, er->logit_margins ? &margin : NULL, e->cand);
    er->n_reasoning += tok >= 0 && inside;
    if (tok < 0) {
        const char *why = "the grammar allows no token here (the vocabulary cannot spell it)";
        if (tok == -2) cb_common_grammar_blown(er->grammar, &why);
        er->invalid = true;
        cb_engine_finish(e, r, CB_FINISHED_ERROR, why);
        return false;
    }
    struct cobatch_logprob *lp = NULL;
    if (er->logprobs) {
        lp = malloc(sizeof(*lp) * (size_t)(1 + er->n_top));
        if (!lp) {
            cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory: the log-probabilities could not be kept");
            return false;
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
        if (n > 0 && cb_textout_push(&er->text, piece, (size_t)n, &out, &out_len))
            end = er->text.stop_hit == CB_TEXTOUT_INDENT ? CB_FINISHED_LENGTH : CB_FINISHED_STOP;
        else if (n > 0 && er->max_predict_us > 0 && memchr(piece, '\n', (size_t)n) &&
                 now - r->t_first_token_us > er->max_predict_us)
            end = CB_FINISHED_LENGTH; /* llama-server's t_max_predict_ms: a newline past the time */
    }
    if (er->text.failed) free(lp);
    if (er->text.failed || !emit_token(e, r, tok, margin, lp, out, out_len, now)) {
        cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory: the output could not be kept whole");
        return false;
    }
    if (end == CB_RUNNING && (r->n_generated >= r->max_tokens || cb_request_n_tokens(r) >= e->n_ctx_seq))
        end = CB_FINISHED_LENGTH;
    if (end != CB_RUNNING) {
        cb_engine_finish(e, r, end, NULL);
        return false;
    }
    if (!er->in_lane && cb_lane_on(&e->lane) && cb_request_n_tokens(r) >= e->main.kv.per_seq_cap) {
        if (!cb_lane_migrate(e, r)) /* its stream is full: on in the long lane */
            cb_engine_finish(e, r, CB_FINISHED_ERROR, "out of memory: the request could not move to the long lane");
        return false;
    }
    return true;
}
