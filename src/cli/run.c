/* run.c — `cobatch run`: one completion streamed to stdout. */
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16

static void usage(void) {
    fputs("usage: cobatch run [-m MODEL] -p TEXT [--chat] [-n N] [--stop S]... [--ignore-eos] [flags]\n"
          "  -p, --prompt TEXT             the prompt (required, not empty)\n"
          "  --chat                        apply the model's chat template (TEXT is the user message)\n"
          "  --system TEXT                 a system message, with --chat\n"
          "  -n, --max-tokens N            tokens to generate at most, default 128\n"
          "  --stop S                      stop string (repeatable, up to 16)\n"
          "  --ignore-eos                  keep going past end-of-generation tokens\n"
          "  --stats                       print timings to stderr at the end\n",
          stdout);
    cb_args_sampling_help();
    cb_args_engine_help();
}

int cmd_run(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    struct cobatch_request_params rp = cobatch_request_default_params();
    ep.max_num_seqs = 1;
    const char *prompt = NULL, *system = NULL;
    const char *stops[MAX_STOPS];
    bool chat = false, show_stats = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cb_args_engine(argc, argv, &i, &ep);
        if (r == 0) r = cb_args_sampling(argc, argv, &i, &rp.sampling);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--system") && i + 1 < argc) {
            system = argv[++i];
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            rp.ignore_eos = true;
        } else if (!strcmp(a, "--stats")) {
            show_stats = true;
        } else if (!strcmp(a, "--stop") && i + 1 < argc) {
            if (rp.n_stop == MAX_STOPS) {
                fprintf(stderr, "cobatch run: at most %d stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[rp.n_stop++] = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--max-tokens")) && i + 1 < argc) {
            int64_t n;
            if (!cb_parse_int(argv[++i], 1, 1 << 24, &n)) {
                fprintf(stderr, "cobatch run: %s takes a whole number >= 1 (got '%s')\n", a, argv[i]);
                return 2;
            }
            rp.max_tokens = (int32_t)n;
        } else {
            fprintf(stderr, "cobatch run: unknown or incomplete option '%s' (see cobatch run --help)\n", a);
            return 2;
        }
    }
    if (!prompt) {
        fprintf(stderr, "cobatch run: no prompt: give -p TEXT\n");
        return 2;
    }
    if (!prompt[0]) {
        fprintf(stderr, "cobatch run: the prompt is empty\n");
        return 2;
    }
    if (!ep.model_path) ep.model_path = cb_default_model();
    rp.stop = stops;
    struct cobatch_chat_message msgs[2];
    if (chat) {
        size_t n = 0;
        if (system) msgs[n++] = (struct cobatch_chat_message){"system", system};
        msgs[n++] = (struct cobatch_chat_message){"user", prompt};
        rp.messages = msgs;
        rp.n_messages = n;
    } else {
        rp.prompt = prompt;
    }

    char err[512] = "";
    cobatch_engine *e = cobatch_engine_init(&ep, err, sizeof(err));
    if (!e) {
        fprintf(stderr, "cobatch run: %s\n", err);
        return 1;
    }
    cobatch_req_id id = cobatch_submit(e, &rp, err, sizeof(err));
    if (id < 0) {
        fprintf(stderr, "cobatch run: %s\n", err);
        cobatch_engine_free(e);
        return 1;
    }
    int rc = 0;
    for (bool done = false; !done;) {
        struct cobatch_event ev;
        if (cobatch_poll(e, &ev, 1, -1) != 1) continue;
        if (ev.text_len) fwrite(ev.text, 1, ev.text_len, stdout);
        fflush(stdout);
        if (ev.type == COBATCH_EVENT_FINISHED) {
            done = true;
            fputc('\n', stdout);
            if (ev.reason == COBATCH_FINISH_ERROR) {
                fprintf(stderr, "cobatch run: %s\n", ev.error ? ev.error : "error");
                rc = 1;
            }
            if (show_stats) {
                double ttft = (double)(ev.timings.t_first_token_us - ev.timings.t_submit_us) / 1e3;
                double total = (double)(ev.timings.t_finish_us - ev.timings.t_submit_us) / 1e6;
                double tpot = ev.n_generated > 1 ? (double)(ev.timings.t_finish_us - ev.timings.t_first_token_us) /
                                                       1e3 / (ev.n_generated - 1)
                                                 : 0;
                fprintf(stderr,
                        "finish=%s prompt_tokens=%d completion_tokens=%d ttft_ms=%.1f tpot_ms=%.2f total_s=%.2f\n",
                        cobatch_finish_reason_str(ev.reason), ev.n_prompt, ev.n_generated, ttft, tpot, total);
            }
        }
        cobatch_event_clear(&ev);
    }
    cobatch_engine_free(e);
    return rc;
}
