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
#include "../../src/engine/testing.h"
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

/* The engine of params p on the tiny model; its attention line and path into kv. */
static cobatch_engine *attn_engine(struct cobatch_engine_params p, struct cobatch_kv_info *kv) {
    p.model_path = path_q4_0;
    p.max_num_seqs = 2;
    p.max_model_len = 512;
    cobatch_engine *e = it_engine(p);
    assert_non_null(e);
    cobatch_kv_info(e, kv);
    printf("# attention: %s\n", kv->attention);
    return e;
}

/* The attention path by default: measured (flash attention kept on: exact cache hits), kept in a
 * file under COBATCH_CACHE whose first line is the key, read back by a later process, measured again
 * when the file's key is not this one; a path the flags name is taken as given. */
static void attention_path_is_measured_then_read_back(void **state) {
    (void)state;
    char dir[] = "/tmp/cobatch-attn-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("COBATCH_CACHE", dir, 1);
    cobatch_test_attn_forget();
    struct cobatch_kv_info kv;
    cobatch_test_attn_steady(0); /* the cache's behaviour, whatever runs beside (cb_attn_steady: unit test) */
    cobatch_engine *e = attn_engine(cobatch_engine_default_params(), &kv);
    assert_non_null(strstr(kv.attention, "measured fastest of 5 paths"));
    assert_non_null(strstr(kv.attention, "(measured)"));
    assert_true(kv.flash_attn);
    assert_true(kv.type_k == kv.type_v && (kv.type_k == COBATCH_KV_F16 || kv.type_k == COBATCH_KV_BF16));
    int type = kv.type_k;
    cobatch_engine_free(e);
    char cmd[300], line[200] = "";
    snprintf(cmd, sizeof cmd, "head -c 40 %s/attn-*.txt", dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    pclose(f);
    assert_true(strncmp(line, "attn v1; cpu ", 13) == 0);
    cobatch_test_attn_forget(); /* as a new process */
    e = attn_engine(cobatch_engine_default_params(), &kv);
    assert_non_null(strstr(kv.attention, "(cached)"));
    assert_int_equal(kv.type_k, type);
    cobatch_engine_free(e);
    snprintf(cmd, sizeof cmd, "for f in %s/attn-*.txt; do sed -i '1s/cpu /cpu other /' $f; done", dir);
    assert_int_equal(system(cmd), 0); /* another host's times under this name */
    cobatch_test_attn_forget();
    e = attn_engine(cobatch_engine_default_params(), &kv);
    assert_non_null(strstr(kv.attention, "(measured)"));
    cobatch_engine_free(e);
    struct cobatch_engine_params named = cobatch_engine_default_params();
    named.flash_attn = 0;
    named.cache_type_k = named.cache_type_v = COBATCH_KV_F32;
    e = attn_engine(named, &kv);
    assert_string_equal(kv.attention, "as given");
    assert_true(!kv.flash_attn && kv.type_k == COBATCH_KV_F32);
    cobatch_engine_free(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    unsetenv("COBATCH_CACHE");
    cobatch_test_attn_steady(1.5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_model_buffers_follow_the_decision),
        cmocka_unit_test(q4_0_is_repacked_unless_off),
        cmocka_unit_test(default_answers_a_prompt),
        cmocka_unit_test(attention_path_is_measured_then_read_back),
    };
    return cmocka_run_group_tests_name("weights", tests, make_model, remove_model);
}
