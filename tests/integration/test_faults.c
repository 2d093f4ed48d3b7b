/* The engine's failure paths on the real default model: faults injected at the llama_decode
 * boundary (error codes, an abort in the middle of a batch of several graph runs), a poller that
 * stops polling, a full queue, a drain, fresh seeds. Whatever happens, every accepted request ends
 * with exactly one FINISHED event, the other requests go on, and llama.cpp's cells match the
 * accounting afterwards (cobatch_stats.kv_mismatches). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "../../src/util/utf8.h"
#include "../../src/engine/testing.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return cb_utf8_valid_prefix(s, n, NULL) == n; }

#define NEAR_TIE_EPS 0.25f

static const char *LONG_PROMPT =
    "The history of the printing press begins in the fifteenth century when movable type changed how "
    "books were made. Before that time every copy of a text was written by hand, which was slow and "
    "expensive. Printers in many cities soon set up workshops, and the price of books fell quickly. "
    "Scholars could compare the same edition of a work, news spread faster, and reading became common.";

/* ---------------------------------------------------------------- a gate on the engine thread */

/* on_step blocks the engine thread after each step until the test lets it go: the test can then
 * change things between two steps deterministically. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int permits; /* steps that may pass */
    int arrived; /* steps that reached the gate */
    bool open;
} gate;

static void gate_step(const struct cobatch_step_info *info, void *user) {
    (void)info;
    gate *g = user;
    pthread_mutex_lock(&g->mu);
    g->arrived++;
    pthread_cond_broadcast(&g->cond);
    while (!g->open && g->permits == 0)
        pthread_cond_wait(&g->cond, &g->mu);
    if (g->permits > 0) g->permits--;
    pthread_mutex_unlock(&g->mu);
}

static void gate_init(gate *g) {
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->permits = g->arrived = 0;
    g->open = false;
}

/* Waits until `arrived` steps have reached the gate. */
static void gate_wait(gate *g, int arrived) {
    pthread_mutex_lock(&g->mu);
    while (g->arrived < arrived)
        pthread_cond_wait(&g->cond, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_pass(gate *g, int steps, bool open) {
    pthread_mutex_lock(&g->mu);
    g->permits += steps;
    g->open = open;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->mu);
}

/* ---------------------------------------------------------------- helpers ------------------ */

static struct cobatch_engine_params small_params(int seqs) {
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.max_num_seqs = seqs;
    p.max_num_batched_tokens = 256;
    p.prefill_chunk = 64;
    p.max_model_len = 512;
    return p;
}

static cobatch_req_id submit(cobatch_engine *e, const char *prompt, int max_tokens, void *user) {
    struct cobatch_error ce;
    struct cobatch_request_params p = cobatch_request_default_params();
    p.prompt = prompt;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.logit_margins = true;
    p.user_data = user;
    cobatch_req_id id = cobatch_submit(e, &p, &ce);
    if (id <= 0) fprintf(stderr, "submit failed: %s\n", ce.message);
    return id;
}

/* Polls until every result in rs[0, n) has its FINISHED event (at most 120 s). */
static void collect(cobatch_engine *e, it_result *rs, int n) {
    int64_t deadline = cobatch_time_us() + 120 * 1000000LL;
    for (;;) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += rs[i].n_finished > 0;
        if (done == n) return;
        if (cobatch_time_us() > deadline) fail_msg("requests did not finish in 120 s");
        struct cobatch_event ev[16];
        int k = cobatch_poll(e, ev, 16, 200);
        for (int j = 0; j < k; j++)
            it_take(&ev[j]);
    }
}

static it_result *results(int n) {
    it_result *rs = calloc((size_t)n, sizeof(*rs));
    for (int i = 0; i < n; i++)
        rs[i].text = calloc(1, 1);
    return rs;
}

/* The stats once the engine is idle (nothing running or waiting), within 5 s. */
static struct cobatch_stats idle_stats(cobatch_engine *e) {
    struct cobatch_stats st;
    for (int i = 0; i < 500; i++) {
        cobatch_engine_stats(e, &st);
        if (st.running == 0 && st.waiting == 0) break;
        usleep(10000);
    }
    return st;
}

