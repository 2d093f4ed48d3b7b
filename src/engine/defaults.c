/* defaults.c — the pure parts of cobatch.h: default parameters, what they resolve to, the clock,
 * names. No engine state: the OpenAI schema and the fuzzers use them without a model. */
#include <cobatch.h>

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
    p.flash_attn = 1;
    p.prefix_caching = true;
    p.prefix_cache_streams = -1;
    p.long_lane = -1;
    p.swap_space = 4.0f;
    p.cache_ram = -1.0f;
    p.repack = COBATCH_REPACK_AUTO;
    p.grammar_max_nesting = 512;
    p.grammar_max_elements = 1000000;
    p.grammar_max_states = 1024;
    return p;
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

bool cobatch_params_flash_attn(const struct cobatch_engine_params *p) {
    return p->flash_attn < 0 ? p->kv_layout == COBATCH_KV_UNIFIED : p->flash_attn != 0;
}

int32_t cobatch_params_n_ctx(const struct cobatch_engine_params *p) {
    if (p->n_ctx > 0) return p->n_ctx;
    int32_t len = p->max_model_len > 0 ? p->max_model_len : p->kv_layout == COBATCH_KV_SPLIT ? 1024 : 4096;
    return p->kv_layout == COBATCH_KV_SPLIT && p->max_num_seqs > 0 ? len * p->max_num_seqs : len;
}
