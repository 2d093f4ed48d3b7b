/* Embeddings (cobatch_embed) on the real default model: vectors of unit length, the same run after run,
 * alone or batched with other inputs and requests, from a text or its token ids; a paraphrase closer
 * than an unrelated sentence; every refusal naming its field; a failed pass, cancels and a drain each
 * ending a request exactly once; and generation keeping its share of the engine's time beside a
 * stream of embeddings. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "../../src/engine/testing.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return (void)s, (void)n, true; }

#define MAX_IN 64

/* What one embedding request came back with. */
typedef struct {
    cobatch_req_id id;
    int n_finished;
    enum cobatch_finish_reason reason;
    float *v; /* (n_inputs x n_embd) */
    int32_t n_embd, n_inputs, n_prompt;
    char error[256];
} er_result;

static struct cobatch_engine_params embd_params(void) {
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.embeddings = true;
    p.max_num_seqs = 4;
    p.max_model_len = 512;
    p.long_lane = 0;
    p.cache_ram = 0;
    return p;
}

static cobatch_req_id submit_texts(cobatch_engine *e, const char *const *texts, int n, er_result *out) {
    struct cobatch_embd_input in[MAX_IN];
    for (int i = 0; i < n; i++)
        in[i] = (struct cobatch_embd_input){.text = texts[i]};
    struct cobatch_embd_params p = {.inputs = in, .n_inputs = n, .user_data = out};
    struct cobatch_error err = {0};
    memset(out, 0, sizeof(*out));
    out->id = cobatch_embed(e, &p, &err);
    if (out->id <= 0) fprintf(stderr, "embed refused: %s\n", err.message);
    return out->id;
}

/* Polls until every one of n results has its FINISHED event (generation events are counted in *gen_done
 * when given: their user_data is NULL). */
static void wait_all(cobatch_engine *e, er_result *r, int n, int *gen_done) {
    int done = 0;
    for (int i = 0; i < n; i++)
        done += r[i].n_finished > 0;
    while (done < n) {
        struct cobatch_event ev[16];
        int k = cobatch_poll(e, ev, 16, 1000);
        for (int j = 0; j < k; j++) {
            er_result *x = ev[j].user_data;
            if (!x) {
                if (gen_done && ev[j].type == COBATCH_EVENT_FINISHED) (*gen_done)++;
            } else if (ev[j].type == COBATCH_EVENT_FINISHED) {
                done += x->n_finished++ == 0;
                x->reason = ev[j].reason;
                x->v = ev[j].embd;
                ev[j].embd = NULL;
                x->n_embd = ev[j].n_embd;
                x->n_inputs = ev[j].n_inputs;
                x->n_prompt = ev[j].n_prompt;
                if (ev[j].error) snprintf(x->error, sizeof(x->error), "%s", ev[j].error);
            }
            cobatch_event_clear(&ev[j]);
        }
    }
}

