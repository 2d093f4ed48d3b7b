/* libFuzzer: a GBNF grammar from a request, through the bounds in front of llama.cpp's grammar
 * (util/gbnf.c's widening and scan, the parse, the start-state estimate: cb_common_grammar_new) and then, with
 * the default model's vocabulary, fed an output token by token as the engine feeds it (the
 * per-character state count, the work bounds), each token checked against llama.cpp's own grammar
 * code on a copy (the same candidates allowed, the same parse states after). Input: the grammar, a
 * NUL, the output. A grammar may be refused or blown; nothing may crash, overflow the stack, run past
 * libFuzzer's timeout, or differ from llama.cpp where ours is not blown. */
#include "../../src/runtime/llama_common.h"
#include "../../src/util/gbnf.h"
#include "fuzz_vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const struct llama_vocab *v = fuzz_vocab();
    size_t n, n_rest;
    const char *rest;
    char *gbnf = fuzz_split(data, size, &n, &rest, &n_rest);
    cb_grammar_limits lim = {.max_nesting = 512, .max_elements = 1000000, .max_states = 256};
    char err[256] = "";
    char *wide = cb_gbnf_widen(gbnf, NULL); /* as the engine builds a grammar: counts past 2000 widened */
    if (!wide) abort();
    struct llama_sampler *s = cb_common_grammar_new(v, wide, false, NULL, 0, NULL, 0, &lim, err, sizeof(err));
    free(wide);
    if (!s && !err[0]) abort(); /* a refusal always says why */
    fuzz_feed(v, s, rest, n_rest);
    if (s) llama_sampler_free(s);
    free(gbnf);
    return 0;
}
