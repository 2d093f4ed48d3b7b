/* Benchmark metrics from known synthetic timelines, and workload generators' exact lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/batch/group.h"
#include "../../src/bench/metrics.h"
#include "../../src/bench/workload.h"

static void percentiles_interpolate_like_numpy(void **state) {
    (void)state;
    double v[] = {5, 1, 4, 2, 3}; /* sorted: 1 2 3 4 5 */
    cb_dist d = cb_dist_of(v, 5);
    assert_float_equal(d.mean, 3.0, 1e-12);
    assert_float_equal(d.p50, 3.0, 1e-12);
    assert_float_equal(d.p90, 4.6, 1e-12); /* numpy.percentile([1..5], 90) */
    assert_float_equal(d.p99, 4.96, 1e-12);
    assert_float_equal(d.max, 5.0, 1e-12);
    double w[] = {10, 20};
    d = cb_dist_of(w, 2);
    assert_float_equal(d.p50, 15.0, 1e-12);
    assert_float_equal(d.p99, 19.9, 1e-12);
    d = cb_dist_of(NULL, 0);
    assert_int_equal(d.n, 0);
}

static void vllm_definitions_on_a_known_timeline(void **state) {
    (void)state;
    /* request A: submitted at 0, tokens at 100, 110, 130 ms, finished at 130 ms;
     * request B: submitted at 50, tokens at 250, 290 ms, finished at 290 ms;
     * request C: failed; request D: one token at 400, submitted 300. */
    int64_t ta[] = {100000, 110000, 130000}, tb[] = {250000, 290000}, td[] = {400000};
    cb_req_timeline r[4] = {
        {0, 100000, 130000, ta, 10, 3, true},
        {50000, 250000, 290000, tb, 20, 2, true},
        {0, 0, 0, NULL, 5, 0, false},
        {300000, 400000, 400000, td, 7, 1, true},
    };
    cb_metrics m;
    assert_int_equal(cb_metrics_compute(r, 4, 2.0, &m), 0);
    assert_int_equal(m.completed, 3);
    assert_int_equal(m.failed, 1);
    assert_int_equal(m.input_tokens, 37);
    assert_int_equal(m.output_tokens, 6);
    assert_float_equal(m.req_per_s, 1.5, 1e-12);
    assert_float_equal(m.out_tok_per_s, 3.0, 1e-12);
    assert_float_equal(m.total_tok_per_s, 21.5, 1e-12);
    /* TTFT: 100, 200, 100 ms */
    assert_float_equal(m.ttft_ms.mean, 400.0 / 3, 1e-9);
    assert_float_equal(m.ttft_ms.p50, 100.0, 1e-9);
    /* TPOT excludes the first token: A (130-100)/2 = 15, B 40/1 = 40; D has one token: none */
    assert_int_equal(m.tpot_ms.n, 2);
    assert_float_equal(m.tpot_ms.mean, 27.5, 1e-9);
    /* ITL: A 10, 20; B 40 */
    assert_int_equal(m.itl_ms.n, 3);
    assert_float_equal(m.itl_ms.p50, 20.0, 1e-9);
    assert_float_equal(m.itl_ms.max, 40.0, 1e-9);
    /* E2EL: 130, 240, 100 */
    assert_float_equal(m.e2el_ms.p50, 130.0, 1e-9);
    assert_float_equal(m.e2el_ms.p99, 130 + (240 - 130) * 0.98, 1e-9);
}

/* A fake tokenizer: prompt token i is 1000 + i, so exactness and determinism can be checked. */
static int fake_prompt(void *ctx, uint64_t *rng, int32_t n, int32_t *out) {
    int *calls = ctx;
    (*calls)++;
    int32_t base = cb_rng_range(rng, 0, 100);
    for (int32_t i = 0; i < n; i++)
        out[i] = base + i;
    return 0;
}

