/* cobatch.h — public embedding API of the cobatch continuous-batching engine.
 *
 * Conventions (llama.h style):
 *   - opaque handles; *_default_params() give a struct to adjust and pass by pointer;
 *   - every function that gives or takes ownership says so;
 *   - return codes are a contract, listed beside each declaration.
 *
 * Threads: cobatch_engine_init/free belong to one owner thread. cobatch_submit, cobatch_embed,
 * cobatch_cancel, cobatch_poll, cobatch_engine_stats and cobatch_tokenize may be called from any thread at any
 * time between init and free. The engine runs its own thread; llama.cpp state never leaves it.
 */
#ifndef COBATCH_H
#define COBATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cobatch_engine cobatch_engine;
typedef struct cobatch_grammar cobatch_grammar; /* a parsed GBNF grammar (cobatch_grammar_new) */
typedef int64_t cobatch_req_id;                 /* > 0 for a real request */

enum cobatch_mode {
    COBATCH_MODE_CONTINUOUS = 0, /* admit every step (iteration-level batching) */
    COBATCH_MODE_STATIC = 1,     /* admit a group, then nothing until the whole group is done */
    COBATCH_MODE_SEQUENTIAL = 2, /* one request at a time: static with max_num_seqs = 1 */
};

enum cobatch_kv_layout {
    COBATCH_KV_UNIFIED = 0, /* one pool of cells shared by all sequences (llama.cpp kv_unified) */
    COBATCH_KV_SPLIT = 1,   /* one fixed stream per sequence: n_ctx / max_num_seqs cells each */
};

enum cobatch_sched_policy {
    COBATCH_SCHED_FCFS = 0,     /* first come, first served; a request with a priority is refused */
    COBATCH_SCHED_PRIORITY = 1, /* higher priority first, with aging: a request gains one priority point for
                                   every priority_aging_ms it has waited, so none waits forever */
};

enum cobatch_finish_reason {
    COBATCH_FINISH_NONE = 0,  /* not finished (token events) */
    COBATCH_FINISH_STOP,      /* end-of-generation token or a stop string */
    COBATCH_FINISH_LENGTH,    /* max_tokens reached, or the sequence's context is full */
    COBATCH_FINISH_CANCELLED, /* cobatch_cancel, or the engine shut down first */
    COBATCH_FINISH_ERROR,     /* the request could not be run; event.error says why */
};

/* Error codes (negative) returned by cobatch_submit and friends. */
enum cobatch_status {
    COBATCH_OK = 0,
    COBATCH_ERR_INVALID = -1,    /* bad parameters: empty prompt, max_tokens < 1, ... */
    COBATCH_ERR_TOO_LONG = -2,   /* the prompt cannot fit in one sequence's context */
    COBATCH_ERR_QUEUE_FULL = -3, /* max_queue requests are already waiting: retry later */
    COBATCH_ERR_SHUTDOWN = -4,   /* the engine is stopping */
    COBATCH_ERR_NOT_FOUND = -5,  /* unknown or already finished request id */
    COBATCH_ERR_NOMEM = -6,
};

/* Why cobatch_submit, cobatch_prompt_tokens or cobatch_chat_new refused a request: the code (a
 * cobatch_status < 0); the field of cobatch_request_params at fault, a static string named as the
 * field is ("prompt", "prompt_tokens", "messages", "tools", "tool_choice", "chat", "grammar",
 * "logit_bias", "max_tokens", "top_logprobs", "priority", a sampling field as "temperature"), or
 * NULL when no field is (out of memory, a full queue, shutdown); and a message for the client. A
 * front end maps the field to its API's name (an OpenAI error's `param`). */
struct cobatch_error {
    int code;
    const char *param;
    char message[256];
};

/* One engine step, as reported to cobatch_engine_params.on_step (the scheduling trace). */
struct cobatch_step_info {
    int64_t t_start_us, t_end_us; /* around schedule + llama_decode + postprocess, the long lane's too */
    int32_t decode_rows;          /* requests that got one token each */
    int32_t prefill_tokens;       /* prompt (or recompute) tokens in the batch */
    int32_t draft_rows;           /* draft tokens checked beside decode rows (speculation) */
    int32_t draft_accepted;       /* of those, held */
    int32_t n_requests;           /* requests with rows in the batch */
    int32_t running, waiting;     /* after the step */
    int32_t kv_used;              /* cells after the step */
    int32_t preempted;            /* requests preempted by this step */
    int32_t swapped;              /* of those, saved to host memory (swap_space) */
    int32_t graph_runs;           /* llama.cpp graph runs the batch took (split layout: one per block of
                                     consecutive streams with equal rows, see cb_plan_row_order;
                                     unified: 1) */
    int32_t lane_tokens;          /* rows of the long lane's graph in this step (0: it had none) */
    int64_t lane_us;              /* its llama_decode time */
    int32_t embd_tokens;          /* tokens of the step's embeddings pass (0: it had none) */
    int64_t embd_us;              /* its llama_decode time */
    int32_t context_cells;        /* the batch's sequences' cells up to their last row in it, summed
                                     over its requests: the contexts its rows attend over (split
                                     layout: what attention spans; unified: every row spans kv_used) */
    int64_t decode_us;            /* time inside llama_decode in this step: the main pool's call and
                                     the long lane's, each timed around the call itself (a call that
                                     found no KV slot and was retried smaller counts too), plus the
                                     embeddings pass (embd_us). The rest of t_end_us - t_start_us is
                                     host work: scheduling, cell bookkeeping and copies, building the
                                     batch, sampling, events */
    int64_t attended_cells;       /* split layout: the attention the main pool's graph runs did, in
                                     row-cells: each run's rows times the cells it spans (the most
                                     one of its streams holds, padded to 256 by llama.cpp); above
                                     context_cells where a run pads a short stream to a long one's
                                     cells (cb_plan_row_order). Unified: 0 */
};
typedef void (*cobatch_step_fn)(const struct cobatch_step_info *info, void *user);

enum cobatch_repack { COBATCH_REPACK_AUTO = 0, COBATCH_REPACK_ON, COBATCH_REPACK_OFF };

/* What becomes of a thinking template's reasoning (cobatch_engine_params.reasoning_format). */
enum cobatch_reasoning_format { COBATCH_REASONING_SEPARATED = 0, COBATCH_REASONING_NONE };

/* How an embedding request's input becomes one vector: llama.cpp's pooling of the last layer's
 * token vectors (cobatch_engine_params.pooling). */
enum cobatch_pooling {
    COBATCH_POOLING_MODEL = 0, /* the model's own (its GGUF pooling_type); MEAN for a model without one
                                  (a generative model: llama-server refuses OpenAI embeddings there) */
    COBATCH_POOLING_MEAN,      /* the average of the input's token vectors */
    COBATCH_POOLING_CLS,       /* the first token's (a BERT-style model's [CLS]) */
    COBATCH_POOLING_LAST,      /* the last token's (vLLM's default for a generative model) */
};

/* KV cache element types (cobatch_engine_params.cache_type_k and cache_type_v). */
enum cobatch_kv_type {
    COBATCH_KV_AUTO = -1, /* the engine measures f16, bf16 and f32 and takes the fastest (engine params only) */
    COBATCH_KV_F16 = 0,
    COBATCH_KV_F32,
    COBATCH_KV_BF16,
    COBATCH_KV_Q8_0,
    COBATCH_KV_Q4_0,
    COBATCH_KV_Q4_1,
    COBATCH_KV_IQ4_NL,
    COBATCH_KV_Q5_0,
    COBATCH_KV_Q5_1,
    COBATCH_KV_N_TYPES
};

/* RoPE scaling (cobatch_engine_params.rope_scaling; llama.cpp's --rope-scaling): how positions
 * past the trained context are squeezed into the ones the model knows. */
enum cobatch_rope_scaling {
    COBATCH_ROPE_MODEL = -1, /* the model's own (its GGUF's rope.scaling, none for most) */
    COBATCH_ROPE_NONE = 0,
    COBATCH_ROPE_LINEAR = 1, /* positions divided by the factor (position interpolation) */
    COBATCH_ROPE_YARN = 2,   /* YaRN: high frequencies kept, low ones interpolated, attention rescaled */
};

