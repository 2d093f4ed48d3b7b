/* Synthetic models from `cobatch mkmodel`: they load, their vocabulary round-trips text, and the
 * engine batches them. Random weights: nothing here looks at what the text says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "../../src/util/utf8.h"
#include "../../src/runtime/synth.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return cb_utf8_valid_prefix(s, n, NULL) == n; }

static char path_llama[256], path_qwen[256];

static int make_models(void **state) {
    (void)state;
    char err[256];
    snprintf(path_llama, sizeof(path_llama), "synth-tiny-%d.gguf", (int)getpid());
    snprintf(path_qwen, sizeof(path_qwen), "synth-tiny-qwen2-%d.gguf", (int)getpid());
    if (cb_synth_write(cb_synth_preset("tiny"), cb_synth_ftype("q8_0"), 7, 2, path_llama, err, sizeof(err)) != 0 ||
        cb_synth_write(cb_synth_preset("tiny-qwen2"), cb_synth_ftype("q4_1"), 7, 2, path_qwen, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", err);
        return -1;
    }
    return 0;
}

static int remove_models(void **state) {
    (void)state;
    unlink(path_llama);
    unlink(path_qwen);
    return 0;
}

static void round_trip(cobatch_engine *e, const char *text) {
    int32_t toks[512];
    int32_t n = cobatch_tokenize(e, text, toks, 512);
    assert_true(n > 0 && n <= 512);
    char out[2048];
    int32_t k = cobatch_detokenize(e, toks, n, out, sizeof(out) - 1);
    assert_true(k >= 0 && k < (int32_t)sizeof(out));
    out[k] = '\0';
    /* SPM prepends a word boundary on tokenize and drops it again on detokenize */
    const char *got = out[0] == ' ' && strlen(out) == strlen(text) + 1 ? out + 1 : out;
    if (strcmp(got, text) != 0) fail_msg("round trip of '%s' gave '%s' (%d tokens)", text, out, n);
}

static void vocabulary_round_trips(void **state) {
    (void)state;
    const char *paths[] = {path_llama, path_qwen};
    for (int m = 0; m < 2; m++) {
        struct cobatch_engine_params p = cobatch_engine_default_params();
        p.model_path = paths[m];
        p.n_ctx = 1024;
        p.kv_layout = COBATCH_KV_UNIFIED;
        cobatch_engine *e = it_engine(p);
        assert_non_null(e);
        assert_non_null(strstr(cobatch_model_name(e), "synthetic"));
        round_trip(e, "Hello world, the history of books.");
        round_trip(e, "  two  spaces\tand a tab\nnew line");
        round_trip(e, "Unicode: élève 早上好 😀 ∑");
        round_trip(e, "x");
        /* word pieces do their job: plain English takes fewer tokens than bytes */
        int32_t toks[256];
        const char *eng = "the people of the city made many books about the history of the world";
        int32_t n = cobatch_tokenize(e, eng, toks, 256);
        printf("# %d tokens for %d bytes of English\n", n, (int)strlen(eng));
        assert_true(n < (int32_t)strlen(eng) / 3);
        cobatch_engine_free(e);
    }
}

/* Continuous batching on a synthetic model gives the sequential outputs (same near-tie rule). */
static void batches_like_sequential(void **state) {
    (void)state;
    enum { N = 12 };
    struct cobatch_request_params ps[N];
    char prompts[N][128];
    for (int i = 0; i < N; i++) {
        snprintf(prompts[i], sizeof(prompts[i]), "request %d: the history of the world %.*s", i, i * 4,
                 "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
        ps[i] = cobatch_request_default_params();
        ps[i].prompt = prompts[i];
        ps[i].max_tokens = 16 + i;
        ps[i].ignore_eos = true;
        ps[i].logit_margins = true;
    }
    const char *paths[] = {path_llama, path_qwen};
    for (int m = 0; m < 2; m++) {
        static it_result a[N], b[N];
        struct cobatch_engine_params p = cobatch_engine_default_params();
        p.model_path = paths[m];
        p.n_ctx = 2048;
        p.kv_layout = COBATCH_KV_UNIFIED;
        p.mode = COBATCH_MODE_SEQUENTIAL;
        cobatch_engine *e = it_engine(p);
        assert_true(it_run(e, ps, a, N));
        cobatch_engine_free(e);
        p.mode = COBATCH_MODE_CONTINUOUS;
        p.max_num_seqs = 6;
        p.prefill_chunk = 8;
        e = it_engine(p);
        assert_true(it_run(e, ps, b, N));
        cobatch_engine_free(e);
        for (int i = 0; i < N; i++) {
            assert_int_equal(a[i].n_generated, 16 + i);
            assert_int_equal(b[i].n_generated, 16 + i);
            assert_true(it_compare(&a[i], &b[i], 0.25f, paths[m], i) >= 0);
        }
        it_free(a, N);
        it_free(b, N);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vocabulary_round_trips),
        cmocka_unit_test(batches_like_sequential),
    };
    return cmocka_run_group_tests(tests, make_models, remove_models);
}
