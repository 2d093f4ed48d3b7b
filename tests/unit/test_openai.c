/* The OpenAI request/response schema (src/openai/openai.c) on its own: what a body turns into,
 * which fields are refused and how the error names them, and the shapes of responses, stream
 * chunks and error bodies as the official SDKs read them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/util/gbnf.h"
#include "../../src/openai/bounds.h"
#include "../../src/openai/openai.h"

static int parse(cb_openai_kind kind, const char *body, cb_openai_request *r, cb_openai_error *e) {
    return cb_openai_parse(kind, NULL, body, strlen(body), r, e);
}

static void completion_fields_become_engine_params(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(
        parse(CB_OPENAI_COMPLETION,
              "{\"model\":\"m\",\"prompt\":\"Hello\",\"max_tokens\":5,\"temperature\":0.5,\"top_p\":0.9,"
              "\"top_k\":-1,\"stop\":[\"a\",\"b\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
              "\"seed\":42,\"ignore_eos\":true}",
              &r, &e),
        0);
    assert_string_equal(r.params.prompt, "Hello");
    assert_int_equal(r.params.max_tokens, 5);
    assert_true(r.params.sampling.temperature == 0.5f);
    assert_true(r.params.sampling.top_p == 0.9f);
    assert_int_equal(r.params.sampling.top_k, 0); /* -1: off, as in vLLM */
    assert_int_equal(r.params.n_stop, 2);
    assert_string_equal(r.params.stop[1], "b");
    assert_true(r.stream && r.include_usage && r.params.ignore_eos);
    assert_int_equal(r.params.sampling.seed, 42);
    assert_string_equal(r.model, "m");
    cb_openai_request_free(&r);

    /* token ids, and OpenAI's default of 16 tokens for legacy completions */
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":[1,2,3]}", &r, &e), 0);
    assert_int_equal(r.params.n_prompt_tokens, 3);
    assert_int_equal(r.params.prompt_tokens[2], 3);
    assert_int_equal(r.params.max_tokens, 16);
    assert_int_equal(r.params.sampling.seed, COBATCH_SEED_RANDOM); /* no seed: a fresh one */
    cb_openai_request_free(&r);
}

static void logit_bias_and_null_fields(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    /* a token named twice is refused: parsers disagree on which value a duplicate key means */
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"prompt\":\"x\",\"logit_bias\":{\"50256\":-100,\"7\":2.5,\"50256\":3},\"tools\":null}",
                           &r, &e),
                     -1);
    assert_string_equal(e.param, "50256");
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"prompt\":\"x\",\"logit_bias\":{\"50256\":-100,\"7\":2.5},\"tools\":null}", &r, &e),
                     0);
    assert_int_equal(r.params.n_logit_bias, 2);
    assert_int_equal(r.params.logit_bias[0].token, 7);
    assert_true(r.params.logit_bias[0].bias == 2.5f);
    assert_int_equal(r.params.logit_bias[1].token, 50256);
    assert_true(r.params.logit_bias[1].bias == -100.0f);
    cb_openai_request_free(&r);
}

/* Duplicate keys are refused wherever they are (top level, nested, among many keys, spelled with an
 * escape): cJSON reads the first, Python and JavaScript the last, so a gateway would see another
 * request (a max_tokens of 8 checked, 9999999999 run). */
static void duplicate_keys_are_refused(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(
        parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":8,\"max_tokens\":9999999999}", &r, &e), -1);
    assert_string_equal(e.param, "max_tokens");
    assert_non_null(strstr(e.message, "twice"));
    assert_int_equal(
        parse(CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"cont\\u0065nt\":\"b\"}]}", &r, &e),
        -1);
    assert_string_equal(e.param, "content");
    char big[4096] = "{\"prompt\":\"x\",\"logit_bias\":{";
    for (int i = 0; i < 100; i++) /* more keys than are compared pairwise: sorted */
        snprintf(big + strlen(big), sizeof(big) - strlen(big), "\"%d\":1,", i);
    snprintf(big + strlen(big), sizeof(big) - strlen(big), "\"42\":2}}");
    assert_int_equal(parse(CB_OPENAI_COMPLETION, big, &r, &e), -1);
    assert_string_equal(e.param, "42");
    big[strlen(big) - 9] = 0; /* without the repeat: taken */
    snprintf(big + strlen(big), sizeof(big) - strlen(big), "}}");
    assert_int_equal(parse(CB_OPENAI_COMPLETION, big, &r, &e), 0);
    cb_openai_request_free(&r);
}

/* suffix: kept for the server to build a fill-in-the-middle prompt; "" (some clients send it always)
 * asks for nothing. */
static void completion_suffix(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"suffix\":\"}\\n\"}", &r, &e), 0);
    assert_non_null(r.suffix);
    assert_string_equal(r.suffix, "}\n");
    assert_int_equal(r.n_prompts, 2);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"\"}", &r, &e), 0);
    assert_null(r.suffix);
    cb_openai_request_free(&r);
}

/* Fields left out take the operator's defaults; seed -1 asks for a fresh seed whatever they say. */
static void operator_defaults_and_seed(void **state) {
    (void)state;
    cb_openai_defaults d = cb_openai_default_defaults();
    assert_true(d.sampling.temperature == 1.0f && d.sampling.seed == COBATCH_SEED_RANDOM && d.max_tokens == 0);
    d.sampling.temperature = 0.0f;
    d.sampling.seed = 7;
    cb_openai_request r;
    cb_openai_error e;
    const char *b1 = "{\"prompt\":\"x\"}", *b2 = "{\"prompt\":\"x\",\"seed\":-1,\"temperature\":0.5}";
    assert_int_equal(cb_openai_parse(CB_OPENAI_COMPLETION, &d, b1, strlen(b1), &r, &e), 0);
    assert_true(r.params.sampling.temperature == 0.0f && r.params.sampling.seed == 7);
    cb_openai_request_free(&r);
    assert_int_equal(cb_openai_parse(CB_OPENAI_COMPLETION, &d, b2, strlen(b2), &r, &e), 0);
    assert_true(r.params.sampling.temperature == 0.5f && r.params.sampling.seed == COBATCH_SEED_RANDOM);
    assert_int_equal(r.params.max_tokens, 16); /* OpenAI's for a completion */
    cb_openai_request_free(&r);
    /* the operator's output limit for a request that names none; a request's own stands */
    d.max_tokens = 5;
    const char *c1 = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
               *c2 = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":900}";
    assert_int_equal(cb_openai_parse(CB_OPENAI_COMPLETION, &d, b1, strlen(b1), &r, &e), 0);
    assert_int_equal(r.params.max_tokens, 5);
    cb_openai_request_free(&r);
    assert_int_equal(cb_openai_parse(CB_OPENAI_CHAT, &d, c1, strlen(c1), &r, &e), 0);
    assert_int_equal(r.params.max_tokens, 5);
    cb_openai_request_free(&r);
    assert_int_equal(cb_openai_parse(CB_OPENAI_CHAT, &d, c2, strlen(c2), &r, &e), 0);
    assert_int_equal(r.params.max_tokens, 900);
    cb_openai_request_free(&r);
}