/* How RoPE is scaled: with linear or YaRN and a factor, a sequence may hold factor x the trained
 * context (yarn_orig_ctx when given), for some loss of quality (README, 'Context beyond training'). */
struct cobatch_rope {
    int scaling;            /* enum cobatch_rope_scaling */
    float scale;            /* the context factor (llama.cpp's --rope-scale); 0: 1 / freq_scale, or none */
    float freq_base;        /* 0: the model's */
    float freq_scale;       /* 0: 1 / scale, or the model's */
    int32_t yarn_orig_ctx;  /* 0: the model's trained context */
    float yarn_ext_factor;  /* < 0: llama.cpp's default for the type */
    float yarn_attn_factor; /* < 0: llama.cpp's default */
    float yarn_beta_slow, yarn_beta_fast; /* < 0: llama.cpp's defaults (1, 32) */
};

/* Speculative decoding (cobatch_engine_params.spec). */
/* NGRAM drafts from a request's own text, then from a pool every request's text teaches (timing can
 * tell one client what another sent recently); NGRAM_OWN from the request's own text only. */
enum cobatch_spec { COBATCH_SPEC_OFF = 0, COBATCH_SPEC_NGRAM = 1, COBATCH_SPEC_NGRAM_OWN = 2 };
#define COBATCH_SPEC_MAX 32

struct cobatch_engine_params {
    const char *model_path;         /* GGUF file; required. Copied. */
    int32_t n_ctx;                  /* total KV cells; 0 = max_model_len x max_num_seqs (split), 4096 (unified) */
    int32_t max_model_len;          /* cells one request may use, prompt + output, when n_ctx is 0; 0 =
                                       split: by memory at init, 4096 when the running streams and a
                                       quarter more fit an eighth of the host's memory (at most 8 GiB;
                                       with a GPU: of its free memory, where the cells go), else 2048,
                                       else 1024 (never past the trained context); unified: n_ctx */
    int32_t n_threads;              /* llama_decode threads; 0 = number of cores */
    int32_t max_num_seqs;           /* requests running at once (sequence ids); default 16; 0 = memory-centric:
                                       as many as the KV cells hold (cobatch_params_max_num_seqs), unified
                                       layout only */
    int32_t max_num_batched_tokens; /* token budget of one step; default 512 */
    int32_t prefill_step_tokens;    /* a step in which no request decodes (prompts alone: no gap between tokens
                                       to keep short) takes up to this many, a request's chunk too, past
                                       prefill_chunk; 0 (default): max_num_batched_tokens; cobatch serve: 512.
                                       n_batch = n_ubatch = the larger of the two */
    int32_t prefill_chunk;          /* max prompt tokens of one request per step; 0 = no chunking */
    int32_t kv_reserve;             /* cells an admission must leave free for decode growth; default 32 */
    int32_t max_queue;              /* waiting requests beyond which submit fails; default 1024 */
    enum cobatch_mode mode;
    enum cobatch_sched_policy sched_policy; /* default FCFS */
    int32_t priority_aging_ms;              /* PRIORITY: waiting time worth one priority point; default 1000,
                                               0 = no aging (a steady stream of higher priorities starves lower ones) */
    enum cobatch_kv_layout kv_layout;
    /* Flash attention: 1 on, 0 off, -1 auto (default) = the faster on this host's CPU kernels as
     * measured (src/core/attn.h; cached per host and model shape), kept on where off breaks a
     * promise: exact cache hits (a prompt computed with or without a cached prefix differs in the
     * last bits without it), the unified layout (it skips the masked cells of other sequences), a
     * quantized V. cobatch_params_flash_attn and cobatch_params_resolve resolve it. */
    int flash_attn;
    /* KV cache element types (enum cobatch_kv_type; llama.cpp's type_k and type_v): COBATCH_KV_AUTO
     * (default) = f16, bf16 or f32 as measured with the flash attention choice. A quantized type (only
     * when named) holds two to four times the cells in the same memory, for a small drift in the
     * outputs (BENCHMARKS.md, 'KV cache types'). A quantized V needs flash attention (auto keeps it
     * on); a quantized type needs attention heads whose size is a multiple of its 32-value blocks. */
    int cache_type_k, cache_type_v;
    bool prefix_caching; /* share resident prompt prefixes across requests; default true */
    /* Split layout: a cache hit computes at least its prompt's last flash-attention tile (64 tokens)
     * again, so that its answer is the cold prompt's bit for bit (default true); false computes only
     * what it adds (up to ~200 ms sooner on two cores when that is a few tokens) and may answer
     * otherwise at near-ties (RELIABILITY.md, 'Repeatable across cache hits'). */
    bool exact_hits;
    /* Split layout with prefix caching: streams that keep finished requests' tokens for later
     * ones (each as large as a running stream's n_ctx / max_num_seqs cells, on top of n_ctx).
     * -1 (default) = 2 x max_num_seqs within what the running streams leave of an eighth of the
     * host's memory (with a GPU: of its free memory; at most 8 GiB, at the model file's bytes a
     * cell), at least max_num_seqs / 4 and 1; 0 = none (idle running streams still serve). */
    int32_t prefix_cache_streams;
    /* Idle cached cells kept (held by no running request); beyond it the least recently used
     * leaves go at the next step, the last one only in part. 0 = no limit (default). At one
     * sequence a 256-cell cap recovers the ~20% idle cells cost, 1024 does not (BENCHMARKS.md,
     * 'The prefix cache at one sequence'); off until what a small cap loses in cache hits is
     * measured too. */
    int32_t prefix_cache_max_idle;
    /* The chat template messages are rendered with (Jinja, through llama.cpp common's engine, as vLLM
     * and llama-server --jinja): chat_template's text, else the file chat_template_file, else the
     * model's own (tokenizer.chat_template). One that does not parse fails init. Copied. */
    const char *chat_template;
    const char *chat_template_file;
    /* A template that thinks (it writes reasoning between markers it knows, such as <think></think>,
     * before the answer): SEPARATED (default) reads the reasoning out of a chat's output
     * (cobatch_chat_parse), NONE leaves it in the text (llama-server's --reasoning-format none).
     * reasoning_budget: the reasoning tokens a chat may write before its end marker is forced
     * (-1 default: no bound; 0: the block ends as it opens); a request may set its own. */
    enum cobatch_reasoning_format reasoning_format;
    int32_t reasoning_budget;
    /* Split layout, continuous mode: cells of the long lane, a second context of one unified pool
     * for requests longer than a stream (prompts beyond max_model_len, and requests that outgrow
     * their stream, recomputed there), run as a second graph per step only while it has work; a
     * request may then use this many cells. -1 (default) = the model's trained context when the
     * streams have their default size (n_ctx and max_model_len 0), else none; 0 = none. */
    int32_t long_lane;
    /* RoPE scaling (scaling COBATCH_ROPE_MODEL by default): max_model_len and long_lane may pass the
     * trained context only up to what it reaches (cobatch_params_ctx_limit); past it, init refuses. */
    struct cobatch_rope rope;
    /* Swap space, in GiB of host memory (vLLM's swap_space): a preempted request's KV cells are
     * saved there and put back when it runs again, instead of recomputed from its tokens, when
     * copying costs less (measured) and they fit; else it is recomputed. Unified pools only (the
     * unified layout, the long lane): a split layout's stream is never preempted for cells. 0 =
     * every preemption recomputes. Default 4. */
    float swap_space;
    /* The prefix cache's host-memory tier, in GiB (llama-server's --cache-ram; split layout with
     * prefix caching): a cached conversation that would leave the device streams (a holder evicted,
     * a parked stream reused) is copied to host memory, and a request continuing it has it copied
     * back into its stream instead of recomputed, when the copy costs less (measured); the long
     * lane's requests' cells too, when they end. Least recently used out. -1 (default) = an
     * eighth of the host's memory, at most 8 GiB (none in the unified layout); 0 = none. A positive
     * value needs the split layout and prefix caching. A sliding-window model's entry serves only a
     * request that continues all of it (llama.cpp saves the cells its window still reads). */
    float cache_ram;
    /* The prefix cache's disk tier under the host tier: a folder (NULL: none) where every
     * conversation the host tier saves is written too (write-through, on a thread of its own), kept
     * when it leaves host memory, read back when a request continues it and reading costs less than
     * computing (measured), and indexed again when a server starts on the folder with the same model
     * file, llama.cpp build, cache types and context layout (runtime/disk.h; replicas may share one
     * folder). Needs the host tier (cache_ram). On a drain, the conversations the streams hold are
     * saved first. A file that cannot be read or fails its checksum is computed instead. */
    const char *cache_disk;
    /* The disk tier's size in GiB, least recently used out. Default 16. */
    float cache_disk_size;
    /* Speculative decoding: a decoding request checks draft tokens, taken from its own text (prompt
     * and output so far: the longest recent n-gram that ends it and occurred before, and what
     * followed it there), as extra rows of the same batch; the tokens the model agrees with are
     * kept (greedy: the same output; sampled: the same distribution, the draft held when the
     * sample is it), the rest of the rows' cells dropped. Each step the scheduler checks only the
     * drafts worth their rows, from the measured cost of a row at the step's shape and each
     * request's rate of drafts that held (spec.h): under load none. spec: COBATCH_SPEC_OFF
     * (default), COBATCH_SPEC_NGRAM or COBATCH_SPEC_NGRAM_OWN; spec_max: drafts a request checks in one step at most (0
     * = 8, at most COBATCH_SPEC_MAX). The main pool only (not the long lane's requests). */
    int spec;
    int32_t spec_max;
    /* llama.cpp's RPC backend (a build with -DCOBATCH_RPC=ON): "HOST:PORT,..." of ggml-rpc-server
     * processes; the model's layers go to them (split by their free memory), the token embeddings
     * and the sampling stay here. NULL = local. Copied. */
    const char *rpc_servers;
    /* The CPU backend's weight layouts (llama-server's --repack / --no-repack): AUTO (default) lets
     * ggml repack weights into its interleaved layouts but never AMX's (its kernels segfault on some
     * AMX hosts); ON uses every layout ggml offers, AMX included; OFF keeps the file's layout.
     * cobatch_weights_info says what a load used and why. */
    enum cobatch_repack repack;
    /* Bounds on a request's grammar (GBNF given, converted from a JSON schema, or a template's
     * tool-call grammar), which llama.cpp runs unbounded: groups nested deeper than
     * grammar_max_nesting (default 512) or elements past grammar_max_elements once repetitions are
     * copied (default 1,000,000) refuse the grammar; more than grammar_max_states parse states
     * (default 1024) refuse it when its start could make that many, and end the request with an
     * error when its output comes to hold that many (an ambiguous grammar grows them per token, and
     * each costs time on the engine thread for every token) or when one token's grammar work passes
     * what that many allow (1,024 parse-stack elements built and 8,192 candidates looked at per state:
     * about 70 ms of the engine thread at the default). */
    int32_t grammar_max_nesting;
    int32_t grammar_max_elements;
    int32_t grammar_max_states;
    /* Continuous mode with prefill_chunk > 0, > 0: while requests decode, a step's tokens of
     * requests of up to a flash-attention tile (64 tokens) are bounded by time as well as by the
     * budget: in sum over the decoding requests they may hold them back by step_pacing times what
     * one decode step of max_num_seqs rows takes (both costs measured as the engine runs; a longer
     * prompt keeps to the budget: cut under a tile it would cost several times more). At 1,
     * with every sequence decoding an admission at most doubles the gap they see, and with few
     * decoding a prompt goes on near the budget; smaller: shorter gaps, later first tokens. 0
     * (default): by the budget alone (throughput first); cobatch serve uses 0.5. */
    float step_pacing;
    /* Embeddings (cobatch_embed): a third llama.cpp context on the same weights, with embeddings on and
     * `pooling`, of embd_batch cells (= n_batch = n_ubatch: a pass is one graph run, as pooling over an
     * input needs), for up to COBATCH_EMBD_PASS_INPUTS inputs a pass; its cells are cleared after each.
     * A step runs at most one pass, after the generation pools: whole inputs of the waiting embedding
     * requests, oldest first, several requests together. It costs memory from init (for the default
     * model at 512 tokens ~210 MB, most of it the logits llama.cpp computes for every token of a
     * generative model; init fails when it cannot be made). Default false: cobatch_embed refuses. */
    bool embeddings;
    enum cobatch_pooling pooling; /* default COBATCH_POOLING_MODEL */
    int32_t embd_batch;           /* tokens of a pass, and of the longest input; default 512 */
    /* While generation runs, embedding passes may take this share of the engine's time (their measured
     * time against the generation steps'), so generation keeps 1 - share of its speed: each step beside
     * generation earns share / (1 - share) of its time for embeddings, and a pass takes the whole
     * inputs its earnings pay for at the measured cost of a pass (a fixed part, and a part a token; an
     * input the earnings of one step do not cover waits until they do: one longer gap, a pass of
     * embd_batch tokens at most). With nothing generating, a pass takes embd_batch tokens every step.
     * In (0, 1]; 1: no bound. Default 0.25. */
    float embd_share;
    bool verbose;            /* let llama.cpp log to stderr */
    cobatch_step_fn on_step; /* called on the engine thread after each step; keep it short */
    void *on_step_user;
};

