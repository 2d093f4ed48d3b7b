#include "runner.h"

#include "disk.h"

#include <llama.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cb_runner_init(cb_runner *r, cb_model *m, int32_t max_items) {
    r->model = m;
    r->n_batch = m->n_batch;
    r->decode_us = 0;
    r->batch = malloc(sizeof(*r->batch));
    if (r->batch) *r->batch = llama_batch_init(m->n_batch, 0, 1);
    r->logit_row = calloc((size_t)max_items, sizeof(int32_t));
    r->draft_base = calloc((size_t)max_items, sizeof(int32_t));
    r->draft_row = calloc((size_t)m->n_batch, sizeof(int32_t));
    r->order = calloc(2 * (size_t)max_items, sizeof(cb_row_piece));
    r->lp = calloc((size_t)m->n_batch, sizeof(cb_lp_row));
    r->restore_failed = calloc((size_t)max_items, sizeof(*r->restore_failed));
    r->max_restore_failed = max_items;
    r->n_pending = m->n_seq_max > 0 ? m->n_seq_max : 1;
    r->pending = calloc((size_t)r->n_pending, 1);
    if (!r->logit_row || !r->draft_base || !r->draft_row || !r->order || !r->lp || !r->restore_failed || !r->pending ||
        !r->batch || !r->batch->token) {
        cb_runner_free(r);
        return -1;
    }
    return 0;
}

void cb_runner_free(cb_runner *r) {
    if (r->batch && r->batch->token) llama_batch_free(*r->batch);
    free(r->batch);
    r->batch = NULL;
    free(r->logit_row);
    free(r->draft_base);
    free(r->draft_row);
    r->draft_base = r->draft_row = NULL;
    free(r->order);
    free(r->lp);
    free(r->restore_failed);
    r->restore_failed = NULL;
    free(r->pending);
    r->pending = NULL;
    r->logit_row = NULL;
    r->order = NULL;
    r->lp = NULL;
}

int32_t cb_runner_seq_len(cb_runner *r, int32_t seq) {
    return llama_memory_seq_pos_max(llama_get_memory(r->model->ctx), seq) + 1;
}

