#include "model.h"
#include "cpu.h"
#include "llama_common.h"
#include "../util/util.h"

#include <gguf.h>
#include <llama.h>
#ifdef COBATCH_HAVE_RPC
#include <ggml-rpc.h>
#endif
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

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

static bool index_specials(cb_model *m);

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
    cp.flash_attn_type = p->flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
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

/* ---------------------------------------------------------------- RPC servers --------------- */

#define CB_MAX_DEVICES 64

#ifdef COBATCH_HAVE_RPC
/* Whether a TCP connection to host:port opens within 5 s (IPv4, as ggml resolves it): 1 (and the
 * address it reached), 0, or -1 when the host has no IPv4 address. ggml's RPC client aborts the
 * process on a server it cannot reach, so cobatch asks first and says which one. A listener that is
 * not a ggml-rpc-server still passes this and aborts at ggml's handshake. */
static int reachable(const char *host, const char *port, struct sockaddr_in *addr) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL; /* as ggml */
    if (getaddrinfo(host, port, &hints, &ai) != 0) return -1;
    bool ok = false;
    for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int e = 0;
            socklen_t el = sizeof(e);
            ok = poll(&pf, 1, 5000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0;
        }
        if (ok) memcpy(addr, a->ai_addr, sizeof(*addr));
        close(fd);
    }
    freeaddrinfo(ai);
    return ok ? 1 : 0;
}
#endif

/* The devices the model's layers go to (llama_model_params.devices): every device of each RPC server
 * in the list, in its order (llama.cpp splits the layers by their free memory), then this host's
 * GPUs. NULL-terminated. Returns the count, or -1 with err set. */
static int rpc_devices(const char *list, ggml_backend_dev_t *devs, int max, char *err, size_t errlen) {
#ifndef COBATCH_HAVE_RPC
    (void)list, (void)devs, (void)max;
    cb_set_err(err, errlen, "--rpc: this build has no RPC backend (build with cmake -DCOBATCH_RPC=ON)");
    return -1;
#else
    int n = 0, n_ep = 0;
    struct sockaddr_in addrs[CB_MAX_DEVICES];
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char ep[256];
        if (len == 0 || len >= sizeof(ep)) {
            cb_set_err(err, errlen, "--rpc: expected HOST:PORT,... (got '%s')", list);
            return -1;
        }
        memcpy(ep, p, len);
        ep[len] = 0;
        char *colon = strrchr(ep, ':');
        char *tail = NULL;
        long port = colon ? strtol(colon + 1, &tail, 10) : 0;
        if (!colon || colon == ep || !colon[1] || *tail || port < 1 || port > 65535) {
            cb_set_err(err, errlen, "--rpc: '%s' is not HOST:PORT", ep);
            return -1;
        }
        if (strchr(ep, '[') || memchr(ep, ':', (size_t)(colon - ep))) {
            cb_set_err(err, errlen, "--rpc: '%s': ggml's RPC backend takes IPv4 addresses and host names, not IPv6",
                       ep);
            return -1;
        }
        *colon = 0;
        int up = reachable(ep, colon + 1, &addrs[n_ep]);
        *colon = ':';
        if (up <= 0) {
            cb_set_err(err, errlen,
                       up < 0 ? "--rpc: %s has no IPv4 address (ggml's RPC backend needs one)"
                              : "--rpc: no RPC server answers at %s",
                       ep);
            return -1;
        }
        for (int k = 0; k < n_ep; k++) /* listed twice, or under two names: it would get layers twice */
            if (addrs[k].sin_addr.s_addr == addrs[n_ep].sin_addr.s_addr && addrs[k].sin_port == addrs[n_ep].sin_port) {
                cb_set_err(err, errlen, "--rpc: %s is a server already listed (same address and port)", ep);
                return -1;
            }
        if (++n_ep == CB_MAX_DEVICES) {
            cb_set_err(err, errlen, "--rpc: at most %d servers", CB_MAX_DEVICES - 1);
            return -1;
        }
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(ep);
        if (!reg || ggml_backend_reg_dev_count(reg) == 0) {
            cb_set_err(err, errlen, "--rpc: the RPC server at %s offers no device", ep);
            return -1;
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg) && n < max - 1; i++)
            devs[n++] = ggml_backend_reg_dev_get(reg, i);
        p = end ? end + 1 : p + len;
    }
    for (size_t i = 0; i < ggml_backend_dev_count() && n < max - 1; i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) devs[n++] = d;
    }
    devs[n] = NULL;
    return n;
