/* report.c — the batch job's report: stderr, and JSON. */
#include "runner.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* 1 - part / whole (BatchLLM eq. 2), or -1 when there is nothing to measure. */
static double saving(int64_t part, int64_t whole) { return whole > 0 ? 1.0 - (double)part / (double)whole : -1; }

static double per_s(int64_t n, double s) { return s > 0 ? (double)n / s : 0; }

void cb_batch_report_print(const cb_batch_report *r, const cb_batch_params *bp) {
    fprintf(stderr, "cobatch batch: %lld requests: %lld ok, %lld failed", (long long)r->requests, (long long)r->ok,
            (long long)r->failed);
    if (r->not_run) fprintf(stderr, ", %lld not run (interrupted: rerun to finish)", (long long)r->not_run);
    fprintf(stderr, "; %lld of %lld lines refused (%s), %lld already in %s\n", (long long)r->refused,
            (long long)r->lines, bp->errors_path, (long long)r->skipped, bp->output_path);
    if (r->requests == 0 || r->prompt_tokens == 0) return;
    fprintf(stderr,
            "  wall %.2f s (after %.2f s loading, tokenizing, grouping): prompt %lld tokens (logical), output %lld "
            "tokens; %.1f output tok/s, %.1f total tok/s\n",
            r->wall_s, r->prep_s, (long long)r->prompt_tokens, (long long)r->output_tokens,
            per_s(r->output_tokens, r->wall_s), per_s(r->prompt_tokens + r->output_tokens, r->wall_s));
    fprintf(stderr,
            "  engine: %lld steps, %.1f tokens a step (prompt computed + sampled), %lld preemptions (%lld swapped)\n",
            (long long)r->steps, r->steps ? (double)(r->processed_prefill + r->generated) / r->steps : 0.0,
            (long long)r->preemptions, (long long)r->swapped);
    fprintf(stderr, "  prefix: %d groups (%s), window %d requests\n", r->n_groups,
            !bp->grouping ? "grouping off: input order"
            : bp->reorder ? (bp->enlarge ? "submitted group by group, decode-heavy first"
                                         : "first-level prefixes not enlarged; decode-heavy first")
                          : (bp->enlarge ? "submitted group by group, in the prefix tree's order"
                                         : "first-level prefixes not enlarged; in the prefix tree's order"),
            r->window);
    if (r->interrupted) return; /* cancelled requests computed part of their prompts: no honest ratio */
    fprintf(stderr,
            "  token saving %.1f%% (prefill computed %lld of %lld); bound %.1f%% (prefix tree %lld tokens), "
            "%.1f%% sharing each group's prefix; engine prefix-cache hits %lld tokens\n",
            saving(r->processed_prefill, r->prompt_tokens) * 100, (long long)r->processed_prefill,
            (long long)r->prompt_tokens, saving(r->tree_tokens, r->plan_tokens) * 100, (long long)r->tree_tokens,
            saving(r->group_tokens, r->plan_tokens) * 100, (long long)r->prefix_hits);
}

int cb_batch_report_json(const cb_batch_report *r, const cb_batch_params *bp, const struct cobatch_engine_params *ep,
                         const char *path) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return -1;
    cJSON_AddStringToObject(o, "input", bp->input_path);
    cJSON_AddStringToObject(o, "output", bp->output_path);
    cJSON_AddStringToObject(o, "errors", bp->errors_path);
    cJSON_AddStringToObject(o, "model", ep->model_path ? ep->model_path : "");
    cJSON_AddBoolToObject(o, "prefix_grouping", bp->grouping);
    cJSON_AddBoolToObject(o, "prefix_enlarge", bp->grouping && bp->enlarge);
    cJSON_AddBoolToObject(o, "group_reorder", bp->grouping && bp->reorder);
    cJSON_AddNumberToObject(o, "max_num_seqs", cobatch_params_max_num_seqs(ep));
    cJSON_AddNumberToObject(o, "window", r->window);
    cJSON_AddNumberToObject(o, "lines", (double)r->lines);
    cJSON_AddNumberToObject(o, "requests", (double)r->requests);
    cJSON_AddNumberToObject(o, "ok", (double)r->ok);
    cJSON_AddNumberToObject(o, "failed", (double)r->failed);
    cJSON_AddNumberToObject(o, "refused", (double)r->refused);
    cJSON_AddNumberToObject(o, "skipped", (double)r->skipped);
    cJSON_AddNumberToObject(o, "not_run", (double)r->not_run);
    cJSON_AddBoolToObject(o, "interrupted", r->interrupted);
    cJSON_AddNumberToObject(o, "wall_s", r->wall_s);
    cJSON_AddNumberToObject(o, "prep_s", r->prep_s);
    cJSON_AddNumberToObject(o, "prompt_tokens", (double)r->prompt_tokens);
    cJSON_AddNumberToObject(o, "output_tokens", (double)r->output_tokens);
    cJSON_AddNumberToObject(o, "output_tok_s", per_s(r->output_tokens, r->wall_s));
    cJSON_AddNumberToObject(o, "total_tok_s", per_s(r->prompt_tokens + r->output_tokens, r->wall_s));
    cJSON_AddNumberToObject(o, "groups", r->n_groups);
    cJSON_AddNumberToObject(o, "processed_prefill_tokens", (double)r->processed_prefill);
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    cJSON_AddNumberToObject(o, "tokens_per_step",
                            r->steps ? (double)(r->processed_prefill + r->generated) / r->steps : 0);
    cJSON_AddNumberToObject(o, "preemptions", (double)r->preemptions);
    cJSON_AddNumberToObject(o, "preemptions_swapped", (double)r->swapped);
    cJSON_AddNumberToObject(o, "prefix_hit_tokens", (double)r->prefix_hits);
    cJSON_AddNumberToObject(o, "planned_prompt_tokens", (double)r->plan_tokens);
    cJSON_AddNumberToObject(o, "tree_tokens", (double)r->tree_tokens);
    cJSON_AddNumberToObject(o, "group_tokens", (double)r->group_tokens);
    if (r->prompt_tokens > 0 && !r->interrupted)
        cJSON_AddNumberToObject(o, "token_saving_ratio", saving(r->processed_prefill, r->prompt_tokens));
    else
        cJSON_AddNullToObject(o, "token_saving_ratio");
    if (r->plan_tokens > 0) {
        cJSON_AddNumberToObject(o, "token_saving_bound", saving(r->tree_tokens, r->plan_tokens));
        cJSON_AddNumberToObject(o, "group_saving_bound", saving(r->group_tokens, r->plan_tokens));
    } else {
        cJSON_AddNullToObject(o, "token_saving_bound");
        cJSON_AddNullToObject(o, "group_saving_bound");
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    FILE *f = text ? fopen(path, "w") : NULL;
    int rc = f && fputs(text, f) != EOF && fputc('\n', f) != EOF ? 0 : -1;
    if (f && fclose(f) != 0) rc = -1;
    free(text);
    return rc;
}
