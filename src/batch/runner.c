/* runner.c — the batch job: plan (tokenize, group, order), then submit and collect. */
#include "runner.h"
#include "group.h"
#include "input.h"
#include "output.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 100
#define EVENTS_AT_ONCE 64

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1; /* SA_RESETHAND: a second signal gets the default action */
}

typedef struct {
    cobatch_engine *e;
    cb_batch_out *out;
    cb_batch_input *in;
    cb_batch_report *rep;
    int32_t *plan;        /* (n_plan) item indices in submission order */
    int32_t *group_left;  /* (n_groups) members of each prefix group not finished yet; NULL without grouping */
    int32_t *group_n;     /* (n_groups) its members; the same block as group_left */
    int32_t *group_live;  /* (n_groups) members submitted, not finished */
    int32_t *group_run;   /* (n_groups) of those, members that have sampled a token */
    int32_t n_idle_waits; /* groups whose prefix may be cached idle while members wait (idle_waits) */
    int32_t n_plan, next;
    int32_t inflight, window;
    int64_t done;        /* planned items dealt with (finished, or refused at submission) */
    int64_t live_tokens; /* tokens seen in events, for the progress line */
    bool cancelling;
    bool progress, tty;
    int64_t t0_us, t_drawn_us;
} run;

/* ---------------------------------------------------------------- plan ---------------------- */

/* Tokenizes every item as the engine will; items that cannot run become error lines. Fills idx
 * with the indices of the others. */
static int32_t tokenize_all(run *r, int32_t *idx) {
    int32_t n_ctx_seq = cobatch_n_ctx_seq(r->e), n_ok = 0;
    for (size_t i = 0; i < r->in->n; i++) {
        cb_batch_item *it = r->in->items[i];
        struct cobatch_error err = {0};
        int32_t n = 0;
        if (it->kind == CB_OPENAI_CHAT) { /* rendered with its tools, schema, reasoning: grammar, output's parser */
            it->chat = cobatch_chat_new(r->e, &it->req.params, &err);
            const int32_t *t = it->chat ? cobatch_chat_tokens(it->chat, &n) : NULL;
            if (t && (it->tokens = malloc(sizeof(int32_t) * (size_t)n)))
                memcpy(it->tokens, t, sizeof(int32_t) * (size_t)n);
            else if (t)
                snprintf(err.message, sizeof(err.message), "out of memory");
            /* a chat with nothing to read out and no grammar of its own runs from its tokens: a job's
               chats are all held until they run */
            if (it->tokens && !cobatch_chat_parses(it->chat) && !it->req.params.json_schema) {
                cobatch_chat_free(it->chat);
                it->chat = NULL;
            }
        } else {
            it->tokens = cobatch_prompt_tokens(r->e, &it->req.params, &n, &err);
        }
        if (!it->tokens || n >= n_ctx_seq) {
            if (!it->tokens)
                cb_batch_out_error(r->out, it->line, it->custom_id, "invalid_request", "%s", err.message);
            else
                cb_batch_out_error(r->out, it->line, it->custom_id, "context_length_exceeded",
                                   "the prompt has %d tokens; the context holds %d per sequence (prompt plus at "
                                   "least one generated token)",
                                   n, n_ctx_seq);
            r->rep->refused++;
            it->finished = true;
            cb_batch_item_release(it);
            continue;
        }
        it->n_tokens = n;
        it->max_tokens = it->req.params.max_tokens < n_ctx_seq - n ? it->req.params.max_tokens : n_ctx_seq - n;
        idx[n_ok++] = (int32_t)i;
    }
    return n_ok;
}

/* The submission order: groups (enlarged or not) by decode/prefill ratio or not, members together
 * (grouping), or the input order. The prefix tree is built either way, for the report's bounds. */
