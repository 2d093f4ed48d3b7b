/* The attention path's candidates and choice (src/core/attn.c): what the flags leave open, what a
 * promise keeps out, and the fastest by measured times. The times are ones measured on the two host
 * kinds (an AMD EPYC with AVX2, and an Intel Xeon with and without ggml's AVX512-FP16 kernels). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/core/attn.h"

enum { F16 = 0, F32 = 1, BF16 = 2, Q8_0 = 3 };

static int find(const cb_attn_path *p, int n, bool fa, int k, int v) {
    for (int i = 0; i < n; i++)
        if (p[i].fa == fa && p[i].type_k == k && p[i].type_v == v) return i;
    return -1;
}

/* Everything open in the split layout with exact cache hits: flash attention on with f16 first (the
 * reference), bf16 beside it, never f32 with flash attention (llama.cpp casts it every step); off
 * is measured but not eligible, and says which promise keeps it out. */
static void open_flags_keep_the_promise(void **state) {
    (void)state;
    cb_attn_ask ask = {.fa = CB_ATTN_AUTO, .type_k = CB_ATTN_AUTO, .type_v = CB_ATTN_AUTO, .exact_hits = true};
    cb_attn_path p[CB_ATTN_MAX_PATHS];
    int n = cb_attn_candidates(&ask, p);
    assert_int_equal(n, 5);
    assert_true(p[0].fa && p[0].type_k == F16 && p[0].type_v == F16 && p[0].eligible);
    assert_true(p[find(p, n, true, BF16, BF16)].eligible);
    assert_int_equal(find(p, n, true, F32, F32), -1);
    int off = find(p, n, false, F16, F16);
    assert_true(off > 0 && !p[off].eligible);
    assert_string_equal(p[off].why_not, "exact cache hits");
    assert_true(cb_attn_open(p, n));
    ask.exact_hits = false; /* approximate hits: off may be chosen */
    n = cb_attn_candidates(&ask, p);
    assert_true(p[find(p, n, false, F32, F32)].eligible);
    ask.unified = true; /* flash attention skips the other sequences' cells there */
    n = cb_attn_candidates(&ask, p);
    assert_string_equal(p[find(p, n, false, F16, F16)].why_not, "the unified layout");
}

/* Named flags close the choice: a quantized V never runs without flash attention, a named type is
 * the only type, flash attention off named is the only mode (and eligible). */
static void named_flags_close_it(void **state) {
    (void)state;
    cb_attn_path p[CB_ATTN_MAX_PATHS];
    cb_attn_ask ask = {.fa = CB_ATTN_AUTO, .type_k = Q8_0, .type_v = Q8_0, .exact_hits = false};
    int n = cb_attn_candidates(&ask, p);
    assert_int_equal(n, 1);
    assert_true(p[0].fa);
    assert_false(cb_attn_open(p, n));
    ask = (cb_attn_ask){.fa = 0, .type_k = F16, .type_v = F16, .exact_hits = true};
    n = cb_attn_candidates(&ask, p);
    assert_int_equal(n, 1);
    assert_true(!p[0].fa && p[0].eligible);
    ask = (cb_attn_ask){.fa = 1, .type_k = CB_ATTN_AUTO, .type_v = Q8_0};
    n = cb_attn_candidates(&ask, p);
    assert_int_equal(n, 2); /* K f16 or bf16 with V q8_0; f32 K never with flash attention */
    assert_true(find(p, n, true, F16, Q8_0) == 0 && find(p, n, true, BF16, Q8_0) == 1);
}

/* The AMD host's probe (ms of attention over 30 layers; points: 1024 x 1 / 16 / a 256-row chunk, then
 * 4096): f16 stays, bf16 is 2.4x slower; off is faster but kept out by exact hits, and taken without
 * them. */
static const double AMD[5][6] = {
    {6.62, 97.99, 326.28, 19.43, 387.66, 1331.14},   /* fa f16 */
    {9.16, 146.53, 1861.90, 35.58, 552.57, 8178.57}, /* fa bf16 */
    {6.97, 67.85, 572.43, 14.82, 215.26, 1427.64},   /* off f16 */
    {7.03, 71.53, 597.98, 16.93, 239.08, 1649.24},   /* off bf16 */
    {6.02, 86.93, 692.89, 24.37, 352.90, 2152.84},   /* off f32 */
};

