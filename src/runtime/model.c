#include "model.h"
#include "cpu.h"
#include "llama_common.h"
#include "rpc.h"
#include "../util/util.h"

#include <gguf.h>
#include <llama.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* llama.cpp's log: errors (everything with --verbose) to stderr; every line also to cpu.c, which
 * reads the weights' buffer types off a load's lines. */
static bool backend_verbose;
static void on_log(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    cb_cpu_log_line(text);
    if (backend_verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static pthread_once_t backend_once = PTHREAD_ONCE_INIT;
static void backend_init_once(void) {
    llama_log_set(on_log, NULL);
    llama_backend_init();
}

void cb_backend_init(bool verbose) {
    backend_verbose = verbose;
    pthread_once(&backend_once, backend_init_once);
}

/* llama.cpp's type for a KV cache type of ours. */
static enum ggml_type kv_ggml_type(enum cobatch_kv_type t) {
    static const enum ggml_type types[COBATCH_KV_N_TYPES] = {GGML_TYPE_F16,    GGML_TYPE_F32,  GGML_TYPE_BF16,
                                                             GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                                                             GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};
    return t >= 0 && t < COBATCH_KV_N_TYPES ? types[t] : GGML_TYPE_F16;
}

/* Bytes one value takes in a cache of this type (a block's bytes over its values). */
static double kv_value_bytes(enum cobatch_kv_type t) {
    enum ggml_type g = kv_ggml_type(t);
    return (double)ggml_type_size(g) / (double)ggml_blck_size(g);
}

static struct llama_context *new_context(struct llama_model *model, const cb_model_params *p) {
    struct llama_context_params cp = llama_context_default_params();
    int threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    cp.n_ctx = (uint32_t)p->n_ctx;
    cp.n_batch = cp.n_ubatch = (uint32_t)p->n_batch;
    cp.n_seq_max = (uint32_t)p->n_seq_max;
    /* One logits row per running request at most: without this the buffer is n_batch x n_vocab
     * floats (2.5 GB for a 4096-token step of a 152k vocabulary). */
    cp.n_outputs_max = (uint32_t)(p->n_outputs_max > 0 ? p->n_outputs_max : p->n_seq_max);
    cp.n_threads = cp.n_threads_batch = threads;
    cp.kv_unified = !p->split_kv;
    cp.swa_full = !p->swa_window_only;
    cp.flash_attn_type = p->flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = kv_ggml_type(p->type_k);
    cp.type_v = kv_ggml_type(p->type_v);
    cp.no_perf = true;
    const struct cobatch_rope *r = p->rope;
    if (!r) return llama_init_from_model(model, cp);
    if (r->scaling != COBATCH_ROPE_MODEL)
        cp.rope_scaling_type = r->scaling == COBATCH_ROPE_YARN     ? LLAMA_ROPE_SCALING_TYPE_YARN
                               : r->scaling == COBATCH_ROPE_LINEAR ? LLAMA_ROPE_SCALING_TYPE_LINEAR
                                                                   : LLAMA_ROPE_SCALING_TYPE_NONE;
    if (r->freq_base > 0) cp.rope_freq_base = r->freq_base;
    if (r->freq_scale > 0)
        cp.rope_freq_scale = r->freq_scale;
    else if (r->scale > 0)
        cp.rope_freq_scale = 1.0f / r->scale;
    if (r->yarn_orig_ctx > 0) cp.yarn_orig_ctx = (uint32_t)r->yarn_orig_ctx;
    if (r->yarn_ext_factor >= 0) cp.yarn_ext_factor = r->yarn_ext_factor;
    if (r->yarn_attn_factor >= 0) cp.yarn_attn_factor = r->yarn_attn_factor;
    if (r->yarn_beta_slow >= 0) cp.yarn_beta_slow = r->yarn_beta_slow;
    if (r->yarn_beta_fast >= 0) cp.yarn_beta_fast = r->yarn_beta_fast;
    return llama_init_from_model(model, cp);
}

int cb_model_new_context(const cb_model *m, const cb_model_params *p, cb_model *out, char *err, size_t errlen) {
    *out = *m;
    out->ctx = new_context(m->model, p);
    if (!out->ctx) {
        memset(out, 0, sizeof(*out));
        cb_set_err(err, errlen, "failed to create a second context (n_ctx %d, n_seq_max %d)", p->n_ctx, p->n_seq_max);
        return -1;
    }
    out->tmpls = NULL; /* the model's: not this one's to free */
    out->n_ctx = (int32_t)llama_n_ctx(out->ctx);
    out->n_ctx_seq = (int32_t)llama_n_ctx_seq(out->ctx);
    out->n_batch = (int32_t)llama_n_batch(out->ctx);
    out->n_seq_max = (int32_t)llama_n_seq_max(out->ctx);
    out->split_kv = p->split_kv;
    return 0;
}

void cb_model_free_context(cb_model *m) {
    if (m->ctx) llama_free(m->ctx);
    memset(m, 0, sizeof(*m));
}

/* One cell's K and V over all layers: what the loaded model and its file's header both say. */
static double cell_bytes(double layers, double heads_kv, double k, double v, enum cobatch_kv_type tk,
                         enum cobatch_kv_type tv) {
    return layers * heads_kv * (k * kv_value_bytes(tk) + v * kv_value_bytes(tv));
}

/* An unsigned value of the architecture's key, the largest element of an array (per-layer counts). */
static double gguf_arch_u(const struct gguf_context *g, const char *arch, const char *key) {
    char name[128];
    snprintf(name, sizeof(name), "%s.%s", arch, key);
    int64_t id = gguf_find_key(g, name);
    if (id < 0) return 0;
    enum gguf_type t = gguf_get_kv_type(g, id);
    if (t == GGUF_TYPE_UINT32) return gguf_get_val_u32(g, id);
    if (t == GGUF_TYPE_INT32) return gguf_get_val_i32(g, id);
    if (t == GGUF_TYPE_UINT64) return (double)gguf_get_val_u64(g, id);
    if (t == GGUF_TYPE_ARRAY &&
        (gguf_get_arr_type(g, id) == GGUF_TYPE_UINT32 || gguf_get_arr_type(g, id) == GGUF_TYPE_INT32)) {
        const int32_t *v = gguf_get_arr_data(g, id); /* same size either way; counts are small */
        double most = 0;
        for (size_t i = 0; i < gguf_get_arr_n(g, id); i++)
            if (v[i] > most) most = v[i];
        return most;
    }
    return 0;
}

bool cb_model_file_shape(const char *path, cb_model_shape *out) {
    memset(out, 0, sizeof(*out));
    if (!path) return false;
    struct gguf_init_params gp = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(path, gp);
    if (!g) return false;
    int64_t a = gguf_find_key(g, "general.architecture");
    if (a >= 0 && gguf_get_kv_type(g, a) == GGUF_TYPE_STRING) {
        const char *arch = gguf_get_val_str(g, a);
        double layers = gguf_arch_u(g, arch, "block_count"), embd = gguf_arch_u(g, arch, "embedding_length");
        double heads = gguf_arch_u(g, arch, "attention.head_count");
        double heads_kv = gguf_arch_u(g, arch, "attention.head_count_kv");
        double k = gguf_arch_u(g, arch, "attention.key_length"), v = gguf_arch_u(g, arch, "attention.value_length");
        if (heads_kv <= 0) heads_kv = heads;
        if (k <= 0 && heads > 0) k = embd / heads;
        if (v <= 0) v = k;
        double ctx = gguf_arch_u(g, arch, "context_length");
        if (layers < INT32_MAX && heads < INT32_MAX && heads_kv < INT32_MAX && k < INT32_MAX && v < INT32_MAX)
            *out = (cb_model_shape){.n_layer = (int32_t)layers,
                                    .n_head = (int32_t)heads,
                                    .n_head_kv = (int32_t)heads_kv,
                                    .head_k = (int32_t)k,
                                    .head_v = (int32_t)v,
                                    .n_ctx_train = ctx > 0 && ctx < INT32_MAX ? (int32_t)ctx : 0};
    }
    gguf_free(g);
    return out->n_layer > 0 && out->n_head > 0 && out->head_k > 0;
}

double cb_model_file_cell_bytes(const char *path, enum cobatch_kv_type type_k, enum cobatch_kv_type type_v,
                                int32_t *n_ctx_train) {
    cb_model_shape s;
    cb_model_file_shape(path, &s);
    if (n_ctx_train) *n_ctx_train = s.n_ctx_train;
    return cell_bytes(s.n_layer, s.n_head_kv, s.head_k, s.head_v, type_k, type_v);
}

int32_t cb_model_n_swa(const cb_model *m) { return m->model ? llama_model_n_swa(m->model) : 0; }

bool cb_model_has_swa(const cb_model *m) { return cb_model_n_swa(m) > 0; }

bool cb_model_has_state(const cb_model *m) {
    return m->model && (llama_model_is_recurrent(m->model) || llama_model_is_hybrid(m->model));
}

int64_t cb_gpu_free_bytes(void) {
    int64_t sum = 0;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) != GGML_BACKEND_DEVICE_TYPE_GPU) continue;
        size_t free_b = 0, total_b = 0;
        ggml_backend_dev_memory(d, &free_b, &total_b);
        sum += (int64_t)free_b;
    }
    return sum;
}

