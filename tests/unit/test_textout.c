#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/textout.h"
#include "../../src/util/utf8.h"

/* Feeds pieces; returns everything released (and flushed if not stopped) as one string. */
static char *feed(const char *const *stops, size_t n_stops, const char *const *pieces, size_t n, bool *stopped) {
    cb_textout t;
    assert_int_equal(cb_textout_init(&t, stops, n_stops), 0);
    char *all = calloc(1, 4096);
    size_t used = 0;
    *stopped = false;
    for (size_t i = 0; i < n && !*stopped; i++) {
        const char *out;
        size_t len;
        *stopped = cb_textout_push(&t, pieces[i], strlen(pieces[i]), &out, &len);
        assert_int_equal(strlen(out), len);
        assert_true(used + len < 4096);
        memcpy(all + used, out, len + 1);
        used += len;
    }
    const char *out;
    size_t len;
    cb_textout_flush(&t, &out, &len);
    assert_true(used + len < 4096);
    memcpy(all + used, out, len + 1);
    cb_textout_free(&t);
    return all;
}

static void stop_string_cuts_exactly(void **state) {
    (void)state;
    const char *stops[] = {"\n\n", "END"};
    const char *pieces[] = {"Hello", " wor", "ld", "\n", "\nmore"};
    bool stopped;
    char *s = feed(stops, 2, pieces, 5, &stopped);
    assert_true(stopped);
    assert_string_equal(s, "Hello world");
    free(s);
}

static void stop_split_across_pieces_is_held_then_dropped(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    cb_textout t;
    assert_int_equal(cb_textout_init(&t, stops, 1), 0);
    const char *out;
    size_t len;
    assert_false(cb_textout_push(&t, "abcS", 4, &out, &len));
    assert_string_equal(out, "abc"); /* "S" may start STOP: held */
    assert_false(cb_textout_push(&t, "TO", 2, &out, &len));
    assert_string_equal(out, "");
    assert_true(cb_textout_push(&t, "Pxyz", 4, &out, &len));
    assert_string_equal(out, "");
    assert_int_equal(t.stop_hit, 0);
    cb_textout_free(&t);
}

/* The stop string that matched is named by its index in the list given (empty ones skipped but
 * counted); the earliest in the text wins, and none matched is -1. */
static void the_matched_stop_is_named(void **state) {
    (void)state;
    const char *stops[] = {"", "zz", "b"};
    cb_textout t;
    const char *out;
    size_t len;
    assert_int_equal(cb_textout_init(&t, stops, 3), 0);
    assert_int_equal(t.stop_hit, -1);
    assert_false(cb_textout_push(&t, "az", 2, &out, &len));
    assert_int_equal(t.stop_hit, -1);
    assert_true(cb_textout_push(&t, "zb", 2, &out, &len));
    assert_int_equal(t.stop_hit, 1);
    cb_textout_free(&t);
}

static void held_text_is_released_when_it_cannot_stop(void **state) {
    (void)state;
    const char *stops[] = {"STOP"};
    const char *pieces[] = {"ST", "ay"};
    bool stopped;
    char *s = feed(stops, 1, pieces, 2, &stopped);
    assert_false(stopped);
    assert_string_equal(s, "STay");
    free(s);
    const char *p2[] = {"xST"}; /* held at the end, released by flush */
    s = feed(stops, 1, p2, 1, &stopped);
    assert_string_equal(s, "xST");
    free(s);
}

static void utf8_never_split(void **state) {
    (void)state;
    cb_textout t;
    assert_int_equal(cb_textout_init(&t, NULL, 0), 0);
    const char *out;
    size_t len;
    /* "é" = C3 A9, "€" = E2 82 AC, arriving byte by byte as byte tokens do */
    assert_false(cb_textout_push(&t, "a\xC3", 2, &out, &len));
    assert_string_equal(out, "a");
    assert_false(cb_textout_push(&t, "\xA9\xE2", 2, &out, &len));
    assert_string_equal(out, "\xC3\xA9");
    assert_false(cb_textout_push(&t, "\x82", 1, &out, &len));
    assert_string_equal(out, "");
    assert_false(cb_textout_push(&t, "\xAC", 1, &out, &len));
    assert_string_equal(out, "\xE2\x82\xAC");
    /* a byte that can never be valid becomes U+FFFD; an unfinished char at the end too, on flush */
    assert_false(cb_textout_push(&t, "\xFFz\xE2\x82", 4, &out, &len));
    assert_string_equal(out, "\xEF\xBF\xBDz");
    cb_textout_flush(&t, &out, &len);
    assert_string_equal(out, "\xEF\xBF\xBD\xEF\xBF\xBD");
    cb_textout_free(&t);
}

static void valid_prefix(void **state) {
    (void)state;
    bool inc;
    assert_int_equal(cb_utf8_valid_prefix("abc", 3, &inc), 3);
    assert_int_equal(cb_utf8_valid_prefix("a\xC3", 2, &inc), 1);
    assert_true(inc);
    assert_int_equal(cb_utf8_valid_prefix("a\xC0\x80", 3, &inc), 1); /* overlong */
    assert_false(inc);
    assert_int_equal(cb_utf8_valid_prefix("\xED\xA0\x80", 3, &inc), 0); /* surrogate */
    assert_int_equal(cb_utf8_valid_prefix("\xF0\x9F\x98\x80!", 5, &inc), 5);
}

static void stop_found_in_one_piece_with_earlier_candidate(void **state) {
    (void)state;
    const char *stops[] = {"abcd", "bc"};
    const char *pieces[] = {"xabc"};
    bool stopped;
    char *s = feed(stops, 2, pieces, 1, &stopped);
    assert_true(stopped);
    assert_string_equal(s, "xa"); /* "bc" matched first in the text */
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stop_string_cuts_exactly),
        cmocka_unit_test(stop_split_across_pieces_is_held_then_dropped),
        cmocka_unit_test(the_matched_stop_is_named),
        cmocka_unit_test(held_text_is_released_when_it_cannot_stop),
        cmocka_unit_test(utf8_never_split),
        cmocka_unit_test(valid_prefix),
        cmocka_unit_test(stop_found_in_one_piece_with_earlier_candidate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
