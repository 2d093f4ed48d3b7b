/* The HTTP reader's refusals that depend on headers, the path an error is answered for, and the
 * guard a server that web pages can reach keeps (Host, Origin, Content-Type): no sockets. */
#include "../../src/server/guard.h"
#include "../../src/server/http.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* Feeds text whole; returns the result and leaves r as the reader left it. */
static cb_http_result feed(cb_http_req *r, const char *text) {
    cb_http_req_init(r, &(cb_http_limits){.max_head = 256});
    size_t used = 0;
    return cb_http_feed(r, text, strlen(text), &used);
}

static void repeated_headers_are_refused(void **state) {
    (void)state;
    cb_http_req r;
    const char *twice[] = {"Host: a\r\nHost: b\r\n", "Authorization: Bearer a\r\nauthorization: Bearer b\r\n",
                           "x-api-key: a\r\nX-Api-Key: b\r\n", "Content-Type: a/b\r\nContent-Type: c/d\r\n",
                           "Origin: http://a\r\nOrigin: http://b\r\n"};
    for (size_t k = 0; k < sizeof(twice) / sizeof(twice[0]); k++) {
        char req[256];
        snprintf(req, sizeof(req), "POST /v1/messages HTTP/1.1\r\n%sContent-Length: 0\r\n\r\n", twice[k]);
        assert_int_equal(feed(&r, req), CB_HTTP_ERROR);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.reason, "more than one"));
        cb_http_req_free(&r);
    }
    assert_int_equal(feed(&r, "GET /health HTTP/1.1\r\nHost: a\r\nAccept: x\r\nAccept: y\r\n\r\n"), CB_HTTP_DONE);
    assert_int_equal(cb_http_header_count(&r, "accept"), 2);
    cb_http_req_free(&r);
}

/* An error is answered for its path: parsed, or read off a head refused before it was whole. */
static void the_path_of_a_refused_request(void **state) {
    (void)state;
    cb_http_req r;
    char path[64];
    assert_int_equal(feed(&r, "POST /v1/messages?beta=1 HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"),
                     CB_HTTP_ERROR);
    assert_int_equal(r.status, 413);
    assert_int_equal(cb_http_req_path(&r, path, sizeof(path)), 12);
    assert_string_equal(path, "/v1/messages");
    cb_http_req_free(&r);
    char big[400] = "POST /v1/responses HTTP/1.1\r\nX-Pad: ";
    memset(big + strlen(big), 'a', 300);
    assert_int_equal(feed(&r, big), CB_HTTP_ERROR);
    assert_int_equal(r.status, 431);
    cb_http_req_path(&r, path, sizeof(path));
    assert_string_equal(path, "/v1/responses");
    cb_http_req_free(&r);
    assert_int_equal(feed(&r, "GARBAGE\r\n\r\n"), CB_HTTP_ERROR);
    assert_int_equal(cb_http_req_path(&r, path, sizeof(path)), 0);
    cb_http_req_free(&r);
    assert_int_equal(feed(&r, "GET /v1/messages/count_tokens HTTP/1.1\r\n\r\n"), CB_HTTP_DONE);
    assert_int_equal(cb_http_req_path(&r, path, 8), 7); /* cut to fit */
    assert_string_equal(path, "/v1/mes");
    cb_http_req_free(&r);
}

static int check(const cb_guard *g, bool post, const char *host, const char *origin, const char *site, const char *ct) {
    const char *why = NULL;
    int st = cb_guard_check(g, &(cb_guard_req){post, host, origin, site, ct}, &why);
    if (st) assert_non_null(why);
    return st;
}

/* A loopback listener answers loopback names only (DNS rebinding), a page of another origin is not
 * served (a no-cors POST), and a browser's body must be JSON; curl's default form type is taken from
 * a client that is not a browser. */
