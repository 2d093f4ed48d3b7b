/* embd.c — embedding requests (cobatch_embed): accepted on any thread, computed on the engine thread in
 * passes of the embedding context (runtime/embd.h), one at most a step, after the generation pools,
 * as many whole inputs of the waiting requests as the pace allows (core/embd.h), oldest first. A
 * request's inputs may take several passes and share them with other requests'; it ends with one
 * FINISHED event carrying every vector once its last input is computed. */
#include "engine_internal.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- requests ------------------- */

static void embd_req_free(cb_embd_req *r) {
    if (!r) return;
    free(r->tokens);
    free(r->off);
    free(r->out);
    free(r->err_buf);
    free(r->text);
    free(r);
}

int32_t *cobatch_embd_tokens(cobatch_engine *e, const char *text, int32_t *n, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !text || !n) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "no engine, text or count");
        return NULL;
    }
    if (!cb_embd_on(&e->embd)) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "embeddings", "this engine computes no embeddings");
        return NULL;
    }
    int32_t max = e->embd.ctx.n_tokens;
    size_t len = strlen(text), most = (size_t)max * (size_t)e->model.max_piece;
    if (len == 0) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "the input is empty");
        return NULL;
    }
    if (len > most) { /* refused before tokenizing, as prompts are (the tokenizer is not linear) */
        cb_engine_refuse(err, COBATCH_ERR_TOO_LONG, "inputs",
                         "the input has %zu bytes; no input of more than %zu fits an embedding pass (%d tokens)", len,
                         most, max);
        return NULL;
    }
    int32_t *t = cb_model_tokenize(&e->model, text, len, true, true, n);
    if (!t) {
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory tokenizing the input");
        return NULL;
    }
    if (*n < 1 || *n > max) {
        if (*n < 1)
            cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "the input has no tokens");
        else
            cb_engine_refuse(err, COBATCH_ERR_TOO_LONG, "inputs",
                             "the input has %d tokens; an input may have at most %d (the embedding pass)", *n, max);
        free(t);
        return NULL;
    }
    return t;
}

/* Input i's tokens into r (appended to r->tokens, of *cap): a text tokenized, token ids checked.
 * COBATCH_OK, or the code with err filled (its message naming the input when there are several). */
static int take_input(cobatch_engine *e, cb_embd_req *r, int32_t i, const struct cobatch_embd_input *in, size_t *cap,
                      struct cobatch_error *err) {
    char at[24] = "";
    if (r->n_inputs > 1) snprintf(at, sizeof(at), "input %d: ", i);
    int32_t n = in->n_tokens, *own = NULL, max = e->embd.ctx.n_tokens;
    const int32_t *toks = in->tokens;
    if ((in->text != NULL) == (in->tokens != NULL))
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "%sgive a text or token ids", at);
    if (in->text) {
        if (!(toks = own = cobatch_embd_tokens(e, in->text, &n, err))) {
            char why[sizeof(err->message)];
            snprintf(why, sizeof(why), "%s", err->message);
            return cb_engine_refuse(err, err->code, err->param, "%s%s", at, why);
        }
    } else if (n < 1) {
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "%sthe input is empty", at);
    } else if (n > max) {
        return cb_engine_refuse(err, COBATCH_ERR_TOO_LONG, "inputs",
                                "%sthe input has %d tokens; an input may have at most %d (the embedding pass)", at, n,
                                max);
    }
    for (int32_t k = 0; !own && k < n; k++)
        if (toks[k] < 0 || toks[k] >= e->model.n_vocab)
            return cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs",
                                    "%stoken %d at index %d is outside the vocabulary (0..%d)", at, toks[k], k,
                                    e->model.n_vocab - 1);
    bool ok = cb_grow((void **)&r->tokens, cap, (size_t)r->n_tokens + (size_t)n, sizeof(int32_t), 256);
    if (ok) memcpy(r->tokens + r->n_tokens, toks, sizeof(int32_t) * (size_t)n);
    free(own);
    if (!ok) return cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
    r->n_tokens += n;
    r->off[i + 1] = r->n_tokens;
    return COBATCH_OK;
}

