/* bounds.h — bounds llama.cpp's grammars do not keep, found before a request is taken.
 *
 * llama.cpp's GBNF parser holds a repetition ({m}, {m,}, {m,n}) to at most 2000: a larger upper
 * bound is silently dropped (x{0,2100} becomes x*), a larger lower bound fails the parse. A JSON
 * schema's minLength / maxLength / minItems / maxItems become such repetitions, so an answer held to
 * maxLength 2100 could be of any length and end with "stop": a wrong answer that looks right. These
 * checks find such bounds so the request is refused with a 400 that names them. Pure: cJSON and
 * text in, no allocation. */
#ifndef CB_OPENAI_BOUNDS_H
#define CB_OPENAI_BOUNDS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define CB_GRAMMAR_MAX_REPEAT 2000 /* llama-grammar.cpp's MAX_REPETITION_THRESHOLD */

/* Bounds on what a request hands llama.cpp's common library, whose JSON reader, schema converter
 * and Jinja engine recurse per level and run std::regex over names (a 30,000-character property
 * name, or tool-call arguments nested 50,000 deep, overflowed their stacks). Process-wide, set once
 * at start-up (--limit) before any request is read. */
typedef struct {
    int json_depth;  /* nesting of a schema, of tool parameters, of tool-call arguments; default 128 */
    int name_length; /* bytes of an object key in a schema (property names, $defs); default 256 */
    int tools;       /* tools one request offers; default 512 */
} cb_bounds_limits;
extern cb_bounds_limits cb_bounds;

/* Whether v (a schema) nests within max_depth levels (a pattern's groups count as levels) and its
 * object keys are at most max_name bytes: 0, or -1 with what is past the bound in why. */
int cb_bounds_json_shape(const cJSON *v, int max_depth, int max_name, char *why, size_t n);

/* The deepest nesting of brackets in JSON text (outside its strings); saturates at 1 << 30. */
int cb_bounds_text_depth(const char *s);

/* The first minLength, maxLength, minItems or maxItems anywhere in schema whose number is above
 * CB_GRAMMAR_MAX_REPEAT: returns its keyword and sets *value, or returns NULL. Recursion follows the
 * document's nesting, which cJSON's parser bounds (CJSON_NESTING_LIMIT). */
const char *cb_bounds_schema(const cJSON *schema, double *value);

/* The largest repetition count of a GBNF text above CB_GRAMMAR_MAX_REPEAT (outside its string
 * literals, character classes and comments), or 0 when there is none. O(length). */
unsigned long long cb_bounds_gbnf(const char *gbnf);

#endif
