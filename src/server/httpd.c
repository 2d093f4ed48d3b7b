/* httpd.c — connections: accept, read, answer, close (see httpd.h). */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* Input a connection may hold while its request is being answered (pipelined requests); beyond it
 * reading stops until the answer is out. */
#define PIPELINE_MAX 65536

typedef enum {
    C_READING,   /* reading a request */
    C_HANDLING,  /* the request is with its owner, no answer yet */
    C_STREAMING, /* a streamed answer is under way */
    C_CLOSING,   /* the last answer is being written, then the connection closes */
    C_LINGER,    /* written and shut for writing: what the client still sends is read and dropped a little
                    while, so that closing with unread input (a reset) does not destroy the answer */
} conn_state;

#define LINGER_MS 2000

struct cb_conn {
    cb_httpd *h;
    struct bufferevent *bev;
    struct event *timer;  /* idle or request deadline */
    struct event *resume; /* reads pipelined input after an answer, outside the answer's call */
    cb_http_req req;
    conn_state state;
    void *req_user;
    size_t held;     /* bytes of h->buffered this connection's reader accounts for */
    bool got_bytes;  /* the current request has started arriving (its deadline runs) */
    bool keep_alive; /* the current request allows another after it */
    bool chunked;    /* the streamed answer is chunked */
    bool continued;  /* "100 Continue" was sent for the current request */
    bool failed;     /* a streamed answer's head could not be queued: every write fails */
    bool reset;      /* closing it sends a reset (cb_conn_abort) */
    cb_conn *prev, *next;
};

struct cb_httpd {
    cb_httpd_params p;
    struct event_base *base;
    int lfd, spare_fd;
    struct event *accept_ev, *accept_pause;
    int port;
    bool draining;
    cb_conn *conns;
    cb_httpd_stats st;
};

