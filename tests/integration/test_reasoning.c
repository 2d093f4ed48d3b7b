/* Reasoning through the public API, on the real default model (which does not think by itself): a
 * template whose generation prompt opens the <think> block puts the output inside it from the first
 * token; the reasoning budget closes it (the FINISHED event counts the block's tokens), and
 * cobatch_chat_parse reads the reasoning apart from the content. Thinking turned off, a JSON schema
 * after the reasoning and without one, and the refusals of what a template cannot do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/util/utf8.h"
#include "harness.h"

bool cb_utf8_check(const char *s, size_t n) { return cb_utf8_valid_prefix(s, n, NULL) == n; }

static cobatch_engine *opened, *plain; /* the block-opening template's engine; the model's own template's */

static int setup(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.n_ctx = 2048;
    p.max_num_seqs = 4;
    p.chat_template_file = COBATCH_TEST_THINK_OPEN_TEMPLATE;
    p.reasoning_budget = 4; /* the chats' default bound, a request's own replaces it */
    opened = it_engine(p);
    p.chat_template_file = NULL;
    plain = it_engine(p);
    return opened && plain ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cobatch_engine_free(opened);
    cobatch_engine_free(plain);
    return 0;
}

static struct cobatch_chat_message ask[] = {{.role = "user", .content = "What is two plus two?"}};

static struct cobatch_request_params chat_params(void) {
    struct cobatch_request_params p = cobatch_request_default_params();
    p.messages = ask;
    p.n_messages = 1;
    p.max_tokens = 40;
    return p;
}

static int32_t n_tokens(cobatch_engine *e, const char *text) {
    int32_t t[64];
    return cobatch_tokenize_ext(e, text, false, false, t, 64);
}

/* The budget forces the end marker after that many tokens; the output read apart gives the block's
 * text as reasoning and what follows as content, both without markers. */
static void a_budget_closes_the_block_and_the_parse_reads_it(void **state) {
    (void)state;
    int32_t end = n_tokens(opened, "</think>");
    char err[160];
    for (int k = 0; k < 3; k++) {
        struct cobatch_request_params p = chat_params();
        int32_t budget = k == 0 ? 4 : k == 1 ? 0 : 9; /* the engine's default, then two of the request's */
        p.reasoning.has_budget = k > 0;
        p.reasoning.budget = budget;
        struct cobatch_error ce;
        cobatch_chat *chat = cobatch_chat_new(opened, &p, &ce);
        assert_non_null(chat);
        assert_true(cobatch_chat_thinks(chat) && cobatch_chat_parses(chat) && !cobatch_chat_calls_tools(chat));
        struct cobatch_request_params q = cobatch_request_default_params();
        q.chat = chat;
        q.max_tokens = 40;
        it_result r;
        assert_true(it_run(opened, &q, &r, 1));
        printf("# budget %d: %d of %d tokens in the block: '%s'\n", budget, r.n_reasoning, r.n_generated, r.text);
        assert_int_equal(r.n_reasoning, budget + end);
        struct cobatch_chat_output out;
        assert_int_equal(cobatch_chat_parse(chat, r.text, r.text_len, false, &out, err, sizeof(err)), 0);
        assert_null(strstr(out.reasoning, "think>"));
        assert_null(strstr(out.content, "think>"));
        const char *close = strstr(r.text, "</think>"); /* the reasoning is the text before the marker */
        assert_non_null(close);
        assert_true(strlen(out.reasoning) <= (size_t)(close - r.text));
        assert_memory_equal(r.text + strspn(r.text, "\n"), out.reasoning + strspn(out.reasoning, "\n"),
                            strlen(out.reasoning) - strspn(out.reasoning, "\n"));
        cobatch_chat_output_clear(&out);
        it_free(&r, 1);
        cobatch_chat_free(chat);
    }
    /* no bound: the model never leaves the block, every token is reasoning */
    struct cobatch_request_params p = chat_params();
    p.reasoning.has_budget = true;
    p.reasoning.budget = -1;
    p.max_tokens = 16;
    it_result r;
    assert_true(it_run(opened, &p, &r, 1));
    assert_int_equal(r.n_reasoning, r.n_generated);
    it_free(&r, 1);
}

