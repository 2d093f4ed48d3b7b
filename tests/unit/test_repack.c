/* Which CPU weight layouts a load may use (src/core/repack.c): a pure function of the host's
 * features and --repack. AMX never without --repack on; the interleaved repacks unless off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/core/repack.h"

static const cb_cpu_features AMX_HOST = {.cpu_amx = true, .ggml_amx = true, .ggml_pack = true};
static const cb_cpu_features AVX2_HOST = {.cpu_amx = false, .ggml_amx = false, .ggml_pack = true};

/* The host that crashed: AMX offered by ggml, nothing asked. AMX stays out, the rest stays in,
 * and the log line says why and how to force it. */
static void amx_host_auto_leaves_amx_out(void **state) {
    (void)state;
    cb_repack_decision d = cb_repack_decide(AMX_HOST, CB_REPACK_AUTO);
    assert_false(d.amx);
    assert_true(d.repack);
    assert_non_null(strstr(d.why, "AMX off: known ggml fault"));
    assert_non_null(strstr(d.why, "--repack on to force it"));
}

static void amx_host_on_forces_amx(void **state) {
    (void)state;
    cb_repack_decision d = cb_repack_decide(AMX_HOST, CB_REPACK_ON);
    assert_true(d.amx);
    assert_true(d.repack);
    assert_non_null(strstr(d.why, "AMX on"));
}

static void off_repacks_nothing(void **state) {
    (void)state;
    cb_repack_decision d = cb_repack_decide(AMX_HOST, CB_REPACK_OFF);
    assert_false(d.amx);
    assert_false(d.repack);
    assert_non_null(strstr(d.why, "off"));
    d = cb_repack_decide(AVX2_HOST, CB_REPACK_OFF);
    assert_false(d.repack);
}

/* Without AMX, auto and on are the same thing: the interleaved repacks, which is what ran before. */
static void host_without_amx_keeps_the_repacks(void **state) {
    (void)state;
    for (int m = CB_REPACK_AUTO; m <= CB_REPACK_ON; m++) {
        cb_repack_decision d = cb_repack_decide(AVX2_HOST, (cb_repack_mode)m);
        assert_true(d.repack);
        assert_false(d.amx);
        assert_non_null(strstr(d.why, "no AMX on this CPU"));
    }
}

/* An AMX CPU with a ggml built without the kernels (or whose tiles the OS refused): on cannot
 * use what is not there, and says so. */
static void amx_cpu_without_kernels(void **state) {
    (void)state;
    cb_cpu_features f = {.cpu_amx = true, .ggml_amx = false, .ggml_pack = true};
    cb_repack_decision d = cb_repack_decide(f, CB_REPACK_ON);
    assert_false(d.amx);
    assert_non_null(strstr(d.why, "no AMX kernels"));
}

/* Every input: AMX only when forced and there; the repacks exactly when offered and not off. */
static void every_input_keeps_the_rules(void **state) {
    (void)state;
    for (int bits = 0; bits < 8; bits++)
        for (int m = CB_REPACK_AUTO; m <= CB_REPACK_OFF; m++) {
            cb_cpu_features f = {.cpu_amx = bits & 1, .ggml_amx = bits & 2, .ggml_pack = bits & 4};
            cb_repack_decision d = cb_repack_decide(f, (cb_repack_mode)m);
            assert_int_equal(d.amx, m == CB_REPACK_ON && f.cpu_amx && f.ggml_amx);
            assert_int_equal(d.repack, m != CB_REPACK_OFF && f.ggml_pack);
            assert_true(d.why[0] != 0);
        }
    assert_string_equal(cb_repack_mode_name(CB_REPACK_AUTO), "auto");
    assert_string_equal(cb_repack_mode_name(CB_REPACK_ON), "on");
    assert_string_equal(cb_repack_mode_name(CB_REPACK_OFF), "off");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(amx_host_auto_leaves_amx_out), cmocka_unit_test(amx_host_on_forces_amx),
        cmocka_unit_test(off_repacks_nothing),          cmocka_unit_test(host_without_amx_keeps_the_repacks),
        cmocka_unit_test(amx_cpu_without_kernels),      cmocka_unit_test(every_input_keeps_the_rules),
    };
    return cmocka_run_group_tests_name("CPU weight layouts", tests, NULL, NULL);
}
