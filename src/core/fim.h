/* fim.h — a code-infill prompt (fill in the middle) assembled as llama-server's /infill assembles
 * it, from pieces already tokenized: pure, unit-tested against its documented format.
 *
 * With the model's FIM_REP and FIM_SEP tokens, the repo-level pattern (Qwen2.5-Coder's paper,
 * arXiv 2409.12186):
 *
 *     [FIM_REP]myproject\n [FIM_SEP]file0\n text0 ... [FIM_SEP]filename\n
 *     [FIM_PRE]prefix [FIM_SUF]suffix [FIM_MID]prompt
 *
 * without them, each extra chunk after a separator text ("\n\n--- snippet ---\n\n"), all of it before
 * [FIM_PRE]. As llama-server's code assembles it (its README places the prompt after FIM_MID; its
 * code, which clients such as llama.vscode are written against, after the prefix, the line being
 * typed): extra [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID], BOS when the vocabulary adds
 * one, and with SPM order (--spm-infill) the [FIM_SUF] part before the [FIM_PRE] one. What fits: the
 * prefix's last 3/4 of a batch of tokens, the suffix's first (1/4 of a batch less the prompt and 2),
 * the extra context's last (the context less a batch less twice the output). */
#ifndef CB_FIM_H
#define CB_FIM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const int32_t *t; /* (n) */
    int32_t n;
} cb_tokens;

/* The model's FIM tokens (-1: it has none), and how it is prompted. */
typedef struct {
    int32_t pre, suf, mid, rep, sep, bos;
    bool add_bos; /* the vocabulary adds BOS */
    bool spm;     /* suffix, then prefix (llama-server's --spm-infill) */
} cb_fim_vocab;

/* The pieces of one infill request, tokenized without special tokens. */
typedef struct {
    cb_tokens prefix, suffix, prompt;
    const cb_tokens *files, *texts; /* (n_extra) each extra chunk's "filename\n" and text */
    int32_t n_extra;
    cb_tokens repo;     /* "myproject\n" (with FIM_REP) */
    cb_tokens snippet;  /* "\n\n--- snippet ---\n\n" (without FIM_SEP) */
    cb_tokens cur_file; /* "filename\n" (with FIM_SEP) */
    int32_t n_batch;    /* the budget the prefix and suffix share (llama-server's --batch-size: 2048) */
    int32_t n_predict;  /* the output's most tokens (< 0: none given: 0 here) */
    int32_t n_ctx;      /* a sequence's cells */
} cb_fim_request;

/* Whether the vocabulary can infill (FIM_PRE, FIM_SUF and FIM_MID). */
bool cb_fim_can(const cb_fim_vocab *v);

/* The prompt's tokens, malloc'd (count in *n), NULL when memory runs out or the vocabulary cannot
 * infill. */
int32_t *cb_fim_assemble(const cb_fim_vocab *v, const cb_fim_request *r, int32_t *n);

#endif
