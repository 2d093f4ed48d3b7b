/* chat.c — the chat compiler: a request's prompt tokens (text, tokens or messages rendered with the
 * chat template), and chats (cobatch_chat_new) with their grammar, stop strings, parser and
 * reasoning markers. */
#include "request.h"
#include "../util/util.h"

#include <stdlib.h>
#include <string.h>

/* Where p's current turn begins: its last user message (0 when it has none). */
static size_t past_turns(const struct cobatch_request_params *p) {
    size_t at = 0;
    for (size_t i = 0; i < p->n_messages; i++)
        if (!p->messages[i].role || !strcmp(p->messages[i].role, "user")) at = i;
    return at;
}

/* The tokens of p's messages rendered with the chat template and its tools; *extra (may be NULL)
 * gets the rest of the rendering (cb_model_chat_tokens). */
static int32_t *chat_tokens(cobatch_engine *e, const struct cobatch_request_params *p, const cb_common_reasoning *rs,
                            cb_common_rendered *extra, int32_t *n, struct cobatch_error *err) {
    if (p->n_messages == 0) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "messages", "messages is empty");
        return NULL;
    }
    if ((unsigned)p->tool_choice > COBATCH_TOOL_CHOICE_NONE) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "tool_choice", "tool_choice: not a choice");
        return NULL;
    }
    size_t current = past_turns(p); /* the messages before it are earlier turns' */
    if ((unsigned)p->reasoning.past > COBATCH_PAST_REASONING_CURRENT) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "reasoning_context", "reasoning_context: not a choice");
        return NULL;
    }
    for (size_t i = 0; p->reasoning.past == COBATCH_PAST_REASONING_ALL && i < p->n_messages; i++) {
        bool earlier = i < current;
        if (p->messages[i].reasoning && p->messages[i].reasoning[0] &&
            !(earlier ? e->model.shows_reasoning_past : e->model.shows_reasoning_current)) {
            cb_engine_refuse(err, COBATCH_ERR_INVALID, "reasoning_context",
                             earlier ? "every turn's reasoning was asked for, and the chat template leaves out the "
                                       "reasoning of turns before the last user message: ask for the current turn's, "
                                       "or the template's own choice"
                                     : "every turn's reasoning was asked for, and the chat template shows no "
                                       "reasoning handed back, not even the current turn's");
            return NULL;
        }
    }
    cb_common_msg *msgs = calloc(p->n_messages, sizeof(*msgs));
    bool any = false;
    int32_t *t = NULL;
    for (size_t i = 0; msgs && i < p->n_messages; i++) {
        const struct cobatch_chat_message *m = &p->messages[i];
        bool shown = p->reasoning.past != COBATCH_PAST_REASONING_CURRENT || i >= current;
        msgs[i] = (cb_common_msg){.role = m->role ? m->role : "user",
                                  .content = m->content ? m->content : "",
                                  .tool_calls = m->tool_calls,
                                  .tool_call_id = m->tool_call_id,
                                  .name = m->name,
                                  .reasoning = shown ? m->reasoning : NULL};
        any |= msgs[i].content[0] != '\0' || m->tool_calls || (shown && m->reasoning && m->reasoning[0]);
    }
    cb_common_tools tools = {.tools = p->tools,
                             .choice = p->tool_choice == COBATCH_TOOL_CHOICE_AUTO       ? CB_TOOLS_AUTO
                                       : p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? CB_TOOLS_REQUIRED
                                                                                        : CB_TOOLS_NONE,
                             .function = p->tool_choice == COBATCH_TOOL_CHOICE_REQUIRED ? p->tool_function : NULL,
                             .single = p->single_tool_call};
    char why[256] = "";
    bool tools_at_fault = false;
    if (msgs && any)
        t = cb_model_chat_tokens(&e->model, msgs, p->n_messages, p->tools ? &tools : NULL, rs, extra, n, why,
                                 sizeof(why));
    if (!t && why[0] && p->tools && !strstr(why, "out of memory")) { /* the messages alone render: the tools failed */
        char none[8];
        int32_t k = 0,
                *alone = cb_model_chat_tokens(&e->model, msgs, p->n_messages, NULL, rs, NULL, &k, none, sizeof(none));
        tools_at_fault = alone != NULL;
        free(alone);
    }
    bool oom = !msgs;
    free(msgs);
    if (!any && !oom) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "messages", "the prompt is empty");
    } else if (!t && why[0] && !strstr(why, "out of memory")) { /* the template refused them */
        cb_engine_refuse(err, COBATCH_ERR_INVALID, tools_at_fault && p->tools ? "tools" : "messages", "%s", why);
    } else if (!t && (oom || cb_model_has_chat_template(&e->model))) {
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory rendering the chat template");
    } else if (!t) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "messages",
                         "the model has no built-in chat template this engine can apply");
    }
    return t;
}