static void chat_messages_and_priority(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(
        parse(CB_OPENAI_CHAT,
              "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
              "[{\"type\":\"text\",\"text\":\"Hi\"}]}],\"max_completion_tokens\":7,\"max_tokens\":3,"
              "\"priority\":-5}",
              &r, &e),
        0);
    assert_int_equal(r.params.n_messages, 2);
    assert_string_equal(r.params.messages[0].role, "system");
    assert_string_equal(r.params.messages[1].content, "Hi");
    assert_int_equal(r.params.max_tokens, 7); /* max_completion_tokens wins */
    assert_true(r.has_priority);
    assert_int_equal(r.params.priority, 5); /* vLLM's lower-is-first becomes the engine's higher-is-first */
    cb_openai_request_free(&r);
}

static cJSON *json(char *s) {
    assert_non_null(s);
    cJSON *o = cJSON_Parse(s);
    free(s);
    assert_non_null(o);
    return o;
}

static const char *str_at(cJSON *o, const char *path) { /* "a.b.0.c" */
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, "."))
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k)) : cJSON_GetObjectItemCaseSensitive(o, k);
    return o && cJSON_IsString(o) ? o->valuestring : NULL;
}

static double num_at(cJSON *o, const char *path) {
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, "."))
        o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(k)) : cJSON_GetObjectItemCaseSensitive(o, k);
    return o && cJSON_IsNumber(o) ? o->valuedouble : -1;
}

/* Prompt lists, echo, max_tokens 0 and the two shapes of logprobs become engine parameters. */
static void prompts_echo_and_logprobs(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":2}", &r, &e), 0);
    assert_int_equal(r.n_prompts, 3);
    assert_string_equal(r.prompts[2].text, "c");
    assert_string_equal(r.params.prompt, "a");
    assert_false(r.params.logprobs);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"prompt\":[[1,2],[3]],\"echo\":true,\"logprobs\":1,\"max_tokens\":0,\"temperature\":0}",
                           &r, &e),
                     0);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[0].n_tokens, 2);
    assert_int_equal(r.prompts[1].tokens[0], 3);
    assert_true(r.echo && r.params.logprobs && r.params.prompt_logprobs);
    assert_int_equal(r.params.top_logprobs, 1);
    assert_int_equal(r.params.max_tokens, 0);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", &r, &e), 0);
    assert_true(r.echo && !r.params.logprobs && !r.params.prompt_logprobs);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":0}", &r, &e), 0);
    assert_true(r.params.logprobs && !r.params.prompt_logprobs);
    assert_int_equal(r.params.top_logprobs, 0);
    cb_openai_request_free(&r);
    assert_int_equal(
        parse(CB_OPENAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":3}", &r, &e),
        0);
    assert_true(r.params.logprobs && !r.params.prompt_logprobs);
    assert_int_equal(r.params.top_logprobs, 3);
    cb_openai_request_free(&r);
    assert_int_equal(
        parse(CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false}", &r, &e), 0);
    assert_false(r.params.logprobs);
    cb_openai_request_free(&r);
    assert_int_equal(
        parse(CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":0}", &r, &e), 0);
    assert_false(r.params.logprobs); /* 0 alternatives without logprobs asks for nothing */
    cb_openai_request_free(&r);
}

static char *fake_convert(const char *schema, char *err, size_t errlen) {
    if (strstr(schema, "bad")) {
        snprintf(err, errlen, "cannot");
        return NULL;
    }
    char *g = malloc(strlen(schema) + 16);
    sprintf(g, "schema:%s", schema);
    return g;
}

/* response_format becomes a JSON schema for the converter, grammar passes as it is, text asks for
 * nothing; a schema the converter refuses is a 400 naming response_format. */
static void response_format_and_grammar(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(
        parse(CB_OPENAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
              "\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}",
              &r, &e),
        0);
    assert_string_equal(r.json_schema, "{\"type\":\"object\"}");
    assert_null(r.params.grammar);
    assert_int_equal(cb_openai_resolve_schema(&r, fake_convert, &e), 0);
    assert_string_equal(r.params.grammar, "schema:{\"type\":\"object\"}");
    cb_openai_request_free(&r);
    assert_int_equal(
        parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}", &r, &e), 0);
    assert_non_null(strstr(r.json_schema, "object"));
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                           "\"p\",\"schema\":{\"title\":\"bad\"}}}}",
                           &r, &e),
                     0);
    assert_int_equal(cb_openai_resolve_schema(&r, fake_convert, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "response_format");
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= [a-z]+\"}", &r, &e), 0);
    assert_string_equal(r.params.grammar, "root ::= [a-z]+");
    assert_null(r.json_schema);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\"}}", &r, &e),
                     0);
    assert_null(r.params.grammar);
    assert_null(r.json_schema);
    cb_openai_request_free(&r);
}

/* Repetition bounds llama.cpp's grammars would drop (above 2000) are refused by name, in a schema
 * (however deep, in response_format and in a tool's parameters) and in a GBNF text; bounds at
 * the limit, and braces inside literals, classes and comments, are not. */
/* The shape of a GBNF text before llama.cpp parses it (src/util/gbnf.c): nesting, the elements its
 * repetitions copy, the largest count; strings, classes, token references and comments are text. */