static const char REFUSED_503[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
    "Content-Length: 107\r\n\r\n"
    "{\"error\":{\"message\":\"the server has too many connections; retry later\",\"type\":\"service_unavailable\"}}\n";

/* ---------------------------------------------------------------- closing ------------------- */

static void account(cb_conn *c) {
    size_t now = cb_http_req_held(&c->req);
    c->h->st.buffered = c->h->st.buffered - c->held + now;
    c->held = now;
}

static void reset_on_close(cb_conn *c) {
    struct linger lg = {.l_onoff = 1, .l_linger = 0}; /* close sends a reset */
    if (c->bev) setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

/* Whether closing fd resets the connection: the kernel does so when request bytes are unread. */
static bool unread(int fd) {
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* Closes c. An answer under way (a stream, or output not yet written) is cut with a reset: a plain
 * close would end it like a whole one (an HTTP/1.0 stream has no other framing). */
static void conn_free(cb_conn *c, bool tell_owner) {
    cb_httpd *h = c->h;
    bool cut = c->bev && (c->state == C_STREAMING || evbuffer_get_length(bufferevent_get_output(c->bev)) > 0);
    if (cut) reset_on_close(c);
    if (cut || c->reset || (c->bev && unread(bufferevent_getfd(c->bev)))) h->st.resets++;
    if (c->req_user && tell_owner) {
        h->st.gone++;
        void *u = c->req_user;
        c->req_user = NULL;
        h->p.on_gone(c, u, h->p.user);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    h->st.open--;
    h->st.buffered -= c->held;
    if (c->timer) event_free(c->timer);
    if (c->resume) event_free(c->resume);
    if (c->bev) bufferevent_free(c->bev); /* closes the socket */
    cb_http_req_free(&c->req);
    free(c);
}

void cb_conn_abort(cb_conn *c) {
    reset_on_close(c);
    c->reset = true;
    c->req_user = NULL;
    conn_free(c, false);
}

/* ---------------------------------------------------------------- timers -------------------- */

static void arm(cb_conn *c, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
}

static void send_error(cb_conn *c, int status, const char *reason);

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    cb_conn *c = arg;
    if (c->state == C_READING && c->got_bytes) { /* a request that did not arrive whole in time */
        c->h->st.timeouts++;
        send_error(c, 408, "the request did not arrive in time");
        return;
    }
    conn_free(c, true); /* idle, or an answer that would not drain */
}

/* ---------------------------------------------------------------- reading ------------------- */

static void send_error(cb_conn *c, int status, const char *reason) {
    c->keep_alive = false;
    if (c->h->p.on_error) {
        c->h->p.on_error(c, &c->req, status, reason, c->h->p.user);
        return;
    }
    char body[256];
    int n =
        snprintf(body, sizeof(body), "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}\n",
                 reason, status == 503 ? "service_unavailable" : "invalid_request_error");
    cb_conn_reply(c, status, "application/json", status == 503 ? "Retry-After: 1\r\n" : NULL, body, (size_t)n);
}

/* Feeds what the input holds to the reader; hands a complete request over. */
static void read_input(cb_conn *c) {
    cb_httpd *h = c->h;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    if (c->state == C_READING && evbuffer_get_length(bufferevent_get_output(c->bev)) > PIPELINE_MAX) {
        /* answers the client has not read yet: the next pipelined request waits for them to leave
         * (on_write), so a client that sends and never reads cannot grow the output */
        bufferevent_disable(c->bev, EV_READ);
        return;
    }
    if (c->state == C_CLOSING || c->state == C_LINGER) { /* a body we refused, still coming: dropped */
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    while (c->state == C_READING && evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1) break;
        if (!c->got_bytes) { /* the request's deadline starts with its first byte */
            c->got_bytes = true;
            arm(c, h->p.request_timeout_ms);
        }
        size_t used = 0;
        cb_http_result rc = cb_http_feed(&c->req, v.iov_base, v.iov_len, &used);
        evbuffer_drain(in, used);
        account(c);
        if (rc == CB_HTTP_ERROR) {
            h->st.bad_requests++;
            send_error(c, c->req.status, c->req.reason);
            return;
        }
        if (h->st.buffered > h->p.max_buffered) {
            send_error(c, 503, "the server holds too many request bytes; retry later");
            return;
        }
        if (rc == CB_HTTP_NEED_MORE && c->req.expect_continue && !c->continued && cb_http_head_done(&c->req)) {
            c->continued = true;
            c->keep_alive = false; /* should on_head answer now: the body is not read (reset when it is) */
            if (h->p.on_head && !h->p.on_head(c, &c->req, h->p.user)) return;
            bufferevent_write(c->bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
        }
        if (rc == CB_HTTP_DONE) {
            evtimer_del(c->timer);
            c->state = C_HANDLING;
            c->keep_alive = c->req.keep_alive && !h->draining;
            h->p.on_request(c, &c->req, h->p.user); /* may answer, and even free c, before it returns */
            return;
        }
    }
}

static void on_read(struct bufferevent *bev, void *arg) {
    (void)bev;
    read_input(arg);
}

static void on_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    read_input(arg);
}

static void on_write(struct bufferevent *bev, void *arg) {
    (void)bev;
    cb_conn *c = arg;
    if (c->state == C_READING) { /* the output left: pipelined input may be read again */
        bufferevent_enable(c->bev, EV_READ);
        if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) event_active(c->resume, EV_TIMEOUT, 0);
        return;
    }
    if (c->state != C_CLOSING) return;
    c->state = C_LINGER; /* the answer has left: say so (FIN), then drain what the client still sends */
    shutdown(bufferevent_getfd(c->bev), SHUT_WR);
    arm(c, LINGER_MS);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    (void)bev;
    cb_conn *c = arg;
    /* End of input while a stream or the last answer is being written: the client may only have
     * shut its sending side, so writing goes on (a client that closed for good resets the next
     * write, an error here). Before the answer has begun, end of input means the client left, as
     * nginx takes it (its 499): the request is cancelled. A reset, or a write that made no progress
     * in time: gone. */
    bool eof = (what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR);
    if (eof && (c->state == C_STREAMING || c->state == C_CLOSING)) {
        bufferevent_disable(c->bev, EV_READ);
        return;
    }
    if (eof && c->state == C_READING && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
        c->state = C_CLOSING; /* answers to pipelined requests still leaving: write them, then close */
        bufferevent_disable(c->bev, EV_READ);
        arm(c, c->h->p.write_timeout_ms);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) conn_free(c, true);
}

/* The answer is out: the next request (already buffered, perhaps), or the close. */
static void answered(cb_conn *c) {
    c->req_user = NULL;
    if (!c->keep_alive) {
        c->state = C_CLOSING;
        arm(c, c->h->p.write_timeout_ms); /* the last answer gets this long to leave */
        if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) event_active(c->resume, EV_TIMEOUT, 0);
        return;
    }
    cb_http_req_reset(&c->req);
    account(c);
    c->state = C_READING;
    c->got_bytes = c->continued = c->failed = false;
    arm(c, c->h->p.idle_timeout_ms);
    bufferevent_enable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) event_active(c->resume, EV_TIMEOUT, 0);
}