static double dot(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

static double max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static const char *const TEXTS[] = {
    "The cat sat on the mat.",
    "A cat was sitting on the rug.",
    "The stock market fell sharply today after the central bank raised interest rates again.",
    "How do I bake bread at home?",
    "<|im_start|>user\nControl-token text is parsed, as llama-server does.",
};
#define N_TEXTS 5

static void vectors_are_unit_length_and_deterministic(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(embd_params());
    assert_non_null(e);
    struct cobatch_embd_info info;
    cobatch_embd_info(e, &info);
    assert_int_equal(info.n_embd, 576);
    assert_int_equal(info.max_tokens, 512);
    assert_int_equal(info.pooling, COBATCH_POOLING_MEAN); /* SmolLM2 names none: the mean */
    er_result a, b;
    submit_texts(e, TEXTS, N_TEXTS, &a);
    wait_all(e, &a, 1, NULL);
    submit_texts(e, TEXTS, N_TEXTS, &b);
    wait_all(e, &b, 1, NULL);
    assert_int_equal(a.reason, COBATCH_FINISH_STOP);
    assert_int_equal(a.n_inputs, N_TEXTS);
    assert_int_equal(a.n_embd, 576);
    int32_t total = 0;
    for (int i = 0; i < N_TEXTS; i++) {
        int32_t n = 0;
        int32_t *t = cobatch_embd_tokens(e, TEXTS[i], &n, NULL);
        assert_non_null(t);
        total += n;
        free(t);
        assert_true(fabs(dot(a.v + i * 576, a.v + i * 576, 576) - 1.0) < 1e-4);
        assert_true(max_diff(a.v + i * 576, b.v + i * 576, 576) < 1e-6); /* the same pass: the same bits */
    }
    assert_int_equal(a.n_prompt, total); /* usage: every input's tokens */
    struct cobatch_stats st;
    cobatch_engine_stats(e, &st);
    assert_int_equal(st.embd_requests, 2);
    assert_int_equal(st.embd_inputs, 2 * N_TEXTS);
    assert_int_equal(st.embd_tokens, 2 * total);
    assert_int_equal(st.embd_waiting, 0);
    free(a.v);
    free(b.v);
    cobatch_engine_free(e);
}

/* One text alone, or in a request with others, or among requests submitted together (one pass): the
 * same vector within float tolerance (different passes attend over different cell counts). */
static void batched_equals_alone(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(embd_params());
    assert_non_null(e);
    er_result alone[N_TEXTS], all, each[N_TEXTS];
    for (int i = 0; i < N_TEXTS; i++) {
        submit_texts(e, &TEXTS[i], 1, &alone[i]);
        wait_all(e, &alone[i], 1, NULL);
    }
    submit_texts(e, TEXTS, N_TEXTS, &all);
    wait_all(e, &all, 1, NULL);
    for (int i = 0; i < N_TEXTS; i++) /* submitted together: one pass takes them all */
        submit_texts(e, &TEXTS[i], 1, &each[i]);
    wait_all(e, each, N_TEXTS, NULL);
    struct cobatch_stats st;
    cobatch_engine_stats(e, &st);
    assert_true(st.embd_passes <= N_TEXTS + 1 + 2); /* N alone, 1 for the list, at most 2 for the burst */
    for (int i = 0; i < N_TEXTS; i++) {
        assert_int_equal(each[i].reason, COBATCH_FINISH_STOP);
        double d1 = max_diff(alone[i].v, all.v + i * 576, 576), d2 = max_diff(alone[i].v, each[i].v, 576);
        printf("# input %d: alone vs in a list %.2g, vs beside other requests %.2g\n", i, d1, d2);
        assert_true(d1 < 2e-3 && d2 < 2e-3);
        assert_true(dot(alone[i].v, all.v + i * 576, 576) > 0.9999);
        free(alone[i].v);
        free(each[i].v);
    }
    free(all.v);
    cobatch_engine_free(e);
}

/* Token ids are taken as given: the text's own tokens give the text's vector. */
static void token_ids_equal_the_text(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(embd_params());
    assert_non_null(e);
    int32_t n = 0;
    int32_t *t = cobatch_embd_tokens(e, TEXTS[2], &n, NULL);
    assert_non_null(t);
    struct cobatch_embd_input in[2] = {{.text = TEXTS[2]}, {.tokens = t, .n_tokens = n}};
    er_result r;
    memset(&r, 0, sizeof(r));
    struct cobatch_embd_params p = {.inputs = in, .n_inputs = 2, .user_data = &r};
    assert_true(cobatch_embed(e, &p, NULL) > 0);
    wait_all(e, &r, 1, NULL);
    assert_int_equal(r.reason, COBATCH_FINISH_STOP);
    assert_int_equal(r.n_prompt, 2 * n);
    assert_true(max_diff(r.v, r.v + 576, 576) < 1e-6);
    free(r.v);
    free(t);
    cobatch_engine_free(e);
}

/* What the pooling is for: a paraphrase scores above an unrelated sentence (mean pooling on this
 * 135M generative model; README says why mean). */
static void paraphrases_score_above_unrelated(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(embd_params());
    assert_non_null(e);
    const char *const t[] = {
        "The cat sat on the mat.",
        "A cat was sitting on the rug.",
        "The stock market fell sharply today.",
        "Paris is the capital of France.",
        "France's capital city is Paris.",
        "Photosynthesis converts light into energy.",
        "The doctor examined the patient.",
        "A physician checked the sick person.",
        "The river flows into the sea.",
    };
    er_result r;
    submit_texts(e, t, 9, &r);
    wait_all(e, &r, 1, NULL);
    assert_int_equal(r.reason, COBATCH_FINISH_STOP);
    for (int k = 0; k < 3; k++) {
        const float *a = r.v + (3 * k) * 576, *para = a + 576, *other = a + 2 * 576;
        double p = dot(a, para, 576), u = dot(a, other, 576);
        printf("# pair %d: paraphrase %.3f, unrelated %.3f\n", k, p, u);
        assert_true(p > u + 0.05);
    }
    free(r.v);
    cobatch_engine_free(e);
}

static void refused(cobatch_engine *e, const struct cobatch_embd_input *in, int n, int code, const char *param,
                    const char *says) {
    struct cobatch_embd_params p = {.inputs = in, .n_inputs = n};
    struct cobatch_error err = {0};
    assert_int_equal(cobatch_embed(e, &p, &err), code);
    assert_non_null(err.param);
    assert_string_equal(err.param, param);
    if (says && !strstr(err.message, says)) fail_msg("'%s' does not say '%s'", err.message, says);
}

static void refusals_name_the_field(void **state) {
    (void)state;
    struct cobatch_engine_params ep = embd_params();
    ep.embd_batch = 64;
    cobatch_engine *e = it_engine(ep);
    assert_non_null(e);
    char long_text[4096] = "";
    for (int i = 0; i < 40; i++)
        strcat(long_text, "one two three ");
    int32_t bad[] = {5, 49152}, ok[] = {5, 6};
    struct cobatch_embd_input in[] = {{.text = "fine"}, {.text = ""}};
    refused(e, in + 1, 1, COBATCH_ERR_INVALID, "inputs", "empty");
    refused(e, in, 2, COBATCH_ERR_INVALID, "inputs", "input 1: the input is empty");
    in[1] = (struct cobatch_embd_input){.text = long_text};
    refused(e, in, 2, COBATCH_ERR_TOO_LONG, "inputs", "at most 64");
    in[1] = (struct cobatch_embd_input){.tokens = bad, .n_tokens = 2};
    refused(e, in, 2, COBATCH_ERR_INVALID, "inputs", "outside the vocabulary");
    in[1] = (struct cobatch_embd_input){.tokens = ok, .n_tokens = 0};
    refused(e, in, 2, COBATCH_ERR_INVALID, "inputs", "empty");
    in[1] = (struct cobatch_embd_input){.text = "both", .tokens = ok, .n_tokens = 2};
    refused(e, in, 2, COBATCH_ERR_INVALID, "inputs", "a text or token ids");
    refused(e, in, 0, COBATCH_ERR_INVALID, "inputs", "no inputs");
    refused(e, in, COBATCH_EMBD_MAX_INPUTS + 1, COBATCH_ERR_INVALID, "inputs", "at most 2048");
    int32_t n = 0;
    struct cobatch_error err = {0};
    assert_null(cobatch_embd_tokens(e, long_text, &n, &err));
    assert_int_equal(err.code, COBATCH_ERR_TOO_LONG);
    cobatch_engine_free(e);

    struct cobatch_engine_params gp = embd_params(); /* an engine without embeddings */
    gp.embeddings = false;
    e = it_engine(gp);
    assert_non_null(e);
    struct cobatch_embd_info info;
    cobatch_embd_info(e, &info);
    assert_int_equal(info.n_embd, 0);
    refused(e, in, 1, COBATCH_ERR_INVALID, "embeddings", "no embeddings");
    cobatch_engine_free(e);
}

/* With a backlog of one event (testing.h) the engine waits before its next step while an event is
 * unpolled: returns once one is, the engine held there until the test polls it. */
static void hold_engine(cobatch_engine *e) {
    for (;;) {
        struct cobatch_stats st;
        cobatch_engine_stats(e, &st);
        if (st.events_queued > 0) return;
        usleep(1000);
    }
}

/* A failed pass ends its requests with an error and the next pass works; a cancel and a drain end
 * requests once each, as cancelled, while the others run to their end. */
static void failures_end_each_request_once(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(embd_params());
    assert_non_null(e);
    cobatch_test_set_event_backlog(e, 1); /* the test decides when the engine takes its next step */
    er_result r[12];
    cobatch_test_fault(e, COBATCH_TEST_EMBED, -3, 1, 0);
    submit_texts(e, TEXTS, 2, &r[0]);
    wait_all(e, &r[0], 1, NULL);
    assert_int_equal(r[0].reason, COBATCH_FINISH_ERROR);
    assert_non_null(strstr(r[0].error, "code -3"));
    assert_null(r[0].v);

    /* r[1] ends and its event waits: the engine holds; a burst comes, one of it is cancelled */
    submit_texts(e, TEXTS, 2, &r[1]);
    hold_engine(e);
    for (int i = 2; i < 8; i++)
        assert_true(submit_texts(e, TEXTS, N_TEXTS, &r[i]) > 0);
    assert_int_equal(cobatch_cancel(e, r[3].id), COBATCH_OK);
    wait_all(e, &r[1], 7, NULL); /* the engine goes on: the cancel first, then a pass of the rest */
    assert_int_equal(r[1].reason, COBATCH_FINISH_STOP);
    free(r[1].v);
    for (int i = 2; i < 8; i++) {
        assert_int_equal(r[i].n_finished, 1);
        assert_int_equal(r[i].reason, i == 3 ? COBATCH_FINISH_CANCELLED : COBATCH_FINISH_STOP);
        assert_true((r[i].reason == COBATCH_FINISH_STOP) == (r[i].v != NULL));
        free(r[i].v);
    }
    assert_int_equal(cobatch_cancel(e, r[3].id), COBATCH_ERR_NOT_FOUND); /* ended: no longer live */

    /* a drain: what never ran ends cancelled, at once */
    submit_texts(e, TEXTS, 1, &r[8]);
    hold_engine(e);
    for (int i = 9; i < 12; i++)
        assert_true(submit_texts(e, TEXTS, N_TEXTS, &r[i]) > 0);
    cobatch_cancel_waiting(e);
    wait_all(e, &r[8], 4, NULL);
    assert_int_equal(r[8].reason, COBATCH_FINISH_STOP);
    free(r[8].v);
    for (int i = 9; i < 12; i++) {
        assert_int_equal(r[i].n_finished, 1);
        assert_int_equal(r[i].reason, COBATCH_FINISH_CANCELLED);
        assert_null(r[i].v);
    }
    struct cobatch_stats st;
    cobatch_engine_stats(e, &st);
    assert_int_equal(st.embd_waiting, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.embd_requests, 12);
    cobatch_engine_free(e);
}

/* ---------------------------------------------------------------- beside generation ---------- */

typedef struct {
    pthread_mutex_t mu;
    int64_t gen_us;               /* generation's time in every step so far */
    int64_t gen_at_pass;          /* of that, up to the last pass beside generation */
    int64_t embd_us, max_pass_us; /* passes beside generation: their time, the longest */
    int both, alone;              /* passes beside generation, and alone */
} step_log;

static void log_step(const struct cobatch_step_info *s, void *user) {
    step_log *L = user;
    bool gen = s->decode_rows + s->prefill_tokens + s->lane_tokens > 0;
    pthread_mutex_lock(&L->mu);
    if (gen) L->gen_us += (s->t_end_us - s->t_start_us) - s->embd_us;
    if (s->embd_tokens > 0 && gen) {
        L->both++;
        L->embd_us += s->embd_us;
        L->gen_at_pass = L->gen_us;
        if (s->embd_us > L->max_pass_us) L->max_pass_us = s->embd_us;
    } else if (s->embd_tokens > 0) {
        L->alone++;
    }
    pthread_mutex_unlock(&L->mu);
}

/* Generation beside a stream of embedding requests: both finish, and the passes beside generation
 * take no more than their share of the engine's time while they wait: share / (1 - share) of
 * generation's, and one pass's overdraft at most (the first, unmeasured, or one that ran over its
 * estimate). */
static void generation_keeps_its_share(void **state) {
    (void)state;
    step_log L = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct cobatch_engine_params ep = embd_params();
    ep.embd_share = 0.25f;
    ep.on_step = log_step;
    ep.on_step_user = &L;
    cobatch_engine *e = it_engine(ep);
    assert_non_null(e);
    struct cobatch_request_params gp = cobatch_request_default_params();
    gp.prompt = "Write a long story about a lighthouse keeper.";
    gp.max_tokens = 96;
    gp.ignore_eos = true;
    gp.user_data = NULL;
    assert_true(cobatch_submit(e, &gp, NULL) > 0);
    assert_true(cobatch_submit(e, &gp, NULL) > 0);
    er_result r[12];
    for (int i = 0; i < 12; i++)
        assert_true(submit_texts(e, TEXTS, N_TEXTS, &r[i]) > 0);
    int gen_done = 0;
    wait_all(e, r, 12, &gen_done);
    while (gen_done < 2) {
        struct cobatch_event ev;
        if (cobatch_poll(e, &ev, 1, 1000) == 1) {
            gen_done += ev.type == COBATCH_EVENT_FINISHED;
            cobatch_event_clear(&ev);
        }
    }
    for (int i = 0; i < 12; i++) {
        assert_int_equal(r[i].reason, COBATCH_FINISH_STOP);
        free(r[i].v);
    }
    cobatch_engine_free(e);
    double bound = (double)L.gen_at_pass * 0.25 / 0.75 + (double)L.max_pass_us;
    printf("# passes beside generation %d (alone %d): %.1f ms of embeddings against %.1f ms of generation (bound "
           "%.1f ms)\n",
           L.both, L.alone, L.embd_us / 1e3, L.gen_at_pass / 1e3, bound / 1e3);
    assert_true(L.both > 0);
    assert_true((double)L.embd_us <= bound);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vectors_are_unit_length_and_deterministic),
        cmocka_unit_test(batched_equals_alone),
        cmocka_unit_test(token_ids_equal_the_text),
        cmocka_unit_test(paraphrases_score_above_unrelated),
        cmocka_unit_test(refusals_name_the_field),
        cmocka_unit_test(failures_end_each_request_once),
        cmocka_unit_test(generation_keeps_its_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
