/* The engine embedded in a program: one chat request, its answer streamed to stdout. */
#include <cobatch.h>
#include <stdio.h>

int main(int argc, char **argv) {
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.model_path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    char err[256];
    cobatch_engine *e = cobatch_engine_init(&ep, err, sizeof(err)); /* loads; starts the engine thread */
    if (!e) return fprintf(stderr, "%s\n", err), 1;
    struct cobatch_chat_message msgs[] = {{.role = "system", .content = "You are a helpful assistant."},
                                          {.role = "user", .content = "What is the capital of France?"}};
    struct cobatch_request_params rp = cobatch_request_default_params();
    rp.messages = msgs, rp.n_messages = 2, rp.max_tokens = 32;
    struct cobatch_error refused;
    if (cobatch_submit(e, &rp, &refused) < 0) return fprintf(stderr, "%s\n", refused.message), 1; /* any thread */
    for (struct cobatch_event ev = {0}; ev.type != COBATCH_EVENT_FINISHED; cobatch_event_clear(&ev))
        if (cobatch_poll(e, &ev, 1, -1) == 1) fwrite(ev.text, 1, ev.text_len, stdout); /* TOKEN..., FINISHED */
    cobatch_engine_free(e);
    return puts(""), 0;
}
