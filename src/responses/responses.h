/* responses.h — OpenAI's Responses API (/v1/responses, /v1/responses/input_tokens) as a dialect
 * of the chat engine, as Codex CLI and the Agents SDK speak it. A request is translated into the
 * OpenAI chat request the server already runs (every field carried over or refused by name, never
 * dropped); the response object, its stream of events and errors are written in the Responses
 * shapes. Responses are not stored: `store` true and `previous_response_id` are refused by name.
 * Pure: no sockets, no engine. */
#ifndef CB_RESPONSES_H
#define CB_RESPONSES_H

#include "../openai/dialect.h"
#include "../openai/openai.h"

#include <stdbool.h>
#include <stddef.h>

struct cJSON;
struct cobatch_tool_call;

/* Translates a Responses body (root, only read) into an OpenAI chat completions body (*out) and
 * the request's fields every response object repeats (*echo: instructions, max_output_tokens,
 * metadata, parallel_tool_calls, temperature, text, tool_choice, tools, top_p, ...); the caller
 * deletes both. count_only: an input_tokens body. Returns 0, or -1 with e set: 400 naming the
 * field refused (an image, a hosted tool, `store` true, an unknown field or item type), 503 when
 * out of memory. */
int cb_responses_to_chat(const struct cJSON *root, bool count_only, struct cJSON **out, struct cJSON **echo,
                         cb_openai_error *e);
/* The namespace a function the request offers belongs to (tools: its tools as given), or NULL. */
const char *cb_responses_namespace_of(const struct cJSON *tools, const char *name);

/* The usage of a response: the prompt's tokens (cached of them read from the prefix cache) and
 * the output's. */
typedef struct {
    int input_tokens, cached, output_tokens, reasoning; /* reasoning: of the output's */
} cb_responses_usage;

/* A whole response: status "completed", or "incomplete" (max_output_tokens) when finish is
 * "length"; output a reasoning item with the reasoning (none when it is "" or NULL), a message item
 * with the text (none when text is "") and a function_call item per call. echo: from
 * cb_responses_to_chat (only read). */
typedef struct {
    const char *reasoning;
    const char *text;
    const struct cobatch_tool_call *calls;
    size_t n_calls;
    const char *const *call_ids;
    const char *finish;
    cb_responses_usage usage;
} cb_responses_answer;
char *cb_responses_json(const char *id, long long created, const char *model, const struct cJSON *echo,
                        const cb_responses_answer *a);

/* An error body, OpenAI's shape ({"error": {"message", "type", "param", "code"}}). */
char *cb_responses_error_json(const cb_openai_error *e);

/* A streamed response: output items in order (a message's text, function calls), each event
 * numbered. Each call below returns the server-sent events to write (malloc'd, "event: T\ndata:
 * {...}\n\n" each; "" when there is nothing to write), NULL when out of memory. */
typedef struct {
    char id[64], model[128];
    long long created;
    const struct cJSON *echo; /* the caller's, alive until the stream ends */
    struct cJSON *output;     /* the items so far, the open one last */
    int seq;                  /* sequence_number of the next event */
    int open;                 /* the open item: -1 none, -2 a message, -3 reasoning, k >= 0 the output's call k */
} cb_responses_stream;
/* response.created and response.in_progress. */
char *cb_responses_stream_start(cb_responses_stream *st, const char *id, long long created, const char *model,
                                const struct cJSON *echo);
/* The end: the open item done, then response.completed, or response.incomplete when finish is
 * "length", with the whole response. */
char *cb_responses_stream_end(cb_responses_stream *st, const char *finish, cb_responses_usage usage);
/* Frees what the stream holds (any time; the state is then empty). */
void cb_responses_stream_free(cb_responses_stream *st);

/* OpenAI's Responses API as the server drives it (dialect.h): the functions above behind one interface. */
extern const cb_dialect cb_responses_dialect;

#endif