static int make_plan(run *r, const cb_batch_params *bp) {
    bool grouping = bp->grouping;
    size_t cap = r->in->n ? r->in->n : 1;
    int32_t *idx = malloc(cap * sizeof(*idx));
    r->plan = malloc(cap * sizeof(*r->plan));
    cb_group_prompt *gp = malloc(cap * sizeof(*gp));
    int rc = -1;
    if (!idx || !r->plan || !gp) goto out;
    int32_t n = tokenize_all(r, idx);
    for (int32_t k = 0; k < n; k++) {
        const cb_batch_item *it = r->in->items[idx[k]];
        gp[k] = (cb_group_prompt){it->tokens, it->n_tokens, it->max_tokens};
    }
    cb_grouping g;
    if (cb_group_build(gp, n, !grouping || bp->enlarge, &g) != 0) goto out;
    if (grouping && bp->reorder) cb_group_sort_by_ratio(&g);
    if (grouping && !(r->group_left = calloc(4 * ((size_t)g.n_groups + 1), sizeof(int32_t)))) {
        cb_grouping_free(&g);
        goto out;
    }
    if (grouping) {
        r->group_n = r->group_left + g.n_groups + 1;
        r->group_live = r->group_n + g.n_groups + 1;
        r->group_run = r->group_live + g.n_groups + 1;
    }
    for (int32_t k = 0; k < n; k++)
        r->in->items[idx[k]]->group = -1;
    for (int32_t k = 0, at = 0; k < g.n_groups && grouping; k++) {
        r->group_left[k] = r->group_n[k] = g.groups[k].n;
        for (int32_t j = 0; j < g.groups[k].n; j++) {
            r->plan[at] = idx[g.order[g.groups[k].first + j]];
            r->in->items[r->plan[at++]]->group = k;
        }
    }
    if (!grouping) memcpy(r->plan, idx, (size_t)n * sizeof(*idx));
    r->n_plan = n;
    r->rep->requests = n;
    r->rep->n_groups = g.n_groups;
    r->rep->plan_tokens = g.logical_tokens;
    r->rep->tree_tokens = g.tree_tokens;
    r->rep->group_tokens = g.group_tokens;
    cb_grouping_free(&g);
    rc = 0;
out:
    free(idx);
    free(gp);
    return rc;
}

/* ---------------------------------------------------------------- submit and collect -------- */

/* Group g's prefix may sit idle in the cache while members of it wait in the engine's queue: one
 * of them is done, others are submitted, and none is known to run. */
static bool idle_waits(const run *r, int32_t g) {
    return r->group_live[g] > 0 && r->group_run[g] == 0 && r->group_left[g] < r->group_n[g];
}

/* Changes group g's counts, keeping the count of groups that idle_waits. */
static void group_add(run *r, int32_t g, int32_t live, int32_t running, int32_t left) {
    r->n_idle_waits -= idle_waits(r, g);
    r->group_live[g] += live;
    r->group_run[g] += running;
    r->group_left[g] += left;
    r->n_idle_waits += idle_waits(r, g);
}

/* An item is done (submitted or refused). When it was the last of its prefix group, the cached
 * prefixes are released at once (BatchLLM §4.3: a group's prefix lives as long as the group):
 * later groups share nothing with it, and a cache kept compact keeps every step's attention span
 * short. The engine keeps what running requests use; a group whose members wait with their
 * prefix idle in the cache holds the release back (it would be computed again). */
static void item_done(run *r, cb_batch_item *it) {
    it->finished = true;
    if (!r->group_left || it->group < 0) return;
    group_add(r, it->group, it->id > 0 ? -1 : 0, it->sampled ? -1 : 0, -1); /* (an id: it was submitted) */
    if (r->group_left[it->group] == 0 && r->n_idle_waits == 0) cobatch_drop_cached_prefixes(r->e);
}

/* Returns 1 when the engine's queue is full (try again after some events), else 0. */
static int submit_one(run *r, cb_batch_item *it) {
    struct cobatch_request_params p = it->req.params;
    p.prompt = NULL; /* the tokens we grouped on are exactly what the engine would queue */
    p.messages = NULL;
    p.n_messages = 0;
    p.tools = NULL;
    p.json_schema = NULL;
    p.chat = it->chat; /* a chat: its grammar, its parser */
    p.prompt_tokens = it->chat ? NULL : it->tokens;
    p.n_prompt_tokens = it->chat ? 0 : it->n_tokens;
    p.max_tokens = it->max_tokens;
    p.user_data = it;
    struct cobatch_error err = {0};
    cobatch_req_id id = cobatch_submit(r->e, &p, &err);
    if (id == COBATCH_ERR_QUEUE_FULL) return 1;
    if (id < 0) {
        const char *code = id == COBATCH_ERR_TOO_LONG  ? "context_length_exceeded"
                           : id == COBATCH_ERR_INVALID ? "invalid_request"
                                                       : "engine_error";
        cb_batch_out_error(r->out, it->line, it->custom_id, code, "%s", err.message);
        r->rep->refused++;
        r->done++;
        item_done(r, it);
    } else {
        it->id = id;
        r->inflight++;
        if (r->group_live && it->group >= 0) group_add(r, it->group, 1, 0, 0);
    }
    cb_batch_item_release(it);
    return 0;
}

