/* serve.c — `cobatch serve`: the OpenAI-compatible server. */
#include "../bench/bench.h"
#include "../openai/bounds.h"
#include "../openai/openai.h"
#include "../server/server.h"
#include "args.h"
#include "cli.h"
#include "flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Latency first: vLLM too sizes max_num_batched_tokens smaller for online serving than offline.
 * Measured on mixed, 16 clients (BENCHMARKS.md, 'Chunked prefill and
 * ITL'): p99 ITL 1.08 s at 128 vs 3.09 s at 512 for the same throughput. Sixteen 4,000-token
 * prompts at once: the mean request ends at 0.82x its time at 512 and 0.80x at 64, for 1.07x the
 * wall of 512 (benchmarks/2026-12.md, 'Sixteen 4,000-token prompts'). */
#define SERVE_STEP_BUDGET 128
/* A step nobody decodes in has no gap to keep short: a lone prompt computes in passes of 512, as
 * llama-server's (its n_ubatch); in passes of 128 a 4,000-token prompt's first token came 10% later
 * and an 8,000-token one's 11% (benchmarks/2026-12.md). */
#define SERVE_PREFILL_STEP 512

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

/* Parses the flags into ep and sp (with the trace and key files' paths) and refuses empty values.
 * Returns -1 to go on, or the exit code (0 after --help, 2 on a bad flag). */
static int parse_serve_flags(int argc, char **argv, struct cobatch_engine_params *ep, cb_srv_params *sp,
                             const char **trace_path, const char **key_file) {
    static const int POLICIES[] = {COBATCH_SCHED_FCFS, COBATCH_SCHED_PRIORITY};
    static const int POOLINGS[] = {-1, COBATCH_POOLING_MEAN, COBATCH_POOLING_CLS, COBATCH_POOLING_LAST};
    _Static_assert(sizeof(enum cobatch_pooling) == sizeof(int), "ENUM rows write an int");
    const cb_flag own[] = {
        {"--host", "H", CB_FLAG_STR, &sp->host, .help = "address to listen on (default 127.0.0.1)"},
        {"--port", "P", CB_FLAG_INT, &sp->port, 0, 65535, .help = "port (default 8080; 0 = any free port)"},
        {"--api-key", "KEY", CB_FLAG_STR, &sp->api_key,
         .help = "require 'Authorization: Bearer KEY' on /v1 and tokenize routes\n(also from $COBATCH_API_KEY, or "
                 "--api-key-file: a key on the\ncommand line is visible to other local users)"},
        {"--api-key-file", "FILE", CB_FLAG_STR, key_file, .help = "the API key is this file's first line"},
        {"--served-model-name", "NAME", CB_FLAG_STR, &sp->model_name,
         .help = "the model's name in responses (default: from the GGUF)"},
        {"--max-body-bytes", "N", CB_FLAG_SIZE, &sp->max_body, 1024, 1 << 30,
         .help = "largest request body (default 1048576)"},
        {"--max-header-bytes", "N", CB_FLAG_SIZE, &sp->max_head, 1024, 1 << 20,
         .help = "largest request line + headers (default 16384)"},
        {"--max-connections", "N", CB_FLAG_INT, &sp->max_connections, 1, 1 << 20,
         .help = "open connections; beyond, 503 at once (default 1024)"},
        {"--request-timeout", "S", CB_FLAG_INT, &sp->request_timeout_s, 1, 86400,
         .help = "a request must arrive whole in S seconds (default 30)"},
        {"--idle-timeout", "S", CB_FLAG_INT, &sp->idle_timeout_s, 1, 86400,
         .help = "an idle keep-alive connection closes after S seconds (default 60)"},
        {"--write-timeout", "S", CB_FLAG_INT, &sp->write_timeout_s, 1, 86400,
         .help = "a client that reads nothing for S seconds is dropped (default 60)"},
        {"--max-stream-backlog", "N", CB_FLAG_SIZE, &sp->max_stream_backlog, 4096, 4294967296.0,
         .help = "streamed bytes a client may leave unread before it is dropped\n(default 4194304; the kernel's "
                 "send buffer holds more before it)"},
        {"--sndbuf", "N", CB_FLAG_INT, &sp->sndbuf, 1024, 1 << 30,
         .help = "each connection's kernel send buffer in bytes (default: the\nsystem's autotuning, up to 4 MiB on "
                 "Linux)"},
        {"--scheduling-policy", "fcfs|priority", CB_FLAG_ENUM, &ep->sched_policy, .choices = "fcfs|priority",
         .values = POLICIES,
         .help = "fcfs (default) refuses a request's 'priority'; priority serves\nlower values first, as vLLM, "
                 "with aging"},
        {"--priority-aging-ms", "N", CB_FLAG_I32, &ep->priority_aging_ms, 0, 1 << 30,
         .help = "priority: waiting N ms is worth one priority step (default 1000;\n0 = none, a steady stream of "
                 "urgent requests starves the others)"},
        {"--drain-timeout", "S", CB_FLAG_INT, &sp->drain_timeout_s, 1, 3600,
         .help = "after SIGTERM, seconds running requests may finish (default 30);\nqueued ones get 503 at once, a "
                 "second signal cuts at once\n(with --drain-grace: the second ends the grace, a third cuts)"},
        {"--drain-grace", "S", CB_FLAG_INT, &sp->drain_grace_s, 0, 600,
         .help = "after SIGTERM, first S seconds in which /health answers 503 and\nrequests are still served "
                 "(a router's health checks take the\nreplica out), then the drain; default 0"},
        {"-n, --max-tokens", "N", CB_FLAG_I32, &sp->defaults.max_tokens, 1, 1 << 24,
         .help = "the output limit of a request that names none (llama-server's\n-n; default: OpenAI's, the rest of "
                 "the context for a chat or\nresponse, 16 tokens for a completion); a request's own limit\nstands"},
        {"--port-file", "FILE", CB_FLAG_STR, &sp->port_file, .help = "write the port there once listening"},
        {"--no-webui", NULL, CB_FLAG_SET, &sp->no_webui,
         .help = "serve no chat page: GET / answers 404 (the page is public, as\n/health; the API calls it makes need "
                 "the key)"},
        {"--allowed-hosts", "LIST", CB_FLAG_STR, &sp->allowed_hosts,
         .help = "more Host names a loopback listener answers to, and Origins it\nserves: comma-separated; "
                 "'.example.com' for every name under it;\n'*' for any (default: localhost and loopback addresses; "
                 "a\nlistener on another address answers any Host)"},
        {"--sse-ping-interval", "S", CB_FLAG_INT, &sp->sse_ping_interval_s, -1, 3600,
         .help = "a stream silent for S seconds (queued, or its prompt being\ncomputed) gets its head and a "
                 "keep-alive: an SSE comment,\nAnthropic's ping event (default 10, under Claude Code's\n~15 s idle "
                 "limit; -1: none)"},
        {"--public-metrics", NULL, CB_FLAG_SET, &sp->public_metrics,
         .help = "/metrics without the API key (by default it needs the key, as\n/v1 does, when one is set)"},
        {"--trace", "FILE", CB_FLAG_STR, trace_path,
         .help = "one line per engine step, as `cobatch bench --trace` writes"},
        {"--no-embeddings", NULL, CB_FLAG_CLEAR, &ep->embeddings,
         .help = "no POST /v1/embeddings (501), and no embedding context: it\ntakes ~210 MB at "
                 "--embeddings-batch 512 for the default model"},
        {"--pooling", "mean|cls|last", CB_FLAG_ENUM, &ep->pooling, .choices = "none|mean|cls|last", .values = POOLINGS,
         .help = "how an input's token vectors become one (default: the model's\nGGUF pooling_type, mean for a "
                 "generative model without one)"},
        {"--embeddings-batch", "N", CB_FLAG_I32, &ep->embd_batch, 8, 1 << 16,
         .help = "tokens of one embeddings pass, and of the longest input\n(default 512; memory grows with it)"},
        {"--embeddings-share", "X", CB_FLAG_F32, &ep->embd_share, 0.01, 1,
         .help = "while generation runs, the share of the engine's time\nembedding passes may take (default 0.25: "
                 "generation keeps\n0.75 of its speed); 1: no bound"},
    };
    cb_flag eng[CB_ENGINE_FLAGS], smp[CB_SAMPLING_FLAGS];
    cb_cli cli = {.cmd = "cobatch serve",
                  .usage = "usage: cobatch serve [-m MODEL] [--host H] [--port P] [flags]\n",
                  .footer = "Sampling flags set what a request that leaves the field out gets (OpenAI's defaults\n"
                            "otherwise: temperature 1, top_p 1, a fresh seed per request).\n"
                            "The server's step budget defaults to 128 tokens, not 512: a step's length is the gap "
                            "every\nrunning stream waits between two tokens (about 0.5 s for 128 prompt tokens on 2 "
                            "cores);\nstep pacing (0.5 here) bounds a step's prompt tokens by time while requests "
                            "decode;\na step in which nobody decodes takes up to 512 prompt tokens "
                            "(--prefill-step-tokens).\n",
                  .groups = {{"serve", own, sizeof(own) / sizeof(own[0])},
                             cb_flags_sampling(smp, &sp->defaults.sampling),
                             cb_flags_engine(eng, ep)},
                  .n_groups = 3};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
    /* an empty key would refuse every request, an empty name answer as "" */
    const char *empty = sp->api_key && !sp->api_key[0]         ? "--api-key"
                        : sp->model_name && !sp->model_name[0] ? "--served-model-name"
                        : sp->port_file && !sp->port_file[0]   ? "--port-file"
                        : ep->model_path && !ep->model_path[0] ? "--model"
                                                               : NULL;
    if (empty) {
        fprintf(stderr, "cobatch serve: %s needs a value that is not empty\n", empty);
        return 2;
    }
    if ((int)ep->pooling < 0) { /* llama-server refuses OpenAI embeddings without pooling too */
        fprintf(stderr, "cobatch serve: --pooling none gives a vector per token, which OpenAI's embeddings have no "
                        "shape for; use mean, cls or last (or --no-embeddings)\n");
        return 2;
    }
    return -1;
}

/* Says how the engine laid out its KV cache (and the host tier) on stderr. */
static void say_kv(cobatch_engine *e, const struct cobatch_engine_params *ep) {
    struct cobatch_kv_info kv;
    cobatch_kv_info(e, &kv);
    const char *types[2] = {cobatch_kv_type_name(kv.type_k), cobatch_kv_type_name(kv.type_v)};
    fprintf(stderr, "cobatch serve: attention: %s\n", kv.attention);
    if (kv.split) {
        char lane[48] = "";
        if (kv.lane_cells > 0) snprintf(lane, sizeof lane, ", long lane %d cells", kv.lane_cells);
        fprintf(stderr,
                "cobatch serve: KV: %d streams of %d cells, %d more for the prefix cache%s (%.2f GB, %s/%s); host tier "
                "up to %.2f GB\n",
                kv.seqs, kv.seq_cells, kv.cache_streams, lane, kv.kv_bytes / 1e9, types[0], types[1],
                kv.host_cache_bytes / 1e9);
    } else
        fprintf(stderr, "cobatch serve: KV: one pool of %d cells for %d requests (%.2f GB, %s/%s)\n", kv.seq_cells,
                kv.seqs, kv.kv_bytes / 1e9, types[0], types[1]);
    if (kv.ctx_limit > kv.n_ctx_train && kv.n_ctx_train > 0)
        fprintf(stderr,
                "cobatch serve: RoPE %s x%.3g (--rope-scaling): sequences of up to %d tokens on a model trained on "
                "%d; past %d it recalls less well, and short prompts drift a little too (README, 'Context beyond "
                "training')\n",
                ep->rope.scaling == COBATCH_ROPE_YARN ? "yarn" : "linear", (double)kv.ctx_limit / kv.n_ctx_train,
                kv.ctx_limit, kv.n_ctx_train, kv.n_ctx_train);
}

int cb_cmd_serve(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.max_num_batched_tokens = SERVE_STEP_BUDGET;
    ep.prefill_step_tokens = SERVE_PREFILL_STEP;
    /* ITL tails: an admission adds at most half a full decode step to the gap every decoding request
     * sees (cobatch.h); measured on decode-heavy, 16 clients (BENCHMARKS.md, 'Step pacing'): p99 ITL
     * 106 ms against 149 unpaced and 132 at 1, for a first token ~250 ms later */
    ep.step_pacing = 0.5f;
    ep.embeddings = true; /* POST /v1/embeddings; --no-embeddings saves the context's memory */
    cb_srv_params sp = {.port = 8080, .defaults = cb_openai_default_defaults()};
    cb_trace_sink trace = {0};
    const char *trace_path = NULL, *key_file = NULL;
    char *key = NULL;
    int pr = parse_serve_flags(argc, argv, &ep, &sp, &trace_path, &key_file);
    if (pr >= 0) return pr;
    if (!ep.model_path) ep.model_path = cb_default_model();
    sp.model_path = ep.model_path;
    sp.sched_policy = ep.sched_policy;
    if (key_file && !(sp.api_key = key = read_key(key_file))) return 2;
    const char *env_key = getenv("COBATCH_API_KEY");
    if (!sp.api_key && env_key && env_key[0]) sp.api_key = env_key;
    sp.max_connections = fit_connections(sp.max_connections > 0 ? sp.max_connections : 1024);
    if (trace_path) {
        if (!cb_trace_open(&trace, trace_path, "serve")) {
            fprintf(stderr, "cobatch serve: cannot write %s\n", trace_path);
            free(key);
            return 1;
        }
        ep.on_step = cb_trace_sink_step;
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
    cb_say_weights("serve", e);
    say_kv(e, &ep);
    struct cobatch_embd_info embd;
    cobatch_embd_info(e, &embd);
    if (embd.n_embd > 0)
        fprintf(stderr,
                "cobatch serve: embeddings: %s pooling, %d dimensions, inputs of up to %d tokens, %.0f%% of "
                "the engine's time beside generation\n",
                cobatch_pooling_name(embd.pooling), embd.n_embd, embd.max_tokens, 100.0 * ep.embd_share);
    cb_bounds.ctx_tokens = cobatch_n_ctx_seq(e); /* a chat's messages at most, for the request checks */
    int rc = cb_srv_run(e, &sp);
    cobatch_engine_free(e); /* joins the engine thread: the trace is complete */
    if (trace.f) fclose(trace.f);
    free(key);
    return rc == 0 ? 0 : 1;
}