static void workloads_hit_their_lengths(void **state) {
    (void)state;
    const char *names[] = {"long",          "long16", "mixed",         "mixed-small", "decode-heavy",
                           "prefill-heavy", "random", "shared-prefix", "multi-prefix"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        cb_workload_opts o = {.seed = 3, .random_input_len = 100, .random_output_len = 20, .random_range_ratio = 0.5};
        int calls = 0;
        cb_workload w;
        char err[128];
        assert_int_equal(cb_workload_make(names[k], &o, fake_prompt, &calls, &w, err, sizeof(err)), 0);
        /* one prompt each; shared-prefix makes one per group prefix and one per distinct part,
         * multi-prefix one system prompt too */
        bool shared = !strcmp(names[k], "shared-prefix"), multi = !strcmp(names[k], "multi-prefix");
        assert_int_equal(calls, shared ? w.n + w.n / 4 : multi ? 1 + w.n / 4 + w.n : w.n);
        for (int i = 0; i < w.n; i++) {
            assert_true(w.items[i].n_in >= 1 && w.items[i].n_out >= 1);
            if (!shared && !multi) /* fake prompts count up from a random base */
                assert_int_equal(w.items[i].tokens[w.items[i].n_in - 1] - w.items[i].tokens[0], w.items[i].n_in - 1);
        }
        if (!strcmp(names[k], "long")) {
            assert_int_equal(w.n, 186);
            for (int i = 0; i < w.n; i++) {
                assert_in_range(w.items[i].n_in, 60, 500);
                assert_in_range(w.items[i].n_out, 32, 128);
            }
        }
        if (!strcmp(names[k], "mixed")) {
            assert_int_equal(w.n, 20);
            int32_t p[] = {128, 256, 384, 512}, out[] = {24, 24, 24, 96, 24, 24, 24, 128};
            for (int i = 0; i < w.n; i++) {
                assert_int_equal(w.items[i].n_in, p[i % 4]);
                assert_int_equal(w.items[i].n_out, out[i % 8]);
            }
        }
        if (!strcmp(names[k], "random")) {
            for (int i = 0; i < w.n; i++) {
                assert_in_range(w.items[i].n_in, 50, 150);
                assert_in_range(w.items[i].n_out, 10, 30);
            }
        }
        /* same seed, same workload */
        cb_workload w2;
        assert_int_equal(cb_workload_make(names[k], &o, fake_prompt, &calls, &w2, err, sizeof(err)), 0);
        for (int i = 0; i < w.n; i++) {
            assert_int_equal(w.items[i].n_in, w2.items[i].n_in);
            assert_memory_equal(w.items[i].tokens, w2.items[i].tokens, sizeof(int32_t) * (size_t)w.items[i].n_in);
        }
        cb_workload_free(&w);
        cb_workload_free(&w2);
    }
    cb_workload w;
    char err[128];
    int calls = 0;
    cb_workload_opts o = {0};
    assert_int_equal(cb_workload_make("nope", &o, fake_prompt, &calls, &w, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "unknown workload"));
}

/* A fake tokenizer whose every prompt is new: call c makes 1000 c, 1000 c + 1, ... */
static int fresh_prompt(void *ctx, uint64_t *rng, int32_t n, int32_t *out) {
    (void)rng;
    int *calls = ctx;
    (*calls)++;
    for (int32_t i = 0; i < n; i++)
        out[i] = 1000 * *calls + i;
    return 0;
}

/* multi-prefix: one system prompt, then a document per group of S requests, then a question each;
 * the batch runner's prefix tree has those two levels, and its enlargement makes each group's
 * prefix the system prompt and its document. */