struct cobatch_sampling {
    float temperature;        /* 0 = greedy (default) */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off */
    float presence_penalty;   /* 0 = off */
    float frequency_penalty;  /* 0 = off */
    int32_t penalty_last_n;   /* tokens the penalties look back on; default 64 */
    uint32_t seed;            /* used when temperature > 0; COBATCH_SEED_RANDOM (default) = a fresh one per request */
    bool infill;              /* llama.cpp's infill sampler last before the draw (code completion: it gathers the
                                 chances of tokens one text begins, and ends the output where that is likelier) */
};

#define COBATCH_SEED_RANDOM 0xFFFFFFFFu

/* A chat message: the role's text and the content go through the model's chat template; the
 * content is tokenized as plain text (control-token text in it stays text). */
struct cobatch_chat_message {
    const char *role;
    const char *content;
    const char *reasoning;    /* an assistant's reasoning (a template that thinks may show it again), or NULL;
                                 tokenized as plain text too */
    const char *tool_calls;   /* an assistant's tool calls, OpenAI's array as JSON text ([{"id", "type":
                                 "function", "function": {"name", "arguments"}}]), or NULL */
    const char *tool_call_id; /* a "tool" message: the call it answers, or NULL */
    const char *name;         /* the author's name, or NULL */
};

/* What a chat that offers tools may do with them. */
enum cobatch_tool_choice {
    COBATCH_TOOL_CHOICE_AUTO = 0, /* answer, or call tools */
    COBATCH_TOOL_CHOICE_REQUIRED, /* the output is one or more calls (to tool_function alone, if named) */
    COBATCH_TOOL_CHOICE_NONE,     /* the tools are listed, the output is an answer */
};

typedef struct cobatch_chat cobatch_chat; /* a chat request rendered once (cobatch_chat_new) */

/* What a chat asks of a template that thinks (cobatch_engine_params.reasoning_format). A template
 * that does not think refuses COBATCH_THINK_ON (COBATCH_ERR_INVALID, param "reasoning"); an effort
 * or a budget asks nothing of it (it writes no reasoning). Zeroed: the defaults. */
enum cobatch_think {
    COBATCH_THINK_DEFAULT = 0, /* the template's default */
    COBATCH_THINK_OFF,         /* the template's enable_thinking false (refused when that changes nothing) */
    COBATCH_THINK_ON,          /* enable_thinking true */
};
/* Which reasoning handed back (cobatch_chat_message.reasoning) reaches the prompt (OpenAI Responses'
 * reasoning.context). A turn is a user message and what follows it; earlier turns are those before
 * the last user message. */
