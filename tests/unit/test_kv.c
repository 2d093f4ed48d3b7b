#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/core/kv.h"

static void unified_pool_is_shared(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 100, 4, false), 0);
    int32_t a = cb_kv_seq_acquire(&kv), b = cb_kv_seq_acquire(&kv);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_true(cb_kv_grow(&kv, a, 90));
    assert_int_equal(cb_kv_room(&kv, b), 10);
    assert_false(cb_kv_grow(&kv, b, 11));
    assert_true(cb_kv_grow(&kv, b, 10));
    assert_int_equal(cb_kv_free_cells(&kv), 0);
    assert_int_equal(kv.peak_used, 100);
    cb_kv_seq_release(&kv, a);
    assert_int_equal(cb_kv_free_cells(&kv), 90);
    assert_int_equal(cb_kv_seq_acquire(&kv), 0); /* lowest free id comes back */
    assert_true(cb_kv_check(&kv));
    cb_kv_free(&kv);
}

static void split_caps_each_sequence(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 100, 4, true), 0);
    assert_int_equal(kv.per_seq_cap, 25);
    int32_t a = cb_kv_seq_acquire(&kv);
    assert_false(cb_kv_grow(&kv, a, 26));
    assert_true(cb_kv_grow(&kv, a, 25));
    assert_int_equal(cb_kv_room(&kv, a), 0);
    assert_true(cb_kv_grow(&kv, a, -5));
    assert_false(cb_kv_grow(&kv, a, -21)); /* cannot go below zero */
    assert_false(cb_kv_grow(&kv, 3, 1));   /* id 3 not acquired */
    assert_true(cb_kv_check(&kv));
    cb_kv_free(&kv);
}

static void ids_run_out(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 10, 2, false), 0);
    assert_true(cb_kv_seq_acquire(&kv) >= 0);
    assert_true(cb_kv_seq_acquire(&kv) >= 0);
    assert_int_equal(cb_kv_seq_acquire(&kv), -1);
    cb_kv_free(&kv);
    assert_int_equal(cb_kv_init(&kv, 0, 2, false), -1);
    assert_int_equal(cb_kv_init(&kv, 3, 4, true), -1);
}

/* Cells handed to the prefix cache stay in use (counted once) after their sequence is released,
 * and are free only when the cache gives them back. */
static void shared_cells_outlive_their_sequence(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 100, 4, false), 0);
    int32_t a = cb_kv_seq_acquire(&kv);
    assert_true(cb_kv_grow(&kv, a, 30));
    cb_kv_share(&kv, a, 20);
    assert_int_equal(kv.used[a], 10);
    assert_int_equal(kv.shared, 20);
    assert_int_equal(kv.total_used, 30);
    assert_true(cb_kv_check(&kv));
    cb_kv_seq_release(&kv, a); /* its own 10 go; the 20 shared stay */
    assert_int_equal(kv.total_used, 20);
    assert_int_equal(cb_kv_free_cells(&kv), 80);
    assert_true(cb_kv_check(&kv));
    cb_kv_unshare(&kv, 20);
    assert_int_equal(kv.total_used, 0);
    assert_true(cb_kv_check(&kv));
    kv.shared = -1; /* the check notices a broken count */
    assert_false(cb_kv_check(&kv));
    cb_kv_free(&kv);
}

/* The op list keeps every op in order as it grows. */
static void ops_keep_order(void **state) {
    (void)state;
    cb_kv_ops o = {0};
    for (int32_t i = 0; i < 1000; i++)
        cb_kv_ops_push(&o, i, i % 3 - 1, i, -1);
    assert_int_equal(o.n, 1000);
    for (int32_t i = 0; i < 1000; i++) {
        assert_int_equal(o.v[i].seq, i);
        assert_int_equal(o.v[i].src, i % 3 - 1);
        assert_int_equal(o.v[i].p0, i);
        assert_int_equal(o.v[i].p1, -1);
    }
    cb_kv_ops_free(&o);
    assert_null(o.v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unified_pool_is_shared),
        cmocka_unit_test(split_caps_each_sequence),
        cmocka_unit_test(ids_run_out),
        cmocka_unit_test(shared_cells_outlive_their_sequence),
        cmocka_unit_test(ops_keep_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
