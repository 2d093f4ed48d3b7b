/* main.c — `cobatch COMMAND [flags]`. */
#include "cli.h"

#include <cobatch.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fputs("usage: cobatch COMMAND [flags]   (cobatch COMMAND --help for its flags)\n"
          "commands:\n"
          "  run       stream one completion to stdout\n"
          "  serve     an OpenAI-compatible HTTP server (completions, chat, streaming)\n"
          "  loadgen   measure an OpenAI-compatible server (cobatch serve, llama-server) like vllm bench serve\n"
          "  batch     run an OpenAI Batch API JSONL file offline, prefix-sharing requests together\n"
          "  bench     run one workload through several engine configurations and compare them\n"
          "  mkmodel   write a random-weight GGUF model with a real model's shapes\n",
          f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cb_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cb_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "batch")) return cb_cmd_batch(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cb_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "loadgen")) return cb_cmd_loadgen(argc - 1, argv + 1);
    if (!strcmp(cmd, "mkmodel")) return cb_cmd_mkmodel(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "cobatch: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
