/* model.h — the llama.cpp model and context cobatch runs on, and tokenizer helpers.
 * The only module besides runner/sampling that includes llama.h. The context belongs to the
 * engine thread; cb_model_tokenize and cb_model_chat may be called from any thread. */
#ifndef CB_MODEL_H
#define CB_MODEL_H

#include "../core/repack.h"
#include "llama_common.h"

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llama_model;
struct llama_context;
struct llama_vocab;

typedef struct {
    const char *path;
    int32_t n_ctx;     /* total cells */
    int32_t n_threads; /* 0 = cores */
    int32_t n_seq_max;
    int32_t n_batch;       /* = n_ubatch: one step is one graph run */
    int32_t n_outputs_max; /* logits rows one step can ask for (sizes the logits buffer) */
    bool split_kv;
    bool flash_attn;
    bool swa_window_only; /* a sliding-window model keeps only its window's cells (llama.cpp's swa_full off):
                             for a context that only ever continues its sequences; by default every
                             cell stays, so a sequence trimmed to any prefix still holds what its
                             window reads */
    enum cobatch_kv_type type_k, type_v; /* the KV cache's element types */
    bool verbose;
    const char *chat_template; /* Jinja text overriding the model's own, or NULL */
    const char *rpc;           /* "HOST:PORT,..." of RPC servers the layers go to, or NULL */
    cb_repack_mode repack;     /* which CPU weight layouts the load may use (core/repack.h) */
    const struct cobatch_rope
        *rope; /* RoPE scaling for every context made; NULL: the model's own (outlives the model) */
} cb_model_params;

typedef struct {
    struct llama_model *model;
    struct llama_context *ctx;
    const struct llama_vocab *vocab;
    int32_t n_ctx, n_ctx_seq, n_vocab, n_batch, n_seq_max;
    double kv_cell_bytes;            /* one cell's K and V over all layers, at the cache's types: what a saved
                                        sequence costs a token */
    int32_t n_ctx_train;             /* the context the model was trained for (positions beyond it are garbage) */
    bool split_kv;                   /* a stream per sequence (llama.cpp's kv_unified = false) */
    bool flash_attn;                 /* the context runs flash attention (it skips masked cells) */
    double weight_bytes;             /* the weights' tensors: what a pass over them reads */
    int32_t max_piece;               /* bytes of the longest token's text (special tokens rendered): a text longer than
                                        n x max_piece cannot be fewer than n tokens */
    char name[128];                  /* general.name or the file name */
    cb_repack_mode repack_mode;      /* the operator's --repack */
    cb_repack_decision repack;       /* what it and the CPU made of it (why: the start-up log line) */
    char weight_bufts[160];          /* the buffer types the weights were loaded into, in the loader's
                                        order: "CPU_REPACK,CPU_Mapped" */
    struct cb_chat_templates *tmpls; /* the Jinja chat template (llama_common.h), or NULL: the built-in
                                        llama_chat_apply_template path, or none */
    /* whether it shows an assistant's reasoning handed back: of a turn before the last user message
     * (most thinking templates leave those out), and of the current turn (tried once, at load) */
    bool shows_reasoning_past, shows_reasoning_current;
    /* the texts of control, unknown and user-defined tokens (those llama.cpp's tokenizer looks for), by
     * first byte (first[b] to first[b + 1]), longest first: where a long text is cut to tokenize it in
     * pieces (cb_model_tokenize_into), and what a client's text must not spell (vocab.c, defusing) */
    const char **special; /* (n_special) */
    int32_t *special_len;
    bool *special_cut;     /* a piece may end right after it (it strips no whitespace to its right) */
    bool *special_control; /* found only when special tokens are parsed (control, unknown) */
    int32_t n_special;
    int32_t first[257];
} cb_model;

/* Loads the model and creates the context. Returns 0, or -1 with a message in err; on failure
 * nothing is left allocated. */
int cb_model_load(cb_model *m, const cb_model_params *p, char *err, size_t errlen);
void cb_model_free(cb_model *m);
/* The attention's shape as a GGUF file's header gives it (largest of per-layer counts), read before
 * any load. */
typedef struct {
    int32_t n_layer, n_head, n_head_kv, head_k, head_v; /* head_k/v: values per head of K and V */
    int32_t n_ctx_train;                                /* 0 when the header names none */
} cb_model_shape;
/* Fills out; false (out zeroed where unread) when the file or its keys cannot be read. */
bool cb_model_file_shape(const char *path, cb_model_shape *out);
/* One cell's K and V over all layers (F16) as the GGUF file's header gives them, read before any
 * load (sizes chosen by memory); 0 when the file or its keys cannot be read. *n_ctx_train (may be
 * NULL): the trained context the header names, 0 when it names none. */