enum cobatch_past_reasoning {
    COBATCH_PAST_REASONING_TEMPLATE = 0, /* the template decides (many show the current turn's alone) */
    COBATCH_PAST_REASONING_ALL,          /* every turn's: refused where a message's reasoning would not reach
                                            the prompt, the template leaving it out (param "reasoning_context") */
    COBATCH_PAST_REASONING_CURRENT,      /* the current turn's: earlier turns' reasoning is left out */
};
struct cobatch_reasoning {
    enum cobatch_think think;
    enum cobatch_past_reasoning past;
    const char *effort; /* reasoning_effort, for a template that reads it (one that thinks and does not refuses
                           it, param "reasoning_effort"; "none" is COBATCH_THINK_OFF); NULL: none */
    bool has_budget;    /* budget is set (else the engine's reasoning_budget) */
    int32_t budget;     /* reasoning tokens at most, then the end marker is forced (< 0: no bound; 0: the block
                           ends as it opens); not with a grammar of the request's own (param "reasoning_budget") */
    bool keep;          /* the reasoning stays in the output's text (as reasoning_format NONE) */
};

/* A bias added to one token's logit before sampling (OpenAI's logit_bias: -100 in effect bans the
 * token, 100 in effect forces it). */
struct cobatch_logit_bias {
    int32_t token; /* < the vocabulary's size (cobatch_n_vocab) */
    float bias;    /* in [-100, 100] */
};

/* Most likely alternatives a request may ask for at each position (OpenAI's limit). */
#define COBATCH_MAX_LOGPROBS 20

/* A token and its log-probability: the log-softmax of the logits the model produced for that
 * position, before logit_bias, penalties, temperature or any truncation (vLLM's raw logprobs). */
struct cobatch_logprob {
    int32_t token;
    float logprob;
};

struct cobatch_request_params {
    /* Exactly one of: text prompt, token prompt, chat messages. All are copied by submit. */
    const char *prompt;
    const int32_t *prompt_tokens;
    int32_t n_prompt_tokens;
    const struct cobatch_chat_message *messages; /* rendered with the model's chat template */
    size_t n_messages;
    /* With messages: the tools the template lists (OpenAI's tools array as JSON text), or NULL. Unless
     * tool_choice is NONE, calls in the output are held to the template's call format by a grammar
     * (lazy for AUTO: from the first call marker on), which cobatch_chat_parse reads. Needs a chat
     * template that offers tools (COBATCH_ERR_INVALID otherwise); not with a grammar of its own. */
    const char *tools;
    enum cobatch_tool_choice tool_choice;
    const char *tool_function; /* REQUIRED: the function the call must be to, or NULL for any */
    bool single_tool_call;     /* at most one call (OpenAI's parallel_tool_calls false) */
    /* With messages: the reasoning asked for; more variables for the chat template (a JSON object's
     * text, such as {"enable_thinking": false}; vLLM's chat_template_kwargs), or NULL; a JSON schema
     * the answer is held to (instead of a grammar; a template that thinks writes its reasoning first),
     * or NULL. */
    struct cobatch_reasoning reasoning;
    const char *template_kwargs;
    const char *json_schema;
    /* Instead of prompt, tokens and messages: a chat rendered once (its tools, grammar and stop
     * strings come with it), which any number of requests may share; free it after their submits. */
    const cobatch_chat *chat;

    int32_t max_tokens; /* >= 0; default 128. 0: compute the prompt only (its log-probabilities, a warm cache) */
    struct cobatch_sampling sampling;
    const char *const *stop; /* stop strings; never emitted, text that may become one is held */
    size_t n_stop;
    const struct cobatch_logit_bias *logit_bias; /* applied first in the sampler chain; copied by submit */
    size_t n_logit_bias;
    bool ignore_eos;
    /* GBNF (llama.cpp's grammar format, root rule "root") the output must match, or NULL: every token
     * is one the grammar allows, and once it is complete only an end-of-generation token is. Copied;
     * a grammar that does not parse is COBATCH_ERR_INVALID. cobatch_json_schema_grammar makes one
     * from a JSON schema. */
    const char *grammar;
    const struct cobatch_grammar *parsed_grammar; /* instead of grammar: one parsed once (cobatch_grammar_new),
                                                     of which the request takes a copy */
    int32_t priority;   /* COBATCH_SCHED_PRIORITY only (else it must be 0): higher runs first and is preempted
                           last; default 0 */
    bool logit_margins; /* fill cobatch_event.margin (top-1 minus top-2 logit); costs a vocab scan */
    /* Every TOKEN event carries the sampled token's log-probability and the top_logprobs (0 to
     * COBATCH_MAX_LOGPROBS) most likely alternatives (two vocab scans per token). */
    bool logprobs;
    int32_t top_logprobs;
    /* The prompt's log-probabilities too (each prompt token's, given the ones before it, with
     * top_logprobs alternatives): logits for every prompt row, so the request shares no cached
     * prefix (it still leaves its own for others). */
    bool prompt_logprobs;
    /* Code completion (llama-server's n_indent and t_max_predict_ms; both end the output as LENGTH):
     * min_indent > 0: a line after the first newline that starts with fewer blanks ends the output
     * before its first character; max_predict_ms > 0: a newline generated later than that after the
     * first token ends it. */
    int32_t min_indent;
    int32_t max_predict_ms;
    bool no_speculation; /* check no draft tokens for this request (cobatch_engine_params.spec) */
    /* The text the output is expected to repeat in large part (OpenAI's Predicted Outputs: the file
     * being edited), or NULL: its tokens are draft tokens for this request, after the point the
     * output last matched, whatever cobatch_engine_params.spec says (unless no_speculation). The
     * output is the same with or without it. At most the engine's context in tokens; copied. */
    const char *prediction;
    void *user_data; /* returned in every event of this request; not touched */
};

enum cobatch_event_type {
    COBATCH_EVENT_TOKEN = 1,    /* one sampled token and the text it released (may be "") */
    COBATCH_EVENT_FINISHED = 2, /* the last event of a request: exactly one per accepted request */
};

struct cobatch_timings {
    int64_t t_submit_us;      /* all times: cobatch_time_us() clock */
    int64_t t_scheduled_us;   /* first step that computed any of its tokens; 0 if never */
    int64_t t_first_token_us; /* 0 if no token was generated */
    int64_t t_finish_us;
};

struct cobatch_event {
    enum cobatch_event_type type;
    cobatch_req_id id;
    void *user_data;
    char *text; /* NUL-terminated UTF-8 piece (never NULL), owned by the event: cobatch_event_clear frees it */
    size_t text_len;
    int32_t token; /* TOKEN: the sampled token */
    float margin;  /* TOKEN with logit_margins: top-1 minus top-2 logit, else 0 */
    /* TOKEN of a request with logprobs: 1 + n_top entries, the sampled token first, then the
     * n_top most likely tokens, most likely first (ties: lower id first). Owned by the event. */
    struct cobatch_logprob *logprobs;
    int32_t n_top;
    /* With prompt_logprobs, in the first event after the prompt was computed (its first TOKEN, or
     * FINISHED when it generates nothing): n_prompt rows of 1 + n_top entries, row i prompt token i
     * and then the most likely tokens at i. Row 0 has nothing before it: its log-probabilities are
     * NAN and its alternatives' tokens -1. Owned by the event; NULL in every other event. */
    struct cobatch_logprob *prompt_logprobs;
    int64_t t_us; /* when the event was made */
    /* FINISHED only: */
    enum cobatch_finish_reason reason;
    int32_t stop;     /* reason == STOP: the index in params.stop of the stop string that ended the output;
                         -1 when something else did (an end-of-generation token) */
    char *error;      /* reason == ERROR: message, owned by the event */
    bool invalid;     /* reason == ERROR: the request itself was at fault (its grammar blew a bound or
                         allowed no token): a client's error (HTTP 400), not the server's */
    int32_t n_prompt; /* also in TOKEN events */
    int32_t n_generated;
    int32_t n_preemptions;
    int32_t n_cached;     /* prompt tokens taken from the prefix cache instead of computed (its first admission:
                             a later one reloads its own cells); also in TOKEN events */
    int32_t n_drafted;    /* FINISHED: draft tokens checked for it (speculation) */
    int32_t n_accepted;   /* FINISHED: of those, the ones that held (its output's tokens that came with no pass of their
                             own) */
    int32_t n_prediction; /* FINISHED: tokens of the request's prediction (0: none) */
    int32_t n_prediction_accepted; /* FINISHED: the prediction's tokens that appeared in the output, each once
                                      (held as drafts, or matched by the next sample): OpenAI's
                                      accepted_prediction_tokens. A prediction that repeats itself can have one
                                      of its tokens held as a draft more than once: n_accepted may be larger */
    int32_t n_reasoning; /* FINISHED: generated tokens written inside a reasoning block (a chat whose output is read
                            for reasoning), else 0 */
    struct cobatch_timings timings;
    /* FINISHED of an embedding request (cobatch_embed; n_inputs > 0 tells it apart): with reason STOP,
     * n_inputs vectors of n_embd floats, input i's at embd + i * n_embd, each of unit length (L2; an
     * all-zero vector stays zero); NULL with any other reason. n_prompt: the tokens of all its inputs.
     * Owned by the event: cobatch_event_clear frees it. */
    float *embd;
    int32_t n_embd, n_inputs;
};

