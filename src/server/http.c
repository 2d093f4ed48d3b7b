/* http.c — the HTTP/1.x request reader (see http.h). */
#include "http.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { S_HEAD, S_BODY, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_END, S_TRAILER, S_DONE, S_ERROR };

#define TRAILER_MAX 8192 /* bytes of trailer fields, read and dropped */

/* ---------------------------------------------------------------- set-up -------------------- */

void cb_http_req_init(cb_http_req *r, const cb_http_limits *lim) {
    memset(r, 0, sizeof(*r));
    r->lim = (cb_http_limits){.max_head = 16384, .max_headers = 64, .max_body = 1 << 20};
    if (lim && lim->max_head) r->lim.max_head = lim->max_head;
    if (lim && lim->max_headers) r->lim.max_headers = lim->max_headers;
    if (lim && lim->max_body) r->lim.max_body = lim->max_body;
    if (r->lim.max_headers > CB_HTTP_MAX_HEADERS) r->lim.max_headers = CB_HTTP_MAX_HEADERS;
    r->content_length = -1;
}

void cb_http_req_free(cb_http_req *r) {
    free(r->head);
    free(r->body);
    r->head = r->body = NULL;
    r->head_cap = r->body_cap = 0;
}

void cb_http_req_reset(cb_http_req *r) {
    char *head = r->head, *body = r->body;
    size_t head_cap = r->head_cap, body_cap = r->body_cap;
    cb_http_limits lim = r->lim;
    if (body_cap > 65536) { /* a large body's buffer is not kept for the next request */
        free(body);
        body = NULL;
        body_cap = 0;
    }
    cb_http_req_init(r, &lim);
    r->head = head;
    r->head_cap = head_cap;
    r->body = body;
    r->body_cap = body_cap;
}

static cb_http_result fail(cb_http_req *r, int status, const char *reason) {
    r->state = S_ERROR;
    r->status = status;
    r->reason = reason;
    return CB_HTTP_ERROR;
}

bool cb_http_head_done(const cb_http_req *r) { return r->state != S_HEAD && r->method != NULL; }

char *cb_http_req_take_body(cb_http_req *r, size_t *len) {
    char *b = r->body;
    *len = r->body_len;
    r->body = NULL;
    r->body_cap = r->body_len = 0;
    return b;
}

size_t cb_http_req_held(const cb_http_req *r) { return r->head_cap + r->body_cap; }

int cb_http_header_count(const cb_http_req *r, const char *name) {
    int n = 0;
    for (int i = 0; i < r->n_headers; i++)
        n += !strcasecmp(r->headers[i].name, name);
    return n;
}

size_t cb_http_req_path(const cb_http_req *r, char *buf, size_t cap) {
    if (cap == 0) return 0;
    const char *t = NULL, *end = NULL;
    if (r->target) {
        t = r->target;
        end = t + strcspn(t, "?");
    } else if (r->head && r->head_len > 0) { /* refused before the request line was read: as it came */
        const char *sp = memchr(r->head, ' ', r->head_len), *e = r->head + r->head_len;
        if (sp)
            for (t = end = sp + 1; end < e && !strchr(" ?\r\n", *end);)
                end++;
    }
    size_t n = t ? (size_t)(end - t) : 0;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(buf, t, n);
    buf[n] = '\0';
    return n;
}

const char *cb_http_header_get(const cb_http_req *r, const char *name) {
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].name, name)) return r->headers[i].value;
    return NULL;
}

/* ---------------------------------------------------------------- the head ------------------ */

static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Strips blanks (SP, HT) from both ends of s, in place. */
static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = '\0';
    return s;
}

/* Whether the comma-separated list s holds token tok (case-insensitive). */
static bool list_has(const char *s, const char *tok) {
    size_t k = strlen(tok);
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',')
            s++;
        size_t n = strcspn(s, ",");
        size_t m = n;
        while (m > 0 && (s[m - 1] == ' ' || s[m - 1] == '\t'))
            m--;
        if (m == k && !strncasecmp(s, tok, k)) return true;
        s += n;
    }
    return false;
}