/* Greedy tokens of prompt on a fresh engine with the same parameters (the reference). */
static it_result reference(struct cobatch_engine_params p, const char *prompt, int max_tokens) {
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    it_result *r = results(1);
    assert_true(submit(e, prompt, max_tokens, r) > 0);
    collect(e, r, 1);
    it_result out = *r;
    free(r);
    cobatch_engine_free(e);
    return out;
}

/* ---------------------------------------------------------------- seeds -------------------- */

/* No seed (or COBATCH_SEED_RANDOM) draws a fresh seed per request; a given seed repeats. */
static void unseeded_requests_differ(void **state) {
    struct cobatch_error ce;
    (void)state;
    cobatch_engine *e = it_engine(small_params(4));
    assert_non_null(e);
    enum { N = 6 };
    it_result *rs = results(N);
    for (int i = 0; i < N; i++) {
        struct cobatch_request_params p = cobatch_request_default_params();
        p.prompt = "Once upon a time";
        p.max_tokens = 24;
        p.ignore_eos = true;
        p.sampling.temperature = 1.0f;
        if (i >= 4) p.sampling.seed = 4242; /* two seeded: must match */
        p.user_data = &rs[i];
        assert_true(cobatch_submit(e, &p, &ce) > 0);
    }
    collect(e, rs, N);
    int distinct = 0;
    for (int i = 0; i < 4; i++) {
        bool seen = false;
        for (int j = 0; j < i; j++)
            seen |= !strcmp(rs[i].text, rs[j].text);
        distinct += !seen;
    }
    printf("# 4 unseeded samples: %d distinct texts\n", distinct);
    assert_true(distinct >= 2);
    assert_string_equal(rs[4].text, rs[5].text);
    it_free(rs, N);
    free(rs);
    cobatch_engine_free(e);
}

/* ---------------------------------------------------------------- the queue limit ---------- */

/* max_queue counts requests not yet running, exactly: while the engine sits between two steps
 * (gated), no more than max_queue wait, also right after the engine took its inbox. */