static void gbnf_shape_is_read_without_parsing(void **state) {
    (void)state;
    cb_gbnf_shape sh = cb_gbnf_scan("root ::= ((\"a\" (b)) | c)\nb ::= [a-z]\nc ::= \"(((\" [(] # (((\n");
    assert_int_equal(sh.depth, 3);
    assert_int_equal(sh.repeat_min, 0);
    assert_int_equal(sh.repeat_max, 0);
    sh = cb_gbnf_scan("root ::= \"abcd\"{1000}");
    assert_int_equal(sh.repeat_min, 1000);
    assert_int_equal(sh.repeat_max, 0);
    assert_true(sh.elements >= 4000);
    sh = cb_gbnf_scan("root ::= (\"a\"){1000}"); /* a group repeats as one reference */
    assert_true(sh.elements < 10000);
    /* a repetition right after another copies all of it: each '+' another 100 x 2000 elements */
    sh = cb_gbnf_scan("root ::= \"0123456789012345678901234567890123456789012345678901234567890123456789"
                      "012345678901234567890123456789\"{2000}+++++");
    assert_true(sh.elements >= 6 * 200000ULL);
    assert_true(cb_gbnf_scan("root ::= [a-z]{2000}*").elements >= 2 * 2000 * 3ULL);
    sh = cb_gbnf_scan("root ::= x{0, 2500} <[12]>{3}");
    assert_int_equal(sh.repeat_min, 3);
    assert_int_equal(sh.repeat_max, 2500);
    assert_true(sh.elements < 100); /* llama.cpp drops the 2500: x{0,} is one rule */
    assert_int_equal(sh.inverted, 0);
    /* {m,n} with n < m (llama.cpp's parser would never return), not {m,} nor {m} */
    assert_int_equal(cb_gbnf_scan("root ::= \"a\"{3,2} [b]{ 11 , 5 } c{4,} d{4} \"{9,1}\"").inverted, 2);
    /* inside a group llama.cpp skips line ends and comments in a repetition too */
    assert_int_equal(cb_gbnf_scan("root ::= (\"a\"{3,\n2} \"b\"{ # x\n 5 \r\n , 4 })").inverted, 2);
    assert_int_equal(cb_gbnf_scan("root ::= (\"a\"{\n2500\n})").repeat_min, 2500);
    char deep[4096] = "root ::= ";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 1000; i++)
        strcat(deep, ")");
    assert_int_equal(cb_gbnf_scan(deep).depth, 1000);
    /* unclosed strings and classes end with the text */
    assert_int_equal(cb_gbnf_scan("root ::= \"((( [").depth, 0);
    assert_int_equal(cb_gbnf_scan("root ::= [\\]((").depth, 0);
    /* llama.cpp reads a UTF-8 lead byte with the bytes after it, a closing ']' or '"' too: the class
     * below ends at "-]", and the {5,3} after it is read (fuzz_grammar: the parser never returned) */
    assert_int_equal(cb_gbnf_scan("root ::= [0-\xe4@]+ (x \", [09-].{5,3})*").inverted, 1);
    assert_int_equal(cb_gbnf_scan("root ::= \"\xc3\xa9\" [\xc3\xa9] (a)").depth, 1);
}

/* What a request hands llama.cpp's common library is bounded: the nesting of schemas, tool
 * parameters and tool-call arguments, schema key lengths, the number of tools. Each refusal names
 * the field and the --limit that sets it; the bound itself is taken. */
static void request_shapes_past_the_limits_are_refused(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    char *body = malloc(1 << 20);
    /* tool-call arguments 129 deep, then 128 */
    for (int depth = 129; depth >= 128; depth--) {
        int n = sprintf(body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\","
                              "\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                              "\"arguments\":\"");
        for (int i = 0; i < depth; i++)
            n += sprintf(body + n, i % 2 ? "{\\\"a\\\":" : "[");
        for (int i = depth - 1; i >= 0; i--)
            n += sprintf(body + n, i % 2 ? "}" : "]");
        sprintf(body + n, "\"}}]}]}");
        int rc = parse(CB_OPENAI_CHAT, body, &r, &e);
        if (depth > 128) {
            assert_int_equal(rc, -1);
            assert_string_equal(e.param, "messages");
            assert_non_null(strstr(e.message, "--limit json-depth"));
        } else {
            assert_int_equal(rc, 0);
        }
        cb_openai_request_free(&r);
    }
    /* brackets inside strings are text */
    assert_int_equal(cb_bounds_text_depth("{\"a\":\"[[[[[[\\\"[[[\"}"), 1);
    /* a schema key of 257 bytes, then 256 */
    for (int len = 257; len >= 256; len--) {
        int n = sprintf(body, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                              "\"name\":\"p\",\"schema\":{\"type\":\"object\",\"properties\":{\"");
        memset(body + n, '!', (size_t)len);
        sprintf(body + n + len, "\":{\"type\":\"string\"}}}}}}");
        int rc = parse(CB_OPENAI_COMPLETION, body, &r, &e);
        assert_int_equal(rc, len > 256 ? -1 : 0);
        if (rc) assert_non_null(strstr(e.message, "--limit name-length"));
        cb_openai_request_free(&r);
    }
    /* a tool's parameters 200 deep; a pattern whose groups nest 200 deep */
    int n = sprintf(body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
                          "\"function\":{\"name\":\"f\",\"parameters\":");
    for (int i = 0; i < 200; i++)
        n += sprintf(body + n, "{\"items\":");
    n += sprintf(body + n, "{}");
    for (int i = 0; i < 200; i++)
        n += sprintf(body + n, "}");
    sprintf(body + n, "}}]}");
    assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), -1);
    assert_string_equal(e.param, "tools");
    cb_openai_request_free(&r);
    n = sprintf(body, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                      "\"p\",\"schema\":{\"type\":\"string\",\"pattern\":\"");
    for (int i = 0; i < 200; i++)
        body[n++] = '(';
    body[n++] = 'a';
    for (int i = 0; i < 200; i++)
        body[n++] = ')';
    sprintf(body + n, "\"}}}}");
    assert_int_equal(parse(CB_OPENAI_COMPLETION, body, &r, &e), -1);
    assert_non_null(strstr(e.message, "pattern"));
    cb_openai_request_free(&r);
    /* more tools than the limit (lowered for the test), then as many */
    int keep = cb_bounds.tools;
    cb_bounds.tools = 3;
    for (int k = 4; k >= 3; k--) {
        n = sprintf(body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[");
        for (int i = 0; i < k; i++)
            n += sprintf(body + n, "%s{\"type\":\"function\",\"function\":{\"name\":\"f%d\"}}", i ? "," : "", i);
        sprintf(body + n, "]}");
        int rc = parse(CB_OPENAI_CHAT, body, &r, &e);
        assert_int_equal(rc, k > 3 ? -1 : 0);
        if (rc) assert_non_null(strstr(e.message, "--limit tools"));
        cb_openai_request_free(&r);
    }
    cb_bounds.tools = keep;
    free(body);
}

/* Counts above 2000 are held (the engine widens them, below); only those past what llama.cpp's
 * schema converter reads (a C int) are refused, by name. */
static void grammar_bounds_above_what_llama_keeps(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    const char *fmt = "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":"
                      "\"p\",\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                      "\"items\":{\"type\":\"string\",\"%s\":%lld}}}}}}}";
    const char *kws[] = {"maxLength", "minLength", "maxItems", "minItems"};
    for (int i = 0; i < 4; i++) {
        char body[512];
        snprintf(body, sizeof(body), fmt, kws[i], 2147483648LL);
        assert_int_equal(parse(CB_OPENAI_COMPLETION, body, &r, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, "response_format");
        assert_non_null(strstr(e.message, kws[i]));
        assert_non_null(strstr(e.message, "2147483648"));
        cb_openai_request_free(&r);
        snprintf(body, sizeof(body), fmt, kws[i], 2147483647LL);
        assert_int_equal(parse(CB_OPENAI_COMPLETION, body, &r, &e), 0);
        cb_openai_request_free(&r);
    }
    /* a property named maxLength is a schema, not a bound */
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{"
                           "\"name\":\"p\",\"schema\":{\"properties\":{\"maxLength\":{\"type\":\"integer\"}}}}}}",
                           &r, &e),
                     0);
    cb_openai_request_free(&r);
    /* Claude Code's WebFetch argument, whatever max_tokens is */
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":32000,\"tools\":[{"
                           "\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                           "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":524288}}}}}]}",
                           &r, &e),
                     0);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                           "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                           "\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":1e12}}}}}]}",
                           &r, &e),
                     -1);
    assert_string_equal(e.param, "tools");
    assert_non_null(strstr(e.message, "maxLength 1000000000000"));
    cb_openai_request_free(&r);
    assert_int_equal(
        parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= [a-z]{0,3000000000}\"}", &r, &e), -1);
    assert_string_equal(e.param, "grammar");
    assert_non_null(strstr(e.message, "3000000000"));
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= [a-z]{0,2100}\"}", &r, &e),
                     0);
    cb_openai_request_free(&r);
    assert_int_equal(cb_bounds_gbnf("root ::= \"a\"{2147483648}"), 2147483648ULL);
    assert_int_equal(cb_bounds_gbnf("root ::= x{3000000000,} x ::= \"b\""), 3000000000ULL);
    assert_int_equal(cb_bounds_gbnf("root ::= x{ 10 , 9999999999 }"), 9999999999ULL);
    assert_int_equal(cb_bounds_gbnf("root ::= x{2001} y{0,2147483647}"), 0);
    assert_int_equal(cb_bounds_gbnf("root ::= [a-z]{0,2000} \"{0,9999999999}\" [{5000000000}] # {7777777777}\n"), 0);
    assert_int_equal(cb_bounds_gbnf("root ::= \"\\\"{9999999999}\" x{3}"),
                     0); /* an escaped quote stays in the literal */
    assert_int_equal(cb_bounds_gbnf("root ::= x{"), 0);
}