/* The engine's statistics (cobatch_engine_stats), each declared once, here:
 *     X(type, field, kind, metric, help, source)
 * kind: how /metrics shows it (a gauge, a counter, or NONE: in the struct only, or shown in a form of
 * its own); metric: its name in /metrics after "cobatch:" (a field in microseconds, "_us", is shown
 * in seconds); help: what it counts, /metrics' HELP line; source: what the engine sets it from after
 * each step (an expression of the engine's own state, compiled there alone; AT_READ: set when read,
 * by cobatch_engine_stats). The struct below, the engine's copy, /metrics and the bench's JSON report
 * read this list: a new statistic is one line here (and what counts it). */
enum cobatch_stat_kind { COBATCH_STAT_NONE, COBATCH_STAT_GAUGE, COBATCH_STAT_COUNTER };
// clang-format off
#define COBATCH_STATS(X) \
    X(int32_t, running, COBATCH_STAT_GAUGE, "num_requests_running", "Requests in the running batch.", n_running(e)) \
    X(int32_t, waiting, COBATCH_STAT_GAUGE, "num_requests_waiting", "Requests waiting to be scheduled.", AT_READ) \
    X(int32_t, kv_used, COBATCH_STAT_NONE, "", "KV cells in use by cobatch's accounting, kv_cached included (/metrics shows kv_cache_used_cells: kv_used - kv_cached, as vLLM counts them).", e->main.kv.total_used) \
    X(int32_t, kv_total, COBATCH_STAT_GAUGE, "kv_cache_total_cells", "KV cells in the cache.", e->main.kv.capacity) \
    X(int32_t, kv_peak, COBATCH_STAT_GAUGE, "kv_cache_peak_cells", "The most KV cells in use at once so far.", e->main.kv.peak_used) \
    X(int32_t, kv_cached, COBATCH_STAT_GAUGE, "kv_cache_cached_cells", "KV cells of cached prefixes no request uses (free on demand).", cs.idle) \
    X(int32_t, kv_cells_llama, COBATCH_STAT_NONE, "", "Cells llama.cpp shows the running requests' sequences, summed over them (a shared cell once per request); 0 when nothing runs.", cells_in_llama(e)) \
    X(int32_t, kv_mismatches, COBATCH_STAT_GAUGE, "kv_mismatched_sequences", "Sequences whose cells in llama.cpp differ from the accounting after the last step (0 unless a bug).", kv_mismatches(&e->main) + kv_mismatches(&e->lane.pool)) \
    X(int64_t, steps, COBATCH_STAT_COUNTER, "engine_steps_total", "Engine steps (forward passes) so far.", ss->steps + e->lane.alone_steps) \
    X(int64_t, preemptions, COBATCH_STAT_COUNTER, "num_preemptions_total", "Preemptions so far (swapped or recomputed).", ss->preemptions + ls.preemptions) \
    X(int64_t, decode_retries, COBATCH_STAT_COUNTER, "decode_retries_total", "llama_decode calls retried after llama.cpp found no KV slot.", e->n_retries) \
    X(int32_t, events_queued, COBATCH_STAT_GAUGE, "engine_events_queued", "Engine events not yet taken by the server.", AT_READ) \
    X(int64_t, decode_failures, COBATCH_STAT_COUNTER, "decode_failures_total", "llama_decode calls that failed; their requests ended with an error.", e->n_decode_failures) \
    X(int64_t, prompt_tokens, COBATCH_STAT_COUNTER, "prompt_tokens_computed_total", "Prompt tokens the engine computed (not taken from the prefix cache; recomputes too).", e->n_prompt_computed) \
    X(int64_t, generated_tokens, COBATCH_STAT_NONE, "", "Tokens sampled (/metrics counts those of finished requests: generation_tokens_total).", e->n_generated) \
    X(int64_t, wasted_decode_slots, COBATCH_STAT_COUNTER, "wasted_decode_slots_total", "Static batching: slots of finished group members idle while their group ran.", ss->wasted_decode_slots) \
    X(int64_t, requests_finished, COBATCH_STAT_NONE, "", "Generation requests finished (/metrics counts them by reason: request_success_total).", ss->finished + ls.finished) \
    X(int64_t, stream_moves, COBATCH_STAT_COUNTER, "stream_moves_total", "Split layout: running requests moved to another stream to keep one graph run.", ss->stream_moves) \
    X(int64_t, prefix_query_tokens, COBATCH_STAT_COUNTER, "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", cs.query_tokens + lcs.query_tokens) \
    X(int64_t, prefix_hit_tokens, COBATCH_STAT_COUNTER, "prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not computed).", cs.hit_tokens + lcs.hit_tokens) \
    X(int64_t, swapped_out, COBATCH_STAT_COUNTER, "num_preemptions_swapped_total", "Preemptions whose KV cells were saved to host memory.", e->swap.swapped_out) \
    X(int64_t, swapped_in, COBATCH_STAT_COUNTER, "num_swapped_in_total", "Swapped-out requests whose KV cells were put back.", e->swap.swapped_in) \
    X(int64_t, recomputed, COBATCH_STAT_COUNTER, "num_preemptions_recomputed_total", "Preemptions whose KV cells were dropped (recomputed).", e->swap.recomputed) \
    X(int64_t, swap_used_bytes, COBATCH_STAT_GAUGE, "swap_space_used_bytes", "Host memory the swapped-out requests' KV cells take.", e->swap.used) \
    X(int64_t, swap_peak_bytes, COBATCH_STAT_GAUGE, "swap_space_peak_bytes", "The most host memory swapped-out KV cells took at once.", e->swap.peak) \
    X(int64_t, swap_lost, COBATCH_STAT_COUNTER, "swap_failures_total", "Swap saves or restores that failed (those requests were recomputed).", e->swap.lost) \
    X(int64_t, swap_copied_bytes, COBATCH_STAT_COUNTER, "swap_copied_bytes_total", "Bytes copied by swap saves and restores.", e->swap.copied_bytes) \
    X(int64_t, swap_copy_us, COBATCH_STAT_COUNTER, "swap_copy_seconds_total", "Time spent on swap saves and restores.", e->swap.copy_us) \
    X(int64_t, host_cache_bytes, COBATCH_STAT_GAUGE, "host_cache_used_bytes", "Host memory the prefix cache's host tier takes.", e->host.used) \
    X(int64_t, host_cache_cap_bytes, COBATCH_STAT_GAUGE, "host_cache_capacity_bytes", "Host memory the prefix cache's host tier may take.", e->host.cap) \
    X(int32_t, host_cache_entries, COBATCH_STAT_GAUGE, "host_cache_entries", "Conversations the prefix cache's host tier holds in memory.", cb_host_in_memory(&e->host)) \
    X(int64_t, host_cache_hit_tokens, COBATCH_STAT_COUNTER, "prefix_cache_host_hits_total", "Of the prefix cache's hits, prompt tokens loaded from its host-memory tier.", e->host.hit_tokens) \
    X(int64_t, host_cache_saves, COBATCH_STAT_COUNTER, "host_cache_saves_total", "Conversations copied from the KV streams to host memory.", e->host.saves) \
    X(int64_t, host_cache_loads, COBATCH_STAT_COUNTER, "host_cache_loads_total", "Conversations copied from host memory back into a KV stream.", e->host.loads) \
    X(int64_t, host_cache_failed, COBATCH_STAT_COUNTER, "host_cache_failures_total", "Host-tier copies that could not be made (recomputed).", e->host.failed) \
    X(int64_t, host_cache_evicted, COBATCH_STAT_COUNTER, "host_cache_evictions_total", "Host-tier conversations dropped for room or superseded.", e->host.evicted) \
    X(int64_t, host_cache_copied_bytes, COBATCH_STAT_COUNTER, "host_cache_copied_bytes_total", "Bytes copied to and from the host tier.", e->host.copied_bytes) \
    X(int64_t, host_cache_copy_us, COBATCH_STAT_COUNTER, "host_cache_copy_seconds_total", "Time spent copying to and from the host tier.", e->host.copy_us) \
    X(int64_t, disk_cache_bytes, COBATCH_STAT_GAUGE, "disk_cache_used_bytes", "Bytes the prefix cache's disk tier takes (files being written included).", e->host.disk_used) \
    X(int64_t, disk_cache_cap_bytes, COBATCH_STAT_GAUGE, "disk_cache_capacity_bytes", "Bytes the prefix cache's disk tier may take (0: none).", e->host.disk_cap) \
    X(int32_t, disk_cache_entries, COBATCH_STAT_GAUGE, "disk_cache_entries", "Conversations the disk tier holds (being written included).", e->host.n_disk) \
    X(int64_t, disk_cache_hit_tokens, COBATCH_STAT_COUNTER, "prefix_cache_disk_hits_total", "Of the host tier's hits, prompt tokens read back from its disk tier.", e->host.disk_hit_tokens) \
    X(int64_t, disk_cache_writes, COBATCH_STAT_COUNTER, "disk_cache_writes_total", "Conversations written to the disk tier.", e->host.disk_writes) \
    X(int64_t, disk_cache_reads, COBATCH_STAT_COUNTER, "disk_cache_reads_total", "Conversations read back from the disk tier for a load.", e->host.disk_reads) \
    X(int64_t, disk_cache_failed, COBATCH_STAT_COUNTER, "disk_cache_failures_total", "Disk-tier writes that could not be made, and reads of a missing, short or corrupt file (computed instead).", e->host.disk_failed) \
    X(int64_t, disk_cache_evicted, COBATCH_STAT_COUNTER, "disk_cache_evictions_total", "Disk-tier files removed for room or superseded.", e->host.disk_evicted) \
    X(int64_t, disk_cache_written_bytes, COBATCH_STAT_COUNTER, "disk_cache_written_bytes_total", "Bytes written to the disk tier.", e->host.disk_written_bytes) \
    X(int64_t, disk_cache_read_bytes, COBATCH_STAT_COUNTER, "disk_cache_read_bytes_total", "Bytes read from the disk tier.", e->host.disk_read_bytes) \
    X(int64_t, disk_cache_write_us, COBATCH_STAT_COUNTER, "disk_cache_write_seconds_total", "Time the disk tier's writer spent writing (its own thread).", e->host.disk_write_us) \
    X(int64_t, disk_cache_read_us, COBATCH_STAT_COUNTER, "disk_cache_read_seconds_total", "Time spent reading from the disk tier.", e->host.disk_read_us) \
    X(int64_t, embd_requests, COBATCH_STAT_COUNTER, "embedding_requests_total", "Embedding requests finished (POST /v1/embeddings).", e->embd.requests) \
    X(int64_t, embd_inputs, COBATCH_STAT_COUNTER, "embedding_inputs_total", "Embedding inputs computed.", e->embd.inputs) \
    X(int64_t, embd_tokens, COBATCH_STAT_COUNTER, "embedding_tokens_total", "Tokens of the embedding inputs computed.", e->embd.tokens) \
    X(int64_t, embd_passes, COBATCH_STAT_COUNTER, "embedding_passes_total", "Passes of the embedding context (llama_decode calls).", e->embd.passes) \
    X(int64_t, embd_us, COBATCH_STAT_COUNTER, "embedding_seconds_total", "Time the embedding passes took.", e->embd.us) \
    X(int32_t, embd_waiting, COBATCH_STAT_GAUGE, "embedding_requests_waiting", "Embedding requests accepted and not finished.", e->mail[CB_KIND_EMBED].open) \
    X(int64_t, spec_drafted, COBATCH_STAT_COUNTER, "spec_decode_num_draft_tokens_total", "Draft tokens checked (speculative decoding, --spec).", e->spec_drafted) \
    X(int64_t, spec_accepted, COBATCH_STAT_COUNTER, "spec_decode_num_accepted_tokens_total", "Draft tokens that held: tokens generated without a pass of their own.", e->spec_accepted) \
    X(int64_t, spec_steps, COBATCH_STAT_COUNTER, "spec_decode_steps_total", "Steps that checked draft tokens.", e->spec_steps)