/* Whether p's text could never fit: refused before it is tokenized (llama.cpp's tokenizer is
 * quadratic in the number of special-token texts, and a megabyte of them takes half a minute). */
static bool too_long(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    size_t bytes = 0, most = (size_t)e->n_ctx_seq * (size_t)e->model.max_piece;
    for (size_t i = 0; p->messages && i < p->n_messages; i++)
        bytes += (p->messages[i].content ? strlen(p->messages[i].content) : 0) +
                 (p->messages[i].tool_calls ? strlen(p->messages[i].tool_calls) : 0);
    if (p->messages && p->tools) bytes += strlen(p->tools);
    if (p->prompt) bytes = strlen(p->prompt);
    if (bytes > most) {
        cb_engine_refuse(
            err, COBATCH_ERR_TOO_LONG, p->prompt ? "prompt" : "messages",
            "the prompt has %zu bytes; no prompt of more than %zu fits this engine's context (%d tokens of at most "
            "%d bytes)",
            bytes, most, e->n_ctx_seq, e->model.max_piece);
        return true;
    }
    return false;
}

static int reasoning_of(const cobatch_engine *e, const struct cobatch_request_params *p, cb_common_reasoning *rs,
                        struct cobatch_error *err);

int32_t *cb_engine_prompt_tokens(cobatch_engine *e, const struct cobatch_request_params *p, int32_t *n,
                                 struct cobatch_error *err) {
    int given = (p->prompt != NULL) + (p->prompt_tokens != NULL) + (p->messages != NULL);
    if (given != 1) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "prompt", "give exactly one of prompt, prompt tokens or messages");
        return NULL;
    }
    if (p->prompt_tokens) {
        if (p->n_prompt_tokens < 1) {
            cb_engine_refuse(err, COBATCH_ERR_INVALID, "prompt_tokens", "the prompt is empty");
            return NULL;
        }
        for (int32_t i = 0; i < p->n_prompt_tokens; i++) {
            if (p->prompt_tokens[i] < 0 || p->prompt_tokens[i] >= e->model.n_vocab) {
                cb_engine_refuse(err, COBATCH_ERR_INVALID, "prompt_tokens",
                                 "prompt token %d at index %d is outside the vocabulary (0..%d)", p->prompt_tokens[i],
                                 i, e->model.n_vocab - 1);
                return NULL;
            }
        }
        int32_t *t = malloc(sizeof(int32_t) * (size_t)p->n_prompt_tokens);
        if (!t) {
            cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
            return NULL;
        }
        memcpy(t, p->prompt_tokens, sizeof(int32_t) * (size_t)p->n_prompt_tokens);
        *n = p->n_prompt_tokens;
        return t;
    }
    if (too_long(e, p, err)) return NULL;
    if (p->messages) {
        cb_common_reasoning rs;
        if (reasoning_of(e, p, &rs, err) != COBATCH_OK) return NULL;
        rs.extract = false; /* the prompt alone */
        return chat_tokens(e, p, &rs, NULL, n, err);
    }
    if (p->prompt[0] == '\0') {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "prompt", "the prompt is empty");
        return NULL;
    }
    /* a text prompt is the client's own: special tokens in it are parsed, as llama-server does */
    int32_t *t = cb_model_tokenize(&e->model, p->prompt, strlen(p->prompt), true, true, n);
    if (!t) cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory tokenizing the prompt");
    return t;
}

int32_t *cobatch_prompt_tokens(cobatch_engine *e, const struct cobatch_request_params *p, int32_t *n,
                               struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!e || !p || !n) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, NULL, "no engine, parameters or count");
        return NULL;
    }
    return cb_engine_prompt_tokens(e, p, n, err ? err : &mine);
}

void cobatch_chat_free(cobatch_chat *c) {
    if (!c) return;
    free(c->tokens);
    cb_sampler_free(c->grammar);
    for (size_t i = 0; i < c->n_stops; i++)
        free(c->stops[i]);
    free(c->stops);
    free(c->shown);
    cb_chat_parser_free(c->parser);
    free(c->think_start);
    free(c->think_end);
    free(c);
}

cb_grammar_limits cb_engine_grammar_limits(const cobatch_engine *e) {
    return (cb_grammar_limits){.max_nesting = e->params.grammar_max_nesting,
                               .max_elements = e->params.grammar_max_elements,
                               .max_states = e->params.grammar_max_states};
}

