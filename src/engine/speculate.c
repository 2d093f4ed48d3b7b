/* speculate.c — speculative decoding in the main pool: the drafts a decoding request offers before a
 * step (its own text's n-gram lookup, draft.h), and after the decode the check of those the
 * scheduler put in the plan (spec.h chose how many).
 *
 * Drafts come from the client's prediction (cobatch_request_params.prediction) where it has one
 * and it matches, else, with speculation on, from the request's own text, else from the pool every
 * request's computed text teaches (what followed the same four tokens elsewhere: agents send the
 * same files and tool output in many requests).
 *
 * The check samples the decode row, then each draft's row in turn, through the request's own
 * sampler, while the token sampled is the draft: a draft that held was computed with the context
 * the output really has, so its row's logits are the ones a step of its own would have given (up to
 * the batch shape's rounding). Sampling the row and comparing is the standard rule for a draft known
 * for certain (the draft holds with the target's probability, and a token that is not the draft is
 * drawn from the rest): greedy output is the same, a sampled one has the same distribution, a
 * seeded one draws the same numbers, and the grammar, stop strings and log-probabilities see the
 * accepted tokens one at a time, as without drafts. The cells of the drafts that did not hold leave
 * llama.cpp at once and the accounting with them, so no rejected token reaches the prefix cache, a
 * stream, an event or a log-probability. */
#include "engine_internal.h"

#include <string.h>

/* n-gram lengths of the lookup: the longest of up to 6 tokens that ends the text and occurred
 * before, 2 at least (one token recurs too often to predict much) */
#define SPEC_NGRAM_MIN 2
#define SPEC_NGRAM_MAX 6
/* a request's rate starts from this many tries at the rate every request's drafts have shown (itself
 * from 3 of 4): one early miss must not switch a request off, nor a long run of misses stay unseen */
#define SPEC_PRIOR_TRIES 4.0
#define SPEC_KEEP_REQUEST 0.9
#define SPEC_KEEP_ALL 0.99

/* The shared pool: 2^18 slots (2 MiB) of 4-grams. Four tokens name a place in a text well enough
 * that what followed there last time is a fair guess (the request's own lookup, tried first, takes
 * the longest n-gram instead). */
#define SPEC_POOL_BITS 18
#define SPEC_POOL_N 4

int cb_spec_init(cobatch_engine *e) {
    if (!e->spec_shared) return 0;
    e->spec_pool = cb_ngram_pool_new(SPEC_POOL_BITS, SPEC_POOL_N);
    return e->spec_pool ? 0 : -1;
}

/* The prediction's token at `at` appeared in the output: counted once (usage). */
static void pred_took(cb_engine_req *er, int32_t at) {
    if (at < 0 || at >= er->n_pred || er->pred_seen[at]) return;
    er->pred_seen[at] = 1;
    er->n_pred_accepted++;
}

