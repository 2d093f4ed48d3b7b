/* Allocation failures in the engine (the sanitizer build's faultalloc: every Nth allocation of
 * cobatch's own code fails), on the real default model. Whatever fails, every accepted request
 * ends with exactly one FINISHED event, a submit that cannot reserve that refuses with NOMEM, the
 * engine goes on serving once memory is back, and its cells match llama.cpp's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <unistd.h>

#include "../../src/util/faultalloc.h"
#include "../../src/util/utf8.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return cb_utf8_valid_prefix(s, n, NULL) == n; }

#define NEAR_TIE_EPS 0.25f
enum { N = 12 };

static struct cobatch_request_params request(int i, it_result *r) {
    static const char *stops[] = {"\n\n", "the end"};
    static const struct cobatch_chat_message chat[] = {{.role = "system", .content = "Be brief."},
                                                       {.role = "user", .content = "Name a colour."}};
    struct cobatch_request_params p = cobatch_request_default_params();
    if (i % 3 == 0) {
        p.messages = chat;
        p.n_messages = 2;
    } else {
        p.prompt = i % 3 == 1 ? "The capital of France is" : "List the planets of the solar system:";
    }
    p.max_tokens = 1 + (i * 5) % 24;
    p.stop = stops;
    p.n_stop = (size_t)(i % 3);
    p.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    p.sampling.seed = (uint32_t)i;
    p.logit_margins = true;
    p.user_data = r;
    return p;
}

static void allocation_failures_lose_no_request(void **state) {
    struct cobatch_error ce;
    (void)state;
    assert_true(cb_fault_alloc_available());
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.max_num_seqs = 4;
    ep.max_model_len = 256;
    ep.max_num_batched_tokens = 64;
    ep.prefill_chunk = 32;
    cobatch_engine *e = it_engine(ep);
    assert_non_null(e);
    struct cobatch_request_params ref_p = cobatch_request_default_params();
    ref_p.prompt = "The capital of France is";
    ref_p.max_tokens = 12;
    ref_p.ignore_eos = true;
    ref_p.logit_margins = true;
    it_result ref;
    assert_true(it_run(e, &ref_p, &ref, 1));
    /* each request's output without faults: a request that ends well under faults must match it
     * (greedy ones token for token, within the near-tie rule; its text in full) */
    it_result clean[N];
    struct cobatch_request_params ps[N];
    for (int i = 0; i < N; i++)
        ps[i] = request(i, &clean[i]);
    assert_true(it_run(e, ps, clean, N));
    const uint64_t everies[] = {2, 3, 5, 7, 11, 17, 31, 61, 127, 251};
    int accepted_total = 0, refused_total = 0;
    for (size_t k = 0; k < sizeof(everies) / sizeof(everies[0]); k++) {
        it_result rs[N];
        bool accepted[N];
        int n_acc = 0;
        cb_fault_alloc_set(everies[k]);
        for (int i = 0; i < N; i++) {
            memset(&rs[i], 0, sizeof(rs[i]));
            rs[i].text = calloc(1, 1);
            struct cobatch_request_params p = request(i, &rs[i]);
            cobatch_req_id id = cobatch_submit(e, &p, &ce);
            accepted[i] = id > 0;
            if (id <= 0) assert_int_equal(id, COBATCH_ERR_NOMEM); /* never a wrong verdict on a good request */
            n_acc += accepted[i];
        }
        int done = 0;
        int64_t deadline = cobatch_time_us() + 60 * 1000000LL;
        while (done < n_acc) {
            if (cobatch_time_us() > deadline)
                fail_msg("every %llu: %d of %d finished", (unsigned long long)everies[k], done, n_acc);
            struct cobatch_event ev[16];
            int got = cobatch_poll(e, ev, 16, 100);
            for (int j = 0; j < got; j++)
                done += it_take(&ev[j]);
        }
        cb_fault_alloc_set(0);
        int errors = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(rs[i].n_finished, accepted[i] ? 1 : 0);
            errors += rs[i].reason == COBATCH_FINISH_ERROR;
            bool whole = rs[i].reason == COBATCH_FINISH_STOP || rs[i].reason == COBATCH_FINISH_LENGTH;
            if (accepted[i] && whole && ps[i].sampling.temperature == 0.0f) {
                int c = it_compare(&clean[i], &rs[i], NEAR_TIE_EPS, "under faults", i);
                assert_true(c >= 0);
                if (c == 0) assert_string_equal(rs[i].text ? rs[i].text : "", clean[i].text);
            }
        }
        it_free(rs, N);
        printf("# every %3llu-th allocation fails: %2d of %d accepted, %d ended with an error\n",
               (unsigned long long)everies[k], n_acc, N, errors);
        accepted_total += n_acc;
        refused_total += N - n_acc;
        /* memory is back: the engine serves as before, its cells as the accounting says */
        it_result again;
        assert_true(it_run(e, &ref_p, &again, 1));
        assert_int_equal(again.n_finished, 1);
        assert_true(it_compare(&ref, &again, NEAR_TIE_EPS, "after faults", 0) >= 0);
        it_free(&again, 1);
        struct cobatch_stats st;
        cobatch_engine_stats(e, &st);
        assert_int_equal(st.kv_mismatches, 0);
        assert_int_equal(st.running + st.waiting, 0);
    }
    printf("# %llu allocations failed; %d requests accepted, %d refused with NOMEM\n",
           (unsigned long long)cb_fault_alloc_failed(), accepted_total, refused_total);
    assert_true(accepted_total > 0 && refused_total > 0);
    it_free(&ref, 1);
    it_free(clean, N);
    cobatch_engine_free(e);
}

