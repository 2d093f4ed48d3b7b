/* rpc.c — the RPC servers a model's layers go to, probed before ggml's client meets them. */
#include "rpc.h"
#include "../util/util.h"

#include <ggml-backend.h>
#ifdef COBATCH_HAVE_RPC
#include <ggml-rpc.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef COBATCH_HAVE_RPC
/* Whether a TCP connection to host:port opens within 5 s (IPv4, as ggml resolves it): 1 (and the
 * address it reached), 0, or -1 when the host has no IPv4 address. ggml's RPC client aborts the
 * process on a server it cannot reach, so cobatch asks first and says which one. A listener that is
 * not a ggml-rpc-server still passes this and aborts at ggml's handshake. */
static int reachable(const char *host, const char *port, struct sockaddr_in *addr) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL; /* as ggml */
    if (getaddrinfo(host, port, &hints, &ai) != 0) return -1;
    bool ok = false;
    for (struct addrinfo *a = ai; a && !ok; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            int e = 0;
            socklen_t el = sizeof(e);
            ok = poll(&pf, 1, 5000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0;
        }
        if (ok) memcpy(addr, a->ai_addr, sizeof(*addr));
        close(fd);
    }
    freeaddrinfo(ai);
    return ok ? 1 : 0;
}
#endif

/* (rpc.h) */
int cb_rpc_devices(const char *list, struct ggml_backend_device **devs, int max, char *err, size_t errlen) {
#ifndef COBATCH_HAVE_RPC
    (void)list, (void)devs, (void)max;
    cb_set_err(err, errlen, "--rpc: this build has no RPC backend (build with cmake -DCOBATCH_RPC=ON)");
    return -1;
#else
    int n = 0, n_ep = 0;
    struct sockaddr_in addrs[CB_RPC_MAX_DEVICES];
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char ep[256];
        if (len == 0 || len >= sizeof(ep)) {
            cb_set_err(err, errlen, "--rpc: expected HOST:PORT,... (got '%s')", list);
            return -1;
        }
        memcpy(ep, p, len);
        ep[len] = 0;
        char *colon = strrchr(ep, ':');
        char *tail = NULL;
        long port = colon ? strtol(colon + 1, &tail, 10) : 0;
        if (!colon || colon == ep || !colon[1] || *tail || port < 1 || port > 65535) {
            cb_set_err(err, errlen, "--rpc: '%s' is not HOST:PORT", ep);
            return -1;
        }
        if (strchr(ep, '[') || memchr(ep, ':', (size_t)(colon - ep))) {
            cb_set_err(err, errlen, "--rpc: '%s': ggml's RPC backend takes IPv4 addresses and host names, not IPv6",
                       ep);
            return -1;
        }
        *colon = 0;
        int up = reachable(ep, colon + 1, &addrs[n_ep]);
        *colon = ':';
        if (up <= 0) {
            cb_set_err(err, errlen,
                       up < 0 ? "--rpc: %s has no IPv4 address (ggml's RPC backend needs one)"
                              : "--rpc: no RPC server answers at %s",
                       ep);
            return -1;
        }
        for (int k = 0; k < n_ep; k++) /* listed twice, or under two names: it would get layers twice */
            if (addrs[k].sin_addr.s_addr == addrs[n_ep].sin_addr.s_addr && addrs[k].sin_port == addrs[n_ep].sin_port) {
                cb_set_err(err, errlen, "--rpc: %s is a server already listed (same address and port)", ep);
                return -1;
            }
        if (++n_ep == CB_RPC_MAX_DEVICES) {
            cb_set_err(err, errlen, "--rpc: at most %d servers", CB_RPC_MAX_DEVICES - 1);
            return -1;
        }
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(ep);
        if (!reg || ggml_backend_reg_dev_count(reg) == 0) {
            cb_set_err(err, errlen, "--rpc: the RPC server at %s offers no device", ep);
            return -1;
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg) && n < max - 1; i++)
            devs[n++] = ggml_backend_reg_dev_get(reg, i);
        p = end ? end + 1 : p + len;
    }
    for (size_t i = 0; i < ggml_backend_dev_count() && n < max - 1; i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_GPU) devs[n++] = d;
    }
    devs[n] = NULL;
    return n;
#endif
}
