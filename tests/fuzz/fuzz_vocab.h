/* The default model's vocabulary for the harnesses that reach llama.cpp (fuzz_grammar, fuzz_chat):
 * loaded once, vocabulary only, from $COBATCH_FUZZ_MODEL or the default model's path; without it the
 * harnesses run with no vocabulary (grammars are built, never fed). And the piece of the input an
 * output is read from: the bytes after its first NUL, as far as they are UTF-8 (the engine releases
 * output text only in whole characters, and llama.cpp's tokenizer throws on a broken one). */
#ifndef CB_FUZZ_VOCAB_H
#define CB_FUZZ_VOCAB_H

#include "../../src/util/utf8.h"
#include "../../src/runtime/llama_common.h"

#include <llama.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fuzz_quiet(enum ggml_log_level level, const char *text, void *user) { (void)level, (void)text, (void)user; }

static const struct llama_vocab *fuzz_vocab(void) {
    static int done;
    static const struct llama_vocab *v;
    if (done) return v;
    done = 1;
    llama_log_set(fuzz_quiet, NULL);
    llama_backend_init();
    const char *path = getenv("COBATCH_FUZZ_MODEL");
    if (!path) path = CB_FUZZ_DEFAULT_MODEL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: no model at %s: grammars are built, not fed\n", path);
        return NULL;
    }
    fclose(f);
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(path, mp);
    v = m ? llama_model_get_vocab(m) : NULL;
    return v;
}

/* Feeds text to a grammar sampler (cb_common_grammar_new's) as the engine would: its tokens, each
 * offered among 16 candidates (it, its neighbours, the end of generation, tokens spread over the
 * vocabulary) and accepted only when the grammar allows it; each apply and accept checked against
 * llama.cpp's own grammar code (cb_common_grammar_twin_check): a difference aborts. */
static void fuzz_feed(const struct llama_vocab *v, struct llama_sampler *s, const char *text, size_t len) {
    if (!v || !s || len == 0) return;
    int32_t cap = (int32_t)len + 8, *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = toks ? llama_tokenize(v, text, (int32_t)len, toks, cap, false, true) : -1;
    int32_t n_vocab = llama_vocab_n_tokens(v);
    llama_token eos = llama_vocab_eos(v) >= 0 ? llama_vocab_eos(v) : 0;
    char why[256];
    for (int32_t i = 0; i < n && !cb_common_grammar_blown(s, NULL); i++) {
        llama_token_data cand[16] = {
            {toks[i], 0, 0}, {(toks[i] + 1) % n_vocab, 0, 0}, {(toks[i] + n_vocab - 1) % n_vocab, 0, 0}, {eos, 0, 0}};
        for (int j = 4; j < 16; j++)
            cand[j] = (llama_token_data){
                (int32_t)(((uint32_t)toks[i] * 2654435761u + (uint32_t)j * 40503u) % (uint32_t)n_vocab), 0, 0};
        llama_token_data_array a = {cand, 16, -1, false};
        if (!cb_common_grammar_twin_check(s, &a, -1, why, sizeof(why))) {
            fprintf(stderr, "fuzz: the grammar differs from llama.cpp's apply: %s\n", why);
            abort();
        }
        llama_sampler_apply(s, &a);
        if (cand[0].logit == -INFINITY) break; /* the engine would never pick it */
        llama_token_data_array none = {cand, 0, -1, false};
        if (!cb_common_grammar_twin_check(s, &none, toks[i], why, sizeof(why))) {
            fprintf(stderr, "fuzz: the grammar differs from llama.cpp's accept: %s\n", why);
            abort();
        }
    }
    free(toks);
}

/* The input before its first NUL (*n bytes, NUL-terminated copy), and after it (*rest, *n_rest). */
static char *fuzz_split(const uint8_t *data, size_t size, size_t *n, const char **rest, size_t *n_rest) {
    const uint8_t *z = memchr(data, 0, size);
    *n = z ? (size_t)(z - data) : size;
    *rest = z ? (const char *)z + 1 : "";
    *n_rest = z ? cb_utf8_valid_prefix(*rest, size - *n - 1, NULL) : 0;
    char *head = malloc(*n + 1);
    if (!head) abort();
    memcpy(head, data, *n);
    head[*n] = '\0';
    return head;
}

#endif