/* The same for embedding requests: an accepted one ends once, with its vectors (as they are without
 * faults) or an error; a refused one says NOMEM. */
typedef struct {
    int n_finished;
    enum cobatch_finish_reason reason;
    float *v;
} embd_result;

static void embedding_allocation_failures_lose_no_request(void **state) {
    (void)state;
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.max_num_seqs = 2;
    ep.max_model_len = 256;
    ep.embeddings = true;
    ep.embd_batch = 64;
    cobatch_engine *e = it_engine(ep);
    assert_non_null(e);
    static const char *const texts[] = {"The cat sat on the mat.", "A cat was sitting on the rug.",
                                        "The stock market fell sharply today.", "Paris is the capital of France."};
    struct cobatch_embd_input in[4];
    for (int i = 0; i < 4; i++)
        in[i] = (struct cobatch_embd_input){.text = texts[i]};
    const uint64_t everies[] = {0, 2, 3, 5, 7, 11, 31};
    float clean[4 * 576];
    int refused = 0;
    for (size_t k = 0; k < sizeof(everies) / sizeof(everies[0]); k++) {
        embd_result rs[N];
        bool accepted[N];
        int n_acc = 0, done = 0;
        memset(rs, 0, sizeof(rs));
        cb_fault_alloc_set(everies[k]);
        for (int i = 0; i < N; i++) {
            struct cobatch_embd_params p = {.inputs = in, .n_inputs = 1 + i % 4, .user_data = &rs[i]};
            struct cobatch_error err;
            cobatch_req_id id = cobatch_embed(e, &p, &err);
            accepted[i] = id > 0;
            if (id <= 0) assert_int_equal(id, COBATCH_ERR_NOMEM);
            n_acc += accepted[i];
        }
        int64_t deadline = cobatch_time_us() + 60 * 1000000LL;
        while (done < n_acc) {
            if (cobatch_time_us() > deadline)
                fail_msg("every %llu: %d of %d", (unsigned long long)everies[k], done, n_acc);
            struct cobatch_event ev;
            if (cobatch_poll(e, &ev, 1, 100) != 1) continue;
            embd_result *r = ev.user_data;
            r->n_finished++;
            r->reason = ev.reason;
            r->v = ev.embd;
            ev.embd = NULL;
            done++;
            cobatch_event_clear(&ev);
        }
        cb_fault_alloc_set(0);
        for (int i = 0; i < N; i++) {
            assert_int_equal(rs[i].n_finished, accepted[i] ? 1 : 0);
            if (accepted[i]) assert_true(rs[i].reason == COBATCH_FINISH_STOP || rs[i].reason == COBATCH_FINISH_ERROR);
            if (rs[i].reason == COBATCH_FINISH_STOP && everies[k] == 0 && i == 3) memcpy(clean, rs[i].v, sizeof(clean));
            if (rs[i].reason == COBATCH_FINISH_STOP && everies[k] != 0)
                for (int j = 0; j < (1 + i % 4) * 576; j++)
                    assert_true(fabsf(rs[i].v[j] - clean[j]) < 2e-3f);
            free(rs[i].v);
        }
        refused += N - n_acc;
        printf("# every %3llu-th allocation fails: %2d of %d embedding requests accepted\n",
               (unsigned long long)everies[k], n_acc, N);
    }
    assert_true(refused > 0);
    struct cobatch_stats st;
    cobatch_engine_stats(e, &st);
    assert_int_equal(st.embd_waiting, 0);
    cobatch_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(allocation_failures_lose_no_request),
                                       cmocka_unit_test(embedding_allocation_failures_lose_no_request)};
    return cmocka_run_group_tests_name("oom", tests, NULL, NULL);
}