/* The reasoning p asks of the engine's chat template, as the rendering's inputs: COBATCH_OK, or a
 * refusal naming the field (thinking the template cannot do, an effort it does not read, a budget
 * beside a grammar that holds the whole output). extract: the output is to be read for reasoning. */
static int reasoning_of(const cobatch_engine *e, const struct cobatch_request_params *p, cb_common_reasoning *rs,
                        struct cobatch_error *err) {
    static const cb_common_thinking none = {false, false, false};
    const struct cobatch_reasoning *q = &p->reasoning;
    const cb_common_thinking *th = e->model.tmpls ? cb_common_template_thinking(e->model.tmpls) : &none;
    enum cobatch_think want = q->think;
    const char *effort = q->effort;
    if ((unsigned)want > COBATCH_THINK_ON)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "reasoning", "reasoning: not a choice");
    if (effort && !strcmp(effort, "none")) { /* no reasoning at all */
        if (want == COBATCH_THINK_ON)
            return cb_engine_refuse(err, COBATCH_ERR_INVALID, "reasoning_effort",
                                    "reasoning_effort none asks for no thinking, and thinking was asked for");
        want = COBATCH_THINK_OFF;
        effort = NULL;
    }
    if (want == COBATCH_THINK_ON && !th->thinks)
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "reasoning",
            "the chat template does not think (it has no reasoning markers): thinking cannot be turned on");
    if (want == COBATCH_THINK_OFF && th->thinks && !th->can_switch)
        return cb_engine_refuse(err, COBATCH_ERR_INVALID, "reasoning",
                                "the chat template always thinks: its enable_thinking cannot turn thinking off");
    if (effort && th->thinks && !th->takes_effort)
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "reasoning_effort",
            "the chat template thinks but reads no reasoning effort ('none' turns thinking off; a reasoning "
            "budget bounds it)");
    *rs = (cb_common_reasoning){.extract = th->thinks && want != COBATCH_THINK_OFF && !q->keep &&
                                           e->params.reasoning_format == COBATCH_REASONING_SEPARATED,
                                .think = want == COBATCH_THINK_DEFAULT ? -1 : want == COBATCH_THINK_ON,
                                .effort = th->takes_effort ? effort : NULL,
                                .kwargs = p->template_kwargs,
                                .json_schema = p->json_schema};
    if (rs->extract && q->has_budget && (p->grammar || p->parsed_grammar))
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "reasoning_budget",
            "a reasoning budget cannot be kept with a grammar of the request's own: it holds the whole "
            "output, reasoning included");
    if (th->thinks && want != COBATCH_THINK_OFF && !rs->extract && q->has_budget && q->budget >= 0)
        return cb_engine_refuse(
            err, COBATCH_ERR_INVALID, "reasoning_budget",
            "a reasoning budget is kept on reasoning read apart, not on reasoning left in the text");
    return COBATCH_OK;
}

/* What chat c takes of its rendering x: the grammar (the tools', or the schema's after the reasoning;
 * else a schema of p's own), stop strings, parser, reasoning markers. false with err filled. */
