#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/util/buf.h"

/* A buffer grows by appends and formats past its first room, stays NUL-terminated, and hands its
 * bytes over whole. */
static void appends_and_formats_grow_whole(void **state) {
    (void)state;
    cb_buf b = {0};
    assert_string_equal(cb_buf_str(&b), "");
    assert_true(cb_buf_append(&b, "ab", 2));
    assert_true(cb_buf_append(&b, NULL, 0));
    char big[1000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_true(cb_buf_printf(&b, "[%d:%s]", 42, big)); /* past the first 64 bytes: formatted again */
    assert_int_equal(b.len, 2 + 4 + 999 + 1);
    assert_int_equal(strlen(b.s), b.len);
    assert_memory_equal(b.s, "ab[42:xxx", 9);
    assert_int_equal(b.s[b.len - 1], ']');
    assert_true(cb_buf_printf(&b, "%s", ""));
    assert_false(b.failed);
    size_t n = 0;
    char *s = cb_buf_take(&b, &n);
    assert_int_equal(n, 1006);
    assert_null(b.s);
    assert_int_equal(b.len, 0);
    free(s);
    cb_buf_free(&b);
}

/* An array grows by doubling from its first size, keeps what it held, and a size past memory is
 * refused with nothing changed. */
static void arrays_grow_by_doubling(void **state) {
    (void)state;
    int *v = NULL;
    size_t cap = 0;
    assert_true(cb_grow((void **)&v, &cap, 3, sizeof(*v), 16));
    assert_int_equal(cap, 16);
    for (int i = 0; i < 16; i++)
        v[i] = i;
    assert_true(cb_grow((void **)&v, &cap, 17, sizeof(*v), 16));
    assert_int_equal(cap, 32);
    assert_int_equal(v[15], 15);
    assert_true(cb_grow((void **)&v, &cap, 20, sizeof(*v), 16)); /* room already */
    assert_int_equal(cap, 32);
    int *before = v;
    assert_false(cb_grow((void **)&v, &cap, SIZE_MAX / 2, sizeof(*v), 16)); /* the bytes overflow */
    assert_ptr_equal(v, before);
    assert_int_equal(cap, 32);
    free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(appends_and_formats_grow_whole),
        cmocka_unit_test(arrays_grow_by_doubling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
