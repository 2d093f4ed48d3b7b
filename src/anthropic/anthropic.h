/* anthropic.h — the Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) as a
 * dialect of the chat engine. A request is translated into the OpenAI chat request the server
 * already runs (every field carried over or refused by name, never dropped); answers, stream
 * events and errors are written in Anthropic's shapes. Pure: no sockets, no engine. */
#ifndef CB_ANTHROPIC_H
#define CB_ANTHROPIC_H

#include "../openai/dialect.h"
#include "../openai/openai.h"

#include <stdbool.h>
#include <stddef.h>

struct cJSON;
struct cobatch_tool_call;

/* Translates a Messages body (root, only read) into an OpenAI chat completions body (*out, which
 * the caller deletes). count_only: a count_tokens body (no max_tokens, no sampling, no stream).
 * Returns 0, or -1 with e set: 400 naming the field refused (an image, redacted thinking, a server
 * tool, an unknown field or block type), 503 when out of memory. */
int cb_anthropic_to_chat(const struct cJSON *root, bool count_only, struct cJSON **out, cb_openai_error *e);

/* An error body: {"type": "error", "error": {"type", "message"}}, its type from e's status. */
char *cb_anthropic_error_json(const cb_openai_error *e);

/* Anthropic's stop_reason for an answer: "max_tokens" for length, "tool_use" when it made calls,
 * "stop_sequence" when one of the request's stop strings ended it (stop >= 0), else "end_turn". */
const char *cb_anthropic_stop_reason(const char *finish, size_t n_calls, int stop);

/* A whole answer. input_tokens counts the prompt tokens not read from the prefix cache
 * (cache_read of them were), as Anthropic's usage does. */
typedef struct {
    const char *thinking; /* the reasoning: a thinking block first ("" or NULL for none) */
    const char *text;     /* "" for none: no text block */
    const struct cobatch_tool_call *calls;
    size_t n_calls;
    const char *const *call_ids;
    const char *stop_reason;
    const char *stop_sequence; /* NULL: null */
    int input_tokens, cache_read, output_tokens;
} cb_anthropic_message;
char *cb_anthropic_message_json(const char *id, const char *model, const cb_anthropic_message *m);

/* A streamed answer's content blocks, in order: a thinking block, a text block and tool_use blocks.
 * Each call below returns the server-sent events to write (malloc'd, "event: T\ndata: {...}\n\n"
 * each; "" when there is nothing to write), NULL when out of memory. */
typedef struct {
    int index; /* blocks opened so far */
    int open;  /* the open block: -1 none, -2 text, -3 thinking, k >= 0 the tool call k of the output */
} cb_anthropic_stream;
/* message_start (an empty message, the prompt's usage) and a ping. */
char *cb_anthropic_stream_start(cb_anthropic_stream *st, const char *id, const char *model, int input_tokens,
                                int cache_read);
/* The end: the open block closed, message_delta (stop_reason, stop_sequence, the usage: the
 * prompt's tokens not cached and cached, as the message's, and the output's), message_stop. */
char *cb_anthropic_stream_end(cb_anthropic_stream *st, const char *stop_reason, const char *stop_sequence,
                              int input_tokens, int cache_read, int output_tokens);

/* Anthropic's Messages API as the server drives it (dialect.h): the functions above behind one interface. */
extern const cb_dialect cb_anthropic_dialect;

#endif
