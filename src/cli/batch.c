/* batch.c — `cobatch batch`: an OpenAI Batch API JSONL job, offline, through one engine. */
#include "../batch/runner.h"
#include "../bench/bench.h"
#include "../openai/openai.h"
#include "args.h"
#include "cli.h"
#include "flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OUT.jsonl -> OUT_errors.jsonl; other names get _errors.jsonl appended. Caller frees. */
static char *default_errors_path(const char *out) {
    size_t n = strlen(out), k = n;
    if (n > 6 && !strcmp(out + n - 6, ".jsonl")) k = n - 6;
    char *p = malloc(k + sizeof("_errors.jsonl"));
    if (p) snprintf(p, k + sizeof("_errors.jsonl"), "%.*s_errors.jsonl", (int)k, out);
    return p;
}

int cb_cmd_batch(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    cb_batch_params bp = {.grouping = true,
                          .enlarge = true,
                          .reorder = true,
                          .progress = isatty(STDERR_FILENO),
                          .defaults = cb_openai_default_defaults()};
    const char *trace_path = NULL;
    ep.max_num_seqs = -1; /* not given yet */
    const cb_flag own[] = {
        {"-i, --input", "FILE", CB_FLAG_STR, &bp.input_path,
         .help = "requests, one per line: {\"custom_id\", \"method\": \"POST\",\n\"url\": \"/v1/completions\" or "
                 "\"/v1/chat/completions\", \"body\"}"},
        {"-o, --output", "FILE", CB_FLAG_STR, &bp.output_path,
         .help = "results, one line per request as it finishes; appended to, and\ncustom_ids already there are "
                 "skipped (rerun to resume)"},
        {"--errors", "FILE", CB_FLAG_STR, &bp.errors_path,
         .help = "refused lines and failed requests (default: OUTPUT less .jsonl\nplus _errors.jsonl); rewritten "
                 "each run"},
        {"--json", "FILE", CB_FLAG_STR, &bp.json_path, .help = "the report as JSON"},
        {"--trace", "FILE", CB_FLAG_STR, &trace_path,
         .help = "one line per engine step, as `cobatch bench --trace` writes\n(the tokens of each step)"},
        {"-n, --max-tokens", "N", CB_FLAG_I32, &bp.defaults.max_tokens, 1, 1 << 24,
         .help = "the output limit of a request that names none (llama-server's\n-n; default: OpenAI's, the rest of "
                 "the context for a chat or\nresponse, 16 tokens for a completion); a request's own limit\nstands"},
        {"--no-prefix-grouping", NULL, CB_FLAG_CLEAR, &bp.grouping,
         .help = "submit in input order (no prefix groups, no reordering)"},
        {"--no-prefix-enlarge", NULL, CB_FLAG_CLEAR, &bp.enlarge,
         .help = "groups of the prefix tree's first-level prefixes as they are (no\nDP enlargement)"},
        {"--no-group-reorder", NULL, CB_FLAG_CLEAR, &bp.reorder,
         .help = "groups in the prefix tree's order, not decode-heavy first"},
        {"--window", "N", CB_FLAG_I32, &bp.window, 1, 1 << 20,
         .help = "requests submitted but unfinished at most (default 4 x max-num-seqs)"},
        {"--progress", NULL, CB_FLAG_SET, &bp.progress,
         .help = "a progress line on stderr even when it is not a terminal"},
        {"--no-progress", NULL, CB_FLAG_CLEAR, &bp.progress, .help = "none even on a terminal"},
    };
    cb_flag eng[CB_ENGINE_FLAGS], smp[CB_SAMPLING_FLAGS];
    cb_cli cli = {.cmd = "cobatch batch",
                  .usage = "usage: cobatch batch --input JOB.jsonl --output OUT.jsonl [flags] [engine flags]\n",
                  .footer =
                      "batch mode's default layout is split, as serve's: a group's prefix is copied to each\n"
                      "stream that shares it (BENCHMARKS.md: 1.6-1.9x faster on this project's CPU than\n"
                      "--kv-layout unified, whose steps attend over every cell the pool holds);\n"
                      "--kv-layout unified --max-num-seqs auto lets the KV cells, not a count, limit the batch.\n",
                  .groups = {{"batch", own, sizeof(own) / sizeof(own[0])},
                             cb_flags_sampling(smp, &bp.defaults.sampling),
                             cb_flags_engine(eng, &ep)},
                  .n_groups = 3};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    if (!bp.input_path || !bp.output_path) {
        fprintf(stderr, "cobatch batch: %s is required (see cobatch batch --help)\n",
                !bp.input_path ? "--input" : "--output");
        return 2;
    }
    if (ep.max_num_seqs < 0) { /* a fixed count: on this project's CPU more rows a step do not pay for the
                                  attention over more cells (BENCHMARKS.md, 'Memory-centric batching') */
        int32_t n = cobatch_engine_default_params().max_num_seqs;
        ep.max_num_seqs = n < ep.max_num_batched_tokens ? n : ep.max_num_batched_tokens;
    }
    if (!ep.model_path) ep.model_path = cb_default_model();
    char *errors = bp.errors_path ? NULL : default_errors_path(bp.output_path);
    if (!bp.errors_path) bp.errors_path = errors;
    cb_trace_sink trace = {0};
    if (trace_path && !cb_trace_open(&trace, trace_path, "batch")) {
        fprintf(stderr, "cobatch batch: cannot write %s\n", trace_path);
        free(errors);
        return 1;
    }
    if (trace.f) {
        ep.on_step = cb_trace_sink_step;
        ep.on_step_user = &trace;
    }
    int rc = bp.errors_path ? cb_batch_run(&bp, &ep) : 1; /* the engine is gone after: the trace is whole */
    if (trace.f) fclose(trace.f);
    free(errors);
    return rc;
}