/* The rules a widened repetition becomes: each count llama.cpp's parser keeps, the element once in
 * a rule of its own, the rest of the text as it was; what they match is checked against llama.cpp's
 * own grammar in the engine's test (test_engine.c). */
static void grammar_repetitions_widened(void **state) {
    (void)state;
    size_t n = 9;
    char *w = cb_gbnf_widen("root ::= \"a\" [b-c]{0,2000} d\nd ::= \"x\"", &n);
    assert_string_equal(w, "root ::= \"a\" [b-c]{0,2000} d\nd ::= \"x\"");
    assert_int_equal(n, 0);
    free(w);
    w = cb_gbnf_widen("root ::= \"<\" [a-z]{3,4500} \">\"", &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(w, "root ::= \"<\"  cbwide0-0  \">\""));
    assert_non_null(strstr(w, "cbwide0-0-e ::= ([a-z]\n)\n"));
    assert_non_null(strstr(w, "cbwide0-0-b1 ::= cbwide0-0-e{2000}\n"));
    /* 3 fixed, then 0..4497 = 2 x 2000 + 497: fewer than 2 blocks and under 2000, or 2 and 497 */
    assert_non_null(strstr(w, "cbwide0-0 ::= cbwide0-0-e{3} ( cbwide0-0-b1{0,1} cbwide0-0-e{0,1999} | "
                              "cbwide0-0-b1{2} cbwide0-0-e{0,497} )\n"));
    cb_gbnf_shape sh = cb_gbnf_scan(w);
    assert_true(sh.repeat_min <= 2000 && sh.repeat_max <= 2000);
    free(w);
    /* a group, a lower count past 2000 and {m,}; the prefix steps past a name the text holds */
    w = cb_gbnf_widen("root ::= (\"ab\" c){4001,} # cbwide0\nc ::= [0-9]", &n);
    assert_int_equal(n, 1);
    assert_non_null(strstr(w, "cbwide1-0-e ::= ((\"ab\" c)\n)\n"));
    assert_non_null(strstr(w, "cbwide1-0 ::= cbwide1-0-b1{2} cbwide1-0-e{1} cbwide1-0-e*\n"));
    free(w);
    /* blocks of blocks past 2000^2, and two repetitions, the inner first */
    w = cb_gbnf_widen("root ::= ([a]{5000000} \"-\"){0,2001}", &n);
    assert_int_equal(n, 2);
    assert_non_null(strstr(w, "cbwide0-0-b2 ::= cbwide0-0-b1{2000}\n"));
    assert_non_null(strstr(w, "cbwide0-0 ::= cbwide0-0-b2{1} cbwide0-0-b1{500}\n"));
    assert_non_null(strstr(w, "cbwide0-1-e ::= (( cbwide0-0  \"-\")\n)\n"));
    assert_non_null(strstr(w, "cbwide0-1 ::= ( cbwide0-1-e{0,1999} | cbwide0-1-b1{1} cbwide0-1-e{0,1} )\n"));
    sh = cb_gbnf_scan(w);
    assert_true(sh.repeat_min <= 2000 && sh.repeat_max <= 2000);
    free(w);
    /* a token's inverse is one symbol with its '!' */
    w = cb_gbnf_widen("root ::= !<[12]>{2500}", &n);
    assert_non_null(strstr(w, "cbwide0-0-e ::= (!<[12]>\n)\n"));
    free(w);
    /* left for the scan to refuse: past the largest count, inverted, after no symbol, inside literals */
    const char *kept[] = {"root ::= x{0,2147483648}", "root ::= x{3000,2500}",
                          "root ::= {3000}",          "root ::= \"x{3000}\" [{3000}] # x{3000}",
                          "root ::= x\n{3000}",       "root ::= x | {3000}"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        w = cb_gbnf_widen(kept[i], &n);
        assert_string_equal(w, kept[i]);
        assert_int_equal(n, 0);
        free(w);
    }
}

