/* http.h — reading one HTTP/1.x request from a byte stream, pure: bytes in, a request or an error
 * status out, no sockets (the fuzzer feeds it directly). Incremental and linear: bytes may come one
 * at a time, each is looked at once. Bounded: the head (request line and headers), the number of
 * headers and the decoded body each have a limit, checked before anything larger is stored.
 *
 * Accepted: HTTP/1.0 and 1.1, Content-Length or chunked bodies, bare LF line ends. Refused with
 * the status a server should send: malformed syntax 400, body over the limit 413, request line
 * over the head limit 414, head over it 431, a Transfer-Encoding other than chunked 501, another
 * HTTP version 505, Content-Length together with Transfer-Encoding 400 (a request smuggling
 * vector), an Expect other than 100-continue 417, a Host, Authorization, x-api-key, Content-Type or
 * Origin header given twice 400. */
#ifndef CB_HTTP_H
#define CB_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CB_HTTP_MAX_HEADERS 100

typedef struct {
    size_t max_head; /* request line + headers, bytes (default 16 KiB) */
    int max_headers; /* header lines, <= CB_HTTP_MAX_HEADERS (default 64) */
    size_t max_body; /* decoded body bytes (default 1 MiB) */
} cb_http_limits;

typedef enum { CB_HTTP_NEED_MORE = 0, CB_HTTP_DONE = 1, CB_HTTP_ERROR = -1 } cb_http_result;

typedef struct {
    const char *name, *value; /* in the head buffer, NUL-terminated, value without surrounding blanks */
} cb_http_header;

typedef struct {
    cb_http_limits lim;
    int state;  /* where the reader is (http.c) */
    char *head; /* (head_cap) the head's bytes; after it is parsed, the NUL-terminated pieces below */
    size_t head_len, head_cap, line_start;
    char *body; /* (body_cap) decoded body, NUL-terminated once done */
    size_t body_len, body_cap;
    uint64_t left; /* body bytes still to come: Content-Length left, or the current chunk's */
    char line[80]; /* a chunk-size or trailer line being read */
    size_t line_len;
    int n_trailers;

    /* the request, valid once the head is parsed (cb_http_head_done) */
    const char *method, *target; /* NUL-terminated, in head */
    int minor;                   /* HTTP/1.minor */
    cb_http_header headers[CB_HTTP_MAX_HEADERS];
    int n_headers;
    int64_t content_length; /* -1: none */
    bool chunked, keep_alive, expect_continue;

    int status;         /* CB_HTTP_ERROR: the status to answer with */
    const char *reason; /* CB_HTTP_ERROR: what was wrong, for the error body */
} cb_http_req;

/* The default limits, overridden by non-zero fields of lim (NULL: defaults). */
void cb_http_req_init(cb_http_req *r, const cb_http_limits *lim);
void cb_http_req_free(cb_http_req *r);
/* Ready for the next request of the connection (buffers are kept for reuse, shrunk when large). */
void cb_http_req_reset(cb_http_req *r);

/* Reads from data[0, n). Sets *used to the bytes consumed. Returns CB_HTTP_NEED_MORE when all
 * were consumed and the request is not complete, CB_HTTP_DONE when it is (bytes past *used belong
 * to the next request), CB_HTTP_ERROR with status and reason set (the connection should answer and
 * close: what follows cannot be framed). After DONE or ERROR it consumes nothing until reset. */
cb_http_result cb_http_feed(cb_http_req *r, const char *data, size_t n, size_t *used);

/* Whether the head has been parsed (method, target, headers are readable). */
bool cb_http_head_done(const cb_http_req *r);
/* The first header with this name (case-insensitive), or NULL. */
const char *cb_http_header_get(const cb_http_req *r, const char *name);
/* How many headers have this name (case-insensitive). */
int cb_http_header_count(const cb_http_req *r, const char *name);
/* The request target's path (no query) into buf (cap bytes, NUL-terminated, cut to fit): from the
 * parsed request line, or, when the head was refused before it was read whole (too long, malformed),
 * from its first line as it came, so that an error can be answered in the shape the path's API
 * speaks. Returns its length (0: none known). */
size_t cb_http_req_path(const cb_http_req *r, char *buf, size_t cap);
/* Hands the decoded body (NUL-terminated, malloc'd) over to the caller, its length in *len; the
 * reader makes a new one for the next request. */
char *cb_http_req_take_body(cb_http_req *r, size_t *len);
/* Bytes the reader holds now (head and body buffers): what a server's memory budget counts. */
size_t cb_http_req_held(const cb_http_req *r);

/* The reason phrase of a status code ("OK", "Not Found", ...). */
const char *cb_http_status_text(int status);

#endif