static bool chat_take(cobatch_engine *e, cobatch_chat *c, const struct cobatch_request_params *p, cb_common_rendered *x,
                      struct cobatch_error *err) {
    cb_grammar_limits lim = cb_engine_grammar_limits(e);
    bool ok = true;
    if (x->grammar) {
        ok = (c->grammar = cb_common_grammar_sampler(e->model.vocab, x, &lim, err->message, sizeof(err->message)));
        if (!ok) { /* the message is in place */
            err->code = strstr(err->message, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID;
            err->param = c->calls ? "tools" : "json_schema";
        }
    } else if (p->json_schema && !c->calls) { /* held from the first token, as a grammar of its own would be */
        char why[240] = "";
        char *g = cb_common_schema_to_grammar(p->json_schema, why, sizeof(why));
        ok = g && (c->grammar = cb_grammar_new(&e->model, g, &lim, why, sizeof(why)));
        free(g);
        if (!ok)
            cb_engine_refuse(err, strstr(why, "out of memory") ? COBATCH_ERR_NOMEM : COBATCH_ERR_INVALID, "json_schema",
                             "json_schema: %s", why);
    }
    c->lazy = x->lazy;
    c->stops = x->stops; /* taken over */
    c->n_stops = x->n_stops;
    x->stops = NULL;
    x->n_stops = 0;
    c->parser = x->parser;
    x->parser = NULL;
    if (x->thinks) {
        c->thinks = true;
        c->think_start = x->think_start;
        c->think_end = x->think_end;
        x->think_start = x->think_end = NULL;
        c->think_open = x->think_open;
        c->think_budget = p->reasoning.has_budget ? p->reasoning.budget : e->params.reasoning_budget;
    }
    if (ok && x->n_preserved && !(c->shown = malloc(sizeof(int32_t) * x->n_preserved))) {
        ok = false;
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
    }
    for (size_t i = 0; ok && i < x->n_preserved; i++) { /* those that are one control token */
        int32_t one[2];
        char piece[8];
        int32_t k = cb_model_tokenize_into(&e->model, x->preserved[i], strlen(x->preserved[i]), false, true, one, 2);
        if (k == 1 && cb_model_piece(&e->model, one[0], piece, sizeof(piece)) == 0) c->shown[c->n_shown++] = one[0];
    }
    return ok;
}

cobatch_chat *cobatch_chat_new(cobatch_engine *e, const struct cobatch_request_params *p, struct cobatch_error *err) {
    struct cobatch_error mine;
    if (!err) err = &mine;
    if (!e || !p || !p->messages || p->prompt || p->prompt_tokens || p->chat) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "messages", "a chat is rendered from messages alone");
        return NULL;
    }
    bool calls = p->tools && p->tool_choice != COBATCH_TOOL_CHOICE_NONE;
    if ((calls || p->json_schema) && (p->grammar || p->parsed_grammar)) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "grammar",
                         calls ? "grammar: a request that may call tools has the tool-call grammar; give no other"
                               : "grammar: a request held to a JSON schema has its grammar; give no other");
        return NULL;
    }
    if (calls && p->json_schema) {
        cb_engine_refuse(err, COBATCH_ERR_INVALID, "json_schema",
                         "json_schema: a request that may call tools has the tool-call grammar; give no other");
        return NULL;
    }
    cb_common_reasoning rs;
    if (reasoning_of(e, p, &rs, err) != COBATCH_OK) return NULL;
    cobatch_chat *c = calloc(1, sizeof(*c));
    cb_common_rendered x = {0};
    if (!c) {
        cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
        return NULL;
    }
    int32_t n = 0;
    int32_t *t = too_long(e, p, err) ? NULL : chat_tokens(e, p, &rs, &x, &n, err);
    if (!t) {
        free(c);
        return NULL;
    }
    c->tokens = t;
    c->n_tokens = n;
    c->calls = calls;
    bool ok = chat_take(e, c, p, &x, err);
    cb_common_rendered_clear(&x);
    if (!ok) {
        cobatch_chat_free(c);
        return NULL;
    }
    return c;
}

const int32_t *cobatch_chat_tokens(const cobatch_chat *c, int32_t *n) {
    *n = c->n_tokens;
    return c->tokens;
}

bool cobatch_chat_calls_tools(const cobatch_chat *c) { return c && c->calls; }
bool cobatch_chat_thinks(const cobatch_chat *c) { return c && c->thinks; }
bool cobatch_chat_parses(const cobatch_chat *c) { return c && c->parser; }

int cobatch_chat_parse(const cobatch_chat *c, const char *text, size_t len, bool partial,
                       struct cobatch_chat_output *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    if (!c->parser) { /* nothing to read out: the output is the answer */
        out->content = strndup(text, len);
        out->reasoning = strdup("");
        if (!out->content || !out->reasoning) {
            cobatch_chat_output_clear(out);
            cb_set_err(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    cb_common_call *calls = NULL;
    size_t n = 0;
    if (cb_common_parse(c->parser, text, len, partial, &out->reasoning, &out->content, &calls, &n, err, errlen) != 0)
        return -1;
    if (n && !(out->calls = calloc(n, sizeof(*out->calls)))) {
        cb_common_calls_free(calls, n);
        cobatch_chat_output_clear(out);
        cb_set_err(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) { /* taken over */
        out->calls[i] = (struct cobatch_tool_call){calls[i].name, calls[i].arguments};
        calls[i] = (cb_common_call){0};
    }
    out->n_calls = n;
    cb_common_calls_free(calls, n);
    return 0;
}

void cobatch_chat_output_clear(struct cobatch_chat_output *out) {
    free(out->reasoning);
    free(out->content);
    for (size_t i = 0; i < out->n_calls; i++) {
        free(out->calls[i].name);
        free(out->calls[i].arguments);
    }
    free(out->calls);
    memset(out, 0, sizeof(*out));
}
