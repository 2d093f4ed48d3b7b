/* llama_common.h — the C face of llama.cpp's `common` library (C++), the only C++ in cobatch:
 * what a request's structured output needs from it. Nothing here throws; every function may be
 * called from any thread. */
#ifndef CB_LLAMA_COMMON_H
#define CB_LLAMA_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct llama_model;
struct llama_vocab;
struct llama_sampler;
struct llama_token_data_array;
typedef struct cb_chat_templates cb_chat_templates;

/* The bounds a grammar is held to (cobatch_engine_params.grammar_max_*). */
typedef struct {
    int32_t max_nesting, max_elements, max_states;
} cb_grammar_limits;

/* The chat template a model's messages are rendered with: override (Jinja text; NULL for the
 * model's own, tokenizer.chat_template) through common's Jinja engine, as vLLM and llama-server
 * --jinja render it. Returns NULL when the model has none and no override is given (err ""), or
 * when the template does not parse (the reason in err). Free with cb_common_templates_free. */
cb_chat_templates *cb_common_templates_new(const struct llama_model *model, const char *override, char *err,
                                           size_t errlen);
void cb_common_templates_free(cb_chat_templates *t);
/* The template's text. */
const char *cb_common_template_source(const cb_chat_templates *t);

/* What a template does with reasoning, worked out once when it is made (common's analysis of the
 * template: the markers it writes reasoning between, such as <think></think>). */
typedef struct {
    bool thinks;       /* its answers may open with reasoning between markers */
    bool can_switch;   /* enable_thinking false changes its generation prompt (turns thinking off) */
    bool takes_effort; /* it reads reasoning_effort */
} cb_common_thinking;
const cb_common_thinking *cb_common_template_thinking(const cb_chat_templates *t);

/* One chat message. tool_calls: an assistant's calls, OpenAI's array as JSON text (each
 * {"id", "type": "function", "function": {"name", "arguments"}}), or NULL; tool_call_id: the call a
 * "tool" message answers, or NULL; name: the author's name, or NULL; reasoning: an assistant's
 * reasoning (the template decides whether to show it), or NULL. */
typedef struct {
    const char *role, *content, *tool_calls, *tool_call_id, *name, *reasoning;
} cb_common_msg;

/* How a chat's reasoning is rendered and read. */
typedef struct {
    bool extract;            /* the output's reasoning is read apart from its content (the parser) */
    int think;               /* -1: the template's default; 0: enable_thinking false; 1: true */
    const char *effort;      /* reasoning_effort for the template, or NULL */
    const char *kwargs;      /* more template variables: a JSON object's text, or NULL */
    const char *json_schema; /* with extract on a template that thinks: the answer after the reasoning is held
                                to this JSON schema (the grammar lets the reasoning come first), or NULL */
} cb_common_reasoning;

enum { CB_TOOLS_AUTO, CB_TOOLS_REQUIRED, CB_TOOLS_NONE };

/* The tools a request offers. */
typedef struct {
    const char *tools;    /* OpenAI's tools array as JSON text, or NULL: none */
    int choice;           /* CB_TOOLS_* */
    const char *function; /* with CB_TOOLS_REQUIRED: the call must be to this one (NULL: any) */
    bool single;          /* one call at most (parallel_tool_calls false) */
} cb_common_tools;

typedef struct cb_chat_parser cb_chat_parser;

/* How a request's own text is kept from spelling the template's control tokens (vocab.c). A text
 * that spells one (say "<|im_start|>system" in a tool's description, a tool call's arguments or a
 * template variable) would be read as that token when the rendering is tokenized, and open a turn
 * the client was not given: every such text, and every byte that marks them, becomes a mark before
 * rendering, which the tokenizer turns back into the same characters, as plain text. text: s[0, n)
 * with its marks made, malloc'd, or NULL when it needs none (or, with *failed set, when memory ran
 * out). */
typedef struct {
    char *(*text)(const void *ctx, const char *s, size_t n, bool *failed);
    const void *ctx;
} cb_common_defuse;

/* What rendering a chat gives besides its prompt when it offers tools: the grammar its calls are
 * held to, the output parser. Every pointer malloc'd (cb_common_rendered_clear frees them). */
typedef struct {
    char *prompt;
    char *grammar;   /* GBNF (root "root") the output is held to, its long repetitions widened, or NULL */
    bool lazy;       /* the grammar holds only from a trigger on */
    char **patterns; /* (n_patterns) lazy: regular expressions whose match starts it */
    size_t n_patterns;
    int32_t *trigger_tokens; /* (n_trigger_tokens) lazy: tokens that start it */
    size_t n_trigger_tokens;
    char *prefill; /* not lazy: text the grammar must be fed before the output (the
                      generation prompt it begins with), or NULL */
    char **stops;  /* (n_stops) stop strings the format adds */
    size_t n_stops;
    char **preserved; /* (n_preserved) texts of tokens the output must show (call markers) */
    size_t n_preserved;
    cb_chat_parser *parser; /* NULL: the output is content only */
    /* the output's reasoning is read apart (extract, on a template that thinks, not turned off): */
    bool thinks;
    char *think_start, *think_end; /* its markers, such as "<think>" and "</think>" */
    bool think_open;               /* the generation prompt opens the block: the output starts inside it */
} cb_common_rendered;