static cb_http_result request_line(cb_http_req *r, char *line) {
    char *sp1 = strchr(line, ' ');
    if (!sp1 || sp1 == line || sp1 - line > 15) return fail(r, 400, "malformed request line");
    *sp1 = '\0';
    for (char *p = line; *p; p++)
        if (!is_tchar((unsigned char)*p)) return fail(r, 400, "malformed method");
    char *target = sp1 + 1, *sp2 = strchr(target, ' ');
    if (!sp2 || sp2 == target) return fail(r, 400, "malformed request line");
    *sp2 = '\0';
    for (char *p = target; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7F) return fail(r, 400, "malformed request target");
    r->target = target; /* known from here on, for an error's shape (cb_http_req_path) */
    const char *v = sp2 + 1;
    if (strncmp(v, "HTTP/", 5) != 0 || strlen(v) != 8 || v[6] != '.' || v[5] < '0' || v[5] > '9' || v[7] < '0' ||
        v[7] > '9')
        return fail(r, 400, "malformed HTTP version");
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) return fail(r, 505, "only HTTP/1.0 and HTTP/1.1 are served");
    r->method = line;
    r->target = target;
    r->minor = v[7] - '0';
    return CB_HTTP_NEED_MORE;
}

static cb_http_result header_line(cb_http_req *r, char *line) {
    if (*line == ' ' || *line == '\t') return fail(r, 400, "folded header lines are not accepted");
    char *colon = strchr(line, ':');
    if (!colon || colon == line) return fail(r, 400, "malformed header line");
    *colon = '\0';
    for (char *p = line; *p; p++)
        if (!is_tchar((unsigned char)*p)) return fail(r, 400, "malformed header name");
    char *value = trim(colon + 1);
    for (char *p = value; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c < 0x20 && c != '\t') || c == 0x7F) return fail(r, 400, "control character in a header value");
    }
    if (r->n_headers >= r->lim.max_headers) return fail(r, 431, "too many header lines");
    r->headers[r->n_headers++] = (cb_http_header){.name = line, .value = value};
    return CB_HTTP_NEED_MORE;
}

/* Headers a request carries once at most (RFC 9110: a repeated Host is a 400; Authorization and
 * x-api-key are not lists, so two of them could be read as either, by a gateway and by us). */
static const char *const SINGLE[][2] = {{"Host", "more than one Host header"},
                                        {"Authorization", "more than one Authorization header"},
                                        {"x-api-key", "more than one x-api-key header"},
                                        {"Content-Type", "more than one Content-Type header"},
                                        {"Origin", "more than one Origin header"}};

/* Content-Length, Transfer-Encoding, Connection, Expect; headers given twice that must not be. */
static cb_http_result framing(cb_http_req *r) {
    bool te = false;
    r->keep_alive = r->minor == 1;
    for (size_t k = 0; k < sizeof(SINGLE) / sizeof(SINGLE[0]); k++)
        if (cb_http_header_count(r, SINGLE[k][0]) > 1) return fail(r, 400, SINGLE[k][1]);
    for (int i = 0; i < r->n_headers; i++) {
        const char *n = r->headers[i].name, *v = r->headers[i].value;
        if (!strcasecmp(n, "Content-Length")) {
            if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 15)
                return fail(r, 400, "malformed Content-Length");
            int64_t cl = strtoll(v, NULL, 10);
            if (r->content_length >= 0 && r->content_length != cl) return fail(r, 400, "conflicting Content-Length");
            r->content_length = cl;
        } else if (!strcasecmp(n, "Transfer-Encoding")) {
            if (te) return fail(r, 400, "more than one Transfer-Encoding");
            te = true;
            if (strcasecmp(v, "chunked") != 0) return fail(r, 501, "only the chunked transfer coding is accepted");
            r->chunked = true;
        } else if (!strcasecmp(n, "Connection")) {
            if (list_has(v, "close")) r->keep_alive = false;
            if (r->minor == 0 && list_has(v, "keep-alive")) r->keep_alive = true;
        } else if (!strcasecmp(n, "Expect")) {
            if (strcasecmp(v, "100-continue") != 0) return fail(r, 417, "only 'Expect: 100-continue' is accepted");
            r->expect_continue = r->minor == 1;
        }
    }
    if (te && r->content_length >= 0) return fail(r, 400, "Content-Length together with Transfer-Encoding");
    if (te && r->minor == 0) return fail(r, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (r->content_length > 0 && (uint64_t)r->content_length > r->lim.max_body)
        return fail(r, 413, "the body is larger than the limit");
    return CB_HTTP_NEED_MORE;
}