static void queue_limit_is_exact(void **state) {
    struct cobatch_error ce;
    (void)state;
    gate g;
    gate_init(&g);
    struct cobatch_engine_params p = small_params(1);
    p.max_queue = 3;
    p.on_step = gate_step;
    p.on_step_user = &g;
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    it_result *rs = results(16);
    int n = 0;
    assert_true(submit(e, "Count to ten:", 40, &rs[n++]) > 0);
    gate_wait(&g, 1); /* it runs (max_num_seqs 1); the engine waits after its first step */
    int accepted = 0;
    for (int i = 0; i < 6; i++) {
        if (submit(e, "Count to five:", 4, &rs[n]) > 0) accepted++, n++;
    }
    assert_int_equal(accepted, 3);
    gate_pass(&g, 1, false); /* the engine takes the three into its waiting queue, steps, waits */
    gate_wait(&g, 2);
    struct cobatch_request_params q = cobatch_request_default_params();
    q.prompt = "One more";
    q.user_data = &rs[n];
    assert_int_equal(cobatch_submit(e, &q, &ce), COBATCH_ERR_QUEUE_FULL);
    gate_pass(&g, 0, true);
    collect(e, rs, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(rs[i].n_finished, 1);
    it_free(rs, 16);
    free(rs);
    cobatch_engine_free(e);
}

/* ---------------------------------------------------------------- a poller that stops ------ */

/* Unpolled events stop the engine at the backlog (plus one step's tokens); nothing is lost when
 * polling resumes. */
static void slow_poller_holds_the_engine(void **state) {
    (void)state;
    enum { N = 4, TOKENS = 60, BACKLOG = 64 };
    cobatch_engine *e = it_engine(small_params(N));
    assert_non_null(e);
    cobatch_test_set_event_backlog(e, BACKLOG);
    it_result *rs = results(N);
    for (int i = 0; i < N; i++)
        assert_true(submit(e, "List the planets:", TOKENS, &rs[i]) > 0);
    struct cobatch_stats st;
    int64_t last = -1;
    int still = 0;
    for (int i = 0; i < 600 && still < 20; i++) { /* until it has not moved for 2 s (at most 60 s) */
        usleep(100000);
        cobatch_engine_stats(e, &st);
        still = st.generated_tokens == last && last >= BACKLOG - N ? still + 1 : 0;
        last = st.generated_tokens;
    }
    printf("# %lld tokens generated with nobody polling (backlog %d)\n", (long long)st.generated_tokens, BACKLOG);
    assert_true(st.generated_tokens >= BACKLOG - N);
    assert_true(st.generated_tokens <= BACKLOG + 2 * N);
    collect(e, rs, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(rs[i].n_finished, 1);
        assert_int_equal(rs[i].n_tokens, TOKENS);
        assert_int_equal(rs[i].reason, COBATCH_FINISH_LENGTH);
    }
    it_free(rs, N);
    free(rs);
    cobatch_engine_free(e);
}

/* ---------------------------------------------------------------- decode faults ------------ */

/* An error code from llama_decode ends the requests of that step with an error naming it; a
 * request that waited goes on, and the cells match the accounting. "No KV slot" (1) is retried. */
static void decode_errors_end_only_their_step(void **state) {
    (void)state;
    struct cobatch_engine_params p = small_params(2);
    it_result ref = reference(p, "Name three colours:", 12);
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    int codes[] = {-1, 2, -3, 1};
    for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
        it_result *rs = results(3);
        assert_true(submit(e, "Write about rivers:", 30, &rs[0]) > 0);
        assert_true(submit(e, "Write about mountains:", 30, &rs[1]) > 0);
        /* both run (max_num_seqs 2); the fault hits a step of theirs */
        for (int i = 0; i < 300; i++) {
            struct cobatch_stats st;
            cobatch_engine_stats(e, &st);
            if (st.running == 2) break;
            usleep(10000);
        }
        cobatch_test_fault(e, COBATCH_TEST_GENERATE, codes[c], 1, 0);
        assert_true(submit(e, "Name three colours:", 12, &rs[2]) > 0); /* waits, then runs after the fault */
        collect(e, rs, 3);
        struct cobatch_stats st = idle_stats(e);
        printf("# code %d: reasons %d %d %d, decode_failures %lld, retries %lld, mismatches %d\n", codes[c],
               rs[0].reason, rs[1].reason, rs[2].reason, (long long)st.decode_failures, (long long)st.decode_retries,
               st.kv_mismatches);
        for (int i = 0; i < 3; i++)
            assert_int_equal(rs[i].n_finished, 1);
        if (codes[c] == 1) { /* retried with a smaller step: nothing failed */
            assert_int_equal(rs[0].reason, COBATCH_FINISH_LENGTH);
            assert_int_equal(rs[1].reason, COBATCH_FINISH_LENGTH);
            assert_true(st.decode_retries >= 1);
        } else {
            assert_int_equal(rs[0].reason, COBATCH_FINISH_ERROR);
            assert_int_equal(rs[1].reason, COBATCH_FINISH_ERROR);
            char want[64];
            snprintf(want, sizeof(want), "llama_decode failed with code %d", codes[c]);
            assert_string_equal(rs[0].error, want);
        }
        assert_int_equal(rs[2].reason, COBATCH_FINISH_LENGTH);
        assert_int_equal(it_compare(&ref, &rs[2], NEAR_TIE_EPS, "after a fault", 2) >= 0, 1);
        assert_int_equal(st.kv_mismatches, 0);
        it_free(rs, 3);
        free(rs);
    }
    struct cobatch_stats st = idle_stats(e);
    assert_int_equal(st.decode_failures, 3);
    free(ref.text);
    cobatch_engine_free(e);
}

/* llama.cpp takes back only the failed graph run's cells when a batch of several aborts: the runs
 * before it stay written. The engine trims every sequence of the step back, so the parked streams
 * (split layout, prefix cache) hold exactly what their records say, and a later request that takes
 * one over computes what a fresh engine computes. */
