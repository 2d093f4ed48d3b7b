/* openai.h — the OpenAI request and response shapes: parse and validate a JSON body into engine
 * parameters, and format responses, stream chunks and error bodies. Pure: no sockets, no engine
 * thread; used by the server thread and the batch runner. */
#ifndef CB_OPENAI_H
#define CB_OPENAI_H

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>

#define CB_OPENAI_MAX_STOP 16
/* The line a chat's verbosity low or high adds to its instructions (cb_openai_parse_json). */
#define CB_OPENAI_VERBOSITY_LOW "Answer concisely, in as few words as the question allows."
#define CB_OPENAI_VERBOSITY_HIGH "Answer in detail, explaining fully."
#define CB_OPENAI_MAX_N 16        /* choices of one prompt (n) */
#define CB_OPENAI_MAX_CHOICES 128 /* choices of one request: prompts x n */

/* One prompt of a completions request: text, or token ids. */
typedef struct {
    char *text; /* NULL for token ids */
    int32_t *tokens;
    int32_t n_tokens;
} cb_openai_prompt;

/* EMBEDDINGS: POST /v1/embeddings (embeddings.h parses it; the server keeps the kind on its request) */
typedef enum { CB_OPENAI_COMPLETION, CB_OPENAI_CHAT, CB_OPENAI_EMBEDDINGS } cb_openai_kind;

/* A parsed request. Owns every string and array the engine params point to. */
typedef struct {
    cb_openai_kind kind;
    struct cobatch_request_params params;
    int n;                     /* choices to generate per prompt, each an engine request (1 to CB_OPENAI_MAX_N) */
    cb_openai_prompt *prompts; /* (n_prompts) completions: the prompt list (one prompt: one entry); params
                                  hold the first; chat: NULL */
    int n_prompts;
    const char *suffix; /* completions: the text after the insertion (fill-in-the-middle), or NULL */
    bool echo;          /* completions: the prompt comes back before the output (its log-probabilities with logprobs) */
    int top;            /* with params.logprobs: alternatives per token (completions logprobs, chat top_logprobs) */
    bool tokens_as_ids; /* vLLM's return_tokens_as_token_ids: log-probabilities name tokens "token_id:N" */
    /* structured output: response_format json_object / json_schema give json_schema (JSON text), to be
     * turned into params.grammar by cb_openai_resolve_schema; llama-server's `grammar` gives GBNF */
    char *json_schema;
    char *grammar;    /* behind params.grammar */
    char *prediction; /* chat: behind params.prediction (Predicted Outputs' content, its parts joined) */
    bool calls_tools; /* chat: tools are offered and tool_choice is not none (the output may be calls) */
    /* chat, reasoning (cb_openai_parse_reasoning): the template's variables (behind params), the name the
       budget was given by, whether the answer leaves the reasoning out (include_reasoning false) and a
       stream sends it whole once its block ends (stream_reasoning false) */
    char *template_kwargs;
    const char *budget_key;
    bool omit_reasoning, hold_reasoning;
    bool stream, include_usage;
    bool has_priority; /* a non-zero priority was given (needs the priority scheduling policy) */
    char *model;       /* as the client named it, or NULL */
    /* storage behind params */
    struct cobatch_chat_message *messages;
    char **strings; /* (strings_cap) every role/content/stop string, freed together */
    size_t n_strings, strings_cap;
    const char *stops[CB_OPENAI_MAX_STOP];
    struct cobatch_logit_bias *logit_bias; /* (params.n_logit_bias) */
} cb_openai_request;

/* An error to return: HTTP status plus OpenAI's error fields. */
typedef struct {
    int status;
    const char *type; /* invalid_request_error, authentication_error, ... */
    char message[256];
    char param[64]; /* the offending field, or "" */
} cb_openai_error;

/* OpenAI's defaults for what a request leaves out: temperature 1, top_p 1, a fresh random seed,
 * no penalties. */
struct cobatch_sampling cb_openai_default_sampling(void);