static void submit_more(run *r) {
    while (r->inflight < r->window && r->next < r->n_plan && !r->out->failed) {
        if (submit_one(r, r->in->items[r->plan[r->next]]) != 0) return;
        r->next++;
    }
}

static void finish(run *r, cb_batch_item *it, const struct cobatch_event *ev) {
    cb_batch_report *rep = r->rep;
    bool ok = ev->reason == COBATCH_FINISH_STOP || ev->reason == COBATCH_FINISH_LENGTH;
    if (!(ev->reason == COBATCH_FINISH_CANCELLED && r->cancelling)) { /* cut short: not the job's tokens */
        rep->prompt_tokens += ev->n_prompt;
        rep->output_tokens += ev->n_generated;
    }
    struct cobatch_chat_output calls = {0};
    char why[160];
    if (ok && !it->text_lost && cobatch_chat_parses(it->chat) &&
        cobatch_chat_parse(it->chat, cb_buf_str(&it->text), it->text.len, false, &calls, why, sizeof(why)) != 0)
        it->text_lost = strstr(why, "out of memory") != NULL; /* else unreadable: answered as text */
    if (ok && !it->text_lost) {
        const char *finish = ev->reason == COBATCH_FINISH_LENGTH ? "length" : calls.n_calls ? "tool_calls" : "stop";
        const char *text = calls.content ? calls.content : cb_buf_str(&it->text);
        if (cb_batch_out_result(r->out, it->custom_id, it->kind, text, &calls, finish, ev->n_prompt, ev->n_generated,
                                ev->n_cached, cobatch_chat_thinks(it->chat) ? ev->n_reasoning : -1) == 0)
            rep->ok++;
        else
            rep->not_run++; /* not in the output: a rerun runs it */
    } else if (ev->reason == COBATCH_FINISH_CANCELLED && r->cancelling) {
        rep->not_run++; /* a rerun picks it up */
    } else {
        cb_batch_out_error(r->out, it->line, it->custom_id,
                           ev->invalid && !it->text_lost ? "invalid_request" : "engine_error", "%s",
                           it->text_lost             ? "out of memory collecting the output"
                           : ev->error && *ev->error ? ev->error
                                                     : cobatch_finish_reason_str(ev->reason));
        rep->failed++;
    }
    cobatch_chat_output_clear(&calls);
    cobatch_chat_free(it->chat);
    it->chat = NULL;
    item_done(r, it);
    cb_buf_free(&it->text);
    r->inflight--;
    r->done++;
}

static void on_event(run *r, const struct cobatch_event *ev) {
    cb_batch_item *it = ev->user_data;
    if (ev->text_len && !it->text_lost && !cb_buf_append(&it->text, ev->text, ev->text_len)) {
        it->text_lost = true;
        cobatch_cancel(r->e, it->id);
    }
    if (ev->type == COBATCH_EVENT_TOKEN) {
        r->live_tokens++;
        if (!it->sampled) {
            it->sampled = true;
            if (r->group_run && it->group >= 0) group_add(r, it->group, 0, 1, 0);
        }
    } else
        finish(r, it, ev);
}

/* Stops the job: nothing more is submitted, what runs is cancelled (and not written). */
static void cancel_all(run *r) {
    r->cancelling = true;
    r->rep->not_run += r->n_plan - r->next;
    for (int32_t k = 0; k < r->next; k++) {
        cb_batch_item *it = r->in->items[r->plan[k]];
        if (it->id > 0 && !it->finished) cobatch_cancel(r->e, it->id);
    }
}

/* ---------------------------------------------------------------- progress ------------------ */

