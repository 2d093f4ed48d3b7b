/* request.c — a request built from its parameters on the caller's thread: its fields checked, its
 * engine-side state made (stops, logit biases, seed, prediction, grammar, log-probability rows) and
 * put in the mailbox. */
#include "request.h"
#include "../util/buf.h"
#include "../util/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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

int cb_engine_check_request(const cobatch_engine *e, const struct cobatch_request_params *p,
                            struct cobatch_error *err) {
    if (p->max_tokens < 0)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "max_tokens", "max_tokens must be at least 0 (got %d)",
                                p->max_tokens);
    if (p->top_logprobs < 0 || p->top_logprobs > COBATCH_MAX_LOGPROBS)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "top_logprobs", "top_logprobs is from 0 to %d (got %d)",
                                COBATCH_MAX_LOGPROBS, p->top_logprobs);
    const char *range = NULL, *field = check_sampling(&p->sampling, &range);
    if (field) return cb_engine_refuse(err, COBATCH_ERR_INVALID, field, "%s must be %s", field, range);
    if (p->n_logit_bias > 0 && (!p->logit_bias || p->n_logit_bias > (size_t)e->model.n_vocab))
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "logit_bias", "logit_bias: %s",
                                p->logit_bias ? "more entries than tokens" : "no list given");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const struct cobatch_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= e->model.n_vocab)
            return cb_engine_refuse(err, COBATCH_ERR_INVALID, "logit_bias",
                                    "logit_bias: token %d is not in the vocabulary (0 to %d)", b->token,
                                    e->model.n_vocab - 1);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return cb_engine_refuse(err, COBATCH_ERR_INVALID, "logit_bias", "logit_bias: biases are from -100 to 100");
    }
    if (p->priority != 0 && e->params.sched_policy != COBATCH_SCHED_PRIORITY)
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "priority",
            "priority needs the priority scheduling policy (the engine runs first come, first served)");
    const cobatch_chat *chat = p->chat;
    if (chat && (p->prompt || p->prompt_tokens || p->messages || p->tools || p->json_schema))
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "chat",
                                "a chat comes instead of a prompt, prompt tokens, messages, tools or a JSON schema");
    if (p->json_schema && !p->messages && !chat)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "json_schema",
                                "json_schema: a chat's (give a prompt a grammar: cobatch_json_schema_grammar)");
    if (chat && chat->grammar && (p->grammar || p->parsed_grammar))
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "grammar",
            "grammar: the chat has its grammar (its tool calls' or its JSON schema's); give no other");
    if (chat && chat->thinks && chat->think_budget >= 0 && (p->grammar || p->parsed_grammar))
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "reasoning_budget",
            "a reasoning budget cannot be kept with a grammar of the request's own: it holds the whole "
            "output, reasoning included");
    return COBATCH_OK;
}

/* The prediction's tokens (as text: no special tokens parsed), into er; false with err filled. */
static bool prediction_tokens(cobatch_engine *e, cb_engine_req *er, const char *text, struct cobatch_error *err) {
    size_t len = strlen(text);
    if (len / 8 > (size_t)e->n_ctx_seq) { /* (a token is rarely 8 bytes: no need to tokenize to know) */
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "prediction", "the prediction is longer than this engine's context");
        return false;
    }
    int32_t n = 0;
    er->pred = len ? cb_model_tokenize(&e->model, text, len, false, false, &n) : NULL;
    er->pred_seen = n > 0 ? calloc((size_t)n, 1) : NULL;
    if (len && (!er->pred || (n > 0 && !er->pred_seen))) {
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return false;
    }
    if (n > e->n_ctx_seq) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "prediction",
                         "the prediction has %d tokens; this engine's context holds %d", n, e->n_ctx_seq);
        return false;
    }
    er->n_pred = n;
    return true;
}

cb_request *cb_engine_request_new(cobatch_engine *e, const struct cobatch_request_params *p,
                                  struct cobatch_error *err) {
    const cobatch_chat *chat = p->chat;
    int32_t n = 0, *toks = NULL;
    if (chat) {
        n = chat->n_tokens;
        if (!(toks = malloc(sizeof(int32_t) * (size_t)n))) {
            cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
            return NULL;
        }
        memcpy(toks, chat->tokens, sizeof(int32_t) * (size_t)n);
    } else if (!(toks = cb_engine_prompt_tokens(e, p, &n, err))) {
        return NULL;
    }
    if (n >= e->n_ctx_seq || !(cb_sched_fits(e->main.sched, n) || cb_lane_on(&e->lane))) {
        cb_engine_refuse(
            err, COBATCH_ERR_TOO_LONG,
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
    cb_grammar_limits lim = cb_engine_grammar_limits(e);
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
        cb_engine_refuse(err, strstr(why, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID, "grammar",
                         "grammar: %s", why);
        return NULL;
    }
    if (!ok) {
        if (r) cb_engine_free_request(r);
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    r->priority = p->priority;
    r->t_submit_us = cobatch_time_us();
    return r;
}

cobatch_req_id cb_engine_enqueue(cobatch_engine *e, cb_request *r, struct cobatch_error *err) {
    cobatch_req_id id = cb_engine_post(e, CB_KIND_GENERATE, r, &r->id, &((cb_engine_req *)r->rt)->cancel, 0, err);
    if (id <= 0) cb_engine_free_request(r);
    return id;
}

void cb_engine_free_request(cb_request *r) {
    if (!r) return;
    cb_engine_req *er = r->rt;
    if (er) {
        cb_sampler_free(er->smpl);
        cb_sampler_free(er->grammar);
        cb_sampler_free(er->think);
        cb_textout_free(&er->text);
        free(er->logit_bias);
        free(er->shown);
        free(er->err_buf);
        free(er->plp);
        free(er->pred);
        free(er->pred_seen);
        free(er);
    }
    cb_request_free(r);
}
