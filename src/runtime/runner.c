#include "runner.h"

#include <stdlib.h>

int cb_runner_init(cb_runner *r, cb_model *m, int32_t max_items) {
    r->model = m;
    r->n_batch = m->n_batch;
    r->batch = llama_batch_init(m->n_batch, 0, 1);
    r->logit_row = calloc((size_t)max_items, sizeof(int32_t));
    r->order = calloc(2 * (size_t)max_items, sizeof(cb_row_piece));
    r->lp = calloc((size_t)m->n_batch, sizeof(cb_lp_row));
    if (!r->logit_row || !r->order || !r->lp || !r->batch.token) {
        cb_runner_free(r);
        return -1;
    }
    return 0;
}

void cb_runner_free(cb_runner *r) {
    if (r->batch.token) llama_batch_free(r->batch);
    r->batch.token = NULL;
    free(r->logit_row);
    free(r->order);
    free(r->lp);
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

static void apply(cb_runner *r, const cb_kv_ops *ops) {
    llama_memory_t mem = llama_get_memory(r->model->ctx);
    for (int32_t i = 0; i < ops->n; i++) {
        const cb_kv_op *op = &ops->v[i];
        if (op->src < 0)
            llama_memory_seq_rm(mem, op->seq, op->p0, op->p1);
        else
            llama_memory_seq_cp(mem, op->src, op->seq, op->p0, op->p1);
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
    int rc = llama_decode(r->model->ctx, r->batch);
    if (r->abort_after > 0) { /* one armed decode, then decode normally */
        r->last_nodes = r->nodes_seen;
        cb_runner_set_fault(r, 0, 0, 0);
    }
    return rc;
}

int cb_runner_run(cb_runner *r, const cb_plan *plan) {
    apply(r, &plan->ops);
    if (plan->n_tokens > r->n_batch) return -100;
    if (plan->n_items == 0) return 0;
    struct llama_batch *b = &r->batch;
    b->n_tokens = 0;
    r->n_lp = 0;
    if (r->model->split_kv) { /* the split layout's graph runs: see cb_plan_row_order */
        r->n_order = cb_plan_row_order(plan, CB_RUNNER_FA_TILE, r->order);
        r->n_runs = cb_plan_graph_runs(plan, r->order, r->n_order);
    } else { /* unified: one graph run whatever the order; keep the plan's (numerics follow rows) */
        for (int32_t i = 0; i < plan->n_items; i++)
            r->order[i] = (cb_row_piece){.item = i, .k0 = 0, .n = plan->items[i].n_tokens};
        r->n_order = plan->n_items;
        r->n_runs = 1;
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
            if (it->pos0 + k < it->req->all_logits_to && it->pos0 + k >= it->req->all_logits_from) {
                b->logits[row] = true;
                r->lp[r->n_lp++] = (cb_lp_row){.item = pc->item, .pos = it->pos0 + k, .row = row};
            }
            if (k == it->n_tokens - 1) r->logit_row[pc->item] = it->logits ? row : -1;
        }
    }
    return decode(r);
}