/* ---------------------------------------------------------------- answering ----------------- */

static bool head(cb_conn *c, int status, const char *ctype, const char *extra, long long length) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    char len[48] = "";
    if (length >= 0) snprintf(len, sizeof(len), "Content-Length: %lld\r\n", length);
    return evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n%s%s%sConnection: %s\r\n\r\n", status,
                               cb_http_status_text(status), ctype, len,
                               c->chunked ? "Transfer-Encoding: chunked\r\n" : "", extra ? extra : "",
                               c->keep_alive ? "keep-alive" : "close") > 0;
}

void cb_conn_reply(cb_conn *c, int status, const char *ctype, const char *extra, const char *body, size_t len) {
    if (status >= 400 && c->state == C_READING) c->keep_alive = false; /* the request was not read whole */
    if (c->h->draining) c->keep_alive = false;
    c->chunked = false;
    bool head_only = c->req.method && !strcmp(c->req.method, "HEAD"); /* the length a GET would get, no body */
    if (!head(c, status, ctype, extra, (long long)len) ||
        (len > 0 && !head_only && evbuffer_add(bufferevent_get_output(c->bev), body, len) != 0)) {
        cb_conn_abort(c); /* out of memory: a cut answer must not look whole */
        return;
    }
    answered(c);
}

void cb_conn_stream_start(cb_conn *c, int status, const char *ctype, const char *extra) {
    if (c->h->draining) c->keep_alive = false;
    c->chunked = c->req.minor == 1;
    if (!c->chunked) c->keep_alive = false; /* HTTP/1.0: the close ends the body */
    c->state = C_STREAMING;
    c->failed = !head(c, status, ctype, extra, -1);
}

bool cb_conn_stream_write(cb_conn *c, const char *data, size_t n) {
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (c->failed || evbuffer_get_length(out) > c->h->p.max_stream_backlog) return false;
    if (n == 0) return true;
    char size[24];
    int k = c->chunked ? snprintf(size, sizeof(size), "%zx\r\n", n) : 0;
    if ((k > 0 && evbuffer_add(out, size, (size_t)k) != 0) || evbuffer_add(out, data, n) != 0 ||
        (c->chunked && evbuffer_add(out, "\r\n", 2) != 0))
        return false;
    return true;
}

void cb_conn_stream_end(cb_conn *c) {
    if (c->chunked && evbuffer_add(bufferevent_get_output(c->bev), "0\r\n\r\n", 5) != 0) {
        cb_conn_abort(c);
        return;
    }
    answered(c);
}

void cb_conn_set_user(cb_conn *c, void *req_user) { c->req_user = req_user; }

/* ---------------------------------------------------------------- accepting ----------------- */

