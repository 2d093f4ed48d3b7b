/* What a grammar's check of the candidates and its accept cost per token, ours (the bounded grammar
 * the engine uses) or llama.cpp's own sampler (LLAMA=1): a GBNF grammar fed an output token by token,
 * each token's check over the whole vocabulary (what the engine runs when the grammar refuses the
 * token it sampled), then its accept. Prints the worst check, the worst accept and the total, or
 * where the grammar was blown. Input file: the grammar, a NUL, the output; STATES: grammar-states.
 * build (after a release build in build/):
 *   L=~/.cache/cobatch/llama.cpp-*[0-9a-f]/install; g++ -O2 -x c scripts/grammar_cost.c -x none -I$L/include \
 *     -o /tmp/grammar_cost build/libcobatch_engine.a build/libcobatch_util.a build/libcobatch_core.a \
 *     $L/lib/libllama-common.a $L/lib/libllama-common-base.a $L/lib/libllama.a $L/lib/libggml.a \
 *     $L/lib/libggml-cpu.a $L/lib/libggml-base.a -lgomp -lm -lpthread
 * usage: [LLAMA=1] /tmp/grammar_cost MODEL FILE [STATES] */
#include "../src/runtime/llama_common.h"

#include <llama.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void quiet(enum ggml_log_level l, const char *t, void *u) { (void)l, (void)t, (void)u; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: [LLAMA=1] grammar_cost MODEL FILE [STATES]\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    size_t gl = strlen(buf);
    const char *out = buf + gl + 1;
    size_t on = gl < n ? n - gl - 1 : 0;
    cb_grammar_limits lim = {
        .max_nesting = 512, .max_elements = 1000000, .max_states = argc > 3 ? atoi(argv[3]) : 1024};
    char err[256] = "";
    struct llama_sampler *s = getenv("LLAMA")
                                  ? llama_sampler_init_grammar(v, buf, "root")
                                  : cb_common_grammar_new(v, buf, false, NULL, 0, NULL, 0, &lim, err, sizeof(err));
    if (!s) {
        printf("refused: %s\n", err);
        return 0;
    }
    int32_t cap = (int32_t)on + 8, *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t nt = llama_tokenize(v, out, (int32_t)on, toks, cap, false, true);
    int32_t nv = llama_vocab_n_tokens(v);
    llama_token_data *d = malloc(sizeof(*d) * (size_t)nv);
    double worst_check = 0, worst_accept = 0, total = 0;
    int32_t i = 0;
    for (; i < nt; i++) {
        for (int32_t j = 0; j < nv; j++)
            d[j] = (llama_token_data){j, 0.0f, 0.0f};
        llama_token_data_array a = {d, (size_t)nv, -1, false};
        const char *why = NULL;
        double t0 = now_ms();
        llama_sampler_apply(s, &a);
        double t1 = now_ms();
        if (cb_common_grammar_blown(s, &why)) {
            printf("blown at token %d in its check (%.1f ms): %s\n", i, t1 - t0, why);
            break;
        }
        if (isinf(d[toks[i]].logit)) {
            printf("the grammar refuses token %d of the output\n", i);
            break;
        }
        llama_sampler_accept(s, toks[i]);
        double t2 = now_ms();
        worst_check = t1 - t0 > worst_check ? t1 - t0 : worst_check;
        worst_accept = t2 - t1 > worst_accept ? t2 - t1 : worst_accept;
        total += t2 - t0;
        if (cb_common_grammar_blown(s, &why)) {
            printf("blown at token %d in its accept (%.1f ms): %s\n", i, t2 - t1, why);
            break;
        }
    }
    printf("%s: %d of %d tokens, check worst %.2f ms, accept worst %.2f ms, %.2f ms a token\n",
           getenv("LLAMA") ? "llama.cpp" : "ours", i, nt, worst_check, worst_accept, i ? total / i : 0.0);
    llama_sampler_free(s);
    free(d);
    free(toks);
    llama_model_free(m);
    return 0;
}