/* The request p asks for, with what its FINISHED event needs allocated; NULL with err filled. */
static cb_embd_req *embd_req_new(cobatch_engine *e, const struct cobatch_embd_params *p, struct cobatch_error *err) {
    cb_embd_req *r = calloc(1, sizeof(*r));
    size_t cap = 0;
    if (r) {
        r->n_inputs = p->n_inputs;
        r->off = calloc((size_t)p->n_inputs + 1, sizeof(int32_t));
        r->out = malloc(sizeof(float) * (size_t)p->n_inputs * (size_t)e->embd.ctx.n_embd);
        r->err_buf = malloc(CB_ERR_BUF);
        r->text = calloc(1, 1);
    }
    if (!r || !r->off || !r->out || !r->err_buf || !r->text) {
        embd_req_free(r);
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    for (int32_t i = 0; i < p->n_inputs; i++) {
        if (take_input(e, r, i, &p->inputs[i], &cap, err) != COBATCH_OK) {
            embd_req_free(r);
            return NULL;
        }
    }
    r->user_data = p->user_data;
    atomic_init(&r->cancel, false);
    r->t_submit_us = cobatch_time_us();
    return r;
}

/* Puts r in the mailbox with its final event reserved; returns its id, or the code with err filled (r
 * is then freed). */
static cobatch_req_id embd_enqueue(cobatch_engine *e, cb_embd_req *r, struct cobatch_error *err) {
    cobatch_req_id id = cb_engine_post(e, CB_KIND_EMBED, r, &r->id, &r->cancel, r->n_inputs, err);
    if (id <= 0) embd_req_free(r);
    return id;
}

cobatch_req_id cobatch_embed(cobatch_engine *e, const struct cobatch_embd_params *p, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !p) return cb_engine_refuse(err, COBATCH_ERR_INVALID, NULL, "no engine or parameters");
    if (!cb_embd_on(&e->embd))
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "embeddings", "this engine computes no embeddings");
    if (p->n_inputs < 1 || !p->inputs) return cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "no inputs given");
    if (p->n_inputs > COBATCH_EMBD_MAX_INPUTS)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "inputs", "%d inputs; a request may have at most %d",
                                p->n_inputs, COBATCH_EMBD_MAX_INPUTS);
    cb_embd_req *r = embd_req_new(e, p, err);
    return r ? embd_enqueue(e, r, err) : err->code;
}

void cobatch_embd_info(const cobatch_engine *e, struct cobatch_embd_info *out) {
    bool on = cb_embd_on(&e->embd);
    out->n_embd = on ? e->embd.ctx.n_embd : 0;
    out->max_tokens = on ? e->embd.ctx.n_tokens : 0;
    out->pooling = on ? e->embd.ctx.pooling : COBATCH_POOLING_MEAN;
}

/* ---------------------------------------------------------------- the engine thread ---------- */