/* tools, tool_choice and parallel_tool_calls become engine params; assistant tool_calls and tool
 * messages in the history are kept for the template; the tool shapes and choices that cannot be
 * honoured are 400s naming the field; tool calls in a response and a stream chunk. */
static void tools_and_tool_messages(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    const char *tools =
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
        "\"parameters\":{\"type\":\"object\"},\"strict\":true}},{\"type\":\"function\",\"function\":"
        "{\"name\":\"get_time\"}}]";
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
             "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
             "\"name\":\"get_weather\",\"content\":\"sunny\"}],%s,\"tool_choice\":{\"type\":\"function\",\"function\":"
             "{\"name\":\"get_time\"}},\"parallel_tool_calls\":false}",
             tools);
    assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), 0);
    assert_int_equal(r.params.n_messages, 3);
    assert_null(r.params.messages[0].tool_calls);
    assert_non_null(strstr(r.params.messages[1].tool_calls, "\"get_weather\""));
    assert_string_equal(r.params.messages[1].content, "");
    assert_string_equal(r.params.messages[2].tool_call_id, "c1");
    assert_string_equal(r.params.messages[2].name, "get_weather");
    assert_non_null(strstr(r.params.tools, "get_time"));
    assert_int_equal(r.params.tool_choice, COBATCH_TOOL_CHOICE_REQUIRED);
    assert_string_equal(r.params.tool_function, "get_time");
    assert_true(r.params.single_tool_call && r.calls_tools);
    cb_openai_request_free(&r);
    snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", tools);
    assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), 0); /* OpenAI's defaults: auto, parallel */
    assert_int_equal(r.params.tool_choice, COBATCH_TOOL_CHOICE_AUTO);
    assert_true(!r.params.single_tool_call && r.calls_tools && !r.params.tool_function);
    cb_openai_request_free(&r);
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,\"tool_choice\":\"none\","
             "\"response_format\":{\"type\":\"json_object\"}}",
             tools);
    assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), 0); /* listed, not called: a format is fine */
    assert_true(!r.calls_tools && r.params.tools && r.params.tool_choice == COBATCH_TOOL_CHOICE_NONE);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[],"
                           "\"tool_choice\":\"auto\"}",
                           &r, &e),
                     0);
    assert_true(!r.calls_tools && !r.params.tools); /* no tools: nothing to call */
    cb_openai_request_free(&r);
    static const struct {
        const char *extra, *param, *says;
    } bad[] = {
        {"\"tools\":{}", "tools", "array"},
        {"\"tools\":[{\"type\":\"code_interpreter\"}]", "tools", "function"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", "tools", "letters"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":\"x\"}}]", "tools", "type"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"examples\":[]}}]", "tools", "not supported"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\"}}]",
         "tools", "second"},
        {"\"tool_choice\":\"required\"", "tool_choice", "needs"},
        {"\"tool_choice\":\"always\"", "tool_choice", "always"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\","
         "\"function\":{\"name\":\"g\"}}",
         "tool_choice", "'g'"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"grammar\":\"root ::= [a]\"", "grammar",
         "call format"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"response_format\":{\"type\":"
         "\"json_object\"}",
         "response_format", "call format"},
        {"\"parallel_tool_calls\":1", "parallel_tool_calls", "boolean"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s}", bad[i].extra);
        assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, bad[i].param);
        if (!strstr(e.message, bad[i].says)) fail_msg("%s: %s", bad[i].extra, e.message);
        cb_openai_request_free(&r);
    }
    static const char *const bad_messages[] = {
        "{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]}", /* only an assistant calls */
        "{\"role\":\"assistant\",\"tool_calls\":{}}",
        "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}"
        "]}",
        "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"retrieval\"}]}",
        "{\"role\":\"tool\",\"content\":\"x\",\"tool_call_id\":5}",
    };
    for (size_t i = 0; i < sizeof(bad_messages) / sizeof(bad_messages[0]); i++) {
        snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},%s]}", bad_messages[i]);
        assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), -1);
        assert_string_equal(e.param, "messages");
        cb_openai_request_free(&r);
    }
    /* hints and defaults that ask for nothing of the output */
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"text\"],"
                           "\"service_tier\":\"auto\",\"prompt_cache_key\":\"k\",\"safety_identifier\":\"u\","
                           "\"store\":false}",
                           &r, &e),
                     0);
    cb_openai_request_free(&r);
    /* what sglang-router and vllm-router add to every request they forward (seen on the wire) */
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"x\",\"logprobs\":false,"
                           "\"max_completion_tokens\":8,\"stream\":false,\"no_stop_trim\":false,\"ignore_eos\":false,"
                           "\"continue_final_message\":false,\"skip_special_tokens\":true,\"separate_reasoning\":true,"
                           "\"stream_reasoning\":true,\"return_hidden_states\":false,\"include_reasoning\":true}",
                           &r, &e),
                     0);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION,
                           "{\"model\":\"x\",\"prompt\":\"x\",\"max_tokens\":5,\"stream\":true,\"echo\":false,"
                           "\"no_stop_trim\":false,\"ignore_eos\":false,\"skip_special_tokens\":true,"
                           "\"return_hidden_states\":false}",
                           &r, &e),
                     0);
    cb_openai_request_free(&r);
    /* the values that ask for something this server does not do are refused by name */
    static const char *const asks[] = {"no_stop_trim\":true", "continue_final_message\":true",
                                       "skip_special_tokens\":false", "return_hidden_states\":true"};
    for (size_t i = 0; i < sizeof(asks) / sizeof(asks[0]); i++) {
        snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"%s}", asks[i]);
        assert_int_equal(parse(CB_OPENAI_COMPLETION, body, &r, &e), -1);
        assert_int_equal(strncmp(e.param, asks[i], strlen(e.param)), 0);
        cb_openai_request_free(&r);
    }
    /* completions have no tools: only the values that ask for nothing */
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"tools\":[],\"tool_choice\":\"none\"}", &r, &e),
                     0);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"tools\":[{\"type\":\"function\"}]}", &r, &e), -1);
    assert_string_equal(e.param, "tools");
    cb_openai_request_free(&r);

    /* a response with calls: content null, ids, arguments as text; a chunk of a call */
    struct cobatch_tool_call calls[2] = {{"get_weather", "{\"city\": \"Paris\"}"}, {"get_time", "{}"}};
    const char *ids[2] = {"call_a", "call_b"};
    char *j = cb_openai_response_json(
        CB_OPENAI_CHAT, "chatcmpl-1", 1, "m",
        &(cb_openai_choice){.text = "", .finish = "tool_calls", .calls = calls, .n_calls = 2, .call_ids = ids}, 1,
        &(cb_openai_usage){3, 4, -1, -1, -1, 0});
    cJSON *o = cJSON_Parse(j);
    free(j);
    cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(m, "content")));
    cJSON *t1 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "tool_calls"), 1);
    assert_string_equal(cJSON_GetObjectItem(t1, "id")->valuestring, "call_b");
    assert_string_equal(cJSON_GetObjectItem(t1, "type")->valuestring, "function");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(t1, "function"), "arguments")->valuestring, "{}");
    cJSON_Delete(o);
    j = cb_openai_tool_chunk_json("chatcmpl-1", 1, "m", 2, 1, NULL, NULL, "\"Par");
    o = cJSON_Parse(j);
    free(j);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_int_equal(cJSON_GetObjectItem(c, "index")->valueint, 2);
    cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "tool_calls"), 0);
    assert_int_equal(cJSON_GetObjectItem(tc, "index")->valueint, 1);
    assert_null(cJSON_GetObjectItem(tc, "id")); /* after the first chunk of a call: its arguments only */
    assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(tc, "function"), "name"));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(tc, "function"), "arguments")->valuestring, "\"Par");
    cJSON_Delete(o);
    j = cb_openai_chunk_json(CB_OPENAI_CHAT, "chatcmpl-1", 1, "m", 0, NULL, NULL, true, NULL);
    o = cJSON_Parse(j);
    free(j);
    cJSON *d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "delta");
    assert_null(cJSON_GetObjectItem(d, "content")); /* a stream of calls opens with the role alone */
    assert_string_equal(cJSON_GetObjectItem(d, "role")->valuestring, "assistant");
    cJSON_Delete(o);
}

