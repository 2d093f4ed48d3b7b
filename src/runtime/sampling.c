#include "sampling.h"
#include "../util/gbnf.h"

#include <llama.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

struct llama_sampler *cb_sampler_new(const cb_model *m, const struct cobatch_sampling *s,
                                     const struct cobatch_logit_bias *bias, size_t n_bias) {
    struct llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = true;
    struct llama_sampler *c = llama_sampler_chain_init(cp);
    if (!c) return NULL;
    if (n_bias > 0) { /* llama.cpp copies the list */
        llama_logit_bias *lb = malloc(sizeof(*lb) * n_bias);
        if (!lb) {
            llama_sampler_free(c);
            return NULL;
        }
        for (size_t i = 0; i < n_bias; i++)
            lb[i] = (llama_logit_bias){.token = bias[i].token, .bias = bias[i].bias};
        llama_sampler_chain_add(c, llama_sampler_init_logit_bias(m->n_vocab, (int32_t)n_bias, lb));
        free(lb);
    }
    bool penalties = s->repetition_penalty != 1.0f || s->presence_penalty != 0.0f || s->frequency_penalty != 0.0f;
    if (penalties && s->penalty_last_n != 0) {
        llama_sampler_chain_add(c,
                                llama_sampler_init_penalties(m->n_vocab, s->penalty_last_n,
                                                             s->repetition_penalty > 0 ? s->repetition_penalty : 1.0f,
                                                             s->frequency_penalty, s->presence_penalty));
    }
    if (s->temperature <= 0.0f) {
        if (s->infill) llama_sampler_chain_add(c, llama_sampler_init_infill(m->vocab));
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        return c;
    }
    if (s->top_k > 0) llama_sampler_chain_add(c, llama_sampler_init_top_k(s->top_k));
    if (s->top_p > 0.0f && s->top_p < 1.0f) llama_sampler_chain_add(c, llama_sampler_init_top_p(s->top_p, 1));
    if (s->min_p > 0.0f) llama_sampler_chain_add(c, llama_sampler_init_min_p(s->min_p, 1));
    llama_sampler_chain_add(c, llama_sampler_init_temp(s->temperature));
    if (s->infill) llama_sampler_chain_add(c, llama_sampler_init_infill(m->vocab));
    llama_sampler_chain_add(c, llama_sampler_init_dist(s->seed));
    return c;
}

void cb_sampler_free(struct llama_sampler *smpl) {
    if (smpl) llama_sampler_free(smpl);
}

struct llama_sampler *cb_sampler_clone(const struct llama_sampler *smpl) {
    return llama_sampler_clone(smpl);
}

struct llama_token_data *cb_sampler_scratch_new(const cb_model *m) {
    return malloc(sizeof(llama_token_data) * (size_t)(m->n_vocab > 0 ? m->n_vocab : 1));
}

struct llama_sampler *cb_grammar_new(const cb_model *m, const char *gbnf, const cb_grammar_limits *lim, char *err,
                                     size_t errlen) {
    char *wide = cb_gbnf_widen(gbnf, NULL); /* counts past llama.cpp's 2000 as rules it keeps */
    if (!wide) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct llama_sampler *s = cb_common_grammar_new(m->vocab, wide, false, NULL, 0, NULL, 0, lim, err, errlen);
    free(wide);
    return s;
}

/* The row's logits as candidates, in token order. */
static llama_token_data_array candidates(const float *lg, int32_t n_vocab, llama_token_data *d) {
    for (int32_t i = 0; i < n_vocab; i++)
        d[i] = (llama_token_data){.id = i, .logit = lg[i], .p = 0.0f};
    return (llama_token_data_array){.data = d, .size = (size_t)n_vocab, .selected = -1, .sorted = false};
}

/* The chain's token, or, when the grammar (if any) refuses it, the chain's token of the row the
 * grammar masked; the think follower (if any) masks all but a token it forces, first. */
static int32_t sample_constrained(struct llama_sampler *chain, struct llama_sampler *grammar,
                                  struct llama_sampler *think, const float *lg, int32_t n_vocab, llama_token_data *d) {
    llama_token_data_array cur = candidates(lg, n_vocab, d);
    if (think) llama_sampler_apply(think, &cur);
    llama_sampler_apply(chain, &cur);
    int32_t tok = cur.data[cur.selected].id;
    llama_token_data one = {.id = tok, .logit = 1.0f, .p = 0.0f};
    llama_token_data_array check = {.data = &one, .size = 1, .selected = -1, .sorted = false};
    if (grammar) llama_sampler_apply(grammar, &check);
    if (!isfinite(one.logit)) { /* refused: the grammar masks the whole row, the chain samples again */
        cur = candidates(lg, n_vocab, d);
        llama_sampler_apply(grammar, &cur);
        if (cb_common_grammar_blown(grammar, NULL)) return -2; /* its check of the candidates ran past its work */
        if (think) llama_sampler_apply(think, &cur);
        llama_sampler_apply(chain, &cur);
        tok = cur.data[cur.selected].id;
        /* a grammar that allows no token here (one the vocabulary cannot spell): accepting anything
         * would abort llama.cpp */
        if (!isfinite(cur.data[cur.selected].logit)) return -1;
    }
    if (grammar) {
        llama_sampler_accept(grammar, tok);
        if (cb_common_grammar_blown(grammar, NULL)) return -2;
    }
    if (think) llama_sampler_accept(think, tok);
    llama_sampler_accept(chain, tok);
    return tok;
}

int32_t cb_sampler_sample(struct llama_sampler *smpl, struct llama_sampler *grammar, struct llama_sampler *think,
                          const cb_model *m, int32_t row, float *margin, llama_token_data *scratch) {
    if (margin) {
        /* O(n_vocab): only when asked for (tests of batch invariance) */
        const float *lg = llama_get_logits_ith(m->ctx, row);
        float a = -INFINITY, b = -INFINITY;
        for (int32_t i = 0; i < m->n_vocab; i++) {
            if (lg[i] > a) {
                b = a;
                a = lg[i];
            } else if (lg[i] > b) {
                b = lg[i];
            }
        }
        *margin = a - b;
    }
    if (grammar || think)
        return sample_constrained(smpl, grammar, think, llama_get_logits_ith(m->ctx, row), m->n_vocab, scratch);
    return llama_sampler_sample(smpl, m->ctx, row);
}

void cb_logprobs(const cb_model *m, int32_t row, int32_t token, int32_t k, struct cobatch_logprob *out) {
    const float *lg = llama_get_logits_ith(m->ctx, row);
    struct cobatch_logprob *top = out + 1; /* kept sorted: top[0] is the largest logit */
    int32_t n_top = 0;
    float max = -INFINITY;
    for (int32_t i = 0; i < m->n_vocab; i++) {
        float x = lg[i];
        if (x > max) max = x;
        if (n_top == k && (k == 0 || x <= top[k - 1].logprob)) continue; /* equal: the lower id stays */
        int32_t j = n_top < k ? n_top++ : k - 1;
        while (j > 0 && top[j - 1].logprob < x) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (struct cobatch_logprob){.token = i, .logprob = x};
    }
    double sum = 0;
    for (int32_t i = 0; i < m->n_vocab; i++)
        sum += exp((double)(lg[i] - max));
    float lse = max + (float)log(sum);
    out[0] = (struct cobatch_logprob){.token = token, .logprob = lg[token] - lse};
    for (int32_t j = 0; j < n_top; j++)
        top[j].logprob -= lse;
}