static void refuse(cb_httpd *h, int fd) {
    ssize_t w = send(fd, REFUSED_503, sizeof(REFUSED_503) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    if (unread(fd)) h->st.resets++;
    close(fd);
}

static void conn_new(cb_httpd *h, int fd) {
    cb_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        refuse(h, fd);
        return;
    }
    c->h = h;
    c->bev = bufferevent_socket_new(h->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->timer = evtimer_new(h->base, on_timer, c);
    c->resume = event_new(h->base, -1, 0, on_resume, c);
    cb_http_req_init(&c->req, &h->p.limits);
    c->next = h->conns;
    if (h->conns) h->conns->prev = c;
    h->conns = c;
    h->st.open++;
    if (!c->bev) close(fd);
    if (!c->bev || !c->timer || !c->resume) {
        conn_free(c, false);
        return;
    }
    struct timeval wt = {h->p.write_timeout_ms / 1000, (h->p.write_timeout_ms % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, NULL, &wt);
    bufferevent_setwatermark(c->bev, EV_READ, 0, PIPELINE_MAX);
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    arm(c, h->p.idle_timeout_ms);
    h->st.accepted++;
}

static void on_accept_pause(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    cb_httpd *h = arg;
    event_add(h->accept_ev, NULL);
}

/* Out of file descriptors: the spare one makes room to take the waiting connection and refuse it
 * (else it would stay in the backlog and wake the loop at once, forever); then accepting pauses a
 * little. */
static void shed(cb_httpd *h) {
    h->st.refused_fd++;
    if (h->spare_fd >= 0) {
        close(h->spare_fd);
        int fd = accept(h->lfd, NULL, NULL);
        if (fd >= 0) refuse(h, fd);
        h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    event_del(h->accept_ev);
    struct timeval tv = {0, 100000};
    evtimer_add(h->accept_pause, &tv);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg) {
    (void)what;
    cb_httpd *h = arg;
    for (int k = 0; k < 64; k++) { /* a bounded batch, then the loop serves the others */
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) shed(h);
            return;
        }
        if (h->st.open >= h->p.max_connections) {
            h->st.refused_full++;
            refuse(h, fd);
            continue;
        }
        if (h->p.sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &h->p.sndbuf, sizeof(h->p.sndbuf));
        conn_new(h, fd);
    }
}

static int listen_on(const char *host, int port, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &ai);
    if (rc != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

cb_httpd *cb_httpd_new(struct event_base *base, const cb_httpd_params *p, char *err, size_t errlen) {
    cb_httpd *h = calloc(1, sizeof(*h));
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->p = *p;
    h->base = base;
    h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!h->p.host) h->p.host = "127.0.0.1";
    if (h->p.max_connections <= 0) h->p.max_connections = 1024;
    if (!h->p.max_buffered) h->p.max_buffered = (size_t)256 << 20;
    if (h->p.request_timeout_ms <= 0) h->p.request_timeout_ms = 30000;
    if (h->p.idle_timeout_ms <= 0) h->p.idle_timeout_ms = 60000;
    if (h->p.write_timeout_ms <= 0) h->p.write_timeout_ms = 60000;
    if (!h->p.max_stream_backlog) h->p.max_stream_backlog = (size_t)4 << 20;
    h->lfd = listen_on(h->p.host, h->p.port, err, errlen);
    if (h->lfd < 0) {
        cb_httpd_free(h);
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    h->port = p->port;
    if (getsockname(h->lfd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    h->accept_ev = event_new(base, h->lfd, EV_READ | EV_PERSIST, on_accept, h);
    h->accept_pause = evtimer_new(base, on_accept_pause, h);
    if (!h->accept_ev || !h->accept_pause || event_add(h->accept_ev, NULL) != 0) {
        snprintf(err, errlen, "out of memory");
        cb_httpd_free(h);
        return NULL;
    }
    return h;
}

void cb_httpd_free(cb_httpd *h) {
    if (!h) return;
    while (h->conns)
        conn_free(h->conns, true);
    if (h->accept_ev) event_free(h->accept_ev);
    if (h->accept_pause) event_free(h->accept_pause);
    if (h->lfd >= 0) close(h->lfd);
    if (h->spare_fd >= 0) close(h->spare_fd);
    free(h);
}

int cb_httpd_port(const cb_httpd *h) { return h->port; }

void cb_httpd_get_stats(const cb_httpd *h, cb_httpd_stats *out) { *out = h->st; }

void cb_httpd_set_draining(cb_httpd *h) {
    h->draining = true;
    for (cb_conn *c = h->conns, *next; c; c = next) { /* idle keep-alive connections go now */
        next = c->next;
        if (c->state == C_READING && !c->got_bytes && evbuffer_get_length(bufferevent_get_input(c->bev)) == 0)
            conn_free(c, false);
    }
}