/* Token texts for the formatting tests: token t is "t<t>", 300 is the first byte of a character
 * ("\xe2"), 301 an invalid byte on its own. */
static int32_t fake_piece(void *user, int32_t tok, char *buf, int32_t cap) {
    (void)user;
    char t[16];
    int n = tok == 300   ? snprintf(t, sizeof(t), "\xe2")
            : tok == 301 ? snprintf(t, sizeof(t), "\xff")
                         : snprintf(t, sizeof(t), "t%d", tok);
    if (n <= cap) memcpy(buf, t, (size_t)n);
    return n;
}

/* OpenAI's two shapes: completions' parallel lists (the first echoed token null, the sampled token
 * always among top_logprobs, offsets in characters) and chat's content entries with bytes. */
static void logprobs_shapes(void **state) {
    (void)state;
    const float nan = NAN;
    struct cobatch_logprob rows[] = {
        {5, nan},   {-1, nan},   {-1, nan},  /* an echoed prompt's first token */
        {6, -0.5f}, {6, -0.5f},  {7, -1.5f}, /* the most likely token */
        {300, -2},  {7, -0.25f}, {8, -1},    /* a token outside the top 2, part of a character */
    };
    cb_openai_logprobs lp = {.rows = rows, .n_rows = 3, .stride = 3, .top = 2, .text_offset = 10, .piece = fake_piece};
    cJSON *o = json(cb_openai_response_json(CB_OPENAI_COMPLETION, "cmpl-1", 1, "m",
                                            &(cb_openai_choice){.text = "t5t6\xe2", .finish = "length", .lp = &lp}, 1,
                                            &(cb_openai_usage){1, 2, -1, -1, -1, 0}));
    cJSON *l = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0),
                                                "logprobs");
    assert_string_equal(str_at(l, "tokens.0"), "t5");
    assert_string_equal(str_at(l, "tokens.2"), "bytes:\\xe2");
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "token_logprobs"), 0)));
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "top_logprobs"), 0)));
    assert_true(num_at(l, "token_logprobs.1") == -0.5);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "top_logprobs"), 1)), 2);
    cJSON *t2 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(l, "top_logprobs"), 2);
    assert_int_equal(cJSON_GetArraySize(t2), 3); /* two alternatives and the sampled token */
    assert_true(cJSON_GetObjectItemCaseSensitive(t2, "bytes:\\xe2")->valuedouble == -2);
    assert_true(num_at(l, "text_offset.0") == 10 && num_at(l, "text_offset.1") == 12 &&
                num_at(l, "text_offset.2") == 14);
    assert_int_equal(cb_openai_text_end(&lp), 15);
    cJSON_Delete(o);

    lp.rows = rows + 3;
    lp.n_rows = 2;
    o = json(cb_openai_chunk_json(CB_OPENAI_CHAT, "c", 1, "m", 0, "t6", NULL, false, &lp));
    cJSON *c = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0),
                                         "logprobs"),
        "content");
    assert_int_equal(cJSON_GetArraySize(c), 2);
    assert_string_equal(str_at(c, "0.token"), "t6");
    assert_true(num_at(c, "0.bytes.1") == '6');
    assert_true(num_at(c, "0.top_logprobs.1.logprob") == -1.5);
    assert_string_equal(str_at(c, "1.token"), "bytes:\\xe2");
    assert_true(num_at(c, "1.bytes.0") == 0xe2);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(c, 1), "top_logprobs")), 2);
    cJSON_Delete(o);
}

