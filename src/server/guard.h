/* guard.h — what a request must show before a server that web pages can reach serves it: pure,
 * unit-tested. Without an API key, any page the local user opens could otherwise drive the server:
 * a cross-site POST with a text/plain or form body runs generation blind, and a page whose name was
 * rebound to 127.0.0.1 (DNS rebinding) reads the answers, since to the browser it is same-origin.
 * Three checks, as local servers browsers can reach make them (Ollama's allowed hosts, llama.cpp's
 * and Jupyter's host checks):
 * - Host: on a loopback listener, the Host header names a loopback address, localhost (or a name
 *   under .localhost), the address listened on, or a name the operator allows (--allowed-hosts). A
 *   listener on another address serves whatever names reach it (a LAN or a proxy), as Ollama does.
 * - Origin: a browser's request from another origin (it sends Origin on every cross-origin POST, no-cors
 *   and form posts included, "null" from an opaque one) must come from an allowed host, or from the
 *   origin the Host header names (the chat page at /).
 * - Content-Type on POST: JSON (application/json, or a +json type); a form type or none only from a
 *   client that is not a browser (no Origin, no Sec-Fetch-Site: curl -d sends form-urlencoded);
 *   text/plain and multipart never (the types a page may send cross-site without asking first). */
#ifndef CB_GUARD_H
#define CB_GUARD_H

#include <stdbool.h>

typedef struct {
    bool loopback;         /* the server listens on a loopback address: the Host header is checked */
    const char *bind_host; /* the address listened on: a Host naming it is allowed */
    const char *allowed;   /* --allowed-hosts: comma-separated names, ".suffix" for every name under it, "*"
                              for any; NULL: none beyond the loopback names */
} cb_guard;

/* What a request carries that the checks read (NULL: the header is absent). */
typedef struct {
    bool post;
    const char *host, *origin, *sec_fetch_site, *content_type;
} cb_guard_req;

/* 0 when the request may go on; else the status to answer (403: a host or origin not allowed, 415: a
 * body type a browser could send cross-site) with *why set to a sentence for the error. */
int cb_guard_check(const cb_guard *g, const cb_guard_req *r, const char **why);

/* Whether a Host header value (name[:port], [v6][:port]) names a host g allows. */
bool cb_guard_host_allowed(const cb_guard *g, const char *host);
/* The guard of a server listening on bind_host (NULL: 127.0.0.1) with the operator's allowed list. */
cb_guard cb_guard_make(const char *bind_host, const char *allowed);

#endif