// clang-format on

struct cobatch_stats {
#define COBATCH_STAT_FIELD(type, field, kind, metric, help, source) type field;
    COBATCH_STATS(COBATCH_STAT_FIELD)
#undef COBATCH_STAT_FIELD
};

struct cobatch_engine_params cobatch_engine_default_params(void);
struct cobatch_request_params cobatch_request_default_params(void);

/* The total KV cells these parameters ask for (n_ctx, or what its default resolves to; the split
 * layout's prefix-cache streams come on top). Without the model and the host's memory: a split
 * layout's max_model_len 0 counts 1024 cells a stream here, where init sizes it by memory
 * (cobatch_params_resolve first gives init's figure). */
int32_t cobatch_params_n_ctx(const struct cobatch_engine_params *p);
/* The requests these parameters run at once: max_num_seqs, or for 0 (memory-centric) as many as
 * the step budget and llama.cpp's sequence ids allow (COBATCH_MEMORY_SEQS, less with a smaller
 * max_num_batched_tokens): KV memory then limits them. */
#define COBATCH_MEMORY_SEQS 224 /* llama.cpp's 256 sequence ids, less 32 for the prefix cache's own */
int32_t cobatch_params_max_num_seqs(const struct cobatch_engine_params *p);
/* Whether these parameters run flash attention (flash_attn, with auto resolved as
 * cobatch_params_resolve does: measured, or the measurement cached). */
bool cobatch_params_flash_attn(const struct cobatch_engine_params *p);
/* A KV cache type's name as llama.cpp spells it ("f16", "q8_0", ...), NULL for none; and back, -1
 * for an unknown name. Whether it is quantized (stored in blocks of 32 values). */
const char *cobatch_kv_type_name(int type);
int cobatch_kv_type_from_name(const char *name);
bool cobatch_kv_type_quantized(int type);
/* Fills in what p leaves to defaults that need the model file (its KV cell size and trained
 * context: the GGUF header alone is read) and the host's memory, as cobatch_engine_init does: the
 * attention path (flash_attn and the cache types auto: measured on this host, seconds the first
 * time for a model shape, then cached under ~/.cache/cobatch), the requests run at once (max_num_seqs 0), and in the
 * split layout a running stream's cells (max_model_len, when n_ctx and max_model_len are 0), the holder streams, the
 * long lane and the host tier. A second call changes nothing. */
void cobatch_params_resolve(struct cobatch_engine_params *p);
/* The most cells a sequence may hold for a model trained on n_ctx_train (0: unknown): that, or with
 * linear or YaRN scaling and a factor, the factor x yarn_orig_ctx (or x n_ctx_train). */
int32_t cobatch_params_ctx_limit(const struct cobatch_engine_params *p, int32_t n_ctx_train);
/* The longest request (prompt and output tokens) an engine made from p accepts: a sequence's cells,
 * or the long lane's where it has one (p resolved as cobatch_params_resolve does; p is not
 * changed). */
int32_t cobatch_params_max_request_len(const struct cobatch_engine_params *p);

