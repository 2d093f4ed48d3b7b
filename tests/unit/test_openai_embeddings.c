/* OpenAI's embeddings request and response (src/openai/embeddings.c) on their own: each of the four
 * input shapes, every refusal naming its field, and the response as the SDKs read it: floats that read
 * back as the same float32, base64 of their little-endian bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/openai/embeddings.h"

#define DIM 576

static int parse(const char *body, cb_openai_embd_request *r, cb_openai_error *e) {
    return cb_openai_embd_parse(body, strlen(body), DIM, r, e);
}

/* The body is refused with a 400 whose param is `param` and whose message says `says`. */
static void refused(const char *body, const char *param, const char *says) {
    cb_openai_embd_request r;
    cb_openai_error e;
    if (parse(body, &r, &e) == 0) fail_msg("accepted: %s", body);
    assert_int_equal(e.status, 400);
    if (strcmp(e.param, param) != 0) fail_msg("%s: param '%s', not '%s'", body, e.param, param);
    if (says && !strstr(e.message, says)) fail_msg("%s: '%s' does not say '%s'", body, e.message, says);
    cb_openai_embd_request_free(&r);
}

static void every_input_shape(void **state) {
    (void)state;
    cb_openai_embd_request r;
    cb_openai_error e;
    assert_int_equal(parse("{\"input\":\"Hello world\",\"model\":\"m\"}", &r, &e), 0);
    assert_int_equal(r.n_inputs, 1);
    assert_string_equal(r.inputs[0].text, "Hello world");
    assert_string_equal(r.model, "m");
    assert_false(r.base64);
    cb_openai_embd_request_free(&r);

    assert_int_equal(parse("{\"input\":[\"a\",\"b c\",\"d\"]}", &r, &e), 0);
    assert_int_equal(r.n_inputs, 3);
    assert_string_equal(r.inputs[1].text, "b c");
    assert_null(r.inputs[1].tokens);
    assert_null(r.model);
    cb_openai_embd_request_free(&r);

    assert_int_equal(parse("{\"input\":[1,2,3]}", &r, &e), 0); /* one input of token ids */
    assert_int_equal(r.n_inputs, 1);
    assert_null(r.inputs[0].text);
    assert_int_equal(r.inputs[0].n_tokens, 3);
    assert_int_equal(r.inputs[0].tokens[2], 3);
    cb_openai_embd_request_free(&r);

    assert_int_equal(parse("{\"input\":[[1,2],[3],[4,5,6]]}", &r, &e), 0);
    assert_int_equal(r.n_inputs, 3);
    assert_int_equal(r.inputs[1].n_tokens, 1);
    assert_int_equal(r.inputs[2].tokens[0], 4);
    cb_openai_embd_request_free(&r);
}

static void options_and_hints(void **state) {
    (void)state;
    cb_openai_embd_request r;
    cb_openai_error e;
    assert_int_equal(
        parse("{\"input\":\"x\",\"encoding_format\":\"base64\",\"user\":\"u-1\",\"dimensions\":576}", &r, &e), 0);
    assert_true(r.base64); /* dimensions at the model's own size asks for nothing */
    cb_openai_embd_request_free(&r);
    assert_int_equal(parse("{\"input\":\"x\",\"encoding_format\":\"float\"}", &r, &e), 0);
    assert_false(r.base64);
    cb_openai_embd_request_free(&r);
    /* a field sent as null asks for nothing */
    assert_int_equal(parse("{\"input\":\"x\",\"encoding_format\":null,\"dimensions\":null,\"user\":null,"
                           "\"model\":null,\"truncate_prompt_tokens\":null}",
                           &r, &e),
                     0);
    assert_false(r.base64);
    cb_openai_embd_request_free(&r);
}

static void refusals_name_their_field(void **state) {
    (void)state;
    refused("{}", "input", "required");
    refused("{\"input\":null}", "input", "required");
    refused("{\"input\":\"\"}", "input", "empty");
    refused("{\"input\":[]}", "input", "empty");
    refused("{\"input\":[\"a\",\"\"]}", "input", "input[1] is empty");
    refused("{\"input\":[[1],[]]}", "input", "input[1] is empty");
    refused("{\"input\":42}", "input", "must be a string");
    refused("{\"input\":{\"text\":\"a\"}}", "input", "must be a string");
    refused("{\"input\":[\"a\",[1]]}", "input", "must be a string");
    refused("{\"input\":[[1],\"a\"]}", "input", "must be a string");
    refused("{\"input\":[null]}", "input", "must be a string");
    refused("{\"input\":[1,-2]}", "input", "non-negative integers");
    refused("{\"input\":[1,2.5]}", "input", "non-negative integers");
    refused("{\"input\":[1,\"a\"]}", "input", "non-negative integers");
    refused("{\"input\":[[1],[2,[3]]]}", "input", "input[1]: token ids");
    refused("{\"input\":\"x\",\"encoding_format\":\"int8\"}", "encoding_format", "\"float\" or \"base64\"");
    refused("{\"input\":\"x\",\"encoding_format\":1}", "encoding_format", NULL);
    refused("{\"input\":\"x\",\"dimensions\":256}", "dimensions", "576 dimensions");
    refused("{\"input\":\"x\",\"dimensions\":0}", "dimensions", "positive integer");
    refused("{\"input\":\"x\",\"dimensions\":\"576\"}", "dimensions", "positive integer");
    refused("{\"input\":\"x\",\"user\":7}", "user", "string");
    refused("{\"input\":\"x\",\"model\":[]}", "model", "string");
    /* what OpenAI does not have, or vLLM's and llama-server's own: named, never ignored */
    refused("{\"input\":\"x\",\"truncate_prompt_tokens\":8}", "truncate_prompt_tokens", "not supported");
    refused("{\"input\":\"x\",\"normalize\":false}", "normalize", "not supported");
    refused("{\"input\":\"x\",\"embd_normalize\":2}", "embd_normalize", "not supported");
    refused("{\"content\":\"x\"}", "content", "not supported");
    refused("[\"x\"]", "", "JSON object");
    refused("{\"input\":\"x\"", "", NULL);
    /* a NUL would cut the text short */
    const char nul[] = "{\"input\":\"a\\u0000b\"}";
    cb_openai_embd_request r;
    cb_openai_error e;
    assert_int_equal(cb_openai_embd_parse(nul, sizeof(nul) - 1, DIM, &r, &e), -1);
    assert_non_null(strstr(e.message, "NUL"));
    cb_openai_embd_request_free(&r);
}

