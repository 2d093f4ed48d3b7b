/* httpd.h — the server's HTTP/1.1 connections on a libevent loop: accepting (a connection cap
 * answered with a quick 503, and no busy loop when file descriptors run out), reading requests
 * (http.h) under a time limit and a memory budget, writing whole or streamed (chunked) responses
 * with a bound on what a slow reader may leave pending, and telling the owner of a request when
 * its client has gone. Everything runs on the loop's thread.
 *
 * A connection carries one request at a time: on_request hands it over; the owner answers it with
 * cb_conn_reply, or cb_conn_stream_start / _write / _end, possibly much later (the request's
 * buffers stay valid until then). If the connection closes first (the client closed or reset it,
 * a write timed out, the server is being freed), on_gone tells the owner, who must not touch the
 * connection again. Pipelined requests wait in the input until the answer is out. */
#ifndef CB_HTTPD_H
#define CB_HTTPD_H

#include "http.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
typedef struct cb_httpd cb_httpd;
typedef struct cb_conn cb_conn;

typedef void (*cb_httpd_request_fn)(cb_conn *c, cb_http_req *req, void *user);
typedef void (*cb_httpd_gone_fn)(cb_conn *c, void *req_user, void *user);
/* A request's head is in and its client waits for "100 Continue" before sending the body: true to
 * let it send, false when the function answered already (a 401, 404, ...; the body is then
 * dropped unread and the connection closes). */
typedef bool (*cb_httpd_head_fn)(cb_conn *c, cb_http_req *req, void *user);
/* The reader refused a request (status: 400, 408, 413, 414, 431, 417, 501, 505, or 503 when the
 * server holds too many request bytes; reason: what was wrong): the owner answers it with
 * cb_conn_reply, in the shape of the API its path belongs to (cb_http_req_path; the head may not
 * have been read whole). The connection closes after it. */
typedef void (*cb_httpd_error_fn)(cb_conn *c, cb_http_req *req, int status, const char *reason, void *user);

typedef struct {
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* 0 = any free port */
    int max_connections;       /* open at once; beyond, a new one gets 503 and is closed (default 1024) */
    cb_http_limits limits;     /* per request (http.h defaults) */
    size_t max_buffered;       /* request bytes all connections may hold at once (default 256 MiB) */
    int request_timeout_ms;    /* a request must arrive whole this long after its first byte (default 30 s) */
    int idle_timeout_ms;       /* a connection without a request is closed after this (default 60 s) */
    int write_timeout_ms;      /* output pending without progress this long: the client is gone (default 60 s) */
    size_t max_stream_backlog; /* streamed output a client may leave unread (default 4 MiB) */
    int sndbuf;                /* > 0: each connection's kernel send buffer (SO_SNDBUF), else the system's
                                  autotuning (up to net.ipv4.tcp_wmem's maximum, 4 MiB by default) */
    cb_httpd_request_fn on_request;
    cb_httpd_gone_fn on_gone;
    cb_httpd_head_fn on_head;   /* NULL: every such client may send */
    cb_httpd_error_fn on_error; /* NULL: OpenAI's error shape */
    void *user;
} cb_httpd_params;

typedef struct {
    int open;                                    /* connections now */
    uint64_t accepted, refused_full, refused_fd; /* refused: at the cap, out of file descriptors */
    uint64_t timeouts;                           /* requests that did not arrive in time */
    uint64_t bad_requests;                       /* malformed, too large (4xx from the reader) */
    uint64_t gone;                               /* closed with a request unanswered */
    uint64_t resets; /* closed with a reset: an answer cut, or request bytes left unread (refusals too) */
    size_t buffered; /* request bytes held now */
} cb_httpd_stats;

/* Listens. Returns NULL with a message (cannot bind, out of memory). */
cb_httpd *cb_httpd_new(struct event_base *base, const cb_httpd_params *p, char *err, size_t errlen);
/* Closes every connection (on_gone for those with an unanswered request) and the listener. */
void cb_httpd_free(cb_httpd *h);
int cb_httpd_port(const cb_httpd *h);
void cb_httpd_get_stats(const cb_httpd *h, cb_httpd_stats *out);
/* From now on every response says Connection: close, and idle connections are closed. */
void cb_httpd_set_draining(cb_httpd *h);

/* A whole response. extra_headers: complete "Name: value\r\n" lines, or NULL. The body is copied;
 * to a HEAD request only the head goes (with the body's Content-Length, as GET would get). */
void cb_conn_reply(cb_conn *c, int status, const char *content_type, const char *extra_headers, const char *body,
                   size_t len);
/* A streamed response: the head now, then pieces (chunked in HTTP/1.1; HTTP/1.0 gets the raw bytes and
 * a close at the end). stream_write returns false when the piece cannot be queued: the client leaves
 * more than max_stream_backlog unread, or memory ran out; the caller then ends its request and calls
 * cb_conn_abort. */
void cb_conn_stream_start(cb_conn *c, int status, const char *content_type, const char *extra_headers);
bool cb_conn_stream_write(cb_conn *c, const char *data, size_t n);
void cb_conn_stream_end(cb_conn *c);
/* Closes now with a reset, dropping unsent output: a client must not take a cut response for a whole
 * one. No on_gone follows. */
void cb_conn_abort(cb_conn *c);
/* The owner's object for the request now being answered (passed to on_gone). */
void cb_conn_set_user(cb_conn *c, void *req_user);

#endif
