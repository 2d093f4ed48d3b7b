/* guard.c — the Host, Origin and Content-Type checks (see guard.h). */
#include "guard.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The name part of a Host value (name[:port], [v6][:port]) into buf, lowercase, without a trailing
 * dot. False when it does not parse or does not fit. */
static bool host_name(const char *host, char *buf, size_t cap) {
    while (*host == ' ' || *host == '\t')
        host++;
    size_t n;
    const char *start = host;
    if (*host == '[') {
        const char *close = strchr(host, ']');
        if (!close || (close[1] && close[1] != ':')) return false;
        start = host + 1;
        n = (size_t)(close - start);
    } else if (strchr(host, ':') != strrchr(host, ':')) { /* a bare IPv6 address (a listener's, not a Host) */
        n = strlen(host);
    } else {
        n = strcspn(host, ":");
        const char *port = host + n;
        if (*port == ':' && (!port[1] || strspn(port + 1, "0123456789") != strlen(port + 1))) return false;
    }
    if (n > 0 && start[n - 1] == '.') n--;
    if (n == 0 || n >= cap) return false;
    for (size_t i = 0; i < n; i++) {
        char c = start[i];
        buf[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    buf[n] = '\0';
    return true;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool is_loopback(const char *name) {
    if (!strcmp(name, "localhost") || ends_with(name, ".localhost")) return true;
    unsigned char a[16];
    if (inet_pton(AF_INET, name, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, name, a) != 1) return false;
    static const unsigned char one[16] = {[15] = 1}, mapped[12] = {[10] = 0xff, [11] = 0xff};
    return !memcmp(a, one, 16) || (!memcmp(a, mapped, 12) && a[12] == 127);
}

/* Whether name is in the comma-separated list (".suffix": that name and every name under it; "*": any). */
static bool listed(const char *list, const char *name) {
    for (const char *p = list; p && *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == 1 && *p == '*') return true;
        size_t k = strlen(name);
        if (n > 0 && *p == '.') {
            if ((k == n - 1 && !strncasecmp(name, p + 1, n - 1)) || (k >= n && !strncasecmp(name + k - n, p, n)))
                return true;
        } else if (n > 0 && k == n && !strncasecmp(name, p, n)) {
            return true;
        }
        p += n;
    }
    return false;
}

/* Whether the host name (parsed) is allowed whatever the listener: loopback names, the operator's list. */
static bool name_allowed(const cb_guard *g, const char *name) {
    char bind[256];
    return is_loopback(name) || listed(g->allowed, name) ||
           (g->bind_host && host_name(g->bind_host, bind, sizeof(bind)) && !strcmp(bind, name));
}

bool cb_guard_host_allowed(const cb_guard *g, const char *host) {
    char name[256];
    return host_name(host, name, sizeof(name)) && name_allowed(g, name);
}

cb_guard cb_guard_make(const char *bind_host, const char *allowed) {
    char name[256];
    bind_host = bind_host ? bind_host : "127.0.0.1";
    return (cb_guard){.loopback = host_name(bind_host, name, sizeof(name)) && is_loopback(name),
                      .bind_host = bind_host,
                      .allowed = allowed};
}

/* An Origin (scheme://host[:port]) a request may come from: the origin its Host names (a page the
 * server itself served), or an allowed host. "null" (an opaque origin) only with "*". */
static bool origin_allowed(const cb_guard *g, const char *origin, const char *host) {
    const char *sep = strstr(origin, "://");
    if (!sep) return listed(g->allowed, "*") && !strcmp(origin, "null");
    const char *hostport = sep + 3;
    size_t n = strcspn(hostport, "/");
    if (hostport[n] && hostport[n + 1]) return false; /* an origin has no path */
    if (host && strlen(host) == n && !strncasecmp(hostport, host, n)) return true;
    char hp[256], name[256];
    if (n >= sizeof(hp)) return false;
    memcpy(hp, hostport, n);
    hp[n] = '\0';
    return host_name(hp, name, sizeof(name)) && name_allowed(g, name);
}

/* The media type of a Content-Type value (before any parameter) is JSON's. */
static bool json_type(const char *ct) {
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, "; \t");
    if (n == 16 && !strncasecmp(ct, "application/json", 16)) return true;
    return n > 5 && !strncasecmp(ct + n - 5, "+json", 5) && memchr(ct, '/', n);
}

static bool form_type(const char *ct) {
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, "; \t");
    return n == 0 || (n == 33 && !strncasecmp(ct, "application/x-www-form-urlencoded", 33));
}

int cb_guard_check(const cb_guard *g, const cb_guard_req *r, const char **why) {
    if (g->loopback && r->host && !cb_guard_host_allowed(g, r->host)) {
        *why = "the Host header names a host this server does not answer to (a loopback listener answers "
               "localhost and loopback addresses; cobatch serve --allowed-hosts adds names)";
        return 403;
    }
    if (r->origin && !origin_allowed(g, r->origin, r->host)) {
        *why = "requests from this Origin are not served (a page served elsewhere; cobatch serve --allowed-hosts "
               "adds hosts)";
        return 403;
    }
    if (!r->post) return 0;
    bool browser = r->origin || r->sec_fetch_site;
    const char *ct = r->content_type ? r->content_type : "";
    if (json_type(ct) || (!browser && form_type(ct))) return 0;
    *why = "send the body as JSON (Content-Type: application/json)";
    return 415;
}