/* The head is head[0, head_len), ending with its blank line: cut it into NUL-terminated lines and
 * read them. */
static cb_http_result parse_head(cb_http_req *r) {
    if (memchr(r->head, '\0', r->head_len)) return fail(r, 400, "NUL byte in the request head");
    char *p = r->head, *end = r->head + r->head_len;
    bool first = true;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        *nl = '\0';
        if (nl > p && nl[-1] == '\r') nl[-1] = '\0';
        if (!*p) break; /* the blank line */
        cb_http_result rc = first ? request_line(r, p) : header_line(r, p);
        if (rc == CB_HTTP_ERROR) return rc;
        first = false;
        p = nl + 1;
    }
    return framing(r);
}

/* ---------------------------------------------------------------- the body ----------------- */

static bool body_reserve(cb_http_req *r, size_t need) {
    if (need <= r->body_cap) return true;
    size_t cap = r->body_cap ? r->body_cap : 4096;
    while (cap < need)
        cap *= 2;
    if (r->content_length >= 0 && cap > (size_t)r->content_length + 1) cap = (size_t)r->content_length + 1;
    if (cap < need) cap = need;
    char *b = realloc(r->body, cap);
    if (!b) return false;
    r->body = b;
    r->body_cap = cap;
    return true;
}

static cb_http_result done(cb_http_req *r) {
    if (!body_reserve(r, r->body_len + 1)) return fail(r, 503, "out of memory");
    r->body[r->body_len] = '\0';
    r->state = S_DONE;
    return CB_HTTP_DONE;
}

static cb_http_result body_bytes(cb_http_req *r, const char *d, size_t n) {
    if (!body_reserve(r, r->body_len + n + 1)) return fail(r, 503, "out of memory");
    memcpy(r->body + r->body_len, d, n);
    r->body_len += n;
    r->left -= n;
    return CB_HTTP_NEED_MORE;
}

/* A chunk-size line: hex digits, then optional extensions (ignored). */
static cb_http_result chunk_size(cb_http_req *r) {
    r->line[r->line_len] = '\0';
    if (r->line_len > 0 && r->line[r->line_len - 1] == '\r') r->line[--r->line_len] = '\0';
    size_t k = strspn(r->line, "0123456789abcdefABCDEF");
    if (k == 0 || k > 15) return fail(r, 400, "malformed chunk size");
    char c = r->line[k];
    if (c != '\0' && c != ';' && c != ' ' && c != '\t') return fail(r, 400, "malformed chunk size");
    uint64_t size = strtoull(r->line, NULL, 16);
    r->line_len = 0;
    if (size == 0) {
        r->state = S_TRAILER;
        return CB_HTTP_NEED_MORE;
    }
    if (size > r->lim.max_body - r->body_len) return fail(r, 413, "the body is larger than the limit");
    r->left = size;
    r->state = S_CHUNK_DATA;
    return CB_HTTP_NEED_MORE;
}

/* ---------------------------------------------------------------- feeding ------------------- */

