/* server.h — `cobatch serve`: an OpenAI-compatible HTTP server over the engine.
 * One libevent (evhttp) thread owns sockets and response buffers; the engine runs on its own
 * thread; they meet only through cobatch_submit / cobatch_cancel and the event queue, whose
 * eventfd wakes the loop. The server thread never computes (no llama.h here). */
#ifndef CB_SERVER_H
#define CB_SERVER_H

#include <cobatch.h>
#include <stddef.h>

typedef struct {
    const char *host;       /* default 127.0.0.1 */
    int port;               /* default 8080; 0 = any free port (printed) */
    const char *api_key;    /* NULL: no authentication */
    const char *model_name; /* served name; NULL = the model file's base name */
    const char *model_path; /* to name the model when model_name is NULL */
    size_t max_body;        /* bytes; default 1 MiB */
    int drain_timeout_s;    /* after SIGTERM: how long running requests may finish; default 30 */
    const char *port_file;  /* if set, the bound port is written there once listening (tests) */
} srv_params;

/* Serves until SIGTERM/SIGINT and the drain. Takes a running engine (not owned). Returns 0 on a
 * clean stop, or -1 with a message printed (cannot bind, ...). */
int srv_run(cobatch_engine *engine, const srv_params *p);

#endif
