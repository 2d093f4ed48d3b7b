/* serve.c — `cobatch serve`: the OpenAI-compatible server. */
#include "../bench/bench.h"
#include "../server/server.h"
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void usage(void) {
    fputs("usage: cobatch serve [-m MODEL] [--host H] [--port P] [flags]\n"
          "  --host H                      address to listen on (default 127.0.0.1)\n"
          "  --port P                      port (default 8080; 0 = any free port)\n"
          "  --api-key KEY                 require 'Authorization: Bearer KEY' on /v1 and tokenize routes\n"
          "  --served-model-name NAME      the model's name in responses (default: from the GGUF)\n"
          "  --max-body-bytes N            largest request body (default 1048576)\n"
          "  --drain-timeout S             after SIGTERM, seconds running requests may finish (default 30)\n"
          "  --port-file FILE              write the port there once listening\n"
          "  --trace FILE                  one line per engine step, as `cobatch bench --trace` writes\n"
          "The server's step budget defaults to 128 tokens, not 512: a step's length is the gap every\n"
          "running stream waits between two tokens (about 0.5 s for 128 prompt tokens on 2 cores).\n",
          stdout);
    cb_args_engine_help();
}

/* Latency first: vLLM too sizes max_num_batched_tokens smaller for online serving than offline.
 * Measured on mixed, 16 clients (BENCHMARKS.md, session 3): p99 ITL 1.08 s at 128 vs 3.09 s at
 * 512 for the same throughput. */
#define SERVE_STEP_BUDGET 128

typedef struct {
    FILE *f;
    int64_t t0;
} serve_trace;

/* Engine thread: one line per step, the columns of `cobatch bench --trace` (config "serve"). */
static void trace_step(const struct cobatch_step_info *s, void *user) {
    serve_trace *t = user;
    if (!t->t0) t->t0 = s->t_start_us;
    cb_trace_write_step(t->f, "serve", t->t0, s);
    fflush(t->f); /* readable while the server runs (tail -f); one write a step */
}

int cmd_serve(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.max_num_batched_tokens = SERVE_STEP_BUDGET;
    srv_params sp = {.port = 8080};
    serve_trace trace = {0};
    const char *trace_path = NULL;
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
        } else if (!strcmp(a, "--host") && has) {
            sp.host = argv[++i];
        } else if (!strcmp(a, "--port") && has && cb_parse_int(argv[i + 1], 0, 65535, &x)) {
            sp.port = (int)x, i++;
        } else if (!strcmp(a, "--api-key") && has) {
            sp.api_key = argv[++i];
        } else if (!strcmp(a, "--served-model-name") && has) {
            sp.model_name = argv[++i];
        } else if (!strcmp(a, "--max-body-bytes") && has && cb_parse_int(argv[i + 1], 1024, 1 << 30, &x)) {
            sp.max_body = (size_t)x, i++;
        } else if (!strcmp(a, "--drain-timeout") && has && cb_parse_int(argv[i + 1], 1, 3600, &x)) {
            sp.drain_timeout_s = (int)x, i++;
        } else if (!strcmp(a, "--port-file") && has) {
            sp.port_file = argv[++i];
        } else if (!strcmp(a, "--trace") && has) {
            trace_path = argv[++i];
        } else {
            fprintf(stderr,
                    "cobatch serve: unknown, incomplete or invalid option '%s'%s%s (see cobatch serve --help)\n", a,
                    has ? " " : "", has ? argv[i + 1] : "");
            return 2;
        }
    }
    if (!ep.model_path) ep.model_path = cb_default_model();
    sp.model_path = ep.model_path;
    if (trace_path) {
        if (!(trace.f = fopen(trace_path, "w"))) {
            fprintf(stderr, "cobatch serve: cannot write %s\n", trace_path);
            return 1;
        }
        cb_trace_write_header(trace.f);
        ep.on_step = trace_step;
        ep.on_step_user = &trace;
    }
    char err[512] = "";
    cobatch_engine *e = cobatch_engine_init(&ep, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "cobatch serve: %s\n", err);
        if (trace.f) fclose(trace.f);
        return 1;
    }
    int rc = srv_run(e, &sp);
    cobatch_engine_free(e); /* joins the engine thread: the trace is complete */
    if (trace.f) fclose(trace.f);
    return rc == 0 ? 0 : 1;
}
