/* libFuzzer: a chat request through what it drives into llama.cpp's common library, as the server
 * does: the OpenAI parser and its bounds, a response_format schema to a grammar, the messages and
 * tools (history with calls and results) rendered by a chat template with tools, the tool-call
 * grammar, and the output parser reading an output as it streams (partial) and whole. Input: a
 * byte choosing the template, the request body, a NUL, the model's output. Nothing may crash,
 * overflow the stack, or run past libFuzzer's timeout; a refusal always says why. */
#include "../../src/openai/openai.h"
#include "../../src/runtime/llama_common.h"
#include "../../src/util/gbnf.h"
#include "fuzz_vocab.h"

#include <cobatch.h>

/* Templates with tools: ours for the default model, and some of llama.cpp's (each its own call
 * format and parser). */
static const char *const template_files[] = {
    CB_FUZZ_SOURCE "/templates/chatml-tools.jinja",
    CB_FUZZ_LLAMA_SRC "/models/templates/Qwen-Qwen3-0.6B.jinja",
    CB_FUZZ_LLAMA_SRC "/models/templates/meta-llama-Llama-3.1-8B-Instruct.jinja",
    CB_FUZZ_LLAMA_SRC "/models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja",
    CB_FUZZ_LLAMA_SRC "/models/templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    CB_FUZZ_LLAMA_SRC "/models/templates/openai-gpt-oss-120b.jinja",
    CB_FUZZ_SOURCE "/templates/chatml-think.jinja",
};
#define N_TEMPLATES (sizeof(template_files) / sizeof(*template_files))
static cb_chat_templates *templates[N_TEMPLATES];

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    if (t && fread(t, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (t) t[n] = '\0';
    fclose(f);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_vocab();
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        char *src = slurp(template_files[i]), err[256] = "";
        templates[i] = src ? cb_common_templates_new(NULL, src, err, sizeof(err)) : NULL;
        if (!templates[i]) fprintf(stderr, "fuzz_chat: template %s not used: %s\n", template_files[i], err);
        free(src);
    }
    return 0;
}

static const cb_grammar_limits lim = {.max_nesting = 512, .max_elements = 1000000, .max_states = 1024};

static void render(const cb_chat_templates *t, const struct cobatch_request_params *p, const char *out, size_t n_out) {
    const struct llama_vocab *v = fuzz_vocab();
    cb_common_msg *msgs = calloc(p->n_messages ? p->n_messages : 1, sizeof(*msgs));
    if (!msgs) abort();
    for (size_t i = 0; i < p->n_messages; i++) { /* as the engine hands them over (chat.c) */
        const struct cobatch_chat_message *m = &p->messages[i];
        msgs[i] = (cb_common_msg){m->role ? m->role : "user",
                                  m->content ? m->content : "",
                                  m->tool_calls,
                                  m->tool_call_id,
                                  m->name,
                                  m->reasoning};
    }
    cb_common_tools tools = {.tools = p->tools,
                             .choice = p->tool_choice == COBATCH_TOOL_CHOICE_AUTO       ? CB_TOOLS_AUTO
                                       : p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? CB_TOOLS_REQUIRED
                                                                                        : CB_TOOLS_NONE,
                             .function = p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? p->tool_function : NULL,
                             .single = p->single_tool_call};
    /* the reasoning asked for, read apart when the template thinks (as the engine does, chat.c) */
    const cb_common_thinking *th = cb_common_template_thinking(t);
    const struct cobatch_reasoning *q = &p->reasoning;
    cb_common_reasoning rs = {.extract = th->thinks && !q->keep,
                              .think = q->think == COBATCH_THINK_ON    ? 1
                                       : q->think == COBATCH_THINK_OFF ? 0
                                                                       : -1,
                              .effort = th->takes_effort ? q->effort : NULL,
                              .kwargs = p->template_kwargs,
                              .json_schema = th->thinks && !q->keep ? p->json_schema : NULL};
    cb_common_rendered x = {0};
    char err[256] = "";
    if (cb_common_render(t, msgs, p->n_messages, p->tools ? &tools : NULL, &rs, NULL, &x, err, sizeof(err)) != 0) {
        if (!err[0]) abort();
    } else {
        if (!x.prompt) abort();
        struct llama_sampler *s = x.grammar ? cb_common_grammar_sampler(v, &x, &lim, err, sizeof(err)) : NULL;
        if (x.grammar && !s && !err[0]) abort();
        fuzz_feed(v, s, out, n_out);
        if (s) llama_sampler_free(s);
        /* the server reads no output nesting past --limit json-depth (default 128) */
        int depth = 0, deepest = 0;
        for (size_t i = 0; i < n_out; i++) {
            if (out[i] == '[' || out[i] == '{') deepest = ++depth > deepest ? depth : deepest;
            if ((out[i] == ']' || out[i] == '}') && depth > 0) depth--;
        }
        for (int partial = 1; x.parser && deepest <= 128 && partial >= 0; partial--) {
            char *content = NULL, *reasoning = NULL;
            cb_common_call *calls = NULL;
            size_t n_calls = 0;
            err[0] = '\0';
            if (cb_common_parse(x.parser, out, n_out, partial, &reasoning, &content, &calls, &n_calls, err,
                                sizeof(err)) == 0) {
                if (!content) abort();
                for (size_t k = 0; k < n_calls; k++)
                    if (!calls[k].name || !calls[k].arguments) abort();
            } else if (!err[0]) {
                abort();
            }
            free(content);
            free(reasoning);
            cb_common_calls_free(calls, n_calls);
        }
    }
    cb_common_rendered_clear(&x);
    free(msgs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const cb_chat_templates *t = templates[data[0] % N_TEMPLATES];
    size_t n, n_out;
    const char *out;
    char *body = fuzz_split(data + 1, size - 1, &n, &out, &n_out);
    cb_openai_request r;
    cb_openai_error e;
    if (cb_openai_parse(CB_OPENAI_CHAT, NULL, body, n, &r, &e) == 0 &&
        cb_openai_resolve_schema(&r, cb_common_schema_to_grammar, &e) == 0) {
        char err[256] = "";
        if (r.params.grammar) { /* response_format's schema, or a grammar of its own, widened as the engine does */
            char *wide = cb_gbnf_widen(r.params.grammar, NULL);
            if (!wide) abort();
            struct llama_sampler *s =
                cb_common_grammar_new(fuzz_vocab(), wide, false, NULL, 0, NULL, 0, &lim, err, sizeof(err));
            free(wide);
            if (!s && !err[0]) abort();
            fuzz_feed(fuzz_vocab(), s, out, n_out);
            if (s) llama_sampler_free(s);
        }
        if (t) render(t, &r.params, out, n_out);
    }
    cb_openai_request_free(&r);
    free(body);
    return 0;
}
