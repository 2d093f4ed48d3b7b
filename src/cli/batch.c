/* batch.c — `cobatch batch`: an OpenAI Batch API JSONL job, offline, through one engine. */
#include "../batch/runner.h"
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH_MAX_NUM_SEQS 64 /* admission is by KV budget; many sequences keep the steps full */

static void usage(void) {
    fputs("usage: cobatch batch --input JOB.jsonl --output OUT.jsonl [flags] [engine flags]\n"
          "  -i, --input FILE              requests, one per line: {\"custom_id\", \"method\": \"POST\",\n"
          "                                \"url\": \"/v1/completions\" or \"/v1/chat/completions\", \"body\"}\n"
          "  -o, --output FILE             results, one line per request as it finishes; appended to, and\n"
          "                                custom_ids already there are skipped (rerun to resume)\n"
          "  --errors FILE                 refused lines and failed requests (default: OUTPUT less .jsonl\n"
          "                                plus _errors.jsonl); rewritten each run\n"
          "  --json FILE                   the report as JSON\n"
          "  --no-prefix-grouping          submit in input order (no prefix groups, no reordering)\n"
          "  --window N                    requests submitted but unfinished at most (default 4 x max-num-seqs)\n"
          "  --progress                    a progress line on stderr even when it is not a terminal\n"
          "  --no-progress                 none even on a terminal\n"
          "batch mode's defaults: --kv-layout unified (a group's prefix shared in place) and\n"
          "--max-num-seqs 64 (16 with --kv-layout split).\n",
          stdout);
    cb_args_engine_help();
}

/* OUT.jsonl -> OUT_errors.jsonl; other names get _errors.jsonl appended. Caller frees. */
static char *default_errors_path(const char *out) {
    size_t n = strlen(out), k = n;
    if (n > 6 && !strcmp(out + n - 6, ".jsonl")) k = n - 6;
    char *p = malloc(k + sizeof("_errors.jsonl"));
    if (p) snprintf(p, k + sizeof("_errors.jsonl"), "%.*s_errors.jsonl", (int)k, out);
    return p;
}

int cmd_batch(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    cb_batch_params bp = {.grouping = true, .progress = isatty(STDERR_FILENO)};
    ep.max_num_seqs = -1;              /* not given yet */
    ep.kv_layout = COBATCH_KV_UNIFIED; /* an offline job groups shared prefixes: shared in place, 64 at once */
    int64_t x;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        int r = cb_args_engine(argc, argv, &i, &ep);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if ((!strcmp(a, "-i") || !strcmp(a, "--input")) && has) {
            bp.input_path = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has) {
            bp.output_path = argv[++i];
        } else if (!strcmp(a, "--errors") && has) {
            bp.errors_path = argv[++i];
        } else if (!strcmp(a, "--json") && has) {
            bp.json_path = argv[++i];
        } else if (!strcmp(a, "--no-prefix-grouping")) {
            bp.grouping = false;
        } else if (!strcmp(a, "--progress")) {
            bp.progress = true;
        } else if (!strcmp(a, "--no-progress")) {
            bp.progress = false;
        } else if (!strcmp(a, "--window") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            bp.window = (int32_t)x, i++;
        } else {
            fprintf(stderr,
                    "cobatch batch: unknown, incomplete or invalid option '%s'%s%s (see cobatch batch --help)\n", a,
                    has ? " " : "", has ? argv[i + 1] : "");
            return 2;
        }
    }
    if (!bp.input_path || !bp.output_path) {
        fprintf(stderr, "cobatch batch: %s is required (see cobatch batch --help)\n",
                !bp.input_path ? "--input" : "--output");
        return 2;
    }
    if (ep.max_num_seqs < 0) { /* split KV gives each sequence n_ctx / max_num_seqs cells: keep it few */
        int32_t n =
            ep.kv_layout == COBATCH_KV_UNIFIED ? BATCH_MAX_NUM_SEQS : cobatch_engine_default_params().max_num_seqs;
        ep.max_num_seqs = n < ep.max_num_batched_tokens ? n : ep.max_num_batched_tokens;
    }
    if (!ep.model_path) ep.model_path = cb_default_model();
    char *errors = bp.errors_path ? NULL : default_errors_path(bp.output_path);
    if (!bp.errors_path) bp.errors_path = errors;
    int rc = bp.errors_path ? cb_batch_run(&bp, &ep) : 1;
    free(errors);
    return rc;
}
