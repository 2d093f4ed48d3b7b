/* output.h — the OpenAI Batch API output: one result line per finished request, one error line
 * per refused line or failed request, each flushed as soon as it is written so that an
 * interrupted job keeps everything it finished. Also reads back an earlier output to resume.
 * One thread (the runner's). */
#ifndef CB_BATCH_OUTPUT_H
#define CB_BATCH_OUTPUT_H

#include "../openai/openai.h"
#include "idset.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int out, err;     /* file descriptors: results (appended to), errors (rewritten each run) */
    char model[128];  /* the model's name in response bodies */
    long created;     /* unix time of the run, in ids and bodies */
    uint64_t seq;     /* id counter */
    int64_t n_result; /* lines written */
    int64_t n_error;
    bool failed;   /* a write failed (disk full, ...): the job must stop */
    char why[160]; /* what failed, for the message */
} cb_batch_out;

/* Adds to done the custom_id of every complete result line already in path (a missing file adds
 * nothing). A last line without its newline (a write cut short) is cut off the file, so appending
 * starts on a fresh line. Lines that are not JSON objects with a string custom_id are ignored.
 * Returns 0, or -1 with a message (unreadable file, out of memory). */
int cb_batch_out_load_done(const char *path, cb_idset *done, char *err, size_t errlen);

/* Opens out_path for appending and err_path anew (truncated). model_path names the model the way
 * the server does (its file name). Returns 0, or -1 with a message and nothing open. The caller
 * has made sure the two are different files, and neither is the input (cb_batch_same_file). */
int cb_batch_out_open(cb_batch_out *o, const char *out_path, const char *err_path, const char *model_path, char *err,
                      size_t errlen);

/* A result line: status 200 and the body a non-streaming /v1/completions or /v1/chat/completions
 * reply has (n_cached: usage.prompt_tokens_details.cached_tokens); calls: a chat's tool calls, or
 * NULL. finish: "stop", "length" or "tool_calls".
 * Each line goes out in one write; one that fails (disk full, a file size limit) is cut off again,
 * so the file keeps whole lines only. Returns 0, or -1 when the write failed (o->failed, o->why):
 * the line is not in the file, its request counts as not done (a rerun runs it). */
int cb_batch_out_result(cb_batch_out *o, const char *custom_id, cb_openai_kind kind, const char *text,
                        const struct cobatch_chat_output *calls, const char *finish, int n_prompt, int n_generated,
                        int n_cached, int n_reasoning);

/* An error line: {"id", "custom_id" (or null), "response": null, "error": {"code", "message"}};
 * the message is "line N: " and the formatted text. Returns 0 or -1 as above. */
int cb_batch_out_error(cb_batch_out *o, int32_t line, const char *custom_id, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

void cb_batch_out_close(cb_batch_out *o);

/* Whether path is a regular file or /dev/null (or, with may_be_missing, names none yet): never
 * another device (/dev/zero never ends, /dev/full never takes a line), a pipe or a directory. */
bool cb_batch_regular_file(const char *path, bool may_be_missing);

/* Whether paths a and b name the same file (the same path, or one existing file under two names,
 * or two names for a file not yet made in the same directory). */
bool cb_batch_same_file(const char *a, const char *b);

/* Reads one line of f, without its newline (or "\r\n"), into *buf (grown as needed, NUL-terminated).
 * Keeps at most max bytes: a longer line is still consumed to its end, and *too_long is set.
 * Returns the length kept, or -1 at end of file (or on a read error: check ferror). Sets *complete
 * to whether the line ended with a newline. */
long cb_batch_read_line(FILE *f, char **buf, size_t *cap, size_t max, bool *too_long, bool *complete);

#endif
