/* The flag table (src/cli/flags.c): every type, range and spelling, the errors a user reads, and
 * the help. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/cli/flags.h"

typedef struct {
    int32_t n;
    int port;
    double rate;
    const char *name;
    bool on, off;
    int mode, fa;
    const char *stops[2];
    size_t n_stops;
    int32_t chunk;
} opts;

static bool parse_even(const char *v, void *dst) {
    int x = atoi(v);
    if (x % 2) return false;
    *(int32_t *)dst = x;
    return true;
}

static const int MODE_VALUES[] = {10, 20, 30};

/* Parses the words of line (space-separated, at most 16) against a table; the messages land in
 * out and err. */
static int run(opts *o, const char *line, char *out, char *err) {
    memset(o, 0, sizeof(*o));
    o->off = true;
    const cb_flag t[] = {
        {"-n, --number", "N", CB_FLAG_I32, &o->n, -5, 100, .help = "a number"},
        {"--port", "P", CB_FLAG_INT, &o->port, 0, 65535, .help = "a port"},
        {"--rate", "R", CB_FLAG_F64, &o->rate, 0, 1e6, .help = "a rate\nover two lines"},
        {"--name", "TEXT", CB_FLAG_STR, &o->name, .help = "a name"},
        {"--on", NULL, CB_FLAG_SET, &o->on, .help = "sets"},
        {"--no-off", NULL, CB_FLAG_CLEAR, &o->off, .help = "clears"},
        {"--mode", "M", CB_FLAG_ENUM, &o->mode, .choices = "a|bb|c", .values = MODE_VALUES, .help = "mode"},
        {"--fa-off", NULL, CB_FLAG_CONST, &o->fa, 7, .help = "constant"},
        {"--stop", "S", CB_FLAG_LIST, o->stops, .count = &o->n_stops, .max = 2, .help = "repeatable"},
        {"--even", "N", CB_FLAG_FN, &o->chunk, .parse = parse_even, .takes = "an even number", .help = "even"},
    };
    int32_t other = 0;
    const cb_flag later[] = {{"--port", "P", CB_FLAG_I32, &other, 0, 9, .help = "shadowed"},
                             {"--later", "N", CB_FLAG_I32, &other, 0, 9, .help = "a later flag"}};
    cb_cli cli = {.cmd = "cobatch test",
                  .usage = "usage: test\n",
                  .footer = "the end\n",
                  .groups = {{"test", t, sizeof(t) / sizeof(t[0])}, {"later", later, 2}},
                  .n_groups = 2};
    char buf[512], *argv[32] = {"cobatch-test"};
    int argc = 1;
    snprintf(buf, sizeof(buf), "%s", line);
    for (char *w = strtok(buf, " "); w && argc < 32; w = strtok(NULL, " "))
        argv[argc++] = w;
    memset(out, 0, 4096);
    memset(err, 0, 512);
    FILE *fo = fmemopen(out, 4096, "w"), *fe = fmemopen(err, 512, "w");
    int rc = cb_flags_parse(&cli, argc, argv, fo, fe);
    fclose(fo);
    fclose(fe);
    /* the strings point into buf: keep what the tests read */
    static char name_copy[64], stop_copy[2][64];
    if (o->name) o->name = strcpy(name_copy, o->name);
    for (size_t k = 0; k < o->n_stops; k++)
        o->stops[k] = strcpy(stop_copy[k], o->stops[k]);
    return rc;
}

static void every_type_and_spelling(void **state) {
    (void)state;
    opts o;
    char out[4096], err[512];
    assert_int_equal(run(&o,
                         "-n 7 --port 0 --rate 2.5 --name x --on --no-off --mode bb --fa-off --stop a --stop b "
                         "--even 4",
                         out, err),
                     0);
    assert_int_equal(o.n, 7);
    assert_int_equal(o.port, 0);
    assert_true(o.rate == 2.5);
    assert_string_equal(o.name, "x");
    assert_true(o.on && !o.off);
    assert_int_equal(o.mode, 20);
    assert_int_equal(o.fa, 7);
    assert_int_equal(o.n_stops, 2);
    assert_string_equal(o.stops[1], "b");
    assert_int_equal(o.chunk, 4);
    assert_int_equal(run(&o, "--number -5", out, err), 0); /* the other spelling, the bound itself */
    assert_int_equal(o.n, -5);
    assert_int_equal(run(&o, "--number=9 --name=a=b --rate=0.5 --stop=", out, err), 0); /* --name=value */
    assert_int_equal(o.n, 9);
    assert_string_equal(o.name, "a=b");
    assert_true(o.rate == 0.5);
    assert_int_equal(o.n_stops, 1);
    assert_string_equal(o.stops[0], "");
}

static void errors_name_the_flag(void **state) {
    (void)state;
    opts o;
    char out[4096], err[512];
    struct {
        const char *line, *msg;
    } cases[] = {
        {"--bogus", "cobatch test: unknown option '--bogus' (see cobatch test --help)\n"},
        {"-n", "cobatch test: -n needs a value (N)\n"},
        {"-n 101", "cobatch test: -n takes a whole number from -5 to 100 (got '101')\n"},
        {"--port 1.5", "cobatch test: --port takes a whole number from 0 to 65535 (got '1.5')\n"},
        {"--rate nan", "cobatch test: --rate takes a number from 0 to 1e+06 (got 'nan')\n"},
        {"--mode d", "cobatch test: --mode is a, bb or c (got 'd')\n"},
        {"--stop a --stop b --stop c", "cobatch test: --stop is given 2 times at most\n"},
        {"--even 3", "cobatch test: --even takes an even number (got '3')\n"},
        {"--name", "cobatch test: --name needs a value (TEXT)\n"},
        {"--number=101", "cobatch test: --number takes a whole number from -5 to 100 (got '101')\n"},
        {"--on=1", "cobatch test: --on takes no value (got '1')\n"},
        {"--bogus=1", "cobatch test: unknown option '--bogus=1' (see cobatch test --help)\n"},
        {"-n=3", "cobatch test: unknown option '-n=3' (see cobatch test --help)\n"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        assert_int_equal(run(&o, cases[k].line, out, err), 2);
        assert_string_equal(err, cases[k].msg);
    }
}

static void help_lists_every_flag(void **state) {
    (void)state;
    opts o;
    char out[4096], err[512];
    assert_int_equal(run(&o, "--port 1 --help", out, err), 1);
    assert_non_null(strstr(out, "usage: test\ntest:\n"));
    assert_non_null(strstr(out, "  -n, --number N                a number\n"));
    assert_non_null(
        strstr(out, "  --rate R                      a rate\n                                over two lines\n"));
    assert_non_null(strstr(out, "  --on                          sets\n"));
    assert_non_null(strstr(out, "the end\n"));
    assert_null(strstr(out, "shadowed")); /* a later group's flag of a name an earlier one takes */
    assert_non_null(strstr(out, "later:\n  --later N"));
    assert_int_equal(err[0], '\0');
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_type_and_spelling),
        cmocka_unit_test(errors_name_the_flag),
        cmocka_unit_test(help_lists_every_flag),
    };
    return cmocka_run_group_tests_name("flags", tests, NULL, NULL);
}