static void refusals_name_the_field(void **state) {
    (void)state;
    struct {
        cb_openai_kind kind;
        const char *body, *param;
        int status;
    } cases[] = {
        {CB_OPENAI_COMPLETION, "{}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"\"}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[[1],\"x\"]}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[\"x\",[1]]}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[[1],[]]}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[1,\"x\"]}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[[1],[2]],\"n\":65}", "n", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"yaml\"}}", "response_format", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":\"json\"}", "response_format", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\"}}", "response_format",
         400},
        {CB_OPENAI_COMPLETION,
         "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":3}"
         "}}",
         "response_format", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"text\",\"extra\":1}}",
         "response_format", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":7}", "grammar", 400},
        {CB_OPENAI_COMPLETION,
         "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}",
         "grammar", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":1}", "echo", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"top_logprobs\":2}", "top_logprobs", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "top_logprobs",
         400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "logprobs", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "max_tokens", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "echo", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}",
         "top_logprobs", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"temperature\":3}", "temperature", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"n\":17}", "n", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stop\":7}", "stop", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"model\":1}", "model", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[]}", "messages", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", "messages", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\"} trailing", "", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "", 400},
        {CB_OPENAI_COMPLETION, "[1]", "", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\",\"echo\":true}", "suffix", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":[1,2],\"suffix\":\"y\"}", "suffix", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":3}", "suffix", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"suffix\":\"y\"}", "suffix", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"store\":true}", "store", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"metadata\":{}}", "metadata", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"modalities\":[\"text\",\"audio\"]}",
         "modalities", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"service_tier\":\"flex\"}",
         "service_tier", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}", "functions", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"extreme\"}",
         "reasoning_effort", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":3}",
         "reasoning_effort", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":[]}",
         "chat_template_kwargs", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}",
         "chat_template_kwargs", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"none\",\"chat_template_kwargs\":"
         "{\"enable_thinking\":true}}",
         "reasoning_effort", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking_budget_tokens\":-2}",
         "thinking_budget_tokens", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking_budget_tokens\":1.5}",
         "thinking_budget_tokens", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"thinking_budget_tokens\":5,\"reasoning_budget_"
         "tokens\":5}",
         "reasoning_budget_tokens", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_format\":\"deepseek-legacy\"}",
         "reasoning_format", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"include_reasoning\":\"yes\"}",
         "include_reasoning", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"separate_reasoning\":false,\"reasoning_format\":"
         "\"auto\"}",
         "separate_reasoning", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"reasoning_content\":\"r\"}]}",
         "messages", 400},
        {CB_OPENAI_CHAT,
         "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":\"r\",\"reasoning\":\"s\"}]}",
         "messages", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"reasoning_effort\":\"low\"}", "reasoning_effort", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools", 400},
        {CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":\"y\"}", "prompt", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "logit_bias", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"12a\":1}}", "logit_bias", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"12\":-101}}", "logit_bias", 400},
        {CB_OPENAI_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias", 400},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cb_openai_request r;
        cb_openai_error e;
        if (parse(cases[k].kind, cases[k].body, &r, &e) != -1) fail_msg("accepted: %s", cases[k].body);
        assert_int_equal(e.status, cases[k].status);
        if (strcmp(e.param, cases[k].param))
            fail_msg("%s: param '%s', want '%s'", cases[k].body, e.param, cases[k].param);
        assert_true(e.message[0] != '\0');
        cb_openai_request_free(&r);
    }
}

/* Reasoning fields: each becomes what the engine is asked; the template's answer comes from it. */
/* verbosity low or high is a line of the chat's instructions (the first system or developer message's
 * end, or a system message of its own first); medium asks nothing; reasoning_context chooses which
 * turns' reasoning handed back is shown (the engine refuses all_turns a template cannot keep). */
static void verbosity_and_reasoning_context(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be kind.\"},{\"role\":\"user\","
                           "\"content\":\"q\"}],\"verbosity\":\"low\",\"reasoning_context\":\"current_turn\"}",
                           &r, &e),
                     0);
    assert_int_equal(r.params.n_messages, 2);
    assert_string_equal(r.params.messages[0].content, "Be kind.\n\n" CB_OPENAI_VERBOSITY_LOW);
    assert_string_equal(r.params.messages[1].content, "q");
    assert_int_equal(r.params.reasoning.past, COBATCH_PAST_REASONING_CURRENT);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"verbosity\":\"high\","
                           "\"reasoning_context\":\"all_turns\"}",
                           &r, &e),
                     0);
    assert_int_equal(r.params.n_messages, 2);
    assert_string_equal(r.params.messages[0].role, "system");
    assert_string_equal(r.params.messages[0].content, CB_OPENAI_VERBOSITY_HIGH);
    assert_int_equal(r.params.reasoning.past, COBATCH_PAST_REASONING_ALL);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"S\"}]},"
                           "{\"role\":\"user\",\"content\":\"q\"}],\"verbosity\":\"low\"}",
                           &r, &e),
                     0);
    assert_string_equal(r.params.messages[0].content, "S\n\n" CB_OPENAI_VERBOSITY_LOW);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"verbosity\":\"medium\","
                           "\"reasoning_context\":\"auto\"}",
                           &r, &e),
                     0);
    assert_int_equal(r.params.n_messages, 1);
    assert_int_equal(r.params.reasoning.past, COBATCH_PAST_REASONING_TEMPLATE);
    cb_openai_request_free(&r);
    const char *bad[][2] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"verbosity\":\"loud\"}", "verbosity"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"reasoning_context\":\"some\"}", "reasoning_context"}};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(parse(CB_OPENAI_CHAT, bad[i][0], &r, &e), -1);
        assert_string_equal(e.param, bad[i][1]);
        cb_openai_request_free(&r);
    }
    /* completions have no instructions to ask in */
    assert_int_equal(parse(CB_OPENAI_COMPLETION, "{\"prompt\":\"q\",\"verbosity\":\"low\"}", &r, &e), -1);
    assert_string_equal(e.param, "verbosity");
    cb_openai_request_free(&r);
}

static void reasoning_fields(void **state) {
    (void)state;
    cb_openai_request r;
    cb_openai_error e;
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                       "\"content\":\"a\",\"reasoning_content\":\"because\"},{\"role\":\"user\",\"content\":\"more\"}],"
                       "\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":true,\"x\":[1]},"
                       "\"thinking_budget_tokens\":64,\"include_reasoning\":false,\"stream_reasoning\":false}";
    assert_int_equal(parse(CB_OPENAI_CHAT, body, &r, &e), 0);
    assert_string_equal(r.params.messages[1].reasoning, "because");
    assert_null(r.params.messages[0].reasoning);
    assert_string_equal(r.params.reasoning.effort, "high");
    assert_int_equal(r.params.reasoning.think, COBATCH_THINK_ON);
    assert_true(r.params.reasoning.has_budget);
    assert_int_equal(r.params.reasoning.budget, 64);
    assert_false(r.params.reasoning.keep);
    assert_true(r.omit_reasoning && r.hold_reasoning);
    cJSON *kw = cJSON_Parse(r.params.template_kwargs); /* every variable reaches the template */
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(kw, "enable_thinking")));
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(kw, "x")));
    cJSON_Delete(kw);
    /* the engine's refusals name the field the request used */
    assert_string_equal(cb_openai_param(&r, "reasoning_budget"), "thinking_budget_tokens");
    assert_string_equal(cb_openai_param(&r, "reasoning"), "reasoning_effort");
    assert_string_equal(cb_openai_param(&r, "json_schema"), "response_format");
    cb_openai_request_free(&r);

    /* none turns thinking off; reasoning_format none and separate_reasoning false keep it in the text */
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"reasoning_effort\":\"none\","
                           "\"reasoning_format\":\"none\",\"reasoning_budget_tokens\":-1}",
                           &r, &e),
                     0);
    assert_string_equal(r.params.reasoning.effort, "none");
    assert_true(r.params.reasoning.keep);
    assert_true(r.params.reasoning.has_budget && r.params.reasoning.budget == -1);
    assert_string_equal(cb_openai_param(&r, "reasoning_budget"), "reasoning_budget_tokens");
    assert_null(r.params.template_kwargs);
    cb_openai_request_free(&r);
    assert_int_equal(parse(CB_OPENAI_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"separate_reasoning\":false,"
                           "\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                           &r, &e),
                     0);
    assert_true(r.params.reasoning.keep);
    assert_int_equal(r.params.reasoning.think, COBATCH_THINK_OFF);
    assert_string_equal(cb_openai_param(&r, "reasoning"), "chat_template_kwargs");
    cb_openai_request_free(&r);
    /* nothing asked: the defaults, zeroed */
    assert_int_equal(parse(CB_OPENAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", &r, &e), 0);
    assert_int_equal(r.params.reasoning.think, COBATCH_THINK_DEFAULT);
    assert_false(r.params.reasoning.has_budget || r.params.reasoning.keep || r.omit_reasoning || r.hold_reasoning);
    assert_null(r.params.reasoning.effort);
    cb_openai_request_free(&r);

    /* a chat's reasoning in its answer and its stream */
    char *j = cb_openai_response_json(CB_OPENAI_CHAT, "chatcmpl-1", 1, "m",
                                      &(cb_openai_choice){.text = "4", .reasoning = "2+2", .finish = "stop"}, 1,
                                      &(cb_openai_usage){5, 9, -1, 7, -1, 0});
    cJSON *o = cJSON_Parse(j);
    free(j);
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0), "message"),
                            "reasoning_content")
            ->valuestring,
        "2+2");
    assert_int_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "completion_tokens_details"),
                            "reasoning_tokens")
            ->valueint,
        7);
    cJSON_Delete(o);
}

