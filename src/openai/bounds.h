/* bounds.h — bounds llama.cpp's grammars do not keep, found before a request is taken.
 *
 * llama.cpp's GBNF parser holds a repetition ({m}, {m,}, {m,n}) to at most 2000: a larger upper
 * bound is silently dropped (x{0,2100} becomes x*), a larger lower bound fails the parse. A JSON
 * schema's minLength / maxLength / minItems / maxItems become such repetitions, so an answer held to
 * maxLength 2100 could be of any length and end with "stop": a wrong answer that looks right. These
 * checks find such bounds so the request is refused with a 400 that names them. An upper bound the
 * answer cannot reach is kept all the same (llama.cpp's unbounded {m,} then holds it): each
 * repetition takes at least a byte, and an answer of up to max_tokens tokens has at most max_tokens
 * x the longest token's bytes (Claude Code offers a tool whose argument has maxLength 524288, which
 * a 64-token answer cannot pass). Pure: cJSON and text in, no allocation. */
#ifndef CB_OPENAI_BOUNDS_H
#define CB_OPENAI_BOUNDS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "../util/gbnf.h"

#define CB_GRAMMAR_MAX_REPEAT CB_GBNF_MAX_REPEAT
/* The end of a 400's message for such a bound ("... above 2000, the most " CB_BOUNDS_DROPPED). */
#define CB_BOUNDS_DROPPED                                                                                              \
    "llama.cpp's grammars keep (it would silently not hold; an upper bound that max_tokens cannot reach is kept)"

/* Bounds on what a request hands llama.cpp's common library, whose JSON reader, schema converter
 * and Jinja engine recurse per level and run std::regex over names (a 30,000-character property
 * name, or tool-call arguments nested 50,000 deep, overflowed their stacks). Process-wide, set once
 * at start-up (--limit) before any request is read. */
typedef struct {
    int json_depth;  /* nesting of a schema, of tool parameters, of tool-call arguments; default 128 */
    int name_length; /* bytes of an object key in a schema (property names, $defs); default 256 */
    int tools;       /* tools one request offers; default 512 */
    int messages;    /* a chat's messages and tool calls (each renders to a token at least, and rendering
                        costs a worker every request needs ~0.3 ms each); 0: the context's tokens */
    /* the model's context (tokens of one sequence) and the bytes of its longest token's text, once
     * the engine is up (0: not known, and every upper bound above 2000 is refused) */
    int ctx_tokens, token_bytes;
} cb_bounds_limits;
extern cb_bounds_limits cb_bounds;

/* Whether v (a schema) nests within max_depth levels (a pattern's groups count as levels) and its
 * object keys are at most max_name bytes: 0, or -1 with what is past the bound in why. */
int cb_bounds_json_shape(const cJSON *v, int max_depth, int max_name, char *why, size_t n);

/* The deepest nesting of brackets in JSON text (outside its strings); saturates at 1 << 30. */
int cb_bounds_text_depth(const char *s);

/* The most bytes an answer of up to max_tokens tokens can hold (the context's tokens where fewer,
 * or where max_tokens <= 0), as cb_bounds' ctx_tokens and token_bytes say; ULLONG_MAX while they
 * are not known. */
unsigned long long cb_bounds_reach(long long max_tokens);

/* The first bound in schema llama.cpp's grammars would not hold: a minLength or minItems above
 * CB_GRAMMAR_MAX_REPEAT, or a maxLength or maxItems above it that an answer of `reach` bytes could
 * pass (below reach). Returns its keyword and sets *value, or returns NULL. Recursion follows the
 * document's nesting, which cJSON's parser bounds (CJSON_NESTING_LIMIT). */
const char *cb_bounds_schema(const cJSON *schema, unsigned long long reach, double *value);

/* The same for a GBNF text (outside its string literals, character classes and comments): a lower
 * count above CB_GRAMMAR_MAX_REPEAT, or an upper bound above it and below reach; 0 when there is
 * none. O(length). */
unsigned long long cb_bounds_gbnf(const char *gbnf, unsigned long long reach);

#endif
