/* The CPU weight layouts of a real load are the ones the decision named (core/repack.h): the
 * buffer types llama.cpp's loader made, read off its log, against cb_repack_decide for this
 * host's features. On an AMX host, the default (auto) must load no AMX buffer and answer a
 * prompt: before the decision existed, every prompt of more than a few tokens segfaulted in
 * ggml_backend_amx_mul_mat there. `on` is only loaded here, never decoded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <unistd.h>

#include "../../src/util/utf8.h"
#include "../../src/runtime/cpu.h"
#include "../../src/runtime/synth.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return cb_utf8_valid_prefix(s, n, NULL) == n; }

static char path_q4_0[256];

static int make_model(void **state) {
    (void)state;
    char err[256];
    snprintf(path_q4_0, sizeof(path_q4_0), "synth-weights-q4_0-%d.gguf", (int)getpid());
    if (cb_synth_write(cb_synth_preset("tiny"), cb_synth_ftype("q4_0"), 7, 2, path_q4_0, err, sizeof(err)) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", err);
        return -1;
    }
    return 0;
}

static int remove_model(void **state) {
    (void)state;
    unlink(path_q4_0);
    return 0;
}

/* Is name one of the comma-separated buffer types? */
static bool has_buft(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && strncmp(p, name, n) == 0) return true;
        p += k + (p[k] == ',');
    }
    return false;
}

/* Loads path with mode, checks the load against the decision; returns the engine (caller frees). */
static cobatch_engine *load_checked(const char *path, enum cobatch_repack mode, cb_repack_decision *d) {
    cb_cpu_features f = cb_cpu_features_probe();
    *d = cb_repack_decide(f, (cb_repack_mode)mode);
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.model_path = path;
    p.n_ctx = 1024;
    p.max_num_seqs = 2;
    p.kv_layout = COBATCH_KV_UNIFIED;
    p.repack = mode;
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    struct cobatch_weights_info w;
    cobatch_weights_info(e, &w);
    printf("# %s, --repack %s: %s (cpu amx %d, ggml amx %d, ggml repacks %d)\n", path, w.repack, w.buffer_types,
           f.cpu_amx, f.ggml_amx, f.ggml_pack);
    assert_true(w.buffer_types[0] != 0); /* the loader's lines were read */
    assert_int_equal(w.amx, d->amx);
    assert_string_equal(w.why, d->why);
    if (!d->amx && has_buft(w.buffer_types, "AMX")) fail_msg("AMX buffer loaded though the decision left it out");
    if (!d->repack && has_buft(w.buffer_types, "CPU_REPACK")) fail_msg("CPU_REPACK loaded with repacking off");
    return e;
}

/* The default model (Q4_1: AMX has kernels for it, the interleaved repacks do not): AMX exactly
 * when the decision allows it, under every mode. */
static void default_model_buffers_follow_the_decision(void **state) {
    (void)state;
    for (int m = COBATCH_REPACK_AUTO; m <= COBATCH_REPACK_OFF; m++) {
        cb_repack_decision d;
        cobatch_engine *e = load_checked(it_model(), (enum cobatch_repack)m, &d);
        struct cobatch_weights_info w;
        cobatch_weights_info(e, &w);
        assert_int_equal(has_buft(w.buffer_types, "AMX"), d.amx);
        cobatch_engine_free(e);
    }
}

/* A Q4_0 model: the interleaved repack takes it exactly when the decision keeps the repacks. */
static void q4_0_is_repacked_unless_off(void **state) {
    (void)state;
    for (int m = COBATCH_REPACK_AUTO; m <= COBATCH_REPACK_OFF; m += 2) { /* auto and off: never AMX */
        cb_repack_decision d;
        cobatch_engine *e = load_checked(path_q4_0, (enum cobatch_repack)m, &d);
        struct cobatch_weights_info w;
        cobatch_weights_info(e, &w);
        assert_int_equal(has_buft(w.buffer_types, "CPU_REPACK"), d.repack);
        cobatch_engine_free(e);
    }
}

/* The default answers: a prompt of tens of tokens, decoded (the AMX fault's trigger). */
static void default_answers_a_prompt(void **state) {
    (void)state;
    cb_repack_decision d;
    cobatch_engine *e = load_checked(it_model(), COBATCH_REPACK_AUTO, &d);
    struct cobatch_request_params ps = cobatch_request_default_params();
    ps.prompt = "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is";
    ps.max_tokens = 8;
    ps.sampling.temperature = 0;
    it_result r;
    assert_true(it_run(e, &ps, &r, 1));
    assert_int_equal(r.n_finished, 1);
    assert_int_equal(r.reason, COBATCH_FINISH_LENGTH);
    assert_true(r.n_prompt > 16);
    printf("# answer: %s\n", r.text);
    assert_non_null(strstr(r.text, "Rome"));
    it_free(&r, 1);
    cobatch_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_model_buffers_follow_the_decision),
        cmocka_unit_test(q4_0_is_repacked_unless_off),
        cmocka_unit_test(default_answers_a_prompt),
    };
    return cmocka_run_group_tests_name("weights", tests, make_model, remove_model);
}
