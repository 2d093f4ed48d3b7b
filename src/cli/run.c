/* run.c — `cobatch run`: one completion streamed to stdout. */
#include "args.h"
#include "cli.h"
#include "flags.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16

int cb_cmd_run(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    struct cobatch_request_params rp = cobatch_request_default_params();
    ep.max_num_seqs = 1;
    const char *prompt = NULL, *system = NULL;
    const char *stops[MAX_STOPS];
    bool chat = false, show_stats = false;
    const cb_flag own[] = {
        {"-p, --prompt", "TEXT", CB_FLAG_STR, &prompt, .help = "the prompt (required, not empty)"},
        {"--chat", NULL, CB_FLAG_SET, &chat, .help = "apply the model's chat template (TEXT is the user message)"},
        {"--system", "TEXT", CB_FLAG_STR, &system, .help = "a system message, with --chat"},
        {"-n, --max-tokens", "N", CB_FLAG_I32, &rp.max_tokens, 1, 1 << 24,
         .help = "tokens to generate at most, default 128"},
        {"--stop", "S", CB_FLAG_LIST, stops, .count = &rp.n_stop, .max = MAX_STOPS,
         .help = "stop string (repeatable, up to 16)"},
        {"--ignore-eos", NULL, CB_FLAG_SET, &rp.ignore_eos, .help = "keep going past end-of-generation tokens"},
        {"--stats", NULL, CB_FLAG_SET, &show_stats,
         .help = "print the finish reason, token counts and timings to stderr"},
    };
    cb_flag eng[CB_ENGINE_FLAGS], smp[CB_SAMPLING_FLAGS];
    cb_cli cli = {.cmd = "cobatch run",
                  .usage =
                      "usage: cobatch run [-m MODEL] -p TEXT [--chat] [-n N] [--stop S]... [--ignore-eos] [flags]\n",
                  .groups = {{"run", own, sizeof(own) / sizeof(own[0])},
                             cb_flags_sampling(smp, &rp.sampling),
                             cb_flags_engine(eng, &ep)},
                  .n_groups = 3};
    int pr = cb_flags_parse(&cli, argc, argv, stdout, stderr);
    if (pr != 0) return pr == 1 ? 0 : 2;
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
        if (system) msgs[n++] = (struct cobatch_chat_message){.role = "system", .content = system};
        msgs[n++] = (struct cobatch_chat_message){.role = "user", .content = prompt};
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
    cb_say_weights("run", e);
    struct cobatch_error refused;
    cobatch_req_id id = cobatch_submit(e, &rp, &refused);
    if (id < 0) {
        fprintf(stderr, "cobatch run: %s\n", refused.message);
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
            fflush(stdout); /* the answer's line ends before --stats writes its own on stderr */
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
                        "finish=%s prompt_tokens=%d completion_tokens=%d ttft_ms=%.1f tpot_ms=%.2f total_s=%.2f "
                        "drafted=%d accepted=%d\n",
                        cobatch_finish_reason_str(ev.reason), ev.n_prompt, ev.n_generated, ttft, tpot, total,
                        ev.n_drafted, ev.n_accepted);
            }
        }
        cobatch_event_clear(&ev);
    }
    cobatch_engine_free(e);
    return rc;
}

void cb_say_weights(const char *cmd, const cobatch_engine *e) {
    struct cobatch_weights_info w;
    cobatch_weights_info(e, &w);
    fprintf(stderr, "cobatch %s: weights in %s (--repack %s): %s\n", cmd, w.buffer_types[0] ? w.buffer_types : "?",
            w.repack, w.why);
}