static void fmt_duration(char *out, size_t len, double s) {
    if (s < 0) {
        snprintf(out, len, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, len, "%02ld:%02ld", t / 60, t % 60);
}

/* "  412/1000 [########------------]  41%  523 tok/s  ETA 01:05", redrawn in place on a terminal,
 * a line every few seconds elsewhere. */
static void progress(run *r, bool final) {
    if (!r->progress) return;
    int64_t now = cobatch_time_us();
    if (!final && now - r->t_drawn_us < (r->tty ? 200000 : 5000000)) return;
    r->t_drawn_us = now;
    double elapsed = (double)(now - r->t0_us) / 1e6, frac = r->n_plan ? (double)r->done / r->n_plan : 1;
    char bar[21], eta[32];
    for (int i = 0; i < 20; i++)
        bar[i] = i < (int)(frac * 20) ? '#' : '-';
    bar[20] = '\0';
    fmt_duration(eta, sizeof(eta), r->done ? elapsed * (double)(r->n_plan - r->done) / (double)r->done : -1);
    fprintf(stderr, "%s%lld/%d [%s] %3.0f%%  %.0f tok/s  ETA %s%s", r->tty ? "\r" : "", (long long)r->done, r->n_plan,
            bar, frac * 100, elapsed > 0 ? (double)r->live_tokens / elapsed : 0.0, eta, r->tty ? "\033[K" : "\n");
    if (final && r->tty) fputc('\n', stderr);
}

static void loop(run *r) {
    struct cobatch_event ev[EVENTS_AT_ONCE];
    r->t0_us = cobatch_time_us();
    while (r->inflight > 0 || (r->next < r->n_plan && !r->cancelling)) {
        if ((g_stop || r->out->failed) && !r->cancelling) cancel_all(r);
        if (!r->cancelling) submit_more(r);
        if (r->inflight == 0) continue;
        int k = cobatch_poll(r->e, ev, EVENTS_AT_ONCE, POLL_MS);
        for (int i = 0; i < k; i++) {
            on_event(r, &ev[i]);
            cobatch_event_clear(&ev[i]);
        }
        progress(r, false);
    }
    progress(r, true);
    r->rep->wall_s = (double)(cobatch_time_us() - r->t0_us) / 1e6;
}

/* ---------------------------------------------------------------- the job ------------------- */

/* The chats of items that did not end (a stopped job, a failed plan), before the engine goes. */
static void free_chats(run *r) {
    for (size_t i = 0; i < r->in->n; i++) {
        cobatch_chat_free(r->in->items[i]->chat);
        r->in->items[i]->chat = NULL;
    }
}

/* Engine up, plan, loop, engine down. Returns 0 or -1 (message printed). */
static int execute(run *r, const cb_batch_params *bp, const struct cobatch_engine_params *ep) {
    char err[512] = "";
    int64_t t0 = cobatch_time_us();
    r->e = cobatch_engine_init(ep, err, sizeof(err));
    if (!r->e) {
        fprintf(stderr, "cobatch batch: %s\n", err);
        return -1;
    }
    if (make_plan(r, bp) != 0) {
        fprintf(stderr, "cobatch batch: out of memory planning %zu requests\n", r->in->n);
        free_chats(r);
        cobatch_engine_free(r->e);
        return -1;
    }
    r->rep->prep_s = (double)(cobatch_time_us() - t0) / 1e6;
    loop(r);
    struct cobatch_stats st;
    cobatch_engine_stats(r->e, &st);
    r->rep->processed_prefill = st.prompt_tokens;
    r->rep->prefix_hits = st.prefix_hit_tokens;
    r->rep->steps = st.steps;
    r->rep->generated = st.generated_tokens;
    r->rep->preemptions = st.preemptions;
    r->rep->swapped = st.swapped_out;
    free_chats(r);
    cobatch_engine_free(r->e);
    return 0;
}

/* Resume set, output files, input lines. Returns 0, or with a message printed 2 (two lines share a
 * custom_id: nothing was written) or -1. */
static int read_job(const cb_batch_params *bp, const struct cobatch_engine_params *ep, cb_batch_out *o,
                    cb_batch_input *in) {
    char err[512] = "";
    FILE *f = fopen(bp->input_path, "r");
    if (!f) {
        fprintf(stderr, "cobatch batch: cannot read %s: %s\n", bp->input_path, strerror(errno));
        return -1;
    }
    int dup = cb_batch_input_duplicates(f, err, sizeof(err)); /* before any file is opened for writing */
    if (dup != 0) {
        fprintf(stderr, "cobatch batch: %s: %s\n", bp->input_path, err);
        fclose(f);
        return dup > 0 ? 2 : -1;
    }
    cb_idset done;
    cb_idset_init(&done);
    int rc = cb_batch_out_load_done(bp->output_path, &done, err, sizeof(err));
    if (rc == 0) rc = cb_batch_out_open(o, bp->output_path, bp->errors_path, ep->model_path, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "cobatch batch: %s\n", err);
    } else if (cb_batch_input_read(f, &done, &bp->defaults, o, in, err, sizeof(err)) != 0) {
        fprintf(stderr, "cobatch batch: %s: %s\n", bp->input_path, err);
        cb_batch_input_free(in);
        cb_batch_out_close(o);
        rc = -1;
    }
    fclose(f);
    cb_idset_free(&done);
    return rc;
}