static void abort_mid_batch_keeps_cells_right(void **state) {
    (void)state;
    struct cobatch_engine_params p = small_params(4);
    char follow[1024];
    snprintf(follow, sizeof(follow), "%s Then the", LONG_PROMPT);
    it_result ref = reference(p, follow, 16);

    gate g;
    gate_init(&g);
    p.on_step = gate_step;
    p.on_step_user = &g;
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    it_result *rs = results(3);
    assert_true(submit(e, "Write about rivers:", 200, &rs[0]) > 0);
    gate_pass(&g, 3, false); /* its prompt, then decode steps of one row: one graph run each */
    gate_wait(&g, 4);
    cobatch_test_fault(e, COBATCH_TEST_GENERATE, 0, 0, INT64_MAX); /* measure one single-run decode step */
    gate_pass(&g, 1, false);
    gate_wait(&g, 5);
    gate_pass(&g, 1, false);
    gate_wait(&g, 6);
    int64_t per_run = cobatch_test_nodes_seen(e);
    printf("# one graph run: %lld nodes\n", (long long)per_run);
    assert_true(per_run > 10);
    /* the long prompt (over one 64-token chunk) computes its first chunk beside the decode row; its
     * second step (the decode row and its last tokens: a run of the first rows, then the rest)
     * aborts in its second graph run, after the first wrote a row of each */
    assert_true(submit(e, LONG_PROMPT, 8, &rs[1]) > 0);
    gate_pass(&g, 1, false);
    gate_wait(&g, 7);
    cobatch_test_fault(e, COBATCH_TEST_GENERATE, 0, 0, per_run + per_run / 2);
    gate_pass(&g, 0, true);
    collect(e, rs, 2);
    assert_int_equal(rs[0].reason, COBATCH_FINISH_ERROR);
    assert_int_equal(rs[1].reason, COBATCH_FINISH_ERROR);
    assert_string_equal(rs[1].error, "llama_decode failed with code 2");
    struct cobatch_stats st = idle_stats(e);
    assert_int_equal(st.kv_mismatches, 0);
    assert_int_equal(st.decode_failures, 1);
    /* the long prompt's stream is parked with what the engine computed of it before the abort (the
     * tokens of earlier steps): a request sharing that prefix takes it over */
    assert_true(submit(e, follow, 16, &rs[2]) > 0);
    collect(e, &rs[2], 1);
    assert_int_equal(rs[2].reason, COBATCH_FINISH_LENGTH);
    assert_true(it_compare(&ref, &rs[2], NEAR_TIE_EPS, "after an abort", 2) >= 0);
    st = idle_stats(e);
    assert_int_equal(st.kv_mismatches, 0);
    it_free(rs, 3);
    free(rs);
    free(ref.text);
    cobatch_engine_free(e);
}

/* ---------------------------------------------------------------- draining ----------------- */

/* cobatch_cancel_waiting ends what never ran, at once; what runs goes on to its end. */
static void cancel_waiting_spares_the_running(void **state) {
    (void)state;
    cobatch_engine *e = it_engine(small_params(1));
    assert_non_null(e);
    it_result *rs = results(4);
    assert_true(submit(e, "Count to twenty:", 40, &rs[0]) > 0);
    for (int i = 1; i < 4; i++)
        assert_true(submit(e, "Count to three:", 8, &rs[i]) > 0);
    for (int i = 0; i < 300; i++) {
        struct cobatch_stats st;
        cobatch_engine_stats(e, &st);
        if (st.running == 1 && st.generated_tokens > 0) break;
        usleep(10000);
    }
    cobatch_cancel_waiting(e);
    collect(e, rs, 4);
    assert_int_equal(rs[0].reason, COBATCH_FINISH_LENGTH);
    assert_int_equal(rs[0].n_tokens, 40);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(rs[i].reason, COBATCH_FINISH_CANCELLED);
        assert_int_equal(rs[i].n_tokens, 0);
    }
    it_free(rs, 4);
    free(rs);
    cobatch_engine_free(e);
}

/* A priority without the priority policy is refused, not ignored. */
static void priority_needs_its_policy(void **state) {
    struct cobatch_error ce;
    (void)state;
    cobatch_engine *e = it_engine(small_params(1));
    assert_non_null(e);
    struct cobatch_request_params p = cobatch_request_default_params();
    p.prompt = "Hi";
    p.priority = 3;
    assert_int_equal(cobatch_submit(e, &p, &ce), COBATCH_ERR_INVALID);
    assert_non_null(strstr(ce.message, "priority"));
    assert_string_equal(ce.param, "priority");
    cobatch_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unseeded_requests_differ),          cmocka_unit_test(queue_limit_is_exact),
        cmocka_unit_test(slow_poller_holds_the_engine),      cmocka_unit_test(decode_errors_end_only_their_step),
        cmocka_unit_test(abort_mid_batch_keeps_cells_right), cmocka_unit_test(cancel_waiting_spares_the_running),
        cmocka_unit_test(priority_needs_its_policy),
    };
    return cmocka_run_group_tests_name("faults", tests, NULL, NULL);
}