/* A quantized cache stores a head's values in blocks (32 values): the model's heads must fill them
 * (llama.cpp refuses otherwise, with flash attention; without it a quantized K is read whole). */
static bool kv_types_fit(const struct llama_model *model, const cb_model_params *p, char *err, size_t errlen) {
    int32_t n_head = llama_model_n_head(model), head = n_head > 0 ? llama_model_n_embd(model) / n_head : 0;
    enum cobatch_kv_type types[2] = {p->type_k, p->type_v};
    for (int i = 0; i < 2 && p->flash_attn && head > 0; i++) {
        int64_t blck = ggml_blck_size(kv_ggml_type(types[i]));
        if (head % blck == 0) continue;
        cb_set_err(err, errlen, "%s %s: the model's attention heads of %d values do not fill its blocks of %lld",
                   i ? "cache_type_v" : "cache_type_k", ggml_type_name(kv_ggml_type(types[i])), (int)head,
                   (long long)blck);
        return false;
    }
    return true;
}

/* Whether t shows an assistant's reasoning handed back: in a turn before the last user message
 * (earlier), or after it (the chat's last message). A template that raises for such a chat shows none. */
static bool shows_reasoning(const struct cb_chat_templates *t, bool earlier) {
    static const char probe[] = "cobatch-probe-reasoning-7f3a";
    cb_common_msg msgs[3] = {{.role = "user", .content = "test"},
                             {.role = "assistant", .content = "answer", .reasoning = probe},
                             {.role = "user", .content = "again"}};
    cb_common_rendered r;
    char err[64];
    if (cb_common_render(t, msgs, earlier ? 3 : 2, NULL, NULL, NULL, &r, err, sizeof err) != 0) return false;
    bool shown = r.prompt && strstr(r.prompt, probe);
    cb_common_rendered_clear(&r);
    return shown;
}