static void a_loopback_server_guards_against_pages(void **state) {
    (void)state;
    cb_guard g = cb_guard_make("127.0.0.1", NULL);
    assert_true(g.loopback);
    const char *ok_hosts[] = {"localhost",  "localhost:8080", "127.0.0.1:8080", "127.1.2.3", "[::1]:8080",
                              "LOCALHOST.", "a.localhost",    "[::1]",          "127.0.0.1", "[::ffff:127.0.0.1]:1"};
    for (size_t k = 0; k < sizeof(ok_hosts) / sizeof(ok_hosts[0]); k++)
        if (check(&g, false, ok_hosts[k], NULL, NULL, NULL)) fail_msg("refused host %s", ok_hosts[k]);
    const char *bad_hosts[] = {"evil.com",           "evil.com:8080", "127.0.0.1.evil.com",
                               "localhost.evil.com", "10.0.0.1",      "[::2]:80",
                               "localhost:80x",      "[::1",          "evillocalhost"};
    for (size_t k = 0; k < sizeof(bad_hosts) / sizeof(bad_hosts[0]); k++)
        if (check(&g, false, bad_hosts[k], NULL, NULL, NULL) != 403) fail_msg("took host %s", bad_hosts[k]);
    assert_int_equal(check(&g, false, NULL, NULL, NULL, NULL), 0); /* HTTP/1.0 without Host */
    /* origins: the page's own, a loopback one; not another site's, not an opaque one */
    assert_int_equal(check(&g, true, "127.0.0.1:8080", "http://127.0.0.1:8080", "same-origin", "application/json"), 0);
    assert_int_equal(check(&g, true, "127.0.0.1:8080", "http://localhost:3000", "same-site", "application/json"), 0);
    assert_int_equal(check(&g, true, "127.0.0.1:8080", "http://evil.com", "cross-site", "application/json"), 403);
    assert_int_equal(check(&g, true, "127.0.0.1:8080", "null", "cross-site", "text/plain"), 403);
    assert_int_equal(check(&g, false, "127.0.0.1:8080", "https://evil.com", NULL, NULL), 403);
    /* body types */
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "application/json; charset=utf-8"), 0);
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "Application/JSON"), 0);
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "application/vnd.api+json"), 0);
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "application/x-www-form-urlencoded"), 0); /* curl -d */
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, NULL), 0);
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "text/plain"), 415);
    assert_int_equal(check(&g, true, "localhost", NULL, NULL, "multipart/form-data; boundary=x"), 415);
    assert_int_equal(check(&g, true, "localhost", "http://localhost:1", "same-site", NULL), 415);
    assert_int_equal(check(&g, true, "localhost", "http://localhost:1", NULL, "application/x-www-form-urlencoded"),
                     415);
    assert_int_equal(check(&g, true, "localhost", NULL, "cross-site", "application/x-www-form-urlencoded"), 415);
}

/* The operator widens the names: exact, a suffix, any; a listener on another address serves any
 * Host (a LAN, a proxy) but still no other origin's page. */
static void allowed_hosts_and_other_listeners(void **state) {
    (void)state;
    cb_guard g = cb_guard_make("127.0.0.1", "box.lan, .example.com");
    assert_int_equal(check(&g, false, "box.lan:8080", NULL, NULL, NULL), 0);
    assert_int_equal(check(&g, false, "a.example.com", NULL, NULL, NULL), 0);
    assert_int_equal(check(&g, false, "example.com", NULL, NULL, NULL), 0);
    assert_int_equal(check(&g, false, "badexample.com", NULL, NULL, NULL), 403);
    assert_int_equal(check(&g, false, "box.lan.evil", NULL, NULL, NULL), 403);
    assert_int_equal(check(&g, true, "localhost", "https://app.example.com", "cross-site", "application/json"), 0);
    cb_guard any = cb_guard_make("localhost", "*");
    assert_true(any.loopback);
    assert_int_equal(check(&any, false, "anything.at.all", NULL, NULL, NULL), 0);
    assert_int_equal(check(&any, true, "x", "null", "cross-site", "application/json"), 0);
    cb_guard lan = cb_guard_make("0.0.0.0", NULL);
    assert_false(lan.loopback);
    assert_int_equal(check(&lan, false, "192.168.1.5:8080", NULL, NULL, NULL), 0);
    assert_int_equal(
        check(&lan, true, "192.168.1.5:8080", "http://192.168.1.5:8080", "same-origin", "application/json"), 0);
    assert_int_equal(check(&lan, true, "192.168.1.5:8080", "http://evil.com", "cross-site", "application/json"), 403);
    cb_guard v6 = cb_guard_make("::1", NULL);
    assert_true(v6.loopback);
    cb_guard bound = cb_guard_make("10.1.2.3", NULL);
    assert_false(bound.loopback);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repeated_headers_are_refused),
        cmocka_unit_test(the_path_of_a_refused_request),
        cmocka_unit_test(a_loopback_server_guards_against_pages),
        cmocka_unit_test(allowed_hosts_and_other_listeners),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