static void response_shapes(void **state) {
    (void)state;
    cJSON *o = json(cb_openai_response_json(CB_OPENAI_CHAT, "chatcmpl-1", 100, "m",
                                            &(cb_openai_choice){.text = "Paris.", .finish = "stop", .lp = NULL}, 1,
                                            &(cb_openai_usage){10, 3, 4, -1, 12, 2}));
    assert_string_equal(str_at(o, "object"), "chat.completion");
    assert_string_equal(str_at(o, "choices.0.message.role"), "assistant");
    assert_string_equal(str_at(o, "choices.0.message.content"), "Paris.");
    assert_string_equal(str_at(o, "choices.0.finish_reason"), "stop");
    assert_true(num_at(o, "usage.total_tokens") == 13);
    assert_true(num_at(o, "usage.prompt_tokens_details.cached_tokens") == 4);
    /* a prediction of 12 tokens of which 2 held as drafts (Predicted Outputs) */
    assert_true(num_at(o, "usage.completion_tokens_details.accepted_prediction_tokens") == 2);
    assert_true(num_at(o, "usage.completion_tokens_details.rejected_prediction_tokens") == 10);
    assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "usage"), "reasoning_tokens"));
    cJSON_Delete(o);

    o = json(cb_openai_response_json(CB_OPENAI_COMPLETION, "cmpl-1", 100, "m",
                                     &(cb_openai_choice){.text = "x", .finish = "length", .lp = NULL}, 1,
                                     &(cb_openai_usage){1, 1, -1, -1, -1, 0}));
    assert_string_equal(str_at(o, "object"), "text_completion");
    assert_string_equal(str_at(o, "choices.0.text"), "x");
    assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "usage"),
                                                 "prompt_tokens_details")); /* cached < 0: omitted */
    cJSON_Delete(o);

    o = json(cb_openai_chunk_json(CB_OPENAI_CHAT, "chatcmpl-1", 100, "m", 0, "", NULL, true, NULL));
    assert_string_equal(str_at(o, "object"), "chat.completion.chunk");
    assert_string_equal(str_at(o, "choices.0.delta.role"), "assistant");
    cJSON_Delete(o);

    o = json(cb_openai_abort_chunk_json(CB_OPENAI_CHAT, "chatcmpl-1", 100, "m", 0, 503, "service_unavailable",
                                        "the server is shutting down"));
    assert_string_equal(str_at(o, "choices.0.finish_reason"), "abort");
    assert_string_equal(str_at(o, "error.message"), "the server is shutting down");
    cJSON_Delete(o);

    cb_openai_error e = {.status = 400, .type = "invalid_request_error", .message = "bad", .param = "top_p"};
    o = json(cb_openai_error_json(&e));
    assert_string_equal(str_at(o, "error.type"), "invalid_request_error");
    assert_string_equal(str_at(o, "error.param"), "top_p");
    assert_string_equal(str_at(o, "error.message"), "bad");
    cJSON_Delete(o);
}

static void json_check_agrees_with_rfc8259(void **state) {
    (void)state;
    const char *good[] = {"{}", "[1,2.5e-3,-0,true,false,null]", "\"\\u00e9\"", " {\"a\" : [ ] } "};
    const char *bad[] = {"",        "01",  "1.",         "{\"a\":1,}",    "[1] [2]",         "{a:1}",
                         "\"\\x\"", "tru", "\"a\x01b\"", "\"tab\there\"", "{\"k\\n\x1f\":1}"};
    for (size_t k = 0; k < sizeof(good) / sizeof(good[0]); k++)
        assert_true(cb_openai_json_well_formed(good[k], strlen(good[k])));
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
        if (cb_openai_json_well_formed(bad[k], strlen(bad[k]))) fail_msg("accepted: %s", bad[k]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(completion_fields_become_engine_params),
        cmocka_unit_test(chat_messages_and_priority),
        cmocka_unit_test(logit_bias_and_null_fields),
        cmocka_unit_test(duplicate_keys_are_refused),
        cmocka_unit_test(operator_defaults_and_seed),
        cmocka_unit_test(completion_suffix),
        cmocka_unit_test(prompts_echo_and_logprobs),
        cmocka_unit_test(logprobs_shapes),
        cmocka_unit_test(response_format_and_grammar),
        cmocka_unit_test(tools_and_tool_messages),
        cmocka_unit_test(refusals_name_the_field),
        cmocka_unit_test(gbnf_shape_is_read_without_parsing),
        cmocka_unit_test(request_shapes_past_the_limits_are_refused),
        cmocka_unit_test(grammar_bounds_above_what_llama_keeps),
        cmocka_unit_test(grammar_repetitions_widened),
        cmocka_unit_test(verbosity_and_reasoning_context),
        cmocka_unit_test(reasoning_fields),
        cmocka_unit_test(response_shapes),
        cmocka_unit_test(json_check_agrees_with_rfc8259),
    };
    return cmocka_run_group_tests_name("openai", tests, NULL, NULL);
}
