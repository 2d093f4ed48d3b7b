/* events.c — the event queue (the engine thread pushes, callers poll; every request's final event
 * reserved when it is accepted) and the one door of every kind's mailbox (cb_engine_post). */
#include "engine_internal.h"
#include "../util/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cb_engine_push_event(cobatch_engine *e, struct cobatch_event *ev) {
    pthread_mutex_lock(&e->ev_mu);
    cb_event_queue *q = &e->events;
    if (ev->type == COBATCH_EVENT_FINISHED) q->reserved--;
    if (q->len == q->cap) { /* unreachable while the reservation holds (engine_internal.h) */
        pthread_mutex_unlock(&e->ev_mu);
        fputs("cobatch: the event queue overflowed its reservation\n", stderr);
        abort();
    }
    q->v[(q->head + q->len) % q->cap] = *ev;
    q->len++;
    pthread_mutex_unlock(&e->ev_mu);
    e->ev_unsignalled = true;
}

/* Makes room for one more live request's events: its FINISHED slot, and a step's worth of tokens
 * above the backlog. Called with ev_mu held. Returns false when out of memory. */
static bool reserve_event(cobatch_engine *e) {
    cb_event_queue *q = &e->events;
    int need = e->event_backlog + (2 + e->spec_max) * e->params.max_num_seqs + q->reserved + 1;
    if (q->cap < need) {
        int cap = q->cap ? q->cap : 1024;
        while (cap < need)
            cap *= 2;
        struct cobatch_event *v = malloc(sizeof(*v) * (size_t)cap);
        if (!v) return false;
        for (int i = 0; i < q->len; i++)
            v[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = v;
        q->cap = cap;
        q->head = 0;
    }
    q->reserved++;
    return true;
}

void cb_engine_wait_for_event_space(cobatch_engine *e) {
    pthread_mutex_lock(&e->ev_mu);
    while (e->events.len >= e->event_backlog && !e->ev_stop)
        pthread_cond_wait(&e->ev_space, &e->ev_mu);
    pthread_mutex_unlock(&e->ev_mu);
}

void cb_engine_wake_pollers(cobatch_engine *e) {
    if (!e->ev_unsignalled) return;
    e->ev_unsignalled = false;
    pthread_mutex_lock(&e->ev_mu);
    pthread_cond_broadcast(&e->ev_cond);
    pthread_mutex_unlock(&e->ev_mu);
    uint64_t one = 1;
    ssize_t w = write(e->event_fd, &one, sizeof(one));
    (void)w; /* the counter saturating only means a reader is already due */
}

int cobatch_poll(cobatch_engine *e, struct cobatch_event *out, int max, int timeout_ms) {
    if (max <= 0) return 0;
    pthread_mutex_lock(&e->ev_mu);
    if (e->events.len == 0 && timeout_ms != 0) {
        if (timeout_ms < 0) {
            while (e->events.len == 0)
                pthread_cond_wait(&e->ev_cond, &e->ev_mu);
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += timeout_ms / 1000;
            ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            while (e->events.len == 0)
                if (pthread_cond_timedwait(&e->ev_cond, &e->ev_mu, &ts) == ETIMEDOUT) break;
        }
    }
    int n = 0;
    cb_event_queue *q = &e->events;
    while (n < max && q->len > 0) {
        out[n++] = q->v[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    if (n > 0 && q->len < e->event_backlog) pthread_cond_signal(&e->ev_space);
    pthread_mutex_unlock(&e->ev_mu);
    return n;
}

void cobatch_event_clear(struct cobatch_event *ev) {
    free(ev->text);
    free(ev->error);
    free(ev->logprobs);
    free(ev->prompt_logprobs);
    free(ev->embd);
    ev->text = ev->error = NULL;
    ev->logprobs = ev->prompt_logprobs = NULL;
    ev->embd = NULL;
}

int cobatch_event_fd(const cobatch_engine *e) { return e->event_fd; }

cobatch_req_id cb_engine_post(cobatch_engine *e, int kind, void *req, cobatch_req_id *id_out, atomic_bool *cancel,
                              int64_t weight, struct cobatch_error *err) {
    cb_mailbox *m = &e->mail[kind];
    int status = COBATCH_OK;
    bool reserved = false;
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
        status = cb_engine_refuse(err, COBATCH_ERR_SHUTDOWN, NULL, "the engine is shutting down");
    } else if (m->max_weight > 0 && m->weight > 0 && m->weight + weight > m->max_weight) {
        status = cb_engine_refuse(err, COBATCH_ERR_QUEUE_FULL, NULL, "%lld %s are waiting; retry later",
                                  (long long)m->weight, m->weight_unit);
    } else if (e->n_queued >= e->params.max_queue) {
        status = cb_engine_refuse(err, COBATCH_ERR_QUEUE_FULL, NULL, "too many requests waiting (%d); retry later",
                                  e->params.max_queue);
    } else {
        pthread_mutex_lock(&e->ev_mu);
        reserved = reserve_event(e);
        pthread_mutex_unlock(&e->ev_mu);
        if (!reserved || !cb_grow((void **)&m->items, &m->cap, (size_t)m->len + 1, sizeof(void *), 64) ||
            !cb_grow((void **)&e->live, &e->live_cap, (size_t)e->n_live + 1, sizeof(*e->live), 64))
            status = cb_engine_refuse(err, COBATCH_ERR_NOMEM, NULL, "out of memory");
    }
    if (status != COBATCH_OK) {
        if (reserved) {
            pthread_mutex_lock(&e->ev_mu);
            e->events.reserved--;
            pthread_mutex_unlock(&e->ev_mu);
        }
        pthread_mutex_unlock(&e->mu);
        return status;
    }
    cobatch_req_id id = *id_out = e->next_id++; /* before the engine thread can see req */
    e->live[e->n_live++] = (cb_live_req){.id = id, .cancel = cancel};
    e->n_queued++;
    m->items[m->len++] = req;
    m->open++;
    m->weight += weight;
    pthread_cond_signal(&e->cond);
    pthread_mutex_unlock(&e->mu);
    return id; /* req may be gone: the engine thread owns it */
}

void cb_engine_done(cobatch_engine *e, int kind, cobatch_req_id id, int64_t weight) {
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i].id == id) {
            e->live[i] = e->live[--e->n_live];
            break;
        }
    }
    e->mail[kind].open--;
    e->mail[kind].weight -= weight;
    pthread_mutex_unlock(&e->mu);
}
