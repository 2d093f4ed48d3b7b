/* synth.h — random-weight GGUF models with a real model's shapes, for tests and throughput runs
 * (`cobatch mkmodel`). The vocabulary is SPM-style (all 256 byte tokens, "▁", word pieces) so any
 * text tokenizes and detokenizes back to itself; the weights are random, so the text a synthetic
 * model writes is noise: use them for speed and plumbing, never for quality. */
#ifndef CB_SYNTH_H
#define CB_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name; /* preset name */
    const char *arch; /* "llama" or "qwen2" (adds Q/K/V biases) */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx_train;
    float rope_theta, rms_eps;
    bool tied; /* output projection shares token_embd */
} cb_synth_shape;

/* The presets: tiny, smollm2-135m, qwen2.5-0.5b. Returns NULL for an unknown name. */
const cb_synth_shape *cb_synth_preset(const char *name);
/* "tiny, smollm2-135m, ..." for messages. */
const char *cb_synth_preset_names(void);

/* Quantization types by name: q8_0 q4_0 q4_1 q4_k_m q5_k_m f16. Returns -1 for an unknown one. */
int cb_synth_ftype(const char *name);

/* Writes the model to path with weights of type ftype. Returns 0, or -1 with a message in err. */
int cb_synth_write(const cb_synth_shape *shape, int ftype, uint64_t seed, int n_threads, const char *path, char *err,
                   size_t errlen);

#endif