/* Two of the job's files are one (/dev/null may be named for any number of them). */
static bool same(const char *a, const char *b) { return strcmp(a, "/dev/null") && cb_batch_same_file(a, b); }

int cb_batch_run(const cb_batch_params *bp, const struct cobatch_engine_params *ep) {
    cb_batch_report rep = {0};
    cb_batch_out o;
    cb_batch_input in;
    const char *json = bp->json_path;
    const char *clash = same(bp->errors_path, bp->output_path)  ? "--errors is the output file"
                        : same(bp->errors_path, bp->input_path) ? "--errors is the input file"
                        : same(bp->output_path, bp->input_path) ? "--output is the input file"
                        : json && same(json, bp->input_path)    ? "--json is the input file"
                        : json && same(json, bp->output_path)   ? "--json is the output file"
                        : json && same(json, bp->errors_path)   ? "--json is the errors file"
                                                                : NULL;
    if (clash) { /* checked before anything is opened for writing: the input must survive a typo */
        fprintf(stderr, "cobatch batch: %s; give it a file of its own\n", clash);
        return 2;
    }
    /* files, not devices: /dev/zero as the input or /dev/full as the output never end */
    const char *not_file = !cb_batch_regular_file(bp->input_path, true)    ? bp->input_path
                           : !cb_batch_regular_file(bp->output_path, true) ? bp->output_path
                           : !cb_batch_regular_file(bp->errors_path, true) ? bp->errors_path
                           : json && !cb_batch_regular_file(json, true)    ? json
                                                                           : NULL;
    if (not_file) {
        fprintf(stderr, "cobatch batch: %s is not a regular file%s\n", not_file,
                not_file == bp->input_path ? " (or cannot be read)" : "");
        return 2;
    }
    signal(SIGXFSZ, SIG_IGN); /* a file size limit is a failed write (EFBIG), reported, not a kill */
    int read = read_job(bp, ep, &o, &in);
    if (read != 0) return read == 2 ? 2 : 1;
    rep.lines = in.lines;
    rep.skipped = in.skipped;
    rep.refused = in.refused;
    int32_t window = bp->window > 0 ? bp->window : 4 * cobatch_params_max_num_seqs(ep);
    int32_t max_queue = ep->max_queue > 0 ? ep->max_queue : cobatch_engine_default_params().max_queue;
    rep.window = window < max_queue ? window : max_queue; /* waiting <= in flight: never QUEUE_FULL */
    run r = {.out = &o,
             .in = &in,
             .rep = &rep,
             .window = rep.window,
             .progress = bp->progress,
             .tty = isatty(STDERR_FILENO)};
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    g_stop = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = in.n > 0 ? execute(&r, bp, ep) : 0; /* nothing left to run: no model to load */
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    rep.interrupted = g_stop != 0;
    bool write_failed = o.failed;
    cb_batch_out_close(&o);
    free(r.plan);
    free(r.group_left);
    cb_batch_input_free(&in);
    if (rc != 0) return 1;
    cb_batch_report_print(&rep, bp);
    bool json_failed = bp->json_path && cb_batch_report_json(&rep, bp, ep, bp->json_path) != 0;
    if (json_failed) fprintf(stderr, "cobatch batch: cannot write %s: the report is lost\n", bp->json_path);
    if (write_failed) {
        fprintf(stderr,
                "cobatch batch: writing %s or %s failed (%s); the job stopped with %lld results written, whole "
                "lines only: free space and rerun the same command to finish it\n",
                bp->output_path, bp->errors_path, o.why, (long long)rep.ok);
        return 1;
    }
    return rep.interrupted ? 130 : json_failed ? 1 : 0;
}
