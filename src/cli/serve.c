/* serve.c — `cobatch serve`: the OpenAI-compatible server. */
#include "../bench/bench.h"
#include "../server/server.h"
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void usage(void) {
    fputs("usage: cobatch serve [-m MODEL] [--host H] [--port P] [flags]\n"
          "  --host H                      address to listen on (default 127.0.0.1)\n"
          "  --port P                      port (default 8080; 0 = any free port)\n"
          "  --api-key KEY                 require 'Authorization: Bearer KEY' on /v1 and tokenize routes\n"
          "                                (also from $COBATCH_API_KEY, or --api-key-file FILE: its first line;\n"
          "                                a key on the command line is visible to other local users)\n"
          "  --served-model-name NAME      the model's name in responses (default: from the GGUF)\n"
          "  --max-body-bytes N            largest request body (default 1048576)\n"
          "  --max-header-bytes N          largest request line + headers (default 16384)\n"
          "  --max-connections N           open connections; beyond, 503 at once (default 1024)\n"
          "  --request-timeout S           a request must arrive whole in S seconds (default 30)\n"
          "  --idle-timeout S              an idle keep-alive connection closes after S seconds (default 60)\n"
          "  --write-timeout S             a client that reads nothing for S seconds is dropped (default 60)\n"
          "  --max-stream-backlog N        streamed bytes a client may leave unread before it is dropped\n"
          "                                (default 4194304; the kernel's send buffer holds more before it)\n"
          "  --sndbuf N                    each connection's kernel send buffer in bytes (default: the\n"
          "                                system's autotuning, up to 4 MiB on Linux)\n"
          "  --scheduling-policy fcfs|priority   fcfs (default) refuses a request's 'priority'; priority\n"
          "                                serves lower values first, as vLLM, with aging\n"
          "  --priority-aging-ms N         priority: waiting N ms is worth one priority step (default 1000;\n"
          "                                0 = none, a steady stream of urgent requests starves the others)\n"
          "  --drain-timeout S             after SIGTERM, seconds running requests may finish (default 30);\n"
          "                                queued ones get 503 at once, a second signal cuts at once\n"
          "  --port-file FILE              write the port there once listening\n"
          "  --trace FILE                  one line per engine step, as `cobatch bench --trace` writes\n"
          "The server's step budget defaults to 128 tokens, not 512: a step's length is the gap every\n"
          "running stream waits between two tokens (about 0.5 s for 128 prompt tokens on 2 cores).\n",
          stdout);
    cb_args_engine_help();
}

/* Latency first: vLLM too sizes max_num_batched_tokens smaller for online serving than offline.
 * Measured on mixed, 16 clients (BENCHMARKS.md, 'cobatch serve vs llama-server at 1, 4, 16 and 32
 * clients'): p99 ITL 1.08 s at 128 vs 3.09 s at 512 for the same throughput. */
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

/* The key from --api-key-file: its first line, without the line end. NULL with a message. */
static char *read_key(const char *path) {
    FILE *f = fopen(path, "r");
    char buf[1024];
    if (!f || !fgets(buf, sizeof(buf), f)) {
        fprintf(stderr, "cobatch serve: cannot read an API key from %s\n", path);
        if (f) fclose(f);
        return NULL;
    }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    if (!buf[0]) {
        fprintf(stderr, "cobatch serve: %s holds an empty API key\n", path);
        return NULL;
    }
    return strdup(buf);
}

/* Enough file descriptors for the connection cap (the soft limit is raised up to the hard one), or
 * a cap that fits the limit. */
static int fit_connections(int want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return want;
    rlim_t need = (rlim_t)want + 128; /* the model, the engine, logs, the listener */
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        int fit = rl.rlim_cur > 192 ? (int)(rl.rlim_cur - 128) : 64;
        fprintf(stderr, "cobatch serve: %d connections need %llu file descriptors, the limit is %llu: at most %d\n",
                want, (unsigned long long)need, (unsigned long long)rl.rlim_cur, fit);
        return fit;
    }
    return want;
}

int cmd_serve(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.max_num_batched_tokens = SERVE_STEP_BUDGET;
    srv_params sp = {.port = 8080};
    serve_trace trace = {0};
    const char *trace_path = NULL, *key_file = NULL;
    char *key = NULL;
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
        } else if (!strcmp(a, "--api-key-file") && has) {
            key_file = argv[++i];
        } else if (!strcmp(a, "--max-body-bytes") && has && cb_parse_int(argv[i + 1], 1024, 1 << 30, &x)) {
            sp.max_body = (size_t)x, i++;
        } else if (!strcmp(a, "--max-header-bytes") && has && cb_parse_int(argv[i + 1], 1024, 1 << 20, &x)) {
            sp.max_head = (size_t)x, i++;
        } else if (!strcmp(a, "--max-connections") && has && cb_parse_int(argv[i + 1], 1, 1 << 20, &x)) {
            sp.max_connections = (int)x, i++;
        } else if (!strcmp(a, "--request-timeout") && has && cb_parse_int(argv[i + 1], 1, 86400, &x)) {
            sp.request_timeout_s = (int)x, i++;
        } else if (!strcmp(a, "--idle-timeout") && has && cb_parse_int(argv[i + 1], 1, 86400, &x)) {
            sp.idle_timeout_s = (int)x, i++;
        } else if (!strcmp(a, "--write-timeout") && has && cb_parse_int(argv[i + 1], 1, 86400, &x)) {
            sp.write_timeout_s = (int)x, i++;
        } else if (!strcmp(a, "--max-stream-backlog") && has && cb_parse_int(argv[i + 1], 4096, 1LL << 32, &x)) {
            sp.max_stream_backlog = (size_t)x, i++;
        } else if (!strcmp(a, "--sndbuf") && has && cb_parse_int(argv[i + 1], 1024, 1 << 30, &x)) {
            sp.sndbuf = (int)x, i++;
        } else if (!strcmp(a, "--scheduling-policy") && has &&
                   (!strcmp(argv[i + 1], "fcfs") || !strcmp(argv[i + 1], "priority"))) {
            ep.sched_policy = !strcmp(argv[++i], "fcfs") ? COBATCH_SCHED_FCFS : COBATCH_SCHED_PRIORITY;
        } else if (!strcmp(a, "--priority-aging-ms") && has && cb_parse_int(argv[i + 1], 0, 1 << 30, &x)) {
            ep.priority_aging_ms = (int32_t)x, i++;
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
    sp.sched_policy = ep.sched_policy;
    if (key_file && !(sp.api_key = key = read_key(key_file))) return 2;
    const char *env_key = getenv("COBATCH_API_KEY");
    if (!sp.api_key && env_key && env_key[0]) sp.api_key = env_key;
    sp.max_connections = fit_connections(sp.max_connections > 0 ? sp.max_connections : 1024);
    if (trace_path) {
        if (!(trace.f = fopen(trace_path, "w"))) {
            fprintf(stderr, "cobatch serve: cannot write %s\n", trace_path);
            free(key);
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
        free(key);
        return 1;
    }
    int rc = srv_run(e, &sp);
    cobatch_engine_free(e); /* joins the engine thread: the trace is complete */
    if (trace.f) fclose(trace.f);
    free(key);
    return rc == 0 ? 0 : 1;
}