/* What a request that leaves a field out gets: OpenAI's defaults, or the operator's flags. */
typedef struct {
    struct cobatch_sampling sampling;
    int32_t max_tokens; /* > 0: the output limit of a request that names none (llama-server's -n); 0:
                           OpenAI's (16 tokens for a completion, the rest of the context for a chat) */
} cb_openai_defaults;
cb_openai_defaults cb_openai_default_defaults(void);

/* Parses body (len bytes) for kind, fields left out taking `defaults` (NULL: OpenAI's; a server's
 * operator may set others). Returns 0 and fills r, or -1 and fills e (status 400). r is
 * valid until cb_openai_request_free either way. Linear in the body's size. A body whose strings hold a
 * NUL character is refused (C strings would end there). */
int cb_openai_parse(cb_openai_kind kind, const cb_openai_defaults *defaults, const char *body, size_t len,
                    cb_openai_request *r, cb_openai_error *e);
/* The same for a body already parsed (the batch runner's JSONL lines); root is only read and
 * stays the caller's. */
struct cJSON;
int cb_openai_parse_json(cb_openai_kind kind, const cb_openai_defaults *defaults, struct cJSON *root,
                         cb_openai_request *r, cb_openai_error *e);
void cb_openai_request_free(cb_openai_request *r);
/* A chat request's messages into r (messages.c). 0, or -1 with e set (400 naming the field, 503). */
int cb_openai_parse_messages(struct cJSON *root, cb_openai_request *r, cb_openai_error *e);
/* A copy of s that r keeps (freed with r); NULL when out of memory. */
char *cb_openai_keep(cb_openai_request *r, const char *s);
/* The most messages and tool calls a chat may hold (--limit messages, else the context's tokens;
 * 0 while neither is known). */
int cb_openai_max_messages(void);
/* chat_template_kwargs: the most variables, and bytes of their JSON. */
#define CB_KWARGS_MAX 64
#define CB_KWARGS_MAX_BYTES 65536
/* A chat request's reasoning fields (reasoning.c): reasoning_effort, chat_template_kwargs,
 * reasoning_format, thinking_budget_tokens / reasoning_budget_tokens, include_reasoning,
 * separate_reasoning, stream_reasoning into r. 0, or -1 with e set (400 naming the field). */
int cb_openai_parse_reasoning(const struct cJSON *root, cb_openai_request *r, cb_openai_error *e);
/* Turns r->json_schema (if any) into params.grammar with convert (cobatch_json_schema_grammar).
 * Returns 0, or -1 with e set: 400 naming response_format for a schema convert refuses. */
typedef char *(*cb_openai_schema_fn)(const char *schema, char *err, size_t errlen);
int cb_openai_resolve_schema(cb_openai_request *r, cb_openai_schema_fn convert, cb_openai_error *e);

/* The field of r that an engine refusal names (struct cobatch_error's param), as the OpenAI request
 * names it: a prompt's tokens are its prompt (a chat's, its messages); a grammar made from a JSON
 * schema is response_format; no field at all is the prompt (a chat's messages). */
const char *cb_openai_param(const cb_openai_request *r, const char *engine_param);
/* Parses JSON text s[0, len) (cJSON), which must be one well-formed value (RFC 8259) and nothing
 * else. NULL with e set when it fails: 400 for text that is not JSON, 503 when it is (the parse
 * ran out of memory). The caller deletes the result. */
struct cJSON *cb_openai_json_parse(const char *s, size_t len, cb_openai_error *e);
/* A request body as JSON: cb_openai_json_parse once the text is valid UTF-8 with no NUL in a string
 * (cJSON would end a string there: a prompt or a stop string cut short without a word); NULL with e
 * set (400, or 503 out of memory). The caller deletes the result. */
struct cJSON *cb_openai_body_parse(const char *body, size_t len, cb_openai_error *e);
/* Whether s[0, len) is well-formed JSON (one value; a NUL right at the end allowed). Linear, no
 * allocation. */
bool cb_openai_json_well_formed(const char *s, size_t len);
/* Whether JSON text s[0, len) holds a NUL byte or a \u0000 escape. */
bool cb_openai_has_nul(const char *s, size_t len);

