/* defaults.c — the pure parts of cobatch.h: default parameters, what they resolve to, the clock,
 * names. No engine state: the OpenAI schema and the fuzzers use them without a model. */
#include <cobatch.h>

#include <string.h>
#include <time.h>

int64_t cobatch_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *cobatch_finish_reason_str(enum cobatch_finish_reason r) {
    switch (r) {
    case COBATCH_FINISH_STOP: return "stop";
    case COBATCH_FINISH_LENGTH: return "length";
    case COBATCH_FINISH_CANCELLED: return "cancelled";
    case COBATCH_FINISH_ERROR: return "error";
    default: return "none";
    }
}

struct cobatch_engine_params cobatch_engine_default_params(void) {
    struct cobatch_engine_params p = {0};
    p.max_num_seqs = 16;
    p.max_num_batched_tokens = 512;
    p.prefill_chunk = 256;
    p.kv_reserve = 32;
    p.max_queue = 1024;
    p.mode = COBATCH_MODE_CONTINUOUS;
    p.sched_policy = COBATCH_SCHED_FCFS;
    p.priority_aging_ms = 1000;
    p.kv_layout = COBATCH_KV_SPLIT;
    p.flash_attn = -1;
    p.cache_type_k = p.cache_type_v = COBATCH_KV_AUTO;
    p.prefix_caching = true;
    p.exact_hits = true;
    p.rope = (struct cobatch_rope){.scaling = COBATCH_ROPE_MODEL,
                                   .yarn_ext_factor = -1,
                                   .yarn_attn_factor = -1,
                                   .yarn_beta_slow = -1,
                                   .yarn_beta_fast = -1};
    p.prefix_cache_streams = -1;
    p.long_lane = -1;
    p.swap_space = 4.0f;
    p.cache_ram = -1.0f;
    p.cache_disk_size = 16.0f;
    p.repack = COBATCH_REPACK_AUTO;
    p.grammar_max_nesting = 512;
    p.grammar_max_elements = 1000000;
    p.grammar_max_states = 1024;
    p.reasoning_budget = -1;
    p.pooling = COBATCH_POOLING_MODEL;
    p.embd_batch = 512;
    p.embd_share = 0.25f;
    return p;
}

const char *cobatch_pooling_name(enum cobatch_pooling pooling) {
    switch (pooling) {
    case COBATCH_POOLING_MODEL: return "model";
    case COBATCH_POOLING_MEAN: return "mean";
    case COBATCH_POOLING_CLS: return "cls";
    case COBATCH_POOLING_LAST: return "last";
    default: return NULL;
    }
}

struct cobatch_request_params cobatch_request_default_params(void) {
    struct cobatch_request_params p = {0};
    p.max_tokens = 128;
    p.sampling.temperature = 0.0f;
    p.sampling.top_p = 1.0f;
    p.sampling.repetition_penalty = 1.0f;
    p.sampling.penalty_last_n = 64;
    p.sampling.seed = COBATCH_SEED_RANDOM;
    return p;
}

int32_t cobatch_params_max_num_seqs(const struct cobatch_engine_params *p) {
    if (p->max_num_seqs != 0) return p->max_num_seqs;
    return p->max_num_batched_tokens > 0 && p->max_num_batched_tokens < COBATCH_MEMORY_SEQS ? p->max_num_batched_tokens
                                                                                            : COBATCH_MEMORY_SEQS;
}

static const char *const kv_type_names[COBATCH_KV_N_TYPES] = {"f16",  "f32",    "bf16", "q8_0", "q4_0",
                                                              "q4_1", "iq4_nl", "q5_0", "q5_1"};

const char *cobatch_kv_type_name(int type) {
    return type >= 0 && type < COBATCH_KV_N_TYPES ? kv_type_names[type] : NULL;
}

int cobatch_kv_type_from_name(const char *name) {
    for (int t = 0; name && t < COBATCH_KV_N_TYPES; t++)
        if (!strcmp(name, kv_type_names[t])) return t;
    return -1;
}

bool cobatch_kv_type_quantized(int type) { return type >= COBATCH_KV_Q8_0 && type < COBATCH_KV_N_TYPES; }

int32_t cobatch_params_n_ctx(const struct cobatch_engine_params *p) {
    if (p->n_ctx > 0) return p->n_ctx;
    int32_t len = p->max_model_len > 0 ? p->max_model_len : p->kv_layout == COBATCH_KV_SPLIT ? 1024 : 4096;
    return p->kv_layout == COBATCH_KV_SPLIT && p->max_num_seqs > 0 ? len * p->max_num_seqs : len;
}

/* The context factor the scaling asks for: scale, else 1 / freq_scale, else 1. */
static double rope_factor(const struct cobatch_rope *r) {
    if (r->scale > 0) return r->scale;
    if (r->freq_scale > 0) return 1.0 / r->freq_scale;
    return 1.0;
}

int32_t cobatch_params_ctx_limit(const struct cobatch_engine_params *p, int32_t n_ctx_train) {
    const struct cobatch_rope *r = &p->rope;
    bool scaled = r->scaling == COBATCH_ROPE_LINEAR || r->scaling == COBATCH_ROPE_YARN;
    int32_t base = scaled && r->yarn_orig_ctx > 0 ? r->yarn_orig_ctx : n_ctx_train;
    if (!scaled || base <= 0) return n_ctx_train;
    double limit = (double)base * rope_factor(r);
    return limit > (double)(1 << 24) ? 1 << 24 : (int32_t)limit;
}
