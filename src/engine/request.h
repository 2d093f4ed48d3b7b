/* request.h — a request built on the caller's thread (inside the engine): the chat compiler
 * (chat.c: prompts and chats rendered, grammars and parsers made) and request building (request.c:
 * the checks, the engine-side state, the mailbox). */
#ifndef CB_ENGINE_REQUEST_H
#define CB_ENGINE_REQUEST_H

#include "engine_internal.h"
#include "../runtime/llama_common.h"
#include "../runtime/sampling.h"

/* A chat rendered once (cobatch_chat_new), shared by the requests that name it. */
struct cobatch_chat {
    int32_t *tokens;
    int32_t n_tokens;
    struct llama_sampler *grammar; /* the tool calls' (lazy, or fed its prefill), cloned by each request; or NULL */
    char **stops;                  /* (n_stops) the call format's */
    size_t n_stops;
    int32_t *shown; /* (n_shown) control tokens whose text the output shows (call markers) */
    size_t n_shown;
    cb_chat_parser *parser; /* NULL: the output is its text (no tool calls, no reasoning to read) */
    bool calls;             /* the output may hold tool calls */
    bool lazy;              /* the grammar holds from a trigger on (it waits out a reasoning block) */
    /* the output is read for reasoning: its markers, whether the output starts inside a block, the
       most tokens one may have (< 0: no bound) */
    bool thinks;
    char *think_start, *think_end;
    bool think_open;
    int32_t think_budget;
};

/* chat.c: the prompt tokens of p (its text, its tokens or its messages rendered), malloc'd; NULL with
 * err filled. */
int32_t *cb_engine_prompt_tokens(cobatch_engine *e, const struct cobatch_request_params *p, int32_t *n,
                                 struct cobatch_error *err);
/* chat.c: the limits a grammar is held to (the engine's --limit grammar-*). */
cb_grammar_limits cb_engine_grammar_limits(const cobatch_engine *e);

/* request.c: the checks of p's own fields (not its prompt): COBATCH_OK, or the code with err filled. */
int cb_engine_check_request(const cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err);
/* request.c: the request p asks for, its prompt tokens taken from its chat or made from its prompt,
 * its grammar and log-probability rows ready; NULL with err filled. */
cb_request *cb_engine_request_new(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err);
/* request.c: puts r in the mailbox with its final event reserved; returns its id, or the code with
 * err filled (r is then freed). */
cobatch_req_id cb_engine_enqueue(cobatch_engine *e, cb_request *r, struct cobatch_error *err);

#endif