/* Loads the model and starts the engine thread. Returns NULL on failure and, if err is not NULL,
 * writes a message into err (errlen bytes at most). The caller owns the engine. */
cobatch_engine *cobatch_engine_init(const struct cobatch_engine_params *params, char *err, size_t errlen);

/* Stops the engine thread: every unfinished request gets a FINISHED(CANCELLED) event, then all
 * undelivered events are dropped and everything is freed. */
void cobatch_engine_free(cobatch_engine *engine);

/* Tokenizes, validates and queues a request. Returns its id (> 0) or a cobatch_status < 0, with err
 * (may be NULL) filled. A request that got an id ends in exactly one FINISHED event, whatever happens
 * (cancel, shutdown, a failed decode, memory running out: what that event needs is reserved here,
 * and a submit that cannot reserve it fails with COBATCH_ERR_NOMEM). */
cobatch_req_id cobatch_submit(cobatch_engine *engine, const struct cobatch_request_params *params,
                              struct cobatch_error *err);

/* One input of an embedding request: a text or token ids, exactly one. */
struct cobatch_embd_input {
    const char *text;      /* tokenized as cobatch_embd_tokens does */
    const int32_t *tokens; /* ids of the vocabulary, taken as they are (no BOS or EOS added) */
    int32_t n_tokens;
};

#define COBATCH_EMBD_MAX_INPUTS 2048 /* inputs of one embedding request (OpenAI's limit) */
#define COBATCH_EMBD_PASS_INPUTS 64  /* inputs one pass computes together, at most */
/* Inputs of accepted embedding requests not yet finished, beyond which cobatch_embed refuses with
 * COBATCH_ERR_QUEUE_FULL (unless none are waiting: a request alone is always taken). */
#define COBATCH_EMBD_MAX_WAITING (4 * COBATCH_EMBD_MAX_INPUTS)

struct cobatch_embd_params {
    const struct cobatch_embd_input *inputs; /* (n_inputs) copied by cobatch_embed */
    int32_t n_inputs;                        /* 1 to COBATCH_EMBD_MAX_INPUTS */
    void *user_data;                         /* returned in its event; not touched */
};

/* Queues an embedding request (an engine made with embeddings): its texts tokenized here as
 * cobatch_embd_tokens does, its token ids checked against the vocabulary. Returns its id (> 0) or a
 * cobatch_status < 0 with err (may be NULL) filled: COBATCH_ERR_INVALID (param "embeddings": the
 * engine computes none; "inputs": none given, more than COBATCH_EMBD_MAX_INPUTS, an input empty or
 * outside the vocabulary), COBATCH_ERR_TOO_LONG ("inputs": an input longer than embd_batch tokens,
 * the message names its index and the limit), COBATCH_ERR_QUEUE_FULL (max_queue requests or
 * COBATCH_EMBD_MAX_WAITING inputs waiting), COBATCH_ERR_SHUTDOWN, COBATCH_ERR_NOMEM. An accepted
 * request ends in exactly one FINISHED event: STOP with its vectors, CANCELLED (cobatch_cancel, which
 * takes its id, or shutdown), or ERROR (a failed pass; its message says why), also when memory runs
 * out: the vectors' memory is reserved here. It counts against max_queue until it ends. Any thread. */
cobatch_req_id cobatch_embed(cobatch_engine *engine, const struct cobatch_embd_params *params,
                             struct cobatch_error *err);

/* The tokens cobatch_embed computes for a text, as llama-server tokenizes for embeddings: BOS and EOS
 * as the vocabulary's metadata asks (add_special), control-token texts parsed. Returns a malloc'd array
 * the caller frees, its length in *n; NULL with err (may be NULL) filled, param "inputs" (or
 * "embeddings": the engine computes none): COBATCH_ERR_INVALID for an empty text (or one of no
 * tokens), COBATCH_ERR_TOO_LONG past embd_batch tokens (a text of more bytes than embd_batch tokens
 * can spell is refused before tokenizing), COBATCH_ERR_NOMEM. Thread-safe. */
int32_t *cobatch_embd_tokens(cobatch_engine *engine, const char *text, int32_t *n, struct cobatch_error *err);

/* What an engine's embeddings are: n_embd floats a vector (0: the engine computes none), inputs of up
 * to max_tokens tokens, the pooling as resolved (never COBATCH_POOLING_MODEL). */
struct cobatch_embd_info {
    int32_t n_embd;
    int32_t max_tokens;
    enum cobatch_pooling pooling;
};
void cobatch_embd_info(const cobatch_engine *engine, struct cobatch_embd_info *out);
/* "model", "mean", "cls", "last"; NULL for another value. */
const char *cobatch_pooling_name(enum cobatch_pooling pooling);

/* The prompt tokens cobatch_submit would queue for params (text tokenized, token ids checked
 * against the vocabulary, or messages rendered with the chat template). Returns a malloc'd array
 * the caller frees, its length in *n; NULL with err (may be NULL) filled: COBATCH_ERR_INVALID for an
 * invalid prompt, COBATCH_ERR_TOO_LONG, or COBATCH_ERR_NOMEM. Thread-safe. */
int32_t *cobatch_prompt_tokens(cobatch_engine *engine, const struct cobatch_request_params *params, int32_t *n,
                               struct cobatch_error *err);

/* What the model is, for clients that list models (Ollama's /api/tags and /api/show). */
struct cobatch_model_desc {
    char arch[32];       /* general.architecture: "llama" */
    char size_label[16]; /* its parameters, as "135M" or "7.2B" */
    char quant[24];      /* its weights' type: "Q4_1" */
    int64_t n_params, bytes;
    bool tools;    /* its chat template offers tools */
    bool thinking; /* its chat template thinks */
};
void cobatch_model_desc(const cobatch_engine *engine, struct cobatch_model_desc *out);

/* A code-infill (fill-in-the-middle) request's parts: the text before the cursor and after it, the
 * line being typed (prompt), and other files' text as context (n_extra of them, a name each). */
struct cobatch_infill {
    const char *prefix, *suffix, *prompt; /* NULL: "" */
    const char *const *extra_names, *const *extra_texts;
    size_t n_extra;
    int32_t max_tokens; /* the output's most tokens (the context left for extra files counts it twice) */
};

/* The prompt llama-server's /infill makes of these parts with the model's FIM tokens (core/fim.h:
 * its order, repo-level pattern and budgets; texts tokenized as plain text): a malloc'd array and its
 * length in *n; NULL with err: COBATCH_ERR_INVALID when the model has no FIM tokens (param "model"),
 * COBATCH_ERR_NOMEM. Thread-safe. */
int32_t *cobatch_infill_tokens(const cobatch_engine *engine, const struct cobatch_infill *parts, int32_t *n,
                               struct cobatch_error *err);

/* Asks the engine to stop a request; its cells are freed at the next step and it finishes with
 * CANCELLED (or with its natural reason if it finished first). Returns COBATCH_OK or
 * COBATCH_ERR_NOT_FOUND. */
int cobatch_cancel(cobatch_engine *engine, cobatch_req_id id);

/* Cancels every request that is waiting and has never run (each ends with CANCELLED and
 * timings.t_scheduled_us == 0); requests that have started go on. A server that drains calls it
 * so that queued clients hear at once that they must go elsewhere. */
void cobatch_cancel_waiting(cobatch_engine *engine);

/* Asks the engine to evict, before its next step, every cached prefix no running request uses
 * (an offline job calls it when a group of requests sharing a prefix is done). Running and
 * waiting requests are not affected; a later request with such a prefix computes it again. */
void cobatch_drop_cached_prefixes(cobatch_engine *engine);

/* Moves up to max events into out, waiting up to timeout_ms (-1 = forever, 0 = no wait) for at
 * least one. Returns the number moved (0 on timeout). Each event's strings belong to the caller:
 * release them with cobatch_event_clear. The queue is bounded: with 4096 events unpolled the
 * engine waits before its next step until they are polled (nothing is dropped). */
int cobatch_poll(cobatch_engine *engine, struct cobatch_event *out, int max, int timeout_ms);
void cobatch_event_clear(struct cobatch_event *ev);