static cb_http_result feed_head(cb_http_req *r, const char *d, size_t n, size_t *i) {
    while (*i < n) {
        const char *nl = memchr(d + *i, '\n', n - *i);
        size_t take = nl ? (size_t)(nl - (d + *i)) + 1 : n - *i;
        if (r->head_len + take > r->lim.max_head)
            return r->line_start == 0 ? fail(r, 414, "the request line is too long")
                                      : fail(r, 431, "the request head is too large");
        if (r->head_len + take > r->head_cap) {
            size_t cap = r->head_cap ? r->head_cap : 1024;
            while (cap < r->head_len + take)
                cap *= 2;
            if (cap > r->lim.max_head) cap = r->lim.max_head;
            char *h = realloc(r->head, cap);
            if (!h) return fail(r, 503, "out of memory");
            r->head = h;
            r->head_cap = cap;
        }
        memcpy(r->head + r->head_len, d + *i, take);
        r->head_len += take;
        *i += take;
        if (!nl) return CB_HTTP_NEED_MORE;
        size_t len = r->head_len - 1 - r->line_start; /* the line without its '\n' */
        if (len > 0 && r->head[r->head_len - 2] == '\r') len--;
        if (len > 0) {
            r->line_start = r->head_len;
        } else if (r->line_start == 0) { /* empty lines before the request line are ignored (RFC 9112 2.2) */
            r->head_len = 0;
        } else {
            if (parse_head(r) == CB_HTTP_ERROR) return CB_HTTP_ERROR;
            if (r->chunked) {
                r->state = S_CHUNK_SIZE;
            } else if (r->content_length > 0) {
                r->state = S_BODY;
                r->left = (uint64_t)r->content_length;
            } else {
                return done(r);
            }
            return CB_HTTP_NEED_MORE;
        }
    }
    return CB_HTTP_NEED_MORE;
}

/* Reads a line (chunk size, chunk end, trailer) byte by byte into r->line; returns true at its end. */
static bool line_byte(cb_http_req *r, char c, bool keep) {
    if (c == '\n') return true;
    if (keep && r->line_len < sizeof(r->line) - 1) r->line[r->line_len] = c;
    r->line_len++;
    return false;
}

cb_http_result cb_http_feed(cb_http_req *r, const char *d, size_t n, size_t *used) {
    size_t i = 0;
    *used = 0;
    if (r->state == S_DONE) return CB_HTTP_DONE;
    if (r->state == S_ERROR) return CB_HTTP_ERROR;
    cb_http_result rc = CB_HTTP_NEED_MORE;
    while (rc == CB_HTTP_NEED_MORE && i < n) {
        switch (r->state) {
        case S_HEAD: rc = feed_head(r, d, n, &i); break;
        case S_BODY: {
            size_t take = n - i < r->left ? n - i : (size_t)r->left;
            rc = body_bytes(r, d + i, take);
            i += take;
            if (rc == CB_HTTP_NEED_MORE && r->left == 0) rc = done(r);
            break;
        }
        case S_CHUNK_SIZE:
            if (!line_byte(r, d[i++], true)) {
                if (r->line_len >= sizeof(r->line) - 1) rc = fail(r, 400, "chunk size line too long");
            } else {
                rc = chunk_size(r);
            }
            break;
        case S_CHUNK_DATA: {
            size_t take = n - i < r->left ? n - i : (size_t)r->left;
            rc = body_bytes(r, d + i, take);
            i += take;
            if (r->left == 0) r->state = S_CHUNK_END;
            break;
        }
        case S_CHUNK_END: /* the CRLF after a chunk's data */
            if (line_byte(r, d[i++], true)) {
                bool empty = r->line_len == 0 || (r->line_len == 1 && r->line[0] == '\r');
                r->line_len = 0;
                if (!empty) rc = fail(r, 400, "chunk data longer than its size");
                r->state = S_CHUNK_SIZE;
            } else if (r->line_len > 1) {
                rc = fail(r, 400, "chunk data longer than its size");
            }
            break;
        case S_TRAILER:
            if (line_byte(r, d[i++], false)) {
                bool empty = r->line_len == 0 || (r->line_len == 1 && r->line[0] == '\r');
                r->line_len = 0;
                if (empty) {
                    rc = done(r);
                } else if (++r->n_trailers > r->lim.max_headers) {
                    rc = fail(r, 431, "too many trailer lines");
                }
            } else if (r->line_len > TRAILER_MAX) {
                rc = fail(r, 431, "trailer line too long");
            } else if (r->line_len == 1) {
                r->line[0] = d[i - 1]; /* remembered to tell a bare CR line from a field */
            }
            break;
        default: rc = CB_HTTP_ERROR; break;
        }
    }
    *used = i;
    return rc;
}

/* ---------------------------------------------------------------- statuses ----------------- */

const char *cb_http_status_text(int status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}