/* A body of n inputs "a" (malloc'd). */
static char *many_inputs(int n) {
    char *body = malloc(16 + 4 * (size_t)n), *p = body;
    p += sprintf(p, "{\"input\":[");
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s\"a\"", i ? "," : "");
    sprintf(p, "]}");
    return body;
}

static void input_count_is_bounded(void **state) {
    (void)state;
    char *body = many_inputs(COBATCH_EMBD_MAX_INPUTS + 1);
    refused(body, "input", "at most 2048");
    free(body);
    body = many_inputs(COBATCH_EMBD_MAX_INPUTS);
    cb_openai_embd_request r;
    cb_openai_error e;
    assert_int_equal(parse(body, &r, &e), 0);
    assert_int_equal(r.n_inputs, COBATCH_EMBD_MAX_INPUTS);
    cb_openai_embd_request_free(&r);
    free(body);
}

/* Decodes base64 (the SDK's side), for the check. */
static size_t unbase64(const char *s, unsigned char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0, len = strlen(s);
    for (size_t i = 0; i + 3 < len; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *c = s[i + k] == '=' ? NULL : strchr(A, s[i + k]);
            pad += c == NULL;
            v = v << 6 | (c ? (unsigned)(c - A) : 0);
        }
        out[n++] = (unsigned char)(v >> 16);
        if (pad < 2) out[n++] = (unsigned char)(v >> 8);
        if (pad < 1) out[n++] = (unsigned char)v;
    }
    return n;
}

static void response_reads_back_exactly(void **state) {
    (void)state;
    enum { N = 3, D = 5 };
    float v[N * D] = {0.1f,    -0.2f,         1e-8f,           0.333333343f, -1.0f, 0.5f, 0.25f, 0.125f,
                      0.0625f, 3.4028235e38f, 1.17549435e-38f, -0.0f,        0.7f,  0.8f, 0.9f};
    for (int b64 = 0; b64 < 2; b64++) {
        char *j = cb_openai_embd_response_json("my \"model\"", v, N, D, b64, 17);
        assert_non_null(j);
        cJSON *root = cJSON_Parse(j);
        assert_non_null(root);
        assert_string_equal(cJSON_GetObjectItem(root, "object")->valuestring, "list");
        assert_string_equal(cJSON_GetObjectItem(root, "model")->valuestring, "my \"model\"");
        cJSON *usage = cJSON_GetObjectItem(root, "usage");
        assert_int_equal(cJSON_GetObjectItem(usage, "prompt_tokens")->valueint, 17);
        assert_int_equal(cJSON_GetObjectItem(usage, "total_tokens")->valueint, 17);
        cJSON *data = cJSON_GetObjectItem(root, "data");
        assert_int_equal(cJSON_GetArraySize(data), N);
        for (int i = 0; i < N; i++) {
            cJSON *d = cJSON_GetArrayItem(data, i);
            assert_string_equal(cJSON_GetObjectItem(d, "object")->valuestring, "embedding");
            assert_int_equal(cJSON_GetObjectItem(d, "index")->valueint, i);
            cJSON *x = cJSON_GetObjectItem(d, "embedding");
            float got[D];
            if (b64) {
                unsigned char bytes[4 * D + 4];
                assert_true(cJSON_IsString(x));
                assert_int_equal(unbase64(x->valuestring, bytes), 4 * D);
                for (int k = 0; k < D; k++) { /* little-endian float32 */
                    uint32_t u = bytes[4 * k] | bytes[4 * k + 1] << 8 | bytes[4 * k + 2] << 16 |
                                 (uint32_t)bytes[4 * k + 3] << 24;
                    memcpy(&got[k], &u, 4);
                }
            } else {
                assert_int_equal(cJSON_GetArraySize(x), D);
                for (int k = 0; k < D; k++)
                    got[k] = (float)cJSON_GetArrayItem(x, k)->valuedouble;
            }
            assert_memory_equal(got, v + i * D, sizeof(got));
        }
        cJSON_Delete(root);
        free(j);
    }
    char out[16]; /* RFC 4648's vectors */
    cb_openai_base64((const unsigned char *)"f", 1, out);
    assert_string_equal(out, "Zg==");
    cb_openai_base64((const unsigned char *)"fo", 2, out);
    assert_string_equal(out, "Zm8=");
    cb_openai_base64((const unsigned char *)"foobar", 6, out);
    assert_string_equal(out, "Zm9vYmFy");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_input_shape),           cmocka_unit_test(options_and_hints),
        cmocka_unit_test(refusals_name_their_field),   cmocka_unit_test(input_count_is_bounded),
        cmocka_unit_test(response_reads_back_exactly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