void cb_spec_prepare(cobatch_engine *e) {
    double prior = cb_accept_rate(&e->spec_all, 3, 4);
    cb_request *r;
    for (int32_t i = 0; (r = cb_sched_running_at(e->main.sched, i)) != NULL; i++) {
        cb_engine_req *er = r->rt;
        r->draft.avail = 0;
        if (er->shadow_at > 0 && cb_request_n_tokens(r) > er->shadow_at) { /* last step's draft, unchecked */
            bool held = r->tokens[er->shadow_at] == er->shadow_tok;
            cb_accept_note(&er->acc, 1, held, SPEC_KEEP_REQUEST);
            cb_accept_note(&e->spec_all, 1, held, SPEC_KEEP_ALL);
            if (held && er->pred_at >= 0) er->pred_from = er->pred_at + 1, pred_took(er, er->pred_at);
        }
        er->shadow_at = 0;
        if (e->spec_pool && r->n_computed > er->pool_learned) { /* computed: prompt chunks and held tokens */
            cb_ngram_pool_learn(e->spec_pool, r->tokens, r->n_computed, er->pool_learned);
            er->pool_learned = r->n_computed;
        }
        if (!er->pred && !e->spec_ngram) continue;
        if (er->no_spec || er->prompt_only || r->n_computed < r->n_prompt || cb_request_pending(r) != 1) continue;
        int32_t n = cb_request_n_tokens(r), want = e->spec_max;
        int32_t left = r->max_tokens - r->n_generated - 1; /* the last row's sample comes on top */
        if (want > left) want = left;
        if (want > e->n_ctx_seq - n - 1) want = e->n_ctx_seq - n - 1;
        if (want <= 0) continue; /* (n + want < r->cap: the drafts fit the token buffer) */
        int32_t end = -1;
        er->pred_at = -1;
        r->draft.avail = 0;
        if (er->pred) { /* the client's prediction first: the longest n-gram, the first after the last match */
            r->draft.avail = cb_draft_lookup(r->tokens, n, er->pred, er->n_pred, 1, SPEC_NGRAM_MAX, er->pred_from, want,
                                             r->tokens + n, &end);
            if (r->draft.avail > 0) er->pred_at = end - r->draft.avail;
        }
        if (r->draft.avail == 0 && e->spec_ngram)
            r->draft.avail = cb_draft_lookup(r->tokens, n, r->tokens, n, SPEC_NGRAM_MIN, SPEC_NGRAM_MAX, -1, want,
                                             r->tokens + n, NULL);
        if (r->draft.avail == 0 && e->spec_pool) /* what followed these tokens in other requests */
            r->draft.avail = cb_ngram_pool_draft(e->spec_pool, r->tokens, n, want, r->tokens + n);
        r->draft.rate = cb_accept_rate(&er->acc, SPEC_PRIOR_TRIES * prior, SPEC_PRIOR_TRIES);
        if (r->draft.avail > 0) er->shadow_at = n, er->shadow_tok = r->tokens[n];
    }
}

void cb_spec_check(cobatch_engine *e, cb_pool *pool, const cb_plan *plan, int32_t i, int64_t now) {
    const cb_plan_item *it = &plan->items[i];
    cb_request *r = it->req;
    cb_engine_req *er = r->rt;
    int32_t k = it->n_draft, seq = r->seq_id, base = pool->runner.draft_base[i];
    int32_t draft[COBATCH_SPEC_MAX];
    memcpy(draft, r->tokens + cb_request_n_tokens(r), sizeof(int32_t) * (size_t)k);
    /* the drafts' cells count again one by one as they hold (the commit counted the decode row's) */
    cb_kv_grow(&pool->kv, seq, -k);
    er->shadow_at = 0; /* checked for real */
    int32_t computed = r->n_computed, held = 0;
    bool alive = true;
    e->spec_drafted += k;
    er->n_drafted += k;
    for (int32_t j = 0; j <= k; j++) {
        alive = cb_engine_sample_one(e, r, pool->model, pool->runner.draft_row[base + j], now);
        if (!alive || j == k || r->tokens[cb_request_n_tokens(r) - 1] != draft[j]) break;
        held++;
        r->n_computed++;
        cb_kv_grow(&pool->kv, seq, 1);
        er->n_accepted++;
        if (er->pred_at >= 0) pred_took(er, er->pred_at + held - 1);
        e->spec_accepted++;
    }
    if (alive && er->pred_at >= 0) er->pred_from = er->pred_at + held; /* the next match: from here on */
    /* the cells after the last held draft leave now: the ops a finish or a move queued act later, on
     * the tokens counted computed only */
    cb_runner_trim(&pool->runner, seq, computed + held);
    int32_t tried = held < k ? held + 1 : held; /* a draft behind a failed one was never tried */
    cb_accept_note(&e->spec_all, tried, held, SPEC_KEEP_ALL);
    if (alive) cb_accept_note(&er->acc, tried, held, SPEC_KEEP_REQUEST);
}