/* A file descriptor that becomes readable when events are queued (an eventfd; read 8 bytes to
 * reset it). Owned by the engine. */
int cobatch_event_fd(const cobatch_engine *engine);

void cobatch_engine_stats(cobatch_engine *engine, struct cobatch_stats *out);

/* Model facts, fixed for the engine's lifetime. */
int32_t cobatch_n_ctx_seq(const cobatch_engine *engine); /* longest sequence (prompt + output): a stream, or the
                                                            pool, and never past the model's trained context */
int32_t cobatch_n_vocab(const cobatch_engine *engine);   /* token ids are [0, n_vocab) */
/* What a client's own tokenizer needs to match the engine's (the server's /tokenizer_info). */
struct cobatch_vocab_info {
    int32_t n_vocab;
    int32_t bos, eos;                /* token ids, -1 when the vocabulary has none */
    const char *bos_text, *eos_text; /* their texts ("" when none); the engine's, valid while it lives */
    bool add_bos;                    /* tokenizing a prompt adds bos */
    const char *chat_template;       /* the model's Jinja chat template, or NULL */
};
void cobatch_vocab_info(const cobatch_engine *engine, struct cobatch_vocab_info *out);
/* Bytes of text beyond which a prompt cannot fit (n_ctx_seq tokens of the vocabulary's longest text):
 * longer prompts are refused (COBATCH_ERR_TOO_LONG) before tokenizing. */
size_t cobatch_max_prompt_bytes(const cobatch_engine *engine);
const char *cobatch_model_name(const cobatch_engine *engine);
/* Where the weights live on the CPU backend: buffer_types as the load made them, comma-separated in
 * llama.cpp's order ("CPU_REPACK,CPU_Mapped"; "AMX" when AMX kernels run); repack the mode ("auto",
 * "on", "off"); amx whether AMX was allowed; why the decision in one line. Strings are the engine's,
 * valid while it lives. */
struct cobatch_weights_info {
    const char *buffer_types;
    const char *repack;
    bool amx;
    const char *why;
};
void cobatch_weights_info(const cobatch_engine *engine, struct cobatch_weights_info *out);
/* The KV memory the engine resolved its defaults to (what a server reports at start). split: one
 * stream of seq_cells cells per running request (seqs of them) and cache_streams more for the prefix
 * cache; unified: one pool of seq_cells cells. lane_cells: the long lane's pool (0 = none);
 * kv_bytes: the device cells of both at the cache's types (what llama.cpp allocates and clears at start);
 * host_cache_bytes: the prefix cache's host tier at most (0 = none). */
struct cobatch_kv_info {
    bool split;
    int32_t seqs, seq_cells, cache_streams, lane_cells;
    int64_t kv_bytes, host_cache_bytes;
    int32_t n_ctx_train;   /* the model's trained context (0: unknown) */
    int32_t ctx_limit;     /* what a sequence may reach: n_ctx_train, or what RoPE scaling makes of it */
    bool flash_attn;       /* the attention path run (auto resolved) */
    int type_k, type_v;    /* the cache's element types (enum cobatch_kv_type, auto resolved) */
    const char *attention; /* how the path was chosen, one line (the engine's, valid while it lives) */
};
void cobatch_kv_info(const cobatch_engine *engine, struct cobatch_kv_info *out);
/* max_queue: requests submitted together beyond it (n choices, several prompts) can never all wait at
 * once, so a server refuses them as a bad request rather than one to retry. */
int32_t cobatch_max_queue(const cobatch_engine *engine);

/* Tokenizes text with the engine's vocabulary (adds BOS as the model wants, parses special
 * tokens). Returns the token count; if it exceeds max, nothing useful is in out and the return
 * value is the size needed. Thread-safe. */
int32_t cobatch_tokenize(const cobatch_engine *engine, const char *text, int32_t *out, int32_t max);

/* The same with the choices spelled out: add_special adds BOS as the vocabulary wants,
 * parse_special turns control-token text into control tokens. -1 for text too long to tokenize. */
int32_t cobatch_tokenize_ext(const cobatch_engine *engine, const char *text, bool add_special, bool parse_special,
                             int32_t *out, int32_t max);

/* A token's own text, control tokens included ("<|im_end|>"): what log-probabilities name. Returns
 * the byte count (it may be a part of a UTF-8 character); if it exceeds max, out holds nothing
 * useful and the return value is the size needed. Negative for an invalid token. Thread-safe. */
int32_t cobatch_token_piece(const cobatch_engine *engine, int32_t token, char *out, int32_t max);

/* Turns tokens back into text (a tokenize round trip: an added bos/eos dropped, other special tokens as
 * their text). Returns the byte count; if it
 * exceeds max, out holds nothing useful and the return value is the size needed. Negative for invalid tokens.
 * Thread-safe. */
int32_t cobatch_detokenize(const cobatch_engine *engine, const int32_t *tokens, int32_t n, char *out, int32_t max);

/* A GBNF grammar accepting the JSON values valid against a JSON schema (JSON text), made with
 * llama.cpp's converter (objects with properties, required and additionalProperties, arrays with
 * items and lengths, enums and consts, strings with lengths, formats and patterns, numbers and
 * integers with bounds, anyOf/oneOf/allOf, local $refs). Returns a malloc'd string the caller frees,
 * or NULL with the reason in err. Needs no engine; thread-safe. */
char *cobatch_json_schema_grammar(const char *schema, char *err, size_t errlen);

/* Parses a GBNF grammar (root rule "root") once, for requests that share it
 * (cobatch_request_params.parsed_grammar: each takes a copy, so the parse leaves the submitting
 * thread). Repetition counts above 2000, which llama.cpp's parser drops or refuses, hold as written
 * up to 2^31 - 1 (rewritten as rules it keeps, 64 such repetitions a grammar). NULL with the reason in err when it does
 * not parse or is past a bound. Thread-safe; free it once the submits that use it have returned. */
cobatch_grammar *cobatch_grammar_new(const cobatch_engine *engine, const char *gbnf, char *err, size_t errlen);
void cobatch_grammar_free(cobatch_grammar *grammar);

/* Renders a chat request (params' messages and tools) once: its prompt tokens, with tools the grammar
 * its calls are held to and the parser of its output. NULL with err (may be NULL) filled
 * (COBATCH_ERR_INVALID, COBATCH_ERR_TOO_LONG, COBATCH_ERR_NOMEM). Thread-safe. */
cobatch_chat *cobatch_chat_new(cobatch_engine *engine, const struct cobatch_request_params *params,
                               struct cobatch_error *err);
void cobatch_chat_free(cobatch_chat *chat);
const int32_t *cobatch_chat_tokens(const cobatch_chat *chat, int32_t *n);
/* Whether the chat's output may hold tool calls (then read it with cobatch_chat_parse). */
bool cobatch_chat_calls_tools(const cobatch_chat *chat);
/* Whether its output is read for reasoning (the template thinks and the chat asked for it). */
bool cobatch_chat_thinks(const cobatch_chat *chat);
/* Whether cobatch_chat_parse gives more than the text as it is (tool calls or reasoning). */
bool cobatch_chat_parses(const cobatch_chat *chat);

struct cobatch_tool_call {
    char *name;
    char *arguments; /* JSON text (cut short while the output is partial) */
};
/* An output read into its reasoning, the answer's text and its tool calls. */
struct cobatch_chat_output {
    char *reasoning; /* "" when none (or not read apart) */
    char *content;
    struct cobatch_tool_call *calls;
    size_t n_calls;
};
/* Reads the output text[0, len) of a request of the chat; partial: more is to come (the call being
 * written is given as far as it goes, text that may become a call marker is held back). Returns 0,
 * or -1 with the reason in err. Thread-safe. */
int cobatch_chat_parse(const cobatch_chat *chat, const char *text, size_t len, bool partial,
                       struct cobatch_chat_output *out, char *err, size_t errlen);
void cobatch_chat_output_clear(struct cobatch_chat_output *out);

int64_t cobatch_time_us(void);
const char *cobatch_finish_reason_str(enum cobatch_finish_reason reason);

#ifdef __cplusplus
}
#endif
#endif