void cb_runner_trim(cb_runner *r, int32_t seq, int32_t p0) {
    if (seq >= 0) llama_memory_seq_rm(llama_get_memory(r->model->ctx), seq, p0, -1);
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* seq's cells as llama.cpp saves them, in a new buffer of *n bytes (owned by the caller); NULL
 * when llama.cpp or memory refused. */
static uint8_t *save_seq(struct llama_context *ctx, int32_t seq, size_t *n) {
    *n = llama_state_seq_get_size_ext(ctx, seq, 0);
    uint8_t *buf = *n > 0 ? malloc(*n) : NULL;
    if (buf && llama_state_seq_get_data_ext(ctx, buf, *n, seq, 0) == *n) return buf;
    free(buf);
    return NULL;
}

bool cb_runner_save(cb_runner *r, cb_request *req, int32_t seq, int32_t from, int32_t to) {
    struct llama_context *ctx = r->model->ctx;
    int64_t t0 = now_us();
    if (from > 0) llama_memory_seq_rm(llama_get_memory(ctx), seq, 0, from);
    size_t n;
    uint8_t *buf = save_seq(ctx, seq, &n);
    if (!buf) {
        req->swap.state = CB_SWAP_FAILED;
        return false;
    }
    free(req->swap.data);
    req->swap.data = buf;
    req->swap.size = n;
    req->swap.state = CB_SWAP_SAVED;
    if (r->swap) { /* the space counts what the copy took, not the estimate it was chosen on */
        r->swap->used += (int64_t)n - req->swap.reserved;
        if (r->swap->used > r->swap->peak) r->swap->peak = r->swap->used;
        req->swap.reserved = (int64_t)n;
    }
    cb_swap_note_copy(r->swap, n, to - from, now_us() - t0);
    return true;
}

bool cb_runner_restore(cb_runner *r, cb_request *req, int32_t seq) {
    int64_t t0 = now_us();
    size_t n = req->swap.size;
    bool ok = req->swap.data && llama_state_seq_set_data_ext(r->model->ctx, req->swap.data, n, seq, 0) == n;
    free(req->swap.data);
    req->swap.data = NULL;
    req->swap.size = 0;
    if (!ok) {
        llama_memory_seq_rm(llama_get_memory(r->model->ctx), seq, -1, -1);
        req->swap.state = CB_SWAP_FAILED;
        return false;
    }
    cb_swap_note_copy(r->swap, n, req->swap.to - req->swap.from, now_us() - t0);
    if (r->swap) r->swap->swapped_in++;
    memset(&req->swap, 0, sizeof(req->swap));
    return true;
}

/* llama.cpp saves a sequence as two words (a magic number, the sequence's id), its context's stream
 * count, then each stream's cell count (32 bits) followed, unless 0, by its cells. A sequence of the
 * split layout lives in one stream: a context of one stream reads it once the other streams' counts
 * (all 0) are left out. false when buf is not of that shape; llama.cpp's load checks the rest
 * (layers, element types, row sizes, V's layout), and a load it refuses is computed again. */
static bool to_one_stream(uint8_t *buf, size_t *n) {
    const size_t w = sizeof(uint32_t), head = 2 * w;
    uint32_t streams = 0, count = 0, s = 0;
    if (*n < head + w) return false;
    memcpy(&streams, buf + head, w);
    size_t at = head + w;
    for (; s < streams && at + w <= *n; s++, at += w) {
        memcpy(&count, buf + at, w);
        if (count > 0) break;
    }
    if (count == 0) return false;
    size_t from = at + w, tail = (size_t)(streams - s - 1) * w;
    if (*n < from + tail) return false;
    for (size_t k = *n - tail; k < *n; k++)
        if (buf[k] != 0) return false;
    size_t len = *n - tail - from;
    const uint32_t one = 1;
    memcpy(buf + head, &one, w);
    memcpy(buf + head + w, &count, w);
    memmove(buf + head + 2 * w, buf + from, len);
    *n = head + 2 * w + len;
    return true;
}

static void stash(cb_runner *r, int32_t seq, int32_t cells, cb_host_entry *e, bool one_stream) {
    int64_t t0 = now_us();
    bool clean = seq < r->n_pending && !(r->pending[seq] & CB_RUNNER_COPY_WRITE);
    size_t n = 0;
    uint8_t *buf = clean ? save_seq(r->model->ctx, seq, &n) : NULL;
    if (buf && one_stream && !to_one_stream(buf, &n)) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        cb_host_saved(e->owner, e, buf, n, cells, now_us() - t0);
    else
        cb_host_fail(e->owner, e);
    cb_host_unlock(e->owner, e);
}

void cb_runner_stash(cb_runner *r, int32_t seq, int32_t cells, cb_host_entry *e) { stash(r, seq, cells, e, false); }

void cb_runner_stash_one_stream(cb_runner *r, int32_t seq, int32_t cells, cb_host_entry *e) {
    stash(r, seq, cells, e, true);
}

void cb_runner_stash_converted(const cb_host_entry *from, cb_host_entry *e) {
    size_t n = from->size;
    uint8_t *buf = from->state == CB_HOST_SAVED && from->data && n > 0 ? malloc(n) : NULL;
    if (buf) memcpy(buf, from->data, n);
    if (buf && !to_one_stream(buf, &n)) {
        free(buf);
        buf = NULL;
    }
    /* counted at the tier's measured rate: a memcpy must not teach it that llama.cpp's copies, which
     * its loads are, cost less than they do */
    if (buf)
        cb_host_saved(e->owner, e, buf, n, e->len, (int64_t)((double)n * e->owner->byte_us));
    else
        cb_host_fail(e->owner, e);
    cb_host_unlock(e->owner, e);
}

bool cb_runner_load(cb_runner *r, int32_t seq, cb_host_entry *e, int32_t keep) {
    struct llama_context *ctx = r->model->ctx;
    cb_host_cache *h = e->owner;
    bool from_disk = e->state == CB_HOST_ON_DISK;
    bool ok = (e->state == CB_HOST_SAVED || (from_disk && h->disk)) && seq < r->n_pending && !r->pending[seq];
    const uint8_t *data = e->data;
    uint8_t *read = NULL;
    if (ok && from_disk) { /* read back from the disk tier, checked (a bad file is removed) */
        int64_t t0 = now_us();
        data = read = cb_disk_read(h->disk, e);
        ok = read != NULL;
        cb_host_read(h, e, ok, now_us() - t0);
    }
    int64_t t0 = now_us();
    if (ok) {
        llama_memory_t mem = llama_get_memory(ctx);
        llama_memory_seq_rm(mem, seq, -1, -1);
        ok = llama_state_seq_set_data_ext(ctx, data, e->size, seq, 0) == e->size;
        /* a sliding window's cells start where the saved sequence's window did: a cut under the
         * window's length past that would leave rows reading cells that are not there */
        int32_t n_swa = llama_model_n_swa(r->model->model);
        llama_pos lo = ok ? llama_memory_seq_pos_min(mem, seq) : 0;
        if (ok && n_swa > 0 && lo > 0 && keep < lo + n_swa) ok = false;
        llama_memory_seq_rm(mem, seq, ok ? keep : -1, -1); /* what it shares */
    }
    free(read);
    cb_host_loaded(h, e, ok, now_us() - t0);
    if (ok) h->hit_tokens += keep;
    if (ok && from_disk) h->disk_hit_tokens += keep;
    return ok;
}

/* The request's host-tier entry into its (empty) stream (the admission's lock on it dropped).
 * false: seq left empty, req->cache.load_failed set. */
static bool load(cb_runner *r, const cb_kv_op *op) {
    cb_request *req = op->ref;
    cb_host_entry *e = req->cache.host;
    bool ok = e && cb_runner_load(r, op->seq, e, op->p1);
    if (e) cb_host_unlock(e->owner, e);
    req->cache.host = NULL;
    req->cache.load_failed = !ok;
    return ok;
}

/* A restore or load that failed: the request is reported (restores and loads are admissions, at
 * most max items a step: one more is a scheduler bug, and a failure left unheard would decode on
 * cells that are not there). */
static void restore_failed(cb_runner *r, cb_request *req) {
    if (r->n_restore_failed >= r->max_restore_failed) {
        fprintf(stderr, "cobatch: internal error: more failed restores than admissions in a step\n");
        abort();
    }
    r->restore_failed[r->n_restore_failed++] = req;
}

static void apply(cb_runner *r, const cb_kv_ops *ops) {
    llama_memory_t mem = llama_get_memory(r->model->ctx);
    for (int32_t i = 0; i < ops->n; i++) {
        const cb_kv_op *op = &ops->v[i];
        switch (op->src) {
        case CB_KV_OP_RM: llama_memory_seq_rm(mem, op->seq, op->p0, op->p1); break;
        case CB_KV_OP_SAVE: cb_runner_save(r, op->ref, op->seq, op->p0, op->p1); break;
        case CB_KV_OP_RESTORE:
            if (!cb_runner_restore(r, op->ref, op->seq)) restore_failed(r, op->ref);
            break;
        case CB_KV_OP_STASH: cb_runner_stash(r, op->seq, op->p1, op->ref); break;
        case CB_KV_OP_LOAD:
            if (!load(r, op)) restore_failed(r, op->ref);
            break;
        case CB_KV_OP_NONE: break;
        default:
            llama_memory_seq_cp(mem, op->src, op->seq, op->p0, op->p1);
            if (r->model->split_kv && op->src != op->seq && op->seq < r->n_pending && op->src < r->n_pending) {
                r->pending[op->src] |= CB_RUNNER_COPY_READ;
                r->pending[op->seq] |= CB_RUNNER_COPY_WRITE;
            }
        }
    }
}

void cb_runner_apply_ops(cb_runner *r, cb_kv_ops *ops) {
    apply(r, ops);
    ops->n = 0;
}

/* ---------------------------------------------------------------- test faults -------------- */

static bool abort_cb(void *data) { /* thread 0 of the graph calls it after every node */
    cb_runner *r = data;
    return ++r->nodes_seen >= r->abort_after;
}

void cb_runner_set_fault(cb_runner *r, int rc, int count, int64_t abort_after_nodes) {
    r->fault_rc = rc;
    r->fault_left = rc ? count : 0;
    r->abort_after = abort_after_nodes;
    r->nodes_seen = 0;
    llama_set_abort_callback(r->model->ctx, abort_after_nodes > 0 ? abort_cb : NULL, abort_after_nodes > 0 ? r : NULL);
}

static int decode(cb_runner *r) {
    if (r->fault_left > 0) {
        r->fault_left--;
        return r->fault_rc;
    }
    int64_t t0 = now_us();
    int rc = llama_decode(r->model->ctx, *r->batch);
    r->decode_us += now_us() - t0;
    if (rc == 0) memset(r->pending, 0, (size_t)r->n_pending); /* its first act made the stream copies */
    if (r->abort_after > 0) {                                 /* one armed decode, then decode normally */
        r->last_nodes = r->nodes_seen;
        cb_runner_set_fault(r, 0, 0, 0);
    }
    return rc;
}

int cb_runner_run(cb_runner *r, const cb_plan *plan) {
    r->n_restore_failed = 0;
    apply(r, &plan->ops);
    if (r->n_restore_failed > 0) return CB_RUNNER_RESTORE_FAILED;
    if (plan->n_tokens > r->n_batch) return -100;
    if (plan->n_items == 0) return 0;
    struct llama_batch *b = r->batch;
    b->n_tokens = 0;
    r->n_lp = 0;
    if (r->model->split_kv) { /* the split layout's graph runs: see cb_plan_row_order */
        r->n_order = cb_plan_row_order(plan, CB_RUNNER_FA_TILE, CB_RUNNER_KV_PAD, r->run_cells, r->order);
        r->n_runs = cb_plan_graph_runs(plan, r->order, r->n_order);
        r->attended = cb_plan_attended(plan, r->order, r->n_order, CB_RUNNER_KV_PAD);
    } else { /* unified: one graph run whatever the order; keep the plan's (numerics follow rows) */
        for (int32_t i = 0; i < plan->n_items; i++)
            r->order[i] = (cb_row_piece){.item = i, .k0 = 0, .n = plan->items[i].n_tokens};
        r->n_order = plan->n_items;
        r->n_runs = 1;
        r->attended = 0;
    }
    for (int32_t i = 0, base = 0; i < plan->n_items; i++) {
        r->draft_base[i] = base;
        if (plan->items[i].n_draft > 0) base += plan->items[i].n_draft + 1;
    }
    for (int32_t j = 0; j < r->n_order; j++) {
        const cb_row_piece *pc = &r->order[j];
        const cb_plan_item *it = &plan->items[pc->item];
        for (int32_t k = pc->k0; k < pc->k0 + pc->n; k++) {
            int32_t row = b->n_tokens++;
            b->token[row] = it->req->tokens[it->pos0 + k];
            b->pos[row] = it->pos0 + k;
            b->n_seq_id[row] = 1;
            b->seq_id[row][0] = it->req->seq_id;
            b->logits[row] = it->logits && k == it->n_tokens - 1;
            int32_t d = k - (it->n_tokens - 1 - it->n_draft); /* 0: the decode row, then the drafts */
            if (it->n_draft > 0 && d >= 0) {
                b->logits[row] = true;
                r->draft_row[r->draft_base[pc->item] + d] = row;
            }
            if (it->pos0 + k < it->req->all_logits_to && it->pos0 + k >= it->req->all_logits_from) {
                b->logits[row] = true;
                r->lp[r->n_lp++] = (cb_lp_row){.item = pc->item, .pos = it->pos0 + k, .row = row};
            }
            if (k == it->n_tokens - 1) r->logit_row[pc->item] = it->logits ? row : -1;
        }
    }
    return decode(r);
}