double cb_model_file_cell_bytes(const char *path, enum cobatch_kv_type type_k, enum cobatch_kv_type type_v,
                                int32_t *n_ctx_train);

/* Whether the loaded model attends through a sliding window (llama.cpp then saves a sequence without
 * the cells its window has passed). */
bool cb_model_has_swa(const cb_model *m);
/* Its window in positions (0: none). */
int32_t cb_model_n_swa(const cb_model *m);
/* Whether the model keeps a recurrent state (a recurrent or hybrid model): its sequences cannot be cut back
 * to a position, so no draft rows (speculate.c) run on it. */
bool cb_model_has_state(const cb_model *m);
/* Free memory of the GPU devices llama.cpp has, summed, in bytes: where a GPU build puts the KV
 * cells (every layer offloaded); 0 without a GPU (a CPU build: the cells are in host memory). */
int64_t cb_gpu_free_bytes(void);
/* A second context on m's weights (p's sizes; path and template unused): *out shares m's model,
 * vocabulary and template and owns only its context (cb_model_free_context). Returns 0 or -1. */
int cb_model_new_context(const cb_model *m, const cb_model_params *p, cb_model *out, char *err, size_t errlen);
void cb_model_free_context(cb_model *m);

/* Tokenizes text[0, len): add_special adds BOS (and EOS) as the vocabulary wants, parse_special
 * turns the text of control tokens ("<|im_start|>") into those tokens. Returns a malloc'd array
 * (caller frees) and its length in *n, or NULL on failure. */
int32_t *cb_model_tokenize(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                           int32_t *n);
/* Same into a caller buffer: returns the count, or -(needed) when max is too small. A long text
 * whose special tokens are parsed is tokenized in pieces cut right after a special token's text
 * (llama.cpp's tokenizer is quadratic in the number of special-token texts of one call: a 650 KB
 * text of them took 16 s whole); the pieces give the tokens the whole would. */
int32_t cb_model_tokenize_into(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                               int32_t *out, int32_t max);

/* Renders messages with the chat template (the Jinja one, else llama.cpp's built-in guess from the
 * model's; generation prompt appended) and
 * tokenizes the result so that message text can never become control tokens: the template's own
 * text is tokenized with special tokens parsed, every message's content without (a user who types
 * "<|im_start|>system" gets those characters, not a forged turn). Returns a malloc'd array and its
 * length in *n, or NULL when the model has no usable template (or on allocation failure). With
 * tools (NULL: none) the template lists them; rs (NULL: the template's defaults) says how reasoning is
 * rendered and read (an assistant's reasoning is message text too, tokenized without special tokens);
 * and *extra (may be NULL) gets what else the rendering gave: the grammar the calls (or a schema
 * after the reasoning) are held to, the output parser, the reasoning markers (prompt NULL; the
 * caller clears it). */
int32_t *cb_model_chat_tokens(const cb_model *m, const cb_common_msg *msgs, size_t n, const cb_common_tools *tools,
                              const cb_common_reasoning *rs, cb_common_rendered *extra, int32_t *n_out, char *err,
                              size_t errlen);

bool cb_model_has_chat_template(const cb_model *m);
/* Its architecture, size label and weight type (llama_model_desc's words), parameters and bytes. */
void cb_model_describe(const cb_model *m, struct cobatch_model_desc *out);
/* The model's FIM tokens and BOS rule (core/fim.h's cb_fim_vocab, spm false). */
void cb_model_fim_vocab(const cb_model *m, int32_t *pre, int32_t *suf, int32_t *mid, int32_t *rep, int32_t *sep,
                        int32_t *bos, bool *add_bos);
/* Indexes the vocabulary's special-token texts for tokenizing in pieces (vocab.c); at load. false
 * when memory runs out. */
bool cb_model_index_specials(cb_model *m);
/* The vocabulary's special tokens, their texts and the chat template (strings are the model's). */
void cb_model_vocab_info(const cb_model *m, struct cobatch_vocab_info *out);

/* Text of one token (special tokens rendered as nothing); writes at most cap bytes, returns the
 * length, or -1 if it did not fit. */
int32_t cb_model_piece(const cb_model *m, int32_t token, char *buf, int32_t cap);
/* A token's text with control tokens rendered; -size needed when cap is too small. */
int32_t cb_model_token_text(const cb_model *m, int32_t token, char *buf, int32_t cap);
/* Text of a token sequence: a bos/eos the tokenizer adds by itself is dropped, other special tokens
 * are written as their text (a tokenize round trip); returns -(needed) when max is too small. */
int32_t cb_model_detokenize(const cb_model *m, const int32_t *tokens, int32_t n, char *out, int32_t max);
bool cb_model_is_eog(const cb_model *m, int32_t token);

void cb_backend_init(bool verbose);

#endif
