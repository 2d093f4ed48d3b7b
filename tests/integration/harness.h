/* harness.h — runs batches of requests through a real engine and collects what came out. */
#ifndef IT_HARNESS_H
#define IT_HARNESS_H

#include <cobatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IT_MAX_TOK 1024

typedef struct {
    cobatch_req_id id;
    int32_t tokens[IT_MAX_TOK];
    float margins[IT_MAX_TOK];
    float logprob[IT_MAX_TOK];              /* with logprobs >= 0: the sampled token's */
    struct cobatch_logprob top[IT_MAX_TOK]; /* with logprobs >= 1: the most likely token */
    bool top_sorted;                        /* every event's alternatives came most likely first */
    struct cobatch_logprob *prompt_lp;      /* with prompt_logprobs: taken from its event */
    int prompt_lp_w;                        /* entries per prompt row */
    int prompt_lp_events;                   /* events that carried prompt log-probabilities: 1 */
    int n_tokens;
    char *text; /* every released piece, concatenated */
    size_t text_len;
    int n_finished; /* FINISHED events seen: must end at exactly 1 */
    enum cobatch_finish_reason reason;
    int32_t n_prompt, n_cached, n_generated, n_preemptions, n_reasoning;
    int32_t n_drafted, n_accepted;
    bool pieces_valid_utf8;
    char error[256]; /* the FINISHED event's error message, if any */
    bool invalid;    /* the FINISHED event blamed the request */
} it_result;

static inline const char *it_model(void) {
    const char *m = getenv("COBATCH_TEST_MODEL");
    return m && m[0] ? m : COBATCH_TEST_DEFAULT_MODEL;
}

static inline cobatch_engine *it_engine(struct cobatch_engine_params p) {
    char err[512] = "";
    if (!p.model_path) p.model_path = it_model();
    cobatch_engine *e = cobatch_engine_init(&p, err, sizeof(err));
    if (!e) fprintf(stderr, "engine init failed: %s\n", err);
    return e;
}

bool cb_utf8_check(const char *s, size_t n); /* defined by each test with textout.h */

static inline void it_append(it_result *r, const char *s, size_t n) {
    r->text = realloc(r->text, r->text_len + n + 1);
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
}

/* Records an event into the it_result its user_data points at, and clears it. Returns 1 for a
 * FINISHED event. */
static inline int it_take(struct cobatch_event *ev) {
    it_result *r = ev->user_data;
    int finished = ev->type == COBATCH_EVENT_FINISHED;
    if (ev->text_len) {
        r->pieces_valid_utf8 &= cb_utf8_check(ev->text, ev->text_len);
        it_append(r, ev->text, ev->text_len);
    }
    if (ev->prompt_logprobs) {
        r->prompt_lp_events++;
        free(r->prompt_lp);
        r->prompt_lp = ev->prompt_logprobs;
        r->prompt_lp_w = 1 + ev->n_top;
        ev->prompt_logprobs = NULL;
    }
    if (!finished && r->n_tokens < IT_MAX_TOK && ev->logprobs) {
        r->logprob[r->n_tokens] = ev->logprobs[0].logprob;
        if (ev->n_top > 0) r->top[r->n_tokens] = ev->logprobs[1];
        for (int k = 2; k <= ev->n_top; k++)
            r->top_sorted &= ev->logprobs[k - 1].logprob >= ev->logprobs[k].logprob;
    }
    if (!finished && r->n_tokens < IT_MAX_TOK) {
        r->margins[r->n_tokens] = ev->margin;
        r->tokens[r->n_tokens++] = ev->token;
    } else if (finished) {
        r->n_finished++;
        r->reason = ev->reason;
        r->n_prompt = ev->n_prompt;
        r->n_cached = ev->n_cached;
        r->n_generated = ev->n_generated;
        r->n_preemptions = ev->n_preemptions;
        r->n_reasoning = ev->n_reasoning;
        r->n_drafted = ev->n_drafted;
        r->n_accepted = ev->n_accepted;
        if (ev->error) snprintf(r->error, sizeof(r->error), "%s", ev->error);
        r->invalid = ev->invalid;
        if (ev->reason == COBATCH_FINISH_ERROR) fprintf(stderr, "request error: %s\n", ev->error);
    }
    cobatch_event_clear(ev);
    return finished;
}

/* Submits every request, then polls until each has finished. Returns false on a submit error. */
static inline bool it_run(cobatch_engine *e, const struct cobatch_request_params *ps, it_result *out, int n) {
    struct cobatch_error ce;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].pieces_valid_utf8 = true;
        out[i].top_sorted = true;
        out[i].text = calloc(1, 1);
        struct cobatch_request_params p = ps[i];
        p.user_data = &out[i];
        out[i].id = cobatch_submit(e, &p, &ce);
        if (out[i].id <= 0) {
            fprintf(stderr, "submit %d failed: %s\n", i, ce.message);
            return false;
        }
    }
    int done = 0;
    while (done < n) {
        struct cobatch_event ev[32];
        int k = cobatch_poll(e, ev, 32, 1000);
        for (int j = 0; j < k; j++)
            done += it_take(&ev[j]);
    }
    return true;
}

static inline void it_free(it_result *r, int n) {
    for (int i = 0; i < n; i++) {
        free(r[i].text);
        free(r[i].prompt_lp);
    }
}

/* Batch invariance with a stated tolerance: outputs a and b (same prompt, greedy) must be equal,
 * or first differ at a token where the reference run's top-2 logit margin was below eps. Returns
 * 0 equal, 1 differs at a near-tie, -1 differs where it should not (and prints why). */
static inline int it_compare(const it_result *ref, const it_result *b, float eps, const char *what, int idx) {
    int n = ref->n_tokens < b->n_tokens ? ref->n_tokens : b->n_tokens;
    for (int k = 0; k < n; k++) {
        if (ref->tokens[k] != b->tokens[k]) {
            if (ref->margins[k] < eps) {
                printf("# %s request %d: differs at token %d, a near-tie (margin %.4f < %.2f)\n", what, idx, k,
                       ref->margins[k], eps);
                return 1;
            }
            printf("# %s request %d: differs at token %d with margin %.4f >= %.2f (%d vs %d)\n", what, idx, k,
                   ref->margins[k], eps, ref->tokens[k], b->tokens[k]);
            return -1;
        }
    }
    if (ref->n_tokens != b->n_tokens) {
        printf("# %s request %d: same tokens but lengths %d vs %d\n", what, idx, ref->n_tokens, b->n_tokens);
        return -1;
    }
    return 0;
}

#endif