int cb_model_load(cb_model *m, const cb_model_params *p, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    if (!p->path || !p->path[0]) {
        cb_set_err(err, errlen, "no model file given");
        return -1;
    }
    if (access(p->path, R_OK) != 0) {
        cb_set_err(err, errlen, "cannot read model file '%s'", p->path);
        return -1;
    }
    cb_backend_init(p->verbose);
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999; /* everything on the GPU when a CUDA build has one; no-op on CPU */
    ggml_backend_dev_t devs[CB_RPC_MAX_DEVICES];
    if (p->rpc) { /* every layer on the RPC servers (and this host's GPUs) */
        if (cb_rpc_devices(p->rpc, devs, CB_RPC_MAX_DEVICES, err, errlen) < 0) return -1;
        mp.devices = devs;
    }
    /* the weights' layouts: the decision, applied to what ggml offers, and the buffers the load made */
    m->repack_mode = p->repack;
    m->repack = cb_repack_decide(cb_cpu_features_probe(), p->repack);
    cb_cpu_load_lock();
    mp.use_extra_bufts = cb_cpu_bufts_apply(&m->repack);
    cb_cpu_capture_begin();
    m->model = llama_model_load_from_file(p->path, mp);
    cb_cpu_capture_end(m->weight_bufts, sizeof(m->weight_bufts));
    cb_cpu_load_unlock();
    if (!m->model) {
        cb_set_err(err, errlen, "failed to load model '%s' (not a valid GGUF model?)", p->path);
        return -1;
    }
    if (!kv_types_fit(m->model, p, err, errlen)) {
        llama_model_free(m->model);
        m->model = NULL;
        return -1;
    }
    /* read before the context: a YaRN context rewrites the model's trained length to the scaled one */
    m->n_ctx_train = llama_model_n_ctx_train(m->model);
    m->ctx = new_context(m->model, p);
    if (!m->ctx) {
        cb_set_err(err, errlen,
                   "failed to create a context (n_ctx %d, n_batch %d, n_seq_max %d, KV cache %s/%s; --verbose shows "
                   "llama.cpp's reason)",
                   p->n_ctx, p->n_batch, p->n_seq_max, ggml_type_name(kv_ggml_type(p->type_k)),
                   ggml_type_name(kv_ggml_type(p->type_v)));
        llama_model_free(m->model);
        m->model = NULL;
        return -1;
    }
    m->vocab = llama_model_get_vocab(m->model);
    char terr[256] = "";
    m->tmpls = cb_common_templates_new(m->model, p->chat_template, terr, sizeof(terr));
    if (!m->tmpls && terr[0]) {
        if (p->chat_template) { /* the operator's template must work */
            cb_set_err(err, errlen, "--chat-template: %s", terr);
            cb_model_free(m);
            return -1;
        } /* the model's own that common cannot parse: the built-in path guesses its format */
        fprintf(stderr, "cobatch: the model's chat template: %s; using llama.cpp's built-in formats\n", terr);
    }
    m->shows_reasoning_past = m->tmpls && shows_reasoning(m->tmpls, true);
    m->shows_reasoning_current = m->tmpls && shows_reasoning(m->tmpls, false);
    m->n_ctx = (int32_t)llama_n_ctx(m->ctx);
    m->n_ctx_seq = (int32_t)llama_n_ctx_seq(m->ctx);
    m->n_batch = (int32_t)llama_n_batch(m->ctx);
    m->n_seq_max = (int32_t)llama_n_seq_max(m->ctx);
    m->split_kv = p->split_kv;
    m->flash_attn = p->flash_attn;
    m->weight_bytes = (double)llama_model_size(m->model);
    m->n_vocab = llama_vocab_n_tokens(m->vocab);
    int32_t n_head = llama_model_n_head(m->model), n_head_kv = llama_model_n_head_kv(m->model);
    cb_model_shape sh; /* the file's heads (their key and value widths, when it gives them: Gemma's are
                          wider than n_embd / n_head), else n_embd / n_head */
    if (cb_model_file_shape(p->path, &sh))
        m->kv_cell_bytes = cell_bytes(sh.n_layer, sh.n_head_kv, sh.head_k, sh.head_v, p->type_k, p->type_v);
    else if (n_head > 0)
        m->kv_cell_bytes = cell_bytes(llama_model_n_layer(m->model), n_head_kv, llama_model_n_embd(m->model) / n_head,
                                      llama_model_n_embd(m->model) / n_head, p->type_k, p->type_v);
    char piece[1024];
    for (int32_t t = 0; t < m->n_vocab; t++) { /* O(vocabulary), once: tens of ms */
        int32_t k = llama_token_to_piece(m->vocab, t, piece, (int32_t)sizeof(piece), 0, true);
        k = k < 0 ? -k : k;
        if (k > m->max_piece) m->max_piece = k;
    }
    if (m->max_piece < 1) m->max_piece = 1;
    if (!cb_model_index_specials(m)) {
        cb_set_err(err, errlen, "out of memory");
        cb_model_free(m);
        return -1;
    }
    if (llama_model_meta_val_str(m->model, "general.name", m->name, sizeof(m->name)) < 0) {
        const char *base = strrchr(p->path, '/');
        snprintf(m->name, sizeof(m->name), "%s", base ? base + 1 : p->path);
    }
    return 0;
}