/* Messages rendered with the template and the assistant's generation prompt after them; with
 * tools (NULL: none) their grammar and parser too; with reasoning (NULL: the template's defaults, the
 * output not read for it) its variables, parser and schema grammar. With defuse (NULL: none), the
 * strings inside the tools, the tool calls and the template variables (JSON, read first) are
 * defused in the prompt; the grammar and parser are those of the text as given (the messages'
 * plain fields are the caller's to defuse). Returns 0, or -1 with the reason in err (the template
 * raised an error, tools it cannot call, out of memory). Thread-safe: the templates are only read. */
int cb_common_render(const cb_chat_templates *t, const cb_common_msg *msgs, size_t n, const cb_common_tools *tools,
                     const cb_common_reasoning *reasoning, const cb_common_defuse *defuse, cb_common_rendered *out,
                     char *err, size_t errlen);
void cb_common_rendered_clear(cb_common_rendered *r);

/* The grammar sampler of a rendering with a grammar: lazy with its triggers, or fed its prefill.
 * NULL with the reason in err (the grammar does not parse, the prefill does not fit it). */
struct llama_sampler *cb_common_grammar_sampler(const struct llama_vocab *vocab, const cb_common_rendered *r,
                                                const cb_grammar_limits *lim, char *err, size_t errlen);

/* A grammar sampler for gbnf (root rule "root"; its repetitions past 2000 already rewritten as rules
 * llama.cpp keeps, cb_gbnf_widen: llama.cpp's parser drops a larger upper bound and fails on a larger
 * lower one, so a count past 2000 left here is refused), checked first under lim: its groups' nesting
 * and elements (util/gbnf.h), then,
 * parsed, its rules' nesting at a position and the parse states any rule can begin with; each
 * refusal names the --limit that sets it. Then llama.cpp's grammar (lazy with its
 * patterns and tokens, like llama_sampler_init_grammar_lazy_patterns) that takes a token as llama.cpp
 * does but counts the work: its parse states after every character, and the parse-stack elements
 * the token builds (at most lim->max_states * CB_GRAMMAR_WORK_PER_STATE; a state is built once per
 * character). Past either it is blown (cb_common_grammar_blown), takes nothing more and allows no
 * token. While a lazy grammar waits for its trigger, and for an end of generation, llama.cpp's own
 * accept runs (the trigger's text is replayed into the grammar's first states). Clones keep the
 * limits. NULL with the reason in err. */
/* The parse-stack elements one token may build, per parse state allowed, in its accept and in the
 * check of its candidates (1,024 x 1,024 by default: about 20 ms; a JSON grammar builds a few hundred
 * a token). */
#define CB_GRAMMAR_WORK_PER_STATE 1024
/* The looks at a candidate one check of a token's candidates may take per parse state allowed (1,024
 * x 8,192 by default, about 8 million, 50 ms; a JSON grammar over the whole vocabulary of 49,152
 * tokens takes up to about 2 million, 9 ms). */
#define CB_GRAMMAR_APPLY_WORK_PER_STATE 8192

struct llama_sampler *cb_common_grammar_new(const struct llama_vocab *vocab, const char *gbnf, bool lazy,
                                            const char *const *patterns, size_t n_patterns, const int32_t *tokens,
                                            size_t n_tokens, const cb_grammar_limits *lim, char *err, size_t errlen);
/* For tests: s (from cb_common_grammar_new) against llama.cpp's own grammar code on a copy of its
 * state. Applies s to a copy of cur, then (tok >= 0) accepts tok into s; true when llama.cpp's apply
 * allows the same candidates and its accept leaves the same parse states and the same cut character,
 * or when s is blown (llama.cpp's own might then not end); false with why otherwise. */
bool cb_common_grammar_twin_check(struct llama_sampler *s, const struct llama_token_data_array *cur, int32_t tok,
                                  char *why, size_t whylen);
/* Whether a sampler from cb_common_grammar_new is blown (*why: the reason); false for any other. */
bool cb_common_grammar_blown(const struct llama_sampler *s, const char **why);

/* A tool call read from an output. */
typedef struct {
    char *name, *arguments; /* arguments: JSON text (while partial, possibly cut short) */
} cb_common_call;

/* Reads an output (text[0, len)) into its reasoning, content and tool calls; partial: more text may
 * come (a call being written is given as far as it goes; text that may become a marker is held
 * back). Returns 0, or -1 with the reason in err. *reasoning, *content and the calls are malloc'd:
 * free them (the calls with cb_common_calls_free). */
int cb_common_parse(const cb_chat_parser *p, const char *text, size_t len, bool partial, char **reasoning,
                    char **content, cb_common_call **calls, size_t *n_calls, char *err, size_t errlen);

/* A sampler that follows a reasoning block by its markers' text (start, end): it tells whether the
 * next token is written inside the block (cb_common_think_inside) and, once `budget` tokens were
 * written inside (< 0: no bound; a character cut across tokens is finished first), forces the end
 * marker's tokens. open: the output starts inside the block. It takes no other part in sampling (put
 * it first in the order: its apply masks all but a forced token). NULL with the reason in err. */
struct llama_sampler *cb_common_think_new(const struct llama_vocab *vocab, const char *start, const char *end,
                                          int32_t budget, bool open, char *err, size_t errlen);
bool cb_common_think_inside(const struct llama_sampler *s);
void cb_common_calls_free(cb_common_call *calls, size_t n);
void cb_chat_parser_free(cb_chat_parser *p);

/* A GBNF grammar (root rule "root") for the JSON values valid against schema, a JSON schema given
 * as JSON text, made by common's converter. Returns a malloc'd string, or NULL with the reason in
 * err (not JSON, a schema the converter cannot express, out of memory). */
char *cb_common_schema_to_grammar(const char *schema, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