static void multi_prefix_two_levels(void **state) {
    (void)state;
    int calls = 0;
    cb_workload w;
    char err[128];
    cb_workload_opts o = {
        .num_prompts = 12, .system_len = 30, .prefix_len = 40, .distinct_len = 7, .output_len = 5, .sharing_degree = 4};
    assert_int_equal(cb_workload_make("multi-prefix", &o, fresh_prompt, &calls, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 12);
    assert_int_equal(w.n_sessions, 0);
    int in_order = 0;
    cb_group_prompt p[12];
    for (int i = 0; i < w.n; i++) {
        const int32_t *t = w.items[i].tokens;
        assert_int_equal(w.items[i].n_in, 77);
        assert_int_equal(w.items[i].n_out, 5);
        assert_memory_equal(t, w.items[0].tokens, sizeof(int32_t) * 30); /* every request: the system prompt */
        assert_int_equal(t[0], 1000);                                    /* with one BOS, the first prompt's */
        assert_int_equal(t[30] % 1000, 1);                               /* the document: a prompt's tail */
        assert_int_equal(t[70] % 1000, 1);                               /* the question too */
        int same = 0;
        for (int j = 0; j < w.n; j++)
            same += !memcmp(t, w.items[j].tokens, sizeof(int32_t) * 70);
        assert_int_equal(same, 4); /* itself and three others */
        for (int j = 0; j < w.n; j++)
            if (j != i) assert_true(memcmp(t, w.items[j].tokens, sizeof(int32_t) * 77) != 0);
        if (i > 0) in_order += !memcmp(t, w.items[i - 1].tokens, sizeof(int32_t) * 70);
        p[i] = (cb_group_prompt){.tokens = t, .n_tokens = 77, .max_tokens = 5};
    }
    assert_true(in_order < 6); /* shuffled */
    /* the tree: the system prompt once, three documents, twelve questions */
    cb_grouping g;
    assert_int_equal(cb_group_build(p, 12, false, &g), 0);
    assert_int_equal(g.tree_tokens, 30 + 3 * 40 + 12 * 7);
    assert_int_equal(g.n_groups, 1); /* unenlarged: the first level is the system prompt alone */
    assert_int_equal(g.groups[0].prefix_len, 30);
    cb_grouping_free(&g);
    assert_int_equal(cb_group_build(p, 12, true, &g), 0);
    assert_int_equal(g.n_groups, 3); /* enlarged: (4 - 1) x 40 document tokens > 30 system tokens */
    for (int k = 0; k < 3; k++) {
        assert_int_equal(g.groups[k].n, 4);
        assert_int_equal(g.groups[k].prefix_len, 70);
    }
    assert_int_equal(g.group_tokens, 3 * 70 + 12 * 7);
    cb_grouping_free(&g);
    cb_workload_free(&w);
}

/* BatchLLM-style groups: S requests share P tokens exactly, then D tokens of their own. */
static void shared_prefix_groups(void **state) {
    (void)state;
    int calls = 0;
    cb_workload w;
    char err[128];
    cb_workload_opts o = {.num_prompts = 24, .prefix_len = 40, .distinct_len = 7, .output_len = 5, .sharing_degree = 4};
    assert_int_equal(cb_workload_make("shared-prefix", &o, fake_prompt, &calls, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 24);
    int groups = 0, in_order = 0;
    for (int i = 0; i < w.n; i++) {
        assert_int_equal(w.items[i].n_in, 47);
        assert_int_equal(w.items[i].n_out, 5);
        int same = 0;
        for (int j = 0; j < w.n; j++)
            same += !memcmp(w.items[i].tokens, w.items[j].tokens, sizeof(int32_t) * 40);
        assert_int_equal(same, 4);    /* itself and three others */
        for (int j = 0; j < w.n; j++) /* no two requests are the same prompt */
            if (j != i) assert_true(memcmp(w.items[i].tokens, w.items[j].tokens, sizeof(int32_t) * 47) != 0);
        if (i % 4 == 0) groups++;
        if (i > 0) in_order += !memcmp(w.items[i].tokens, w.items[i - 1].tokens, sizeof(int32_t) * 40);
    }
    assert_int_equal(groups, 6);
    assert_true(in_order < 12); /* shuffled: neighbours rarely share a group */
    cb_workload_free(&w);
}

/* Sessions: turn-major items (turn t of session s is item t * S + s), the task then the turns'
 * lengths, one shared system prompt; the defaults are the agent-traffic shape (32 x 4, 470 / 90 / 50
 * / 32). */
static void sessions_are_turns_of_conversations(void **state) {
    (void)state;
    int calls = 0;
    cb_workload w;
    char err[128];
    cb_workload_opts o = {.sessions = 3,
                          .turns = 4,
                          .system_len = 20,
                          .task_len = 9,
                          .turn_len = 5,
                          .output_len = 7,
                          .think_s = 0.25,
                          .num_prompts = 2};
    assert_int_equal(cb_workload_make("sessions", &o, fake_prompt, &calls, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 12); /* --num-prompts does not cut conversations */
    assert_int_equal(w.n_sessions, 3);
    assert_int_equal(w.n_system, 20);
    assert_non_null(w.system_tokens);
    assert_true(w.think_s == 0.25);
    for (int i = 0; i < w.n; i++) {
        assert_int_equal(w.items[i].session, i % 3);
        assert_int_equal(w.items[i].turn, i / 3);
        assert_int_equal(w.items[i].n_in, i < 3 ? 9 : 5);
        assert_int_equal(w.items[i].n_out, 7);
    }
    cb_workload_free(&w);
    cb_workload_opts d = {0};
    assert_int_equal(cb_workload_make("sessions", &d, fake_prompt, &calls, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n, 128);
    assert_int_equal(w.n_system, 470);
    assert_int_equal(w.items[0].n_in, 90);
    assert_int_equal(w.items[32].n_in, 50);
    assert_int_equal(w.items[127].n_out, 32);
    assert_int_equal(w.items[127].turn, 3);
    cb_workload_free(&w);
    o = (cb_workload_opts){.seed = 1}; /* other workloads are not sessions */
    assert_int_equal(cb_workload_make("mixed", &o, fake_prompt, &calls, &w, err, sizeof(err)), 0);
    assert_int_equal(w.n_sessions, 0);
    assert_int_equal(w.items[0].session, -1);
    cb_workload_free(&w);
}

static int32_t *fake_tokenize(void *ctx, const char *text, int32_t *n) {
    (void)ctx;
    *n = (int32_t)strlen(text);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)*n);
    for (int32_t i = 0; i < *n; i++)
        t[i] = (unsigned char)text[i];
    return t;
}

static void jsonl_workloads(void **state) {
    (void)state;
    char path[] = "/tmp/cobatch-wl-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"prompt\": \"abc\", \"max_tokens\": 5, \"arrival_s\": 1.5}\n\n"
          "{\"prompt_tokens\": [7, 8, 9, 10], \"priority\": 2}\n",
          f);
    fclose(f);
    cb_workload w;
    bool arrivals;
    char err[256];
    assert_int_equal(cb_workload_load_jsonl(path, fake_tokenize, NULL, &w, &arrivals, err, sizeof(err)), 0);
    assert_true(arrivals);
    assert_int_equal(w.n, 2);
    assert_int_equal(w.items[0].n_in, 3);
    assert_int_equal(w.items[0].tokens[1], 'b');
    assert_int_equal(w.items[0].n_out, 5);
    assert_float_equal(w.items[0].arrival_s, 1.5, 1e-12);
    assert_int_equal(w.items[1].n_in, 4);
    assert_int_equal(w.items[1].n_out, 128);
    assert_int_equal(w.items[1].priority, 2);
    cb_workload_free(&w);
    const char *bad[] = {"{\"prompt\": \"\"}\n",
                         "{\"max_tokens\": 3}\n",
                         "[1, 2]\n",
                         "{\"prompt\": \"a\", \"max_tokens\": 0}\n",
                         "{\"prompt_tokens\": [\"x\"]}\n",
                         "{\"prompt\": \"a\"}\n{oops\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        f = fopen(path, "w");
        fputs(bad[i], f);
        fclose(f);
        assert_int_equal(cb_workload_load_jsonl(path, fake_tokenize, NULL, &w, &arrivals, err, sizeof(err)), -1);
        assert_non_null(strstr(err, i == 5 ? ":2:" : ":1:")); /* the message names the line */
    }
    unlink(path);
}

static void poisson_arrivals_have_the_asked_rate(void **state) {
    (void)state;
    int calls = 0;
    cb_workload w;
    char err[128];
    cb_workload_opts o = {.num_prompts = 4000, .random_input_len = 4, .random_output_len = 4};
    assert_int_equal(cb_workload_make("random", &o, fake_prompt, &calls, &w, err, sizeof(err)), 0);
    for (int b = 0; b < 2; b++) {
        double burst = b ? 0.5 : 1.0;
        cb_workload_set_arrivals(&w, 8.0, burst, 1);
        assert_float_equal(w.items[0].arrival_s, 0.0, 1e-12);
        double sum = 0, sq = 0;
        for (int i = 1; i < w.n; i++) {
            double g = w.items[i].arrival_s - w.items[i - 1].arrival_s;
            assert_true(g >= 0);
            sum += g;
            sq += g * g;
        }
        double mean = sum / (w.n - 1), var = sq / (w.n - 1) - mean * mean;
        assert_float_equal(mean, 1.0 / 8, 0.01);
        /* gamma(k): cv^2 = 1/k, so burstiness 0.5 is twice as variable as Poisson */
        assert_float_equal(var / (mean * mean), 1.0 / burst, 0.25 / burst);
    }
    cb_workload_set_arrivals(&w, 0, 1, 1);
    assert_float_equal(w.items[w.n - 1].arrival_s, 0.0, 1e-12);
    cb_workload_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(percentiles_interpolate_like_numpy),   cmocka_unit_test(vllm_definitions_on_a_known_timeline),
        cmocka_unit_test(workloads_hit_their_lengths),          cmocka_unit_test(shared_prefix_groups),
        cmocka_unit_test(sessions_are_turns_of_conversations),  cmocka_unit_test(jsonl_workloads),
        cmocka_unit_test(poisson_arrivals_have_the_asked_rate), cmocka_unit_test(multi_prefix_two_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
