/* runner.h — `cobatch batch`: an offline job of OpenAI Batch API requests through one engine.
 *
 * The job, in order: read and check every line (bad ones go to the error file); skip the
 * custom_ids the output already has (resume); tokenize every prompt as the engine will; build the
 * prefix tree of all prompts and the prefix-sharing groups (group.h); order the groups by
 * decode/prefill ratio, members of a group contiguous; submit in that order (the engine admits
 * FCFS, so submission order is admission order), keeping at most `window` requests submitted but
 * unfinished; write each result line as it finishes; report.
 *
 * Runs on the calling thread; installs SIGINT/SIGTERM handlers for the job's duration (the first
 * signal cancels what is running and ends the job cleanly, a second one kills the process). */
#ifndef CB_BATCH_RUNNER_H
#define CB_BATCH_RUNNER_H

#include "../openai/openai.h"

#include <cobatch.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *input_path;      /* required */
    const char *output_path;     /* required; appended to, custom_ids already there are skipped */
    const char *errors_path;     /* required; rewritten */
    const char *json_path;       /* the report as JSON, or NULL */
    bool grouping;               /* prefix grouping and ratio order; false: input order */
    bool enlarge;                /* with grouping: first-level prefixes enlarged (the DP pass); false: the
                                    groups are the prefix tree's first-level nodes as they are */
    bool reorder;                /* with grouping: groups by decode/prefill ratio; false: in the tree's
                                    (lexicographic) order */
    bool progress;               /* a progress line on stderr */
    int32_t window;              /* requests submitted but unfinished at most; 0 = 4 x max_num_seqs */
    cb_openai_defaults defaults; /* for the fields a body leaves out (OpenAI's by default) */
} cb_batch_params;

/* What the job did; the report prints it. */
typedef struct {
    int64_t lines, requests, ok, failed, refused, skipped, not_run;
    bool interrupted;
    double wall_s;                                  /* first submission to last result */
    double prep_s;                                  /* before that: loading the model, tokenizing, grouping */
    int64_t prompt_tokens, output_tokens;           /* of finished requests: logical (sum of n_prompt), sampled */
    int64_t processed_prefill, prefix_hits;         /* from the engine: prompt tokens computed, taken from its cache */
    int64_t steps, generated, preemptions, swapped; /* from the engine: steps, tokens sampled, preemptions (swapped) */
    int64_t plan_tokens, tree_tokens, group_tokens; /* over the planned requests: see cb_grouping */
    int32_t n_groups, window;
} cb_batch_report;

/* Runs the whole job with an engine made from ep (ep->model_path required). Returns 0 when every
 * line was dealt with (refused lines and failed requests included: they are in the error file), 1
 * on a failure that stopped the job (message on stderr; a failed write keeps the output whole and
 * resumable), 2 when two of the input, output and error paths name one file (refused before
 * anything is opened), 130 when interrupted by a signal. */
int cb_batch_run(const cb_batch_params *bp, const struct cobatch_engine_params *ep);

/* The report on stderr, and as JSON into path when path is not NULL (0, or -1 if it cannot be
 * written). */
void cb_batch_report_print(const cb_batch_report *r, const cb_batch_params *bp);
int cb_batch_report_json(const cb_batch_report *r, const cb_batch_params *bp, const struct cobatch_engine_params *ep,
                         const char *path);

#endif