#endif
}

/* One cell's K and V over all layers, F16: what the loaded model and its file's header both say. */
static double f16_cell_bytes(double layers, double heads_kv, double k, double v) {
    return 2.0 * layers * heads_kv * (k + v);
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

double cb_model_file_cell_bytes(const char *path, int32_t *n_ctx_train) {
    if (n_ctx_train) *n_ctx_train = 0;
    if (!path) return 0;
    struct gguf_init_params gp = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *g = gguf_init_from_file(path, gp);
    if (!g) return 0;
    double bytes = 0;
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
        bytes = f16_cell_bytes(layers, heads_kv, k, v);
        double ctx = gguf_arch_u(g, arch, "context_length");
        if (n_ctx_train && ctx > 0 && ctx < INT32_MAX) *n_ctx_train = (int32_t)ctx;
    }
    gguf_free(g);
    return bytes;
}

bool cb_model_has_swa(const cb_model *m) { return m->model && llama_model_n_swa(m->model) > 0; }

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
    ggml_backend_dev_t devs[CB_MAX_DEVICES];
    if (p->rpc) { /* every layer on the RPC servers (and this host's GPUs) */
        if (rpc_devices(p->rpc, devs, CB_MAX_DEVICES, err, errlen) < 0) return -1;
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
    m->ctx = new_context(m->model, p);
    if (!m->ctx) {
        cb_set_err(err, errlen, "failed to create a context (n_ctx %d, n_batch %d, n_seq_max %d)", p->n_ctx, p->n_batch,
                   p->n_seq_max);
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
    m->n_ctx = (int32_t)llama_n_ctx(m->ctx);
    m->n_ctx_seq = (int32_t)llama_n_ctx_seq(m->ctx);
    m->n_ctx_train = llama_model_n_ctx_train(m->model);
    m->n_batch = (int32_t)llama_n_batch(m->ctx);
    m->n_seq_max = (int32_t)llama_n_seq_max(m->ctx);
    m->split_kv = p->split_kv;
    m->n_vocab = llama_vocab_n_tokens(m->vocab);
    int32_t n_head = llama_model_n_head(m->model), n_head_kv = llama_model_n_head_kv(m->model);
    if (n_head > 0) { /* K and V rows of n_embd / n_head x n_head_kv values, every layer */
        int32_t head = llama_model_n_embd(m->model) / n_head;
        m->kv_cell_bytes = f16_cell_bytes(llama_model_n_layer(m->model), n_head_kv, head, head);
    }
    char piece[1024];
    for (int32_t t = 0; t < m->n_vocab; t++) { /* O(vocabulary), once: tens of ms */
        int32_t k = llama_token_to_piece(m->vocab, t, piece, (int32_t)sizeof(piece), 0, true);
        k = k < 0 ? -k : k;
        if (k > m->max_piece) m->max_piece = k;
    }
    if (m->max_piece < 1) m->max_piece = 1;
    if (!index_specials(m)) {
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
    if (m->ctx) llama_free(m->ctx);
    if (m->model) llama_model_free(m->model);
    memset(m, 0, sizeof(*m));
}

/* Texts longer than this with special tokens parsed are tokenized in pieces of at most
 * CB_TOKENIZE_SPECIALS special-token texts. */
#define CB_TOKENIZE_PIECE_BYTES 16384
#define CB_TOKENIZE_SPECIALS 64

/* Where the piece of text[start, len) ends: right after its CB_TOKENIZE_SPECIALS-th special-token
 * text that may end a piece (leftmost, longest matches), or at len. */
static size_t piece_end(const cb_model *m, const char *text, size_t start, size_t len) {
    int32_t seen = 0;
    for (size_t i = start; i < len;) {
        unsigned char b = (unsigned char)text[i];
        int32_t hit = -1;
        for (int32_t k = m->first[b]; k < m->first[b + 1] && hit < 0; k++)
            if ((size_t)m->special_len[k] <= len - i && !memcmp(text + i, m->special[k], (size_t)m->special_len[k]))
                hit = k;
        if (hit < 0) {
            i++;
            continue;
        }
        i += (size_t)m->special_len[hit];
        if (m->special_cut[hit] && ++seen == CB_TOKENIZE_SPECIALS) return i;
    }
    return len;
}

int32_t cb_model_tokenize_into(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                               int32_t *out, int32_t max) {
    if (len > INT32_MAX / 2) return INT32_MIN;
    bool pieces = parse_special && len > CB_TOKENIZE_PIECE_BYTES && m->special &&
                  !(add_special && llama_vocab_get_add_eos(m->vocab)); /* an added eos belongs to the last piece */
    if (!pieces) return llama_tokenize(m->vocab, text, (int32_t)len, out, max, add_special, parse_special);
    int32_t n = 0;
    bool short_of_room = false;
    for (size_t start = 0; start < len;) {
        size_t end = piece_end(m, text, start, len);
        int32_t k = llama_tokenize(m->vocab, text + start, (int32_t)(end - start), short_of_room ? NULL : out + n,
                                   short_of_room ? 0 : max - n, add_special && start == 0, true);
        if (k == INT32_MIN) return INT32_MIN;
        if (k < 0) { /* counted, not written: from here on only the size needed */
            short_of_room = true;
            k = -k;
        }
        if (n > INT32_MAX - k) return INT32_MIN;
        n += k;
        start = end;
    }
    return short_of_room ? -n : n;
}

static int by_first_then_longest(const void *a, const void *b, void *arg) {
    const cb_model *m = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    unsigned char fx = (unsigned char)m->special[x][0], fy = (unsigned char)m->special[y][0];
    if (fx != fy) return fx < fy ? -1 : 1;
    return m->special_len[y] - m->special_len[x];
}

/* The special-token texts, indexed for piece_end. Returns false when out of memory. */
static bool index_specials(cb_model *m) {
    int32_t n = 0;
    for (int32_t t = 0; t < m->n_vocab; t++) {
        enum llama_token_attr a = llama_vocab_get_attr(m->vocab, t);
        const char *s = llama_vocab_get_text(m->vocab, t);
        n += (a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED)) && s && s[0];
    }
    if (n == 0) return true;
    const char **text = malloc(sizeof(char *) * (size_t)n);
    int32_t *len = malloc(sizeof(int32_t) * (size_t)n), *ord = malloc(sizeof(int32_t) * (size_t)n);
    bool *cut = malloc(sizeof(bool) * (size_t)n), *cut2 = malloc(sizeof(bool) * (size_t)n);
    const char **text2 = malloc(sizeof(char *) * (size_t)n);
    int32_t *len2 = malloc(sizeof(int32_t) * (size_t)n);
    bool ok = text && len && ord && cut && cut2 && text2 && len2;
    for (int32_t t = 0, k = 0; ok && t < m->n_vocab; t++) {
        enum llama_token_attr a = llama_vocab_get_attr(m->vocab, t);
        const char *s = llama_vocab_get_text(m->vocab, t);
        if (!((a & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED)) && s && s[0])) continue;
        text[k] = s;
        len[k] = (int32_t)strlen(s);
        cut[k] = !(a & LLAMA_TOKEN_ATTR_RSTRIP);
        ord[k] = k;
        k++;
    }
    if (ok) {
        m->special = text;
        m->special_len = len;
        qsort_r(ord, (size_t)n, sizeof(int32_t), by_first_then_longest, m);
        for (int32_t i = 0; i < n; i++) {
            text2[i] = text[ord[i]];
            len2[i] = len[ord[i]];
            cut2[i] = cut[ord[i]];
        }
        m->special = text2;
        m->special_len = len2;
        m->special_cut = cut2;
        for (int b = 0, i = 0; b <= 256; b++) { /* first[b]: the first text starting with a byte >= b */
            while (i < n && (unsigned char)text2[i][0] < b)
                i++;
            m->first[b] = i;
        }
        text2 = NULL;
        len2 = NULL;
        cut2 = NULL;
    }
    free(text);
    free(len);
    free(ord);
    free(cut);
    free(text2);
    free(len2);
    free(cut2);
    return ok;
}