static void amd_host_keeps_f16_and_reports_the_cost(void **state) {
    (void)state;
    cb_attn_ask ask = {.fa = CB_ATTN_AUTO, .type_k = CB_ATTN_AUTO, .type_v = CB_ATTN_AUTO, .exact_hits = true};
    cb_attn_path p[CB_ATTN_MAX_PATHS];
    int n = cb_attn_candidates(&ask, p);
    double t[5 * 6], scores[5];
    int order[5] = {find(p, n, true, F16, F16), find(p, n, true, BF16, BF16), find(p, n, false, F16, F16),
                    find(p, n, false, BF16, BF16), find(p, n, false, F32, F32)};
    for (int i = 0; i < 5; i++)
        memcpy(&t[order[i] * 6], AMD[i], sizeof AMD[i]);
    int pick = cb_attn_choose(p, n, t, 6, 0.05, scores);
    assert_int_equal(pick, order[0]);
    assert_true(scores[order[2]] < scores[order[0]]); /* what the promise costs, reported */
    assert_true(scores[order[1]] > 2.0 * scores[order[0]]);
    ask.exact_hits = false;
    n = cb_attn_candidates(&ask, p);
    assert_int_equal(cb_attn_choose(p, n, t, 6, 0.05, scores), order[2]);
}

/* An Intel Xeon (Sapphire Rapids, 2 cores, the default model's shape), the probe's own times
 * (ms: 1,024 and 4,096 tokens, each for 1 and 16 decoding rows and a 256-token chunk): with ggml's
 * AVX512-FP16 kernels f16 decodes 3-4x slower than bf16, so bf16 wins though its chunks at 4,096
 * take 6.7x longer; without them (the build scripts/llama.sh makes) f16 is the fastest everywhere
 * and stays. */
static void intel_host_as_measured(void **state) {
    (void)state;
    cb_attn_ask ask = {.fa = 1, .type_k = CB_ATTN_AUTO, .type_v = CB_ATTN_AUTO};
    cb_attn_path p[CB_ATTN_MAX_PATHS];
    int n = cb_attn_candidates(&ask, p);
    assert_int_equal(n, 2);
    double fp16[2 * 6] = {44.64, 617.79, 428.26,  170.39, 2150.82, 1783.93,
                          10.97, 176.53, 2252.34, 42.89,  677.38,  11887.14};
    assert_int_equal(cb_attn_choose(p, n, fp16, 6, 0.05, NULL), 1);
    double plain[2 * 6] = {11.93, 111.68, 425.83,  29.85, 443.65, 1691.67,
                           12.66, 140.20, 2070.77, 43.13, 604.93, 10673.12};
    double scores[2];
    assert_int_equal(cb_attn_choose(p, n, plain, 6, 0.05, scores), 0);
    assert_true(scores[0] == 1.0 && scores[1] > 1.5);
}

/* Noise does not flip it: 3% faster is not enough; a path that failed anywhere is never chosen, and
 * a failed reference gives way to the best that ran. */
static void margin_and_failures(void **state) {
    (void)state;
    cb_attn_ask ask = {.fa = 1, .type_k = CB_ATTN_AUTO, .type_v = CB_ATTN_AUTO};
    cb_attn_path p[CB_ATTN_MAX_PATHS];
    int n = cb_attn_candidates(&ask, p);
    double t[4] = {10.0, 100.0, 9.7, 97.0};
    assert_int_equal(cb_attn_choose(p, n, t, 2, 0.05, NULL), 0);
    double failed[4] = {10.0, 100.0, 5.0, -1};
    double scores[2];
    assert_int_equal(cb_attn_choose(p, n, failed, 2, 0.05, scores), 0);
    assert_true(scores[1] == 0);
    double ref_failed[4] = {-1, 100.0, 12.0, 120.0};
    assert_int_equal(cb_attn_choose(p, n, ref_failed, 2, 0.05, NULL), 1);
}

/* A probe is kept only when its reference timed again at the end agrees within the factor; a point
 * that did not run on either pass says nothing. */
static void steady_host(void **state) {
    (void)state;
    double first[4] = {10.0, 100.0, -1, 0.5}, again[4] = {12.0, 80.0, 50.0, 2.0};
    assert_true(cb_attn_steady(first, again, 4, 1.5, 5.0)); /* 0.5 against 2.0 ms: jitter */
    assert_false(cb_attn_steady(first, again, 4, 1.5, 0.1));
    again[1] = 40.0; /* the host got quieter (or busier) by 2.5x in between */
    assert_false(cb_attn_steady(first, again, 4, 1.5, 5.0));
    again[1] = 250.0;
    assert_false(cb_attn_steady(first, again, 4, 1.5, 5.0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(open_flags_keep_the_promise),
        cmocka_unit_test(named_flags_close_it),
        cmocka_unit_test(amd_host_keeps_f16_and_reports_the_cost),
        cmocka_unit_test(intel_host_as_measured),
        cmocka_unit_test(margin_and_failures),
        cmocka_unit_test(steady_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
