/* prompts.c — prompts of exact token lengths in the vocabulary of the model under test. */
#include "prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *WORDS[] = {
    "the",     "history", "of",       "printing", "began",     "when",       "movable",   "type",    "changed",
    "how",     "books",   "were",     "made",     "and",       "every",      "copy",      "was",     "written",
    "by",      "hand",    "printers", "in",       "many",      "cities",     "set",       "up",      "workshops",
    "price",   "fell",    "quickly",  "scholars", "could",     "compare",    "news",      "spread",  "faster",
    "reading", "became",  "common",   "among",    "merchants", "over",       "centuries", "presses", "grew",
    "larger",  "steam",   "power",    "replaced", "muscle",    "newspapers", "reached"};

/* Exactly n tokens of English-like text: tokenize enough random words, keep the first n. */
int cb_prompt_make(void *engine, uint64_t *rng, int32_t n, int32_t *out) {
    size_t cap = (size_t)n * 12 + 64;
    char *text = malloc(cap);
    int32_t *toks = malloc(sizeof(int32_t) * ((size_t)n * 4 + 64));
    if (!text || !toks) {
        free(text);
        free(toks);
        return -1;
    }
    size_t len = 0;
    int rc = -1;
    for (int words = n; words <= n * 4 + 8; words += n / 2 + 4) {
        while (len + 16 < cap && (int)(len / 6) < words) {
            const char *w = WORDS[cb_rng_range(rng, 0, (int32_t)(sizeof(WORDS) / sizeof(WORDS[0])) - 1)];
            len += (size_t)snprintf(text + len, cap - len, "%s%s", len ? " " : "", w);
        }
        int32_t k = cobatch_tokenize(engine, text, toks, n * 4 + 64);
        if (k >= n && k <= n * 4 + 64) {
            memcpy(out, toks, sizeof(int32_t) * (size_t)n);
            rc = 0;
            break;
        }
    }
    free(text);
    free(toks);
    return rc;
}

int32_t *cb_prompt_tokenize(void *engine, const char *text, int32_t *n) {
    int32_t cap = (int32_t)strlen(text) + 16;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t k = t ? cobatch_tokenize(engine, text, t, cap) : -1;
    if (k < 1 || k > cap) {
        free(t);
        return NULL;
    }
    *n = k;
    return t;
}

int32_t *cb_prompt_chat(void *engine, const char *user, int32_t *n) {
    struct cobatch_chat_message m = {.role = "user", .content = user};
    struct cobatch_request_params p = cobatch_request_default_params();
    p.messages = &m;
    p.n_messages = 1;
    return cobatch_prompt_tokens(engine, &p, n, NULL);
}