int32_t *cb_model_tokenize(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                           int32_t *n_out) {
    int32_t cap = (int32_t)(len < 1000000 ? len + 8 : 1000008);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    if (!t) return NULL;
    int32_t n = cb_model_tokenize_into(m, text, len, add_special, parse_special, t, cap);
    if (n < 0 && n != INT32_MIN) {
        int32_t *t2 = realloc(t, sizeof(int32_t) * (size_t)-n);
        if (!t2) {
            free(t);
            return NULL;
        }
        t = t2;
        n = cb_model_tokenize_into(m, text, len, add_special, parse_special, t, -n);
    }
    if (n < 0) {
        free(t);
        return NULL;
    }
    *n_out = n;
    return t;
}

/* The template applied to these messages (the Jinja one, else the built-in, which knows no tools):
 * 0 with out->prompt set (and with tools, the rest of out), or -1 with the reason in err. */
static int render(const cb_model *m, const cb_common_msg *msgs, size_t n, const cb_common_tools *tools,
                  cb_common_rendered *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (m->tmpls) return cb_common_render(m->tmpls, msgs, n, tools, out, err, errlen);
    if (tools && tools->tools && tools->choice != CB_TOOLS_NONE) {
        if (err && errlen)
            snprintf(err, errlen,
                     "the model has no chat template that offers tools; give the server one "
                     "(--chat-template)");
        return -1;
    }
    const char *tmpl = llama_model_chat_template(m->model, NULL);
    struct llama_chat_message *lm = calloc(n ? n : 1, sizeof(*lm));
    if (!lm) return -1;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        lm[i].role = msgs[i].role;
        lm[i].content = msgs[i].content;
        total += strlen(msgs[i].role) + strlen(msgs[i].content);
    }
    int32_t cap = total < INT32_MAX / 4 ? (int32_t)(total * 2 + 256) : -1;
    char *buf = cap > 0 ? malloc((size_t)cap) : NULL;
    int32_t len = buf ? llama_chat_apply_template(tmpl, lm, n, true, buf, cap) : -1;
    if (len >= cap) {
        char *b2 = realloc(buf, (size_t)len + 1);
        if (b2) {
            buf = b2;
            len = llama_chat_apply_template(tmpl, lm, n, true, buf, len + 1);
        } else {
            len = -1;
        }
    }
    free(lm);
    if (len < 0) {
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    out->prompt = buf;
    return 0;
}

