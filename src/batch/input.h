/* input.h — the OpenAI Batch API input: one request per line,
 *   {"custom_id": "...", "method": "POST", "url": "/v1/completions" | "/v1/chat/completions",
 *    "body": {... as the server takes it ...}}
 * Every line is checked on its own; a bad one becomes an error line (with its line number) and
 * never stops the others. One thread (the runner's). */
#ifndef CB_BATCH_INPUT_H
#define CB_BATCH_INPUT_H

#include "../openai/openai.h"
#include "../util/buf.h"
#include "idset.h"
#include "output.h"

#include <stdint.h>
#include <stdio.h>

#define CB_BATCH_LINE_MAX (16u << 20) /* bytes; a longer line is refused */

/* One accepted request, from its line to its result line. Items are allocated one by one and
 * never move: req.params points into req. */
typedef struct {
    int32_t line; /* 1-based line number in the input */
    char *custom_id;
    cb_openai_kind kind;
    cb_openai_request req; /* the parsed body; freed once submitted */
    /* filled by the runner: */
    int32_t *tokens; /* (n_tokens) the prompt as the engine will queue it; freed once submitted */
    int32_t n_tokens;
    cobatch_chat *chat; /* a chat with tools: rendered once, its output read for calls; freed by the runner */
    int32_t max_tokens; /* what the engine will allow: min(body's max_tokens, context - prompt) */
    cobatch_req_id id;  /* > 0 once submitted */
    int32_t group;      /* its prefix group in the plan, -1 without grouping */
    bool finished;
    bool sampled;   /* a token came: it runs (or ran), its prefix in use while it does */
    cb_buf text;    /* the output so far */
    bool text_lost; /* a piece could not be kept (out of memory): the request fails */
} cb_batch_item;

typedef struct {
    cb_batch_item **items; /* (n) accepted requests not already done, in input order */
    size_t n, cap;
    int64_t lines;                      /* non-blank lines */
    int64_t skipped;                    /* lines whose custom_id is already in the output */
    int64_t refused;                    /* lines written to the error file */
    const cb_openai_defaults *defaults; /* for the fields a body leaves out; NULL: OpenAI's */
} cb_batch_input;

/* Whether two lines of f share a custom_id: 1 with the second named in err, 0 when none do, -1 on
 * a read error or allocation failure. f is at its start again after 0 or 1 (a regular file). */
int cb_batch_input_duplicates(FILE *f, char *err, size_t errlen);

/* Reads every line of f. Lines whose custom_id is in done are counted and skipped; refused lines
 * go to o as error lines. Returns 0, or -1 with a message on a read error or allocation failure
 * (in is then still valid to free). */
int cb_batch_input_read(FILE *f, const cb_idset *done, const cb_openai_defaults *defaults, cb_batch_out *o,
                        cb_batch_input *in, char *err, size_t errlen);

/* Frees an item's body and tokens (after submission), or the whole input. */
void cb_batch_item_release(cb_batch_item *it);
void cb_batch_input_free(cb_batch_input *in);

#endif
