#include "runner.h"

#include <stdlib.h>

int cb_runner_init(cb_runner *r, cb_model *m, int32_t max_items) {
    r->model = m;
    r->n_batch = m->n_batch;
    r->batch = llama_batch_init(m->n_batch, 0, 1);
    r->logit_row = calloc((size_t)max_items, sizeof(int32_t));
    r->order = calloc(2 * (size_t)max_items, sizeof(cb_row_piece));
    if (!r->logit_row || !r->order || !r->batch.token) {
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
    r->logit_row = NULL;
    r->order = NULL;
}

int32_t cb_runner_seq_len(cb_runner *r, int32_t seq) {
    return llama_memory_seq_pos_max(llama_get_memory(r->model->ctx), seq) + 1;
}

int cb_runner_run(cb_runner *r, const cb_plan *plan) {
    llama_memory_t mem = llama_get_memory(r->model->ctx);
    for (int32_t i = 0; i < plan->ops.n; i++) {
        const cb_kv_op *op = &plan->ops.v[i];
        if (op->src < 0)
            llama_memory_seq_rm(mem, op->seq, op->p0, op->p1);
        else
            llama_memory_seq_cp(mem, op->src, op->seq, op->p0, op->p1);
    }
    if (plan->n_tokens > r->n_batch) return -100;
    if (plan->n_items == 0) return 0;
    struct llama_batch *b = &r->batch;
    b->n_tokens = 0;
    if (r->model->split_kv) { /* the split layout's graph runs: see cb_plan_row_order */
        r->n_order = cb_plan_row_order(plan, r->order);
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
            if (k == it->n_tokens - 1) r->logit_row[pc->item] = it->logits ? row : -1;
        }
    }
    return llama_decode(r->model->ctx, *b);
}