/* Appends the tokens of text[0, len) to *v (cap grown as needed). Returns false on failure. */
static bool append_tokens(const cb_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          int32_t **v, int32_t *n, int32_t *cap) {
    if (len == 0 && !add_special) return true;
    int32_t k = 0;
    int32_t *t = cb_model_tokenize(m, text, len, add_special, parse_special, &k);
    if (!t) return false;
    if (*n + k > *cap) {
        int32_t c = (*n + k) * 2 + 64;
        int32_t *w = realloc(*v, sizeof(int32_t) * (size_t)c);
        if (!w) {
            free(t);
            return false;
        }
        *v = w;
        *cap = c;
    }
    memcpy(*v + *n, t, sizeof(int32_t) * (size_t)k);
    *n += k;
    free(t);
    return true;
}

/* Marks where message i's content goes in a rendering: a character no template adds and no
 * template changes, the index, another one. */
#define MARK '\x1e'

/* Walks the skeleton (the rendering around marks): template text up to a mark, the mark's content,
 * and so on, checking each piece against the real rendering. Fills *v with the template's text
 * tokenized with special tokens and the contents without. False when the pieces do not give the
 * real rendering (the template changed a content) or on allocation failure. */
static bool split_tokens(const cb_model *m, const char *skel, const char *real, const char *const *contents, size_t n,
                         int32_t **v, int32_t *nv) {
    int32_t cap = 0;
    size_t at = 0;
    bool first = true;
    *nv = 0;
    for (const char *p = skel; *p;) {
        const char *q = strchr(p, MARK), *after = NULL;
        size_t idx = 0;
        if (q) {
            char *endp = NULL;
            idx = strtoul(q + 1, &endp, 10);
            if (endp == q + 1 || *endp != MARK || idx >= n) return false;
            after = endp + 1;
        }
        size_t lit = q ? (size_t)(q - p) : strlen(p);
        if (strncmp(real + at, p, lit) != 0 || !append_tokens(m, p, lit, first, true, v, nv, &cap)) return false;
        at += lit;
        first = false;
        if (!q) break;
        size_t cl = strlen(contents[idx]);
        if (strncmp(real + at, contents[idx], cl) != 0 ||
            !append_tokens(m, contents[idx], cl, false, false, v, nv, &cap))
            return false;
        at += cl;
        p = after;
    }
    return real[at] == '\0';
}

