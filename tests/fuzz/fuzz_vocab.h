/* The default model's vocabulary for the harnesses that reach llama.cpp (fuzz_grammar, fuzz_chat):
 * loaded once, vocabulary only, from $COBATCH_FUZZ_MODEL or the default model's path; without it the
 * harnesses run with no vocabulary (grammars are built, never fed). And the piece of the input an
 * output is read from: the bytes after its first NUL, as far as they are UTF-8 (the engine releases
 * output text only in whole characters, and llama.cpp's tokenizer throws on a broken one). */
#ifndef CB_FUZZ_VOCAB_H
#define CB_FUZZ_VOCAB_H

#include "../../src/core/textout.h"

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

/* Feeds text to a grammar sampler as the engine would: its tokens, each accepted only when the
 * grammar allows it among a few candidates (the next token, its neighbours, end of generation). */
static void fuzz_feed(const struct llama_vocab *v, struct llama_sampler *s, const char *text, size_t len,
                      int (*blown)(const struct llama_sampler *)) {
    if (!v || !s || len == 0) return;
    int32_t cap = (int32_t)len + 8, *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = toks ? llama_tokenize(v, text, (int32_t)len, toks, cap, false, true) : -1;
    int32_t n_vocab = llama_vocab_n_tokens(v);
    llama_token eos = llama_vocab_eos(v) >= 0 ? llama_vocab_eos(v) : 0;
    for (int32_t i = 0; i < n && !blown(s); i++) {
        llama_token_data cand[4] = {
            {toks[i], 0, 0}, {(toks[i] + 1) % n_vocab, 0, 0}, {(toks[i] + n_vocab - 1) % n_vocab, 0, 0}, {eos, 0, 0}};
        llama_token_data_array a = {cand, 4, -1, false};
        llama_sampler_apply(s, &a);
        if (cand[0].logit == -INFINITY) break; /* the engine would never pick it */
        llama_sampler_accept(s, toks[i]);
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