int cb_embd_init(cobatch_engine *e, char *err, size_t errlen) {
    const struct cobatch_engine_params *p = &e->params;
    if (p->embd_batch < 1 || !(p->embd_share > 0 && p->embd_share <= 1) || !cobatch_pooling_name(p->pooling)) {
        cb_set_err(err, errlen,
                   "embeddings: embd_batch must be at least 1, embd_share in (0, 1], pooling one of "
                   "model, mean, cls, last");
        return -1;
    }
    cb_embd *E = &e->embd;
    int32_t seqs = p->embd_batch < COBATCH_EMBD_PASS_INPUTS ? p->embd_batch : COBATCH_EMBD_PASS_INPUTS;
    if (cb_embd_ctx_init(&E->ctx, &e->model, p->pooling, p->embd_batch, seqs, p->n_threads, err, errlen) != 0)
        return -1;
    cb_embd_pace_init(&E->pace, p->embd_share);
    E->pass = calloc(COBATCH_EMBD_PASS_INPUTS, sizeof(*E->pass));
    E->pass_out = calloc(COBATCH_EMBD_PASS_INPUTS, sizeof(*E->pass_out));
    if (!E->pass || !E->pass_out) {
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void cb_embd_free(cobatch_engine *e) {
    cb_embd *E = &e->embd;
    for (int i = 0; i < E->n_queue; i++)
        embd_req_free(E->queue[i]);
    free(E->queue);
    free(E->pass);
    free(E->pass_out);
    cb_embd_ctx_free(&E->ctx);
    memset(E, 0, sizeof(*E));
}

/* The one way an embedding request ends: its event (the vectors handed over when it ends well),
 * and it is freed. Allocates nothing: what the event needs was reserved at submit. */
static void embd_finish(cobatch_engine *e, cb_embd_req *r, enum cobatch_finish_reason reason, const char *error) {
    struct cobatch_event ev = {0};
    ev.type = COBATCH_EVENT_FINISHED;
    ev.id = r->id;
    ev.user_data = r->user_data;
    ev.reason = reason;
    ev.stop = -1;
    ev.text = r->text;
    r->text = NULL;
    if (reason == COBATCH_FINISH_STOP) {
        ev.embd = r->out;
        r->out = NULL;
    }
    if (error) {
        snprintf(r->err_buf, CB_ERR_BUF, "%s", error);
        ev.error = r->err_buf;
        r->err_buf = NULL;
    }
    ev.n_embd = e->embd.ctx.n_embd;
    ev.n_inputs = r->n_inputs;
    ev.n_prompt = r->n_tokens;
    ev.t_us = cobatch_time_us();
    ev.timings = (struct cobatch_timings){
        .t_submit_us = r->t_submit_us, .t_scheduled_us = r->t_scheduled_us, .t_finish_us = ev.t_us};
    e->embd.requests++;
    cb_engine_done(e, CB_KIND_EMBED, r->id, r->n_inputs);
    cb_engine_push_event(e, &ev);
    embd_req_free(r);
}

void cb_embd_intake(cobatch_engine *e, void **reqs, int n) {
    cb_embd *E = &e->embd;
    for (int i = 0; i < n; i++) {
        if (cb_grow((void **)&E->queue, &E->queue_cap, (size_t)E->n_queue + 1, sizeof(*E->queue), 64))
            E->queue[E->n_queue++] = reqs[i];
        else
            embd_finish(e, reqs[i], COBATCH_FINISH_ERROR, "out of memory");
    }
}

/* Ends the queued requests `which` picks with `reason`, the queue's order kept. */
static void end_queued(cobatch_engine *e, bool (*which)(cb_embd_req *r), enum cobatch_finish_reason reason,
                       const char *error) {
    cb_embd *E = &e->embd;
    int k = 0;
    for (int i = 0; i < E->n_queue; i++) {
        cb_embd_req *r = E->queue[i];
        if (which(r))
            embd_finish(e, r, reason, error);
        else
            E->queue[k++] = r;
    }
    E->n_queue = k;
}

static bool flagged(cb_embd_req *r) { return atomic_load(&r->cancel); }
static bool never_ran(cb_embd_req *r) { return r->t_scheduled_us == 0; }
static bool any(cb_embd_req *r) { return (void)r, true; }
static bool complete(cb_embd_req *r) { return r->done == r->n_inputs; }
static bool failed(cb_embd_req *r) { return r->failed; }

void cb_embd_end(cobatch_engine *e, cb_end_which which) {
    if (which == CB_END_ALL) {
        cb_mailbox *t = &e->taken[CB_KIND_EMBED];
        for (int i = 0; i < t->len; i++)
            embd_finish(e, t->items[i], COBATCH_FINISH_CANCELLED, NULL);
        t->len = 0;
    }
    end_queued(e,
               which == CB_END_FLAGGED     ? flagged
               : which == CB_END_NEVER_RAN ? never_ran
                                           : any,
               COBATCH_FINISH_CANCELLED, NULL);
}

bool cb_embd_busy(const cobatch_engine *e) { return e->embd.n_queue > 0; }

void cb_embd_req_free(void *r) { embd_req_free(r); }

void cb_embd_arm(cobatch_engine *e, const cb_engine_fault *f) {
    e->embd.ctx.fault_rc = f->decode_rc;
    e->embd.ctx.fault_left = f->decode_count;
}

/* Fills the pass with whole inputs, oldest first, up to `allow` tokens: returns its inputs (the
 * requests in E->pass, where their vectors go in E->pass_out) and their tokens in *tokens. */
static int32_t fill_pass(cobatch_engine *e, int32_t allow, int32_t *tokens) {
    cb_embd *E = &e->embd;
    int32_t n = 0;
    *tokens = 0;
    for (int q = 0; q < E->n_queue; q++) {
        cb_embd_req *r = E->queue[q];
        for (int32_t i = r->done; i < r->n_inputs; i++) {
            int32_t len = r->off[i + 1] - r->off[i];
            if (*tokens + len > allow || !cb_embd_ctx_add(&E->ctx, r->tokens + r->off[i], len)) return n;
            E->pass[n] = r;
            E->pass_out[n++] = r->out + (size_t)i * (size_t)E->ctx.n_embd;
            *tokens += len;
        }
    }
    return n;
}

void cb_embd_step(cobatch_engine *e, int64_t gen_us, struct cobatch_step_info *info) {
    cb_embd *E = &e->embd;
    if (E->n_queue == 0) return;
    const cb_embd_req *h = E->queue[0];
    int32_t head = h->off[h->done + 1] - h->off[h->done], tokens = 0;
    int32_t allow = cb_embd_pace_tokens(&E->pace, gen_us, head, E->ctx.n_tokens, e->swap.token_us);
    if (allow <= 0) return; /* beside generation: the credit grows until it covers the oldest input */
    int32_t n = fill_pass(e, allow, &tokens);
    int64_t t0 = cobatch_time_us();
    int rc = cb_embd_ctx_run(&E->ctx, E->pass_out);
    int64_t us = cobatch_time_us() - t0;
    cb_embd_pace_note(&E->pace, tokens, us, gen_us > 0, E->ctx.n_tokens);
    E->passes++;
    E->us += us;
    info->embd_tokens = tokens;
    info->embd_us = us;
    for (int32_t k = 0; k < n; k++) {
        cb_embd_req *r = E->pass[k];
        if (!r->t_scheduled_us) r->t_scheduled_us = t0;
        if (rc != 0) {
            r->failed = true;
            continue;
        }
        r->done++;
        E->inputs++;
        E->tokens += r->off[r->done] - r->off[r->done - 1];
    }
    if (rc == 0) {
        end_queued(e, complete, COBATCH_FINISH_STOP, NULL);
        return;
    }
    char why[96]; /* the pass's requests end; the others go on */
    if (rc == CB_EMBD_NOT_FINITE)
        snprintf(why, sizeof(why), "the model gave a vector that is not finite");
    else if (rc == CB_EMBD_NO_VECTOR)
        snprintf(why, sizeof(why), "llama.cpp gave no pooled vector");
    else
        snprintf(why, sizeof(why), "llama_decode failed with code %d", rc);
    end_queued(e, failed, COBATCH_FINISH_ERROR, why);
}