/* s without leading and trailing whitespace, malloc'd. */
static char *trimmed(const char *s) {
    while (*s && strchr(" \t\r\n", *s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && strchr(" \t\r\n", s[n - 1]))
        n--;
    return strndup(s, n);
}

int32_t *cb_model_chat_tokens(const cb_model *m, const cb_common_msg *msgs, size_t n, const cb_common_tools *tools,
                              cb_common_rendered *extra, int32_t *n_out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (extra) memset(extra, 0, sizeof(*extra));
    if (!cb_model_has_chat_template(m) || n == 0) return NULL;
    const char **contents = calloc(n, sizeof(char *));
    char **marks = calloc(n, sizeof(char *)), **trims = calloc(n, sizeof(char *));
    cb_common_msg *skel_msgs = calloc(n, sizeof(*skel_msgs));
    cb_common_rendered real = {0}, skel = {0};
    int32_t *v = NULL, nv = 0;
    bool ok = contents && marks && trims && skel_msgs && render(m, msgs, n, tools, &real, err, errlen) == 0;
    for (size_t i = 0; ok && i < n; i++) {
        contents[i] = msgs[i].content;
        skel_msgs[i] = msgs[i];
        trims[i] = trimmed(msgs[i].content);
        ok = trims[i] != NULL;
        if (!ok || !msgs[i].content[0]) continue; /* an empty content stays empty: templates test it */
        marks[i] = malloc(24);
        ok = marks[i] != NULL;
        if (ok) snprintf(marks[i], 24, "%c%zu%c", MARK, i, MARK);
        skel_msgs[i].content = marks[i];
    }
    /* the skeleton needs the prompt only: the tools as listed, no grammar or parser worked out */
    cb_common_tools listed = tools ? *tools : (cb_common_tools){0};
    listed.choice = CB_TOOLS_NONE;
    listed.function = NULL;
    bool have_skel = ok && render(m, skel_msgs, n, tools ? &listed : NULL, &skel, NULL, 0) == 0;
    /* templates copy a content as it is, or trimmed (llama2-like ones); one that does something
     * else (or fails on the marks) gets its whole rendering tokenized with special tokens, as text
     * completions are */
    if (ok && (!have_skel || (!split_tokens(m, skel.prompt, real.prompt, contents, n, &v, &nv) &&
                              !split_tokens(m, skel.prompt, real.prompt, (const char *const *)trims, n, &v, &nv)))) {
        free(v);
        v = cb_model_tokenize(m, real.prompt, strlen(real.prompt), true, true, &nv);
    }
    for (size_t i = 0; i < n && marks && trims; i++) {
        free(marks[i]);
        free(trims[i]);
    }
    free(contents);
    free(marks);
    free(trims);
    free(skel_msgs);
    cb_common_rendered_clear(&skel);
    if (!ok || !v) {
        free(v);
        cb_common_rendered_clear(&real);
        return NULL;
    }
    free(real.prompt);
    real.prompt = NULL;
    if (extra)
        *extra = real;
    else
        cb_common_rendered_clear(&real);
    *n_out = nv;
    return v;
}

bool cb_model_has_chat_template(const cb_model *m) {
    return m->tmpls || llama_model_chat_template(m->model, NULL) != NULL;
}

void cb_model_vocab_info(const cb_model *m, struct cobatch_vocab_info *out) {
    out->n_vocab = m->n_vocab;
    out->bos = llama_vocab_bos(m->vocab);
    out->eos = llama_vocab_eos(m->vocab);
    if (out->bos >= m->n_vocab) out->bos = -1;
    if (out->eos >= m->n_vocab) out->eos = -1;
    out->bos_text = out->bos >= 0 ? llama_vocab_get_text(m->vocab, out->bos) : "";
    out->eos_text = out->eos >= 0 ? llama_vocab_get_text(m->vocab, out->eos) : "";
    out->add_bos = llama_vocab_get_add_bos(m->vocab);
    out->chat_template = m->tmpls ? cb_common_template_source(m->tmpls) : llama_model_chat_template(m->model, NULL);
}

int32_t cb_model_piece(const cb_model *m, int32_t token, char *buf, int32_t cap) {
    int32_t n = llama_token_to_piece(m->vocab, token, buf, cap, 0, false);
    return n < 0 ? -1 : n;
}

int32_t cb_model_token_text(const cb_model *m, int32_t token, char *buf, int32_t cap) {
    return llama_token_to_piece(m->vocab, token, buf, cap, 0, true); /* -size when buf is too small */
}

bool cb_model_is_eog(const cb_model *m, int32_t token) { return llama_vocab_is_eog(m->vocab, token); }

int32_t cb_model_detokenize(const cb_model *m, const int32_t *tokens, int32_t n, char *out, int32_t max) {
    return llama_detokenize(m->vocab, tokens, n, out, max, true,
                            true); /* the added bos/eos go, other specials stay text */
}