/* A token's text (cobatch_token_piece): its length, or the size needed when it exceeds cap. */
typedef int32_t (*cb_openai_piece_fn)(void *user, int32_t token, char *buf, int32_t cap);

/* Log-probabilities of a run of tokens of one choice, for a response or a stream chunk. */
typedef struct {
    const struct cobatch_logprob *rows; /* n_rows rows of `stride` entries: [0] the token (logprob NAN for
                                           an echoed prompt's first token: null), then its alternatives */
    int32_t n_rows, stride;
    int32_t top;         /* alternatives to list (<= stride - 1) */
    int32_t text_offset; /* completions: where the first token's text starts in the choice's text
                            (characters); the next run's starts where this one ends (*end_offset) */
    bool as_ids;         /* tokens named "token_id:N" instead of by their text */
    cb_openai_piece_fn piece;
    void *user;
} cb_openai_logprobs;

/* All returned strings are malloc'd JSON; the caller frees them. NULL on allocation failure. */
char *cb_openai_error_json(const cb_openai_error *e);
/* e as a 400 naming param (NULL: none; the message printf-style); returns -1. */
int cb_openai_bad(cb_openai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* e as a 503 (out of memory; retry later); returns -1. */
int cb_openai_nomem(cb_openai_error *e);
/* id: "cmpl-..." or "chatcmpl-...". */
/* A response's usage. cached_tokens >= 0 adds usage.prompt_tokens_details.cached_tokens (prefix cache
 * hits), reasoning_tokens >= 0 usage.completion_tokens_details.reasoning_tokens, prediction >= 0 (a
 * request with a prediction: its tokens over every choice) its accepted_prediction_tokens (the
 * prediction's tokens the output took as drafts that held) and rejected_prediction_tokens (the
 * rest); < 0 omits them. */
typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
    int prediction, accepted_prediction;
} cb_openai_usage;
typedef struct {
    const char *text;
    const char *reasoning;        /* chat: message.reasoning_content (NULL or "": none) */
    const char *finish;           /* "stop", "length" or "tool_calls" */
    const cb_openai_logprobs *lp; /* NULL: "logprobs": null */
    /* chat: the tool calls the output made (n_calls; ids call_ids[k]); with calls an empty text is
     * "content": null */
    const struct cobatch_tool_call *calls;
    size_t n_calls;
    const char *const *call_ids;
} cb_openai_choice;
char *cb_openai_response_json(cb_openai_kind kind, const char *id, long created, const char *model,
                              const cb_openai_choice *choices, int n_choices, const cb_openai_usage *usage);
/* A chat stream chunk of reasoning (delta.reasoning_content, llama-server's and vLLM's). */
char *cb_openai_reasoning_chunk_json(const char *id, long created, const char *model, int index, const char *text);
/* A stream chunk. role_first: the chat chunk that opens the stream (role, and content text: "", or
 * none for NULL, as a stream of tool calls opens).
 * finish: NULL while streaming. */
char *cb_openai_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model, int index,
                           const char *text, const char *finish, bool role_first, const cb_openai_logprobs *lp);
/* A chat stream chunk of tool call `call` of choice index: its first (call_id and name given, with
 * the arguments written so far) or a further piece of its arguments (call_id and name NULL). */
char *cb_openai_tool_chunk_json(const char *id, long created, const char *model, int index, int call,
                                const char *call_id, const char *name, const char *arguments);
/* The characters (UTF-8 code points started) of the pieces of tokens, one after the other: where the
 * text of the token after them starts, counting from offset. */
int32_t cb_openai_text_end(const cb_openai_logprobs *lp);
/* The last chunk of a stream the server cut short or that failed: finish_reason "abort" and an
 * "error" object (the OpenAI SDKs raise it), for status 503 or 500. */
char *cb_openai_abort_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model, int index,
                                 int status, const char *type, const char *message);
char *cb_openai_usage_chunk_json(cb_openai_kind kind, const char *id, long created, const char *model,
                                 const cb_openai_usage *usage);

#endif