/* Off: the template closes an empty block in the generation prompt, the output is not read for it. */
static void thinking_off_and_refusals(void **state) {
    (void)state;
    struct cobatch_error ce;
    struct cobatch_request_params p = chat_params();
    cobatch_chat *on = cobatch_chat_new(opened, &p, &ce);
    p.reasoning.think = COBATCH_THINK_OFF;
    cobatch_chat *off = cobatch_chat_new(opened, &p, &ce);
    p.reasoning.think = COBATCH_THINK_DEFAULT;
    p.reasoning.effort = "none";
    cobatch_chat *none = cobatch_chat_new(opened, &p, &ce);
    assert_true(on && off && none);
    int32_t n_on, n_off, n_none;
    cobatch_chat_tokens(on, &n_on);
    cobatch_chat_tokens(off, &n_off);
    cobatch_chat_tokens(none, &n_none);
    assert_true(n_off > n_on && n_none == n_off);
    assert_false(cobatch_chat_thinks(off) || cobatch_chat_parses(off) || cobatch_chat_thinks(none));
    cobatch_chat_free(on);
    cobatch_chat_free(off);
    cobatch_chat_free(none);
    /* kept in the text: not read apart */
    p = chat_params();
    p.reasoning.keep = true;
    cobatch_chat *kept = cobatch_chat_new(opened, &p, &ce);
    assert_non_null(kept);
    assert_false(cobatch_chat_thinks(kept));
    cobatch_chat_free(kept);
    p.reasoning.has_budget = true; /* a budget needs the block followed: refused, not dropped */
    p.reasoning.budget = 5;
    assert_null(cobatch_chat_new(opened, &p, &ce));
    assert_string_equal(ce.param, "reasoning_budget");
    struct cobatch_engine_params ep = cobatch_engine_default_params();
    ep.model_path = "unused.gguf";
    ep.reasoning_format = COBATCH_REASONING_NONE;
    ep.reasoning_budget = 8;
    char err[200] = "";
    assert_null(cobatch_engine_init(&ep, err, sizeof(err)));
    assert_non_null(strstr(err, "reasoning"));
    /* an effort the template does not read; a budget beside a grammar of the request's own */
    p = chat_params();
    p.reasoning.effort = "high";
    assert_null(cobatch_chat_new(opened, &p, &ce));
    assert_string_equal(ce.param, "reasoning_effort");
    p = chat_params();
    p.grammar = "root ::= \"x\"";
    p.reasoning.has_budget = true;
    p.reasoning.budget = 3;
    assert_int_equal(cobatch_submit(opened, &p, &ce), COBATCH_ERR_INVALID);
    assert_string_equal(ce.param, "reasoning_budget");
    /* the model's own template does not think: on is refused, an effort or a budget ask nothing */
    p = chat_params();
    p.reasoning.think = COBATCH_THINK_ON;
    assert_null(cobatch_chat_new(plain, &p, &ce));
    assert_string_equal(ce.param, "reasoning");
    p.reasoning.think = COBATCH_THINK_DEFAULT;
    p.reasoning.effort = "high";
    p.reasoning.has_budget = true;
    cobatch_chat *moot = cobatch_chat_new(plain, &p, &ce);
    assert_non_null(moot);
    assert_false(cobatch_chat_thinks(moot));
    cobatch_chat_free(moot);
}

/* A JSON schema holds the answer after the reasoning (the block first), and from the first token
 * where there is no block. */
static void a_schema_holds_the_answer(void **state) {
    (void)state;
    static const char schema[] =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
        "\"additionalProperties\":false}";
    char err[160];
    for (int k = 0; k < 2; k++) {
        cobatch_engine *e = k ? plain : opened;
        struct cobatch_request_params p = chat_params();
        p.json_schema = schema;
        p.max_tokens = 60;
        struct cobatch_error ce;
        cobatch_chat *chat = cobatch_chat_new(e, &p, &ce);
        assert_non_null(chat);
        struct cobatch_request_params q = cobatch_request_default_params();
        q.chat = chat;
        q.max_tokens = 60;
        it_result r;
        assert_true(it_run(e, &q, &r, 1));
        struct cobatch_chat_output out;
        assert_int_equal(cobatch_chat_parse(chat, r.text, r.text_len, false, &out, err, sizeof(err)), 0);
        printf("# schema, %s: reasoning '%s', answer '%s'\n", k ? "no block" : "after the block", out.reasoning,
               out.content);
        assert_int_equal(r.reason, COBATCH_FINISH_STOP);
        assert_true(k ? !out.reasoning[0] : out.reasoning[0] != '\0');
        const char *a = out.content + strspn(out.content, " \n");
        assert_true(a[0] == '{' && strstr(a, "\"n\"") && out.content[strlen(out.content) - 1] == '}');
        /* a chat's schema goes with the chat: given beside it, or with a text prompt, it is refused */
        q.json_schema = schema;
        assert_int_equal(cobatch_submit(e, &q, &ce), COBATCH_ERR_INVALID);
        q = cobatch_request_default_params();
        q.prompt = "Two plus two is";
        q.json_schema = schema;
        assert_int_equal(cobatch_submit(e, &q, &ce), COBATCH_ERR_INVALID);
        assert_string_equal(ce.param, "json_schema");
        cobatch_chat_output_clear(&out);
        it_free(&r, 1);
        cobatch_chat_free(chat);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_budget_closes_the_block_and_the_parse_reads_it),
        cmocka_unit_test(thinking_off_and_refusals),
        cmocka_unit_test(a_schema_holds_the_answer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
