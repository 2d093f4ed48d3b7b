#include "synth.h"
#include "../util/util.h"
#include "model.h"

#include <ggml.h>
#include <gguf.h>
#include <llama.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const cb_synth_shape PRESETS[] = {
    {"tiny", "llama", 1024, 64, 2, 4, 2, 128, 4096, 10000.0f, 1e-5f, true},
    {"tiny-qwen2", "qwen2", 1024, 64, 2, 4, 2, 128, 4096, 1000000.0f, 1e-6f, true},
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 1536, 8192, 100000.0f, 1e-5f, true},
    {"qwen2.5-0.5b", "qwen2", 151936, 896, 24, 14, 2, 4864, 32768, 1000000.0f, 1e-6f, true},
};

const cb_synth_shape *cb_synth_preset(const char *name) {
    for (size_t i = 0; i < sizeof(PRESETS) / sizeof(PRESETS[0]); i++)
        if (!strcmp(PRESETS[i].name, name)) return &PRESETS[i];
    return NULL;
}

const char *cb_synth_preset_names(void) { return "tiny, tiny-qwen2, smollm2-135m, qwen2.5-0.5b"; }

int cb_synth_ftype(const char *name) {
    static const struct {
        const char *n;
        int t;
    } T[] = {{"f16", LLAMA_FTYPE_MOSTLY_F16},       {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
             {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0},     {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
             {"q4_k_m", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"q5_k_m", LLAMA_FTYPE_MOSTLY_Q5_K_M}};
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (!strcasecmp(T[i].n, name)) return T[i].t;
    return -1;
}

/* ---------------------------------------------------------------- vocabulary ----------------- */

typedef struct {
    char **text; /* (n) */
    float *score;
    int32_t *type;
    int32_t n, cap;
    char **set; /* open addressing, (set_cap) */
    int32_t set_cap;
} vocab;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Adds a token unless the vocabulary is full or already has it. */
static void vocab_add(vocab *v, const char *text, float score, int32_t type) {
    if (v->n >= v->cap) return;
    uint64_t h = hash_str(text) % (uint64_t)v->set_cap;
    while (v->set[h]) {
        if (!strcmp(v->set[h], text)) return;
        h = (h + 1) % (uint64_t)v->set_cap;
    }
    char *t = strdup(text);
    v->set[h] = t;
    v->text[v->n] = t;
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static const char *WORDS[] = {
    "the",   "of",   "and",   "to",      "in",     "is",    "was",    "that",     "for",   "on",     "with",  "as",
    "it",    "by",   "at",    "from",    "his",    "her",   "an",     "were",     "are",   "which",  "this",  "be",
    "or",    "had",  "not",   "but",     "first",  "one",   "their",  "its",      "new",   "after",  "who",   "they",
    "have",  "has",  "been",  "also",    "more",   "into",  "time",   "world",    "city",  "people", "year",  "years",
    "made",  "book", "books", "history", "word",   "words", "story",  "there",    "would", "about",  "when",  "what",
    "where", "how",  "can",   "will",    "all",    "some",  "many",   "other",    "over",  "such",   "Hello", "The",
    "A",     "In",   "It",    "capital", "France", "Paris", "answer", "question", "model", "token"};

#define SPM_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's word boundary */

/* Fills the vocabulary: special tokens, 256 byte tokens, "▁", single characters, common words,
 * then letter combinations with and without "▁" until n_vocab. Longer pieces score higher so the
 * SPM merge prefers them. */
static int vocab_build(vocab *v, int32_t n_vocab) {
    v->cap = n_vocab;
    v->set_cap = n_vocab * 2 + 1;
    v->text = calloc((size_t)n_vocab, sizeof(char *));
    v->score = calloc((size_t)n_vocab, sizeof(float));
    v->type = calloc((size_t)n_vocab, sizeof(int32_t));
    v->set = calloc((size_t)v->set_cap, sizeof(char *));
    if (!v->text || !v->score || !v->type || !v->set) return -1;
    vocab_add(v, "<unk>", 0, LLAMA_TOKEN_TYPE_UNKNOWN);
    vocab_add(v, "<s>", 0, LLAMA_TOKEN_TYPE_CONTROL);
    vocab_add(v, "</s>", 0, LLAMA_TOKEN_TYPE_CONTROL);
    vocab_add(v, "<|im_start|>", 0, LLAMA_TOKEN_TYPE_CONTROL);
    vocab_add(v, "<|im_end|>", 0, LLAMA_TOKEN_TYPE_CONTROL);
    /* fill-in-the-middle tokens (Qwen2.5-Coder's names), ids 5 to 10: /infill runs on such a model */
    static const char *const FIM[] = {"<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                                      "<fim_pad>",    "<repo_name>",  "<file_sep>"};
    for (int k = 0; k < 6; k++)
        vocab_add(v, FIM[k], 0, LLAMA_TOKEN_TYPE_CONTROL);
    char buf[64];
    for (int b = 0; b < 256; b++) {
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        vocab_add(v, buf, 0, LLAMA_TOKEN_TYPE_BYTE);
    }
    vocab_add(v, SPM_SPACE, -1.0f, LLAMA_TOKEN_TYPE_NORMAL);
    for (int c = 33; c < 127; c++) {
        snprintf(buf, sizeof(buf), "%c", c);
        vocab_add(v, buf, -2.0f, LLAMA_TOKEN_TYPE_NORMAL);
        snprintf(buf, sizeof(buf), SPM_SPACE "%c", c);
        vocab_add(v, buf, -1.5f, LLAMA_TOKEN_TYPE_NORMAL);
    }
    /* every piece of a common word, so SPM's pairwise merges can always reach the whole word */
    for (size_t i = 0; i < sizeof(WORDS) / sizeof(WORDS[0]); i++) {
        const char *w = WORDS[i];
        int wl = (int)strlen(w);
        for (int len = 2; len <= wl; len++) {
            snprintf(buf, sizeof(buf), SPM_SPACE "%.*s", len, w);
            vocab_add(v, buf, (float)len, LLAMA_TOKEN_TYPE_NORMAL);
            for (int at = 0; at + len <= wl; at++) {
                snprintf(buf, sizeof(buf), "%.*s", len, w + at);
                vocab_add(v, buf, (float)len - 0.5f, LLAMA_TOKEN_TYPE_NORMAL);
            }
        }
    }
    static const char L[] = "etaoinshrdlucmfwypvbgkjqxz";
    for (int len = 2; len <= 5 && v->n < n_vocab; len++) {
        int idx[5] = {0};
        for (;;) {
            for (int k = 0; k < len; k++)
                buf[k] = L[idx[k]];
            buf[len] = '\0';
            char sp[80];
            snprintf(sp, sizeof(sp), SPM_SPACE "%s", buf);
            vocab_add(v, sp, (float)len - 0.1f, LLAMA_TOKEN_TYPE_NORMAL);
            vocab_add(v, buf, (float)len - 0.6f, LLAMA_TOKEN_TYPE_NORMAL);
            if (v->n >= n_vocab) break;
            int k = len - 1;
            while (k >= 0 && ++idx[k] == 26)
                idx[k--] = 0;
            if (k < 0) break;
        }
    }
    /* pad with unused tokens if the letters ran out (only for enormous vocabularies) */
    for (int i = 0; v->n < n_vocab; i++) {
        snprintf(buf, sizeof(buf), "<unused%d>", i);
        vocab_add(v, buf, -1000.0f, LLAMA_TOKEN_TYPE_UNUSED);
    }
    return 0;
}

static void vocab_free(vocab *v) {
    for (int32_t i = 0; i < v->n; i++)
        free(v->text[i]);
    free(v->text);
    free(v->score);
    free(v->type);
    free(v->set);
}

/* ---------------------------------------------------------------- tensors -------------------- */

typedef struct {
    uint64_t s;
} rng;

static float rng_uniform(rng *r) { /* splitmix64 -> [-1, 1) */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / (double)(1ULL << 52)) - 1.0f;
}

/* A 2-D (or 1-D when ne1 == 1) tensor filled with small random values (f16), or ones (f32 norms),
 * or small random f32 (biases). Its data is malloc'd and freed by the caller through t->data. */
static struct ggml_tensor *make(struct ggml_context *ctx, const char *name, int64_t ne0, int64_t ne1, int kind,
                                rng *r) {
    enum ggml_type type = kind == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor *t = ne1 > 1 ? ggml_new_tensor_2d(ctx, type, ne0, ne1) : ggml_new_tensor_1d(ctx, type, ne0);
    ggml_set_name(t, name);
    size_t n = (size_t)(ne0 * ne1);
    t->data = malloc(ggml_nbytes(t));
    if (!t->data) return NULL;
    const float scale = 0.035f; /* uniform in +-scale: std 0.02, like a trained model's init */
    if (kind == 0) {
        ggml_fp16_t *d = t->data;
        for (size_t i = 0; i < n; i++)
            d[i] = ggml_fp32_to_fp16(scale * rng_uniform(r));
    } else {
        float *d = t->data;
        for (size_t i = 0; i < n; i++)
            d[i] = kind == 1 ? 1.0f : 0.01f * rng_uniform(r);
    }
    return t;
}

static int write_f16(const cb_synth_shape *s, uint64_t seed, const char *path, char *err, size_t errlen) {
    int rc = -1;
    vocab v = {0};
    struct gguf_context *g = gguf_init_empty();
    int max_tensors = 4 + s->n_layer * 16;
    struct ggml_init_params ip = {(size_t)max_tensors * ggml_tensor_overhead() + 4096, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    if (!g || !ctx || vocab_build(&v, s->n_vocab) != 0) {
        cb_set_err(err, errlen, "out of memory");
        goto done;
    }
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", s->arch, suffix), key)
    gguf_set_val_str(g, "general.architecture", s->arch);
    snprintf(key, sizeof(key), "synthetic %s (random weights)", s->name);
    gguf_set_val_str(g, "general.name", key);
    gguf_set_val_u32(g, KEY("context_length"), (uint32_t)s->n_ctx_train);
    gguf_set_val_u32(g, KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_set_val_u32(g, KEY("block_count"), (uint32_t)s->n_layer);
    gguf_set_val_u32(g, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_set_val_u32(g, KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_set_val_u32(g, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_set_val_f32(g, KEY("attention.layer_norm_rms_epsilon"), s->rms_eps);
    gguf_set_val_f32(g, KEY("rope.freq_base"), s->rope_theta);
    gguf_set_val_u32(g, "general.file_type", LLAMA_FTYPE_MOSTLY_F16);
    gguf_set_val_str(g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", (const char **)v.text, (size_t)v.n);
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v.score, (size_t)v.n);
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, (size_t)v.n);
    gguf_set_val_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", 1);
    gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", 2);
    gguf_set_val_u32(g, "tokenizer.ggml.eot_token_id", 4);
    static const char *const FIM_KEYS[] = {"fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"};
    for (int k = 0; k < 6; k++) {
        char fk[64];
        snprintf(fk, sizeof(fk), "tokenizer.ggml.%s_token_id", FIM_KEYS[k]);
        gguf_set_val_u32(g, fk, (uint32_t)(5 + k));
    }
    gguf_set_val_bool(g, "tokenizer.ggml.add_bos_token", true);
    gguf_set_val_str(g, "tokenizer.chat_template",
                     "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");

    rng r = {seed};
    int64_t hd = s->n_embd / s->n_head;
    struct ggml_tensor *ts[4 + 16 * 64];
    int nt = 0;
    ts[nt++] = make(ctx, "token_embd.weight", s->n_embd, s->n_vocab, 0, &r);
    ts[nt++] = make(ctx, "output_norm.weight", s->n_embd, 1, 1, &r);
    if (!s->tied) ts[nt++] = make(ctx, "output.weight", s->n_embd, s->n_vocab, 0, &r);
    for (int l = 0; l < s->n_layer && l < 64; l++) {
        char n[64];
#define T(name, a, b, kind) (snprintf(n, sizeof(n), "blk.%d.%s", l, name), ts[nt++] = make(ctx, n, a, b, kind, &r))
        T("attn_norm.weight", s->n_embd, 1, 1);
        T("attn_q.weight", s->n_embd, hd * s->n_head, 0);
        T("attn_k.weight", s->n_embd, hd * s->n_head_kv, 0);
        T("attn_v.weight", s->n_embd, hd * s->n_head_kv, 0);
        T("attn_output.weight", hd * s->n_head, s->n_embd, 0);
        if (!strcmp(s->arch, "qwen2")) {
            T("attn_q.bias", hd * s->n_head, 1, 2);
            T("attn_k.bias", hd * s->n_head_kv, 1, 2);
            T("attn_v.bias", hd * s->n_head_kv, 1, 2);
        }
        T("ffn_norm.weight", s->n_embd, 1, 1);
        T("ffn_gate.weight", s->n_embd, s->n_ff, 0);
        T("ffn_up.weight", s->n_embd, s->n_ff, 0);
        T("ffn_down.weight", s->n_ff, s->n_embd, 0);
#undef T
    }
    for (int i = 0; i < nt; i++) {
        if (!ts[i] || !ts[i]->data) {
            cb_set_err(err, errlen, "out of memory for the weights");
            goto done_tensors;
        }
        gguf_add_tensor(g, ts[i]);
    }
    if (!gguf_write_to_file(g, path, false)) {
        cb_set_err(err, errlen, "cannot write '%s'", path);
        goto done_tensors;
    }
    rc = 0;
done_tensors:
    for (int i = 0; i < nt; i++)
        if (ts[i]) free(ts[i]->data);
#undef KEY
done:
    if (ctx) ggml_free(ctx);
    if (g) gguf_free(g);
    vocab_free(&v);
    return rc;
}

int cb_synth_write(const cb_synth_shape *s, int ftype, uint64_t seed, int n_threads, const char *path, char *err,
                   size_t errlen) {
    if (s->n_layer > 64) {
        cb_set_err(err, errlen, "at most 64 layers");
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.f16.tmp", path);
    if (write_f16(s, seed, tmp, err, errlen) != 0) {
        unlink(tmp);
        return -1;
    }
    cb_backend_init(false); /* quiet: llama.cpp's quantize log is long */
    struct llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.ftype = (enum llama_ftype)ftype;
    qp.nthread = n_threads;
    uint32_t q = llama_model_quantize(tmp, path, &qp);
    unlink(tmp);
    if (q != 0) {
        cb_set_err(err, errlen, "llama_model_quantize failed (%u)", q);
        return -1;
    }
    return 0;
}
