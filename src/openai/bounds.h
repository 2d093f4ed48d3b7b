/* bounds.h — bounds a request's grammar cannot keep, found before a request is taken.
 *
 * llama.cpp's GBNF parser holds a repetition ({m}, {m,}, {m,n}) to at most 2000: a larger upper
 * bound is silently dropped (x{0,2100} becomes x*), a larger lower bound fails the parse. The engine
 * rewrites such repetitions as rules it keeps (util/gbnf.h, cb_gbnf_widen), so a JSON schema's
 * minLength / maxLength / minItems / maxItems hold as written (Claude Code offers a tool whose
 * argument has maxLength 524288) up to CB_GBNF_MAX_WIDE, the most llama.cpp's schema converter
 * reads (a C int). A larger one would be a wrong answer that looks right, so these checks find it
 * and the request is refused with a 400 that names it. Pure: cJSON and text in, no allocation. */
#ifndef CB_OPENAI_BOUNDS_H
#define CB_OPENAI_BOUNDS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "../util/gbnf.h"

#define CB_GRAMMAR_MAX_COUNT CB_GBNF_MAX_WIDE
/* The end of a 400's message for such a bound ("... above 2147483647, the most " CB_BOUNDS_HELD). */
#define CB_BOUNDS_HELD "this server holds a grammar to"

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
    int ctx_tokens;  /* the model's context (tokens of one sequence) once the engine is up (0: not known) */
} cb_bounds_limits;
extern cb_bounds_limits cb_bounds;

/* Whether v (a schema) nests within max_depth levels (a pattern's groups count as levels) and its
 * object keys are at most max_name bytes: 0, or -1 with what is past the bound in why. */
int cb_bounds_json_shape(const cJSON *v, int max_depth, int max_name, char *why, size_t n);

/* The deepest nesting of brackets in JSON text (outside its strings); saturates at 1 << 30. */
int cb_bounds_text_depth(const char *s);

/* The first bound in schema a grammar would not hold: a minLength, maxLength, minItems or maxItems
 * above CB_GRAMMAR_MAX_COUNT. Returns its keyword and sets *value, or returns NULL. Recursion follows
 * the document's nesting, which cJSON's parser bounds (CJSON_NESTING_LIMIT). */
const char *cb_bounds_schema(const cJSON *schema, double *value);

/* The same for a GBNF text (outside its string literals, character classes and comments): the
 * largest repetition count above CB_GRAMMAR_MAX_COUNT; 0 when there is none. O(length). */
unsigned long long cb_bounds_gbnf(const char *gbnf);

#endif
