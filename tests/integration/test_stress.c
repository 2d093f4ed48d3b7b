/* The C API from many threads at once, on the real default model: submitters, a canceller, a
 * stats reader and a poller race each other. Every accepted request must end with exactly one
 * FINISHED event, no TOKEN event may follow it, and the engine must end idle with its cells
 * matching llama.cpp's. Run under ThreadSanitizer by `make test` (as all tests are). */
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) {
    (void)s, (void)n;
    return true;
}

enum { SUBMITTERS = 4, PER_THREAD = 40, MAX_REQ = SUBMITTERS * PER_THREAD };

typedef struct {
    cobatch_engine *e;
    pthread_mutex_t mu;
    cobatch_req_id ids[MAX_REQ]; /* accepted ids, in acceptance order */
    int n_ids;
    int finished[MAX_REQ + 1]; /* FINISHED events per slot */
    int tokens_after[MAX_REQ + 1];
    int reasons[5];
    int refused_full;
    atomic_bool submitting_done;
    atomic_bool stop;
} stress;

typedef struct {
    stress *st;
    int slot; /* user_data: which request */
} slot_ref;

static slot_ref refs[MAX_REQ];

static void *submitter(void *arg) {
    struct cobatch_error ce;
    stress *st = ((void **)arg)[0];
    int t = (int)(intptr_t)((void **)arg)[1];
    for (int k = 0; k < PER_THREAD; k++) {
        int slot = t * PER_THREAD + k;
        refs[slot] = (slot_ref){st, slot};
        struct cobatch_request_params p = cobatch_request_default_params();
        char prompt[64];
        snprintf(prompt, sizeof(prompt), "Thread %d, request %d: count", t, k);
        p.prompt = prompt;
        p.max_tokens = 1 + (k * 7 + t) % 8;
        p.ignore_eos = k % 2 == 0;
        p.user_data = &refs[slot];
        for (;;) {
            cobatch_req_id id = cobatch_submit(st->e, &p, &ce);
            if (id > 0) {
                pthread_mutex_lock(&st->mu);
                st->ids[st->n_ids++] = id;
                pthread_mutex_unlock(&st->mu);
                break;
            }
            if (id != COBATCH_ERR_QUEUE_FULL) fail_msg("submit: %s", ce.message);
            pthread_mutex_lock(&st->mu);
            st->refused_full++;
            pthread_mutex_unlock(&st->mu);
            usleep(2000);
        }
    }
    return NULL;
}

static void *canceller(void *arg) {
    stress *st = arg;
    uint64_t rng = 12345;
    while (!atomic_load(&st->stop)) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        pthread_mutex_lock(&st->mu);
        cobatch_req_id id = st->n_ids ? st->ids[(rng >> 33) % (uint64_t)st->n_ids] : 0;
        pthread_mutex_unlock(&st->mu);
        if (id > 0 && (rng >> 20) % 3 == 0) {
            int rc = cobatch_cancel(st->e, id);
            assert_true(rc == COBATCH_OK || rc == COBATCH_ERR_NOT_FOUND);
        }
        usleep(1000);
    }
    return NULL;
}

static void *stats_reader(void *arg) {
    stress *st = arg;
    while (!atomic_load(&st->stop)) {
        struct cobatch_stats s;
        cobatch_engine_stats(st->e, &s);
        assert_true(s.running >= 0 && s.waiting >= 0 && s.running <= 8);
        usleep(500);
    }
    return NULL;
}

static void races_end_every_request_once(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.max_num_seqs = 8;
    p.max_queue = 16; /* small: the submitters meet QUEUE_FULL */
    p.max_model_len = 256;
    p.max_num_batched_tokens = 128;
    p.prefill_chunk = 32;
    static stress st;
    memset(&st, 0, sizeof(st));
    pthread_mutex_init(&st.mu, NULL);
    st.e = it_engine(p);
    assert_non_null(st.e);
    pthread_t sub[SUBMITTERS], can, rd;
    void *args[SUBMITTERS][2];
    for (int t = 0; t < SUBMITTERS; t++) {
        args[t][0] = &st;
        args[t][1] = (void *)(intptr_t)t;
        pthread_create(&sub[t], NULL, submitter, args[t]);
    }
    pthread_create(&can, NULL, canceller, &st);
    pthread_create(&rd, NULL, stats_reader, &st);
    int done = 0;
    int64_t deadline = cobatch_time_us() + 300 * 1000000LL;
    while (done < MAX_REQ) {
        if (cobatch_time_us() > deadline) fail_msg("only %d of %d requests finished in 300 s", done, MAX_REQ);
        struct cobatch_event ev[32];
        int k = cobatch_poll(st.e, ev, 32, 100);
        for (int j = 0; j < k; j++) {
            slot_ref *r = ev[j].user_data;
            if (ev[j].type == COBATCH_EVENT_TOKEN) {
                st.tokens_after[r->slot] += st.finished[r->slot] > 0;
            } else {
                st.finished[r->slot]++;
                st.reasons[ev[j].reason]++;
                done++;
            }
            cobatch_event_clear(&ev[j]);
        }
    }
    for (int t = 0; t < SUBMITTERS; t++)
        pthread_join(sub[t], NULL);
    atomic_store(&st.stop, true);
    pthread_join(can, NULL);
    pthread_join(rd, NULL);
    for (int i = 0; i < MAX_REQ; i++) {
        assert_int_equal(st.finished[i], 1);
        assert_int_equal(st.tokens_after[i], 0);
    }
    printf("# %d requests: %d stop, %d length, %d cancelled, %d error; %d QUEUE_FULL retries\n", MAX_REQ,
           st.reasons[COBATCH_FINISH_STOP], st.reasons[COBATCH_FINISH_LENGTH], st.reasons[COBATCH_FINISH_CANCELLED],
           st.reasons[COBATCH_FINISH_ERROR], st.refused_full);
    assert_int_equal(st.reasons[COBATCH_FINISH_ERROR], 0);
    assert_true(st.reasons[COBATCH_FINISH_CANCELLED] > 0);
    struct cobatch_stats s;
    for (int i = 0; i < 200; i++) {
        cobatch_engine_stats(st.e, &s);
        if (s.running == 0 && s.waiting == 0) break;
        usleep(10000);
    }
    assert_int_equal(s.running + s.waiting, 0);
    assert_int_equal(s.kv_mismatches, 0);
    cobatch_engine_free(st.e);
    pthread_mutex_destroy(&st.mu);
}

/* Freeing the engine with requests in flight and events unpolled: everything is released (the
 * sanitizers check), nothing blocks. */
static void free_with_requests_in_flight(void **state) {
    struct cobatch_error ce;
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.max_num_seqs = 4;
    p.max_model_len = 256;
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    for (int i = 0; i < 20; i++) {
        struct cobatch_request_params q = cobatch_request_default_params();
        q.prompt = "Tell a long story:";
        q.max_tokens = 100;
        assert_true(cobatch_submit(e, &q, &ce) > 0);
    }
    usleep(300000);
    cobatch_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(races_end_every_request_once),
        cmocka_unit_test(free_with_requests_in_flight),
    };
    return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