void cb_model_free(cb_model *m) {
    cb_common_templates_free(m->tmpls);
    free((void *)m->special);
    free(m->special_len);
    free(m->special_cut);
    free(m->special_control);
    if (m->ctx) llama_free(m->ctx);
    if (m->model) llama_model_free(m->model);
    memset(m, 0, sizeof(*m));
}

void cb_model_describe(const cb_model *m, struct cobatch_model_desc *out) {
    memset(out, 0, sizeof(*out));
    char desc[128] = "", arch[32] = "", size[16] = "", quant[24] = "";
    llama_model_desc(m->model, desc, sizeof(desc)); /* "<arch> <size> <type>" */
    if (sscanf(desc, "%31s %15s %23s", arch, size, quant) < 3) snprintf(quant, sizeof(quant), "unknown");
    if (llama_model_meta_val_str(m->model, "general.architecture", arch, sizeof(arch)) < 0 && !arch[0])
        snprintf(arch, sizeof(arch), "unknown");
    snprintf(out->arch, sizeof(out->arch), "%s", arch);
    double n = (double)llama_model_n_params(m->model); /* Ollama's label: "134.52M", "7.2B" */
    if (n >= 1e9)
        snprintf(out->size_label, sizeof(out->size_label), "%.1fB", n / 1e9);
    else
        snprintf(out->size_label, sizeof(out->size_label), "%.2fM", n / 1e6);
    (void)size;
    snprintf(out->quant, sizeof(out->quant), "%s", quant);
    out->n_params = (int64_t)llama_model_n_params(m->model);
    out->bytes = (int64_t)llama_model_size(m->model);
}
