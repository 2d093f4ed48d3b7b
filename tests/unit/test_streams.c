/* The split layout's stream cache through the scheduler: sharing a running prefix, parking,
 * taking over and holding streams, and keeping running requests in one block of stream ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched_harness.h"

/* Split layout: requests arriving together with one prefix copy it from the stream computing it,
 * instead of computing it again (a copy takes the whole stream, then a trim). */
static void streams_share_a_running_prefix(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 8, 64, 32, 8 * 160, true, 0);
    for (int i = 0; i < 8; i++)
        h_add_shared(&h, 100, 10, 5);
    int64_t prompt_rows = h_until_idle(&h);
    assert_int_equal(h_stats(&h).hit_tokens, 7 * 100);
    assert_int_equal(h_stats(&h).query_tokens, 8 * 110);
    assert_int_equal(prompt_rows, 100 + 8 * 10 + 8 * 4); /* nothing computed twice */
    assert_int_equal(h.sc->copies, 7);
    h_drain(&h, 10);
    h_check_outputs(&h);
    h_free(&h);
}

/* One running stream and one holder. A finished request's stream stays parked; an unrelated
 * request reuses it after its tokens are saved to the holder (one copy); a request sharing the
 * held prompt copies it from there; a request continuing the last conversation (its prompt and
 * what it generated) takes its parked stream over in place: no copy. */
static void streams_park_take_over_and_hold(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 1, 64, 32, 2 * 128, true, 1);
    int32_t a[60];
    for (int32_t k = 0; k < 60; k++)
        a[k] = 700000 + k;
    h_add_tokens(&h, a, 60, 5, 0); /* leaves 64 cells: its prompt and 4 generated tokens */
    h_until_idle(&h);
    assert_int_equal(h.sc->len[0], 64);
    h_add_shared(&h, 0, 30, 5); /* shares nothing */
    h_step(&h);
    assert_int_equal(h.sc->len[1], 64);
    assert_int_equal(h.sc->copies, 1);
    h_until_idle(&h);
    cb_request *c = h_add_tokens(&h, a, 40, 5, 0); /* a prefix of the held prompt */
    h_step(&h);
    assert_int_equal(h.sc->copies, 2);
    assert_int_equal(h_stats(&h).hit_tokens, 39);
    assert_int_equal(h.plan.items[0].pos0, 39);
    h_until_idle(&h);
    int32_t next[44];
    memcpy(next, a, sizeof(int32_t) * 40);
    for (int32_t k = 0; k < 4; k++)
        next[40 + k] = gen_token(c->id, k);
    h_add_tokens(&h, next, 44, 5, 0);
    h_step(&h);
    assert_int_equal(h.sc->copies, 2);
    assert_int_equal(h_stats(&h).hit_tokens, 39 + 43);
    assert_int_equal(h.plan.items[0].req->seq_id, 0);
    assert_int_equal(h.plan.items[0].pos0, 43);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* The next turn of a conversation: the history (prompt and answer) is cached, the new message is
 * the rest. split: a rest under the tile (64) gives cached tokens back up to a tile (40 rows after
 * 304 cells, 10 after 348), so that the rows run the tiled kernel as the cold prompt's did; the
 * unified layout takes the whole hit. */
static void turn_rest_padded_to_a_tile(void **state) {
    (void)state;
    g_exact_hits = true;
    for (int split = 0; split < 2; split++) {
        harness h;
        if (split)
            h_init_px(&h, CB_MODE_CONTINUOUS, 1, 128, 128, 2 * 512, true, 1);
        else
            h_init_px(&h, CB_MODE_CONTINUOUS, 1, 128, 128, 1024, false, 4);
        int32_t conv[400];
        int32_t n = 300;
        for (int32_t k = 0; k < n; k++)
            conv[k] = 800000 + k;
        int32_t news[2] = {40, 10}, want_pos0[2][2] = {{304, 348}, {280, 294}};
        int64_t hits = 0;
        for (int t = 0; t < 3; t++) {
            cb_request *r = h_add_tokens(&h, conv, n, 5, 0);
            h_step(&h);
            if (t > 0) { /* the history: all but the last token cached, the rest computed */
                assert_int_equal(h.plan.items[0].pos0, want_pos0[split][t - 1]);
                assert_int_equal(h.plan.items[0].n_tokens, n - want_pos0[split][t - 1]);
                hits += want_pos0[split][t - 1];
                assert_int_equal(h_stats(&h).hit_tokens, hits);
                if (split) assert_int_equal(h.sc->copies, 0); /* its stream taken over in place */
            }
            h_until_idle(&h);
            for (int32_t k = 0; k < 4; k++) /* the answer, then the next message */
                conv[n + k] = gen_token(r->id, k);
            n += 4;
            for (int32_t k = 0; t < 2 && k < news[t]; k++)
                conv[n++] = 900000 + t * 1000 + k;
        }
        h_drain(&h, 100);
        h_check_outputs(&h);
        h_free(&h);
    }
    g_exact_hits = false;
}

/* Split layout with a chunk cap under 64 (and decode rows in every step): long prompts still
 * move several at a time, at the cap. */

/* Adds n requests (10-token prompts, outs[i] tokens each) and steps until r[until] has finished. */
static void h_add_run_until(harness *h, cb_request **r, const int32_t *outs, int n, int until) {
    for (int i = 0; i < n; i++)
        r[i] = h_add(h, 10, outs[i], 0);
    while (!CB_STATE_FINISHED(r[until]->state))
        h_step(h);
}

/* Split layout: a request that finishes in the middle of the running block leaves a hole; with
 * nobody waiting, the highest running request moves into it (one whole-stream copy), so the next
 * decode step is one graph run. With the stream cache the old stream stays parked with the moved
 * request's tokens; without it the old stream is emptied. Outputs and cells are checked by the
 * harness (h_check_cells reads every stream after the copy). */
static void split_moves_requests_into_one_block(void **state) {
    (void)state;
    for (int with_cache = 0; with_cache < 2; with_cache++) {
        harness h;
        h_init_px(&h, CB_MODE_CONTINUOUS, 4, 64, 32, 5 * 128, true, with_cache ? 1 : -1);
        int32_t outs[4] = {20, 3, 20, 20};
        cb_request *r[4];
        h_add_run_until(&h, r, outs, 4, 1);
        assert_int_equal(r[3]->seq_id, 3);
        int32_t n_computed = r[3]->n_computed;
        h_step(&h);
        assert_int_equal(r[3]->seq_id, 1);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 1);
        cb_row_piece order[8];
        int32_t np = cb_plan_row_order(&h.plan, 64, 256, 0, order);
        assert_int_equal(h.plan.n_items, 3);
        assert_int_equal(cb_plan_graph_runs(&h.plan, order, np), 1); /* {0, 1, 2}, one row each */
        if (with_cache) assert_int_equal(h.sc->len[3], n_computed);  /* parked: the same tokens */
        if (!with_cache) assert_int_equal(h.f.cnt[3], 0);
        h_drain(&h, 100);
        h_check_outputs(&h);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 1); /* the others left from the top */
        h_free(&h);
    }
}

/* With a request waiting, the hole goes to its admission instead (no copy), before an empty id
 * above the block. */
static void split_admission_fills_a_hole(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 5, 64, 32, 6 * 128, true, 1);
    cb_request *r[4];
    int32_t outs[4] = {20, 3, 20, 20};
    h_add_run_until(&h, r, outs, 4, 1);
    cb_request *late = h_add(&h, 10, 5, 0);
    h_step(&h);
    assert_int_equal(late->seq_id, 1);
    assert_int_equal(r[3]->seq_id, 3);
    assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 0);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* A new request goes next to the running block, not to the lowest (or least recently used) free
 * stream below it: with 2..5 running and 0, 1 free, it takes 1 and nothing needs to move. */
static void split_admission_extends_the_block(void **state) {
    (void)state;
    for (int with_cache = 0; with_cache < 2; with_cache++) {
        harness h;
        h_init_px(&h, CB_MODE_CONTINUOUS, 6, 64, 32, 7 * 128, true, with_cache ? 1 : -1);
        int32_t outs[6] = {3, 4, 30, 30, 30, 30};
        cb_request *r[6];
        h_add_run_until(&h, r, outs, 6, 1);
        assert_int_equal(r[2]->seq_id, 2);
        cb_request *late = h_add(&h, 10, 5, 0);
        h_step(&h);
        assert_int_equal(late->seq_id, 1);
        h_drain(&h, 100);
        h_check_outputs(&h);
        assert_int_equal(cb_sched_get_stats(h.s)->stream_moves, 0);
        h_free(&h);
    }
}

/* Six conversations of three turns on two running streams and one holder: the device keeps three
 * of them, the host tier the others. Rounds of turns, all sessions at once. Returns the batch rows
 * of the later turns; every token every request sees is checked (a load of stale or wrong cells
 * fails the run). fail_loads: that many loads fail (those requests compute their history again). */
#define SESS 6
static int64_t run_sessions(cb_host_cache *host, int fail_loads) {
    harness h;
    g_host = host;
    h_init_px(&h, CB_MODE_CONTINUOUS, 2, 128, 64, 3 * 512, true, 1);
    g_host = NULL;
    h.f.fail_loads = fail_loads;
    int32_t conv[SESS][512], n[SESS];
    for (int s = 0; s < SESS; s++) { /* a shared system prompt, then the session's task */
        for (n[s] = 0; n[s] < 40; n[s]++)
            conv[s][n[s]] = 500000 + n[s];
        for (int32_t k = 0; k < 30; k++)
            conv[s][n[s]++] = 600000 + s * 1000 + k;
    }
    int64_t later = 0;
    for (int t = 0; t < 3; t++) {
        cb_request *r[SESS];
        for (int s = 0; s < SESS; s++)
            r[s] = h_add_tokens(&h, conv[s], n[s], 4, 0);
        int64_t rows = h_until_idle(&h);
        if (t > 0) later += rows;
        for (int s = 0; s < SESS; s++) { /* the answer, then the next message */
            for (int32_t k = 0; k < 4; k++)
                conv[s][n[s]++] = gen_token(r[s]->id, k);
            for (int32_t k = 0; k < 20; k++)
                conv[s][n[s]++] = 700000 + s * 1000 + t * 100 + k;
        }
        if (host) assert_true(cb_host_check(host));
    }
    h_drain(&h, 200);
    h_check_outputs(&h);
    h_free(&h);
    return later;
}

/* With the host tier a later turn computes what it added (the answer's last token, the new message,
 * the prompt's last token again) and its answer's decode rows; without it, the conversations the
 * device could not keep compute their history again. Entries a longer turn supersedes go; a failed
 * load recomputes; a tier too small for all keeps what fits, least recently used out. */
static void host_tier_keeps_sessions(void **state) {
    (void)state;
    int64_t bound = SESS * 2 * (1 + 20 + 1 + 3);
    int64_t without = run_sessions(NULL, 0);
    assert_true(without > bound + 200);

    cb_host_cache host;
    assert_int_equal(cb_host_init(&host, 1 << 20, 8, 32, NULL), 0);
    int64_t with = run_sessions(&host, 0);
    assert_true(with <= bound);
    assert_true(host.loads >= SESS); /* half the later turns at least */
    assert_int_equal(host.failed, 0);
    assert_true(host.hit_tokens >= host.loads * 70);
    assert_true(host.evicted > 0); /* a turn's entry supersedes the turn before's */
    assert_int_equal(host.n, 0);   /* the cache drop at the end emptied it */
    assert_int_equal(host.used, 0);
    cb_host_free(&host);

    assert_int_equal(cb_host_init(&host, 1 << 20, 8, 32, NULL), 0);
    int64_t failing = run_sessions(&host, 2);
    assert_true(failing > with + 100);
    assert_int_equal(host.failed, 2);
    cb_host_free(&host);

    /* room for two conversations (~140 cells of 8 bytes and a 4 KiB header each) */
    assert_int_equal(cb_host_init(&host, 2 * (4096 + 8 * 150), 8, 32, NULL), 0);
    int64_t small = run_sessions(&host, 0);
    assert_true(small > with && small < without);
    assert_true(host.loads > 0);
    cb_host_free(&host);
}

/* The host tier's own records: a newer turn supersedes the older (a prefix of it), an entry holding
 * all of a stash already is touched instead, a locked entry is never evicted, a failed stash's
 * entry goes with its last lock, and the budget evicts the least recently used. */
static void host_tier_records(void **state) {
    (void)state;
    cb_host_cache h;
    /* 100 bytes a cell and a 4 KiB header: room for two entries of 40-60 tokens */
    assert_int_equal(cb_host_init(&h, 2 * (4096 + 100 * 60), 100, 32, NULL), 0);
    int32_t t[200];
    for (int32_t k = 0; k < 200; k++)
        t[k] = 1000 + k;
    assert_null(cb_host_stash(&h, CB_HOST_STREAMS, t, 31)); /* under min_len */
    cb_host_entry *a = cb_host_stash(&h, CB_HOST_STREAMS, t, 40);
    assert_non_null(a);
    assert_int_equal(a->state, CB_HOST_SAVING);
    assert_int_equal(h.used, 4096 + 100 * 40);
    int32_t len;
    assert_ptr_equal(cb_host_match(&h, CB_HOST_STREAMS, t, 100, &len), a); /* a stash in flight is found */
    assert_int_equal(len, 40);
    cb_host_saved(&h, a, malloc(4000), 4000, 40, 10);
    cb_host_unlock(&h, a);
    assert_int_equal(h.used, 4000);
    assert_null(cb_host_stash(&h, CB_HOST_STREAMS, t, 39));       /* held already */
    cb_host_entry *b = cb_host_stash(&h, CB_HOST_STREAMS, t, 50); /* the next turn: a goes */
    assert_non_null(b);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.evicted, 1);
    cb_host_saved(&h, b, malloc(5000), 5000, 50, 10);
    cb_host_unlock(&h, b);
    int32_t u[60];
    for (int32_t k = 0; k < 60; k++)
        u[k] = 5000 + k;
    cb_host_entry *c = cb_host_stash(&h, CB_HOST_STREAMS, u, 60); /* another conversation: both fit */
    assert_non_null(c);
    cb_host_fail(&h, c); /* its stash could not be made */
    assert_null(cb_host_match(&h, CB_HOST_STREAMS, u, 60, &len));
    cb_host_unlock(&h, c); /* freed with its last lock */
    assert_int_equal(h.n, 1);
    assert_int_equal(h.used, 5000);
    cb_host_lock(&h, b); /* a queued load */
    c = cb_host_stash(&h, CB_HOST_STREAMS, u, 60);
    assert_non_null(c);
    cb_host_unlock(&h, c); /* (left saving: the check allows it) */
    int32_t v[60];
    for (int32_t k = 0; k < 60; k++)
        v[k] = 9000 + k;
    cb_host_entry *d = cb_host_stash(&h, CB_HOST_STREAMS, v, 60); /* room only by evicting c: b is locked */
    assert_non_null(d);
    assert_null(cb_host_match(&h, CB_HOST_STREAMS, u, 60, &len));
    assert_ptr_equal(cb_host_match(&h, CB_HOST_STREAMS, t, 60, &len), b);
    cb_host_unlock(&h, d);
    cb_host_loaded(&h, b, true, 5);
    cb_host_unlock(&h, b);
    assert_int_equal(h.loads, 1);
    /* the long lane's, kept apart (room for it: d goes, the least recently used, as b was loaded) */
    cb_host_entry *l = cb_host_stash(&h, CB_HOST_LANE, t, 40);
    assert_non_null(l);
    cb_host_saved(&h, l, malloc(100), 100, 40, 1);
    cb_host_unlock(&h, l);
    assert_ptr_equal(cb_host_match(&h, CB_HOST_STREAMS, t, 60, &len), b);
    assert_ptr_equal(cb_host_match(&h, CB_HOST_LANE, t, 60, &len), l);
    assert_int_equal(len, 40);
    assert_null(cb_host_match(&h, CB_HOST_STREAMS, v, 60, &len));
    assert_true(cb_host_check(&h));
    assert_int_equal(cb_host_drop(&h), 2);
    assert_int_equal(h.used, 0);
    cb_host_free(&h);
}

/* Takes the tier's queued file work: the writes (their entries, in order) and the removals. */
static int32_t take_io(cb_host_cache *h, cb_host_entry **writes, int32_t *n_writes, uint64_t *removed) {
    int32_t n, n_removed = 0;
    const cb_host_io *io = cb_host_take_io(h, &n);
    *n_writes = 0;
    for (int32_t i = 0; i < n; i++) {
        if (io[i].op == CB_HOST_IO_WRITE)
            writes[(*n_writes)++] = io[i].e;
        else
            removed[n_removed++] = io[i].id;
    }
    return n_removed;
}

/* The disk tier's records: a saved entry is queued to be written and locked until written; one
 * written leaves memory for room as ON_DISK (its tokens still matched, its load costed as a read);
 * one not written (the write failed) goes; a superseded or evicted file is queued for removal; the
 * disk's budget evicts the least recently used file; a file found at start comes in as the least
 * recently used, one written by another replica as the most; a failed read removes its file. */
static void host_tier_disk_records(void **state) {
    (void)state;
    cb_host_cache h;
    /* memory for one saved entry of 60 tokens (100 bytes a cell) beside a stash, disk for three files of them */
    int64_t one = 4096 + 100 * 70, file = 6000 + 4 * 60 + CB_HOST_FILE_HEADER;
    assert_int_equal(cb_host_init(&h, one, 100, 32, NULL), 0);
    assert_int_equal(cb_host_disk_on(&h, 3 * file), 0);
    int32_t t[4][60];
    for (int32_t c = 0; c < 4; c++)
        for (int32_t k = 0; k < 60; k++)
            t[c][k] = 1000 * (c + 1) + k;
    cb_host_entry *w[8];
    uint64_t rm[8];
    int32_t nw;
    cb_host_entry *a = cb_host_stash(&h, CB_HOST_STREAMS, t[0], 60);
    assert_non_null(a);
    assert_true(a->id == cb_host_id(CB_HOST_STREAMS, t[0], 60) && a->id != cb_host_id(CB_HOST_LANE, t[0], 60));
    cb_host_saved(&h, a, malloc(6000), 6000, 60, 10);
    cb_host_unlock(&h, a);
    assert_int_equal(a->file, CB_HOST_FILE_WRITING);
    assert_int_equal(a->locks, 1); /* the write's */
    assert_int_equal(h.disk_used, file);
    assert_int_equal(take_io(&h, w, &nw, rm), 0);
    assert_int_equal(nw, 1);
    assert_ptr_equal(w[0], a);
    assert_true(cb_host_check(&h));
    /* b needs a's memory, but a is being written (locked): b is not kept */
    assert_null(cb_host_stash(&h, CB_HOST_STREAMS, t[1], 60));
    cb_host_written(&h, a, true, 50);
    assert_int_equal(a->file, CB_HOST_FILE_WRITTEN);
    assert_int_equal(h.disk_writes, 1);
    /* now a leaves memory for b and stays on disk */
    cb_host_entry *b = cb_host_stash(&h, CB_HOST_STREAMS, t[1], 60);
    assert_non_null(b);
    assert_int_equal(a->state, CB_HOST_ON_DISK);
    assert_null(a->data);
    assert_int_equal(cb_host_in_memory(&h), 1);
    int32_t len;
    assert_ptr_equal(cb_host_match(&h, CB_HOST_STREAMS, t[0], 60, &len), a);
    assert_int_equal(len, 60);
    /* a read costs its file's bytes at the disk's rate besides the copy */
    double token_us = 2000.0;
    h.disk_byte_us = 50 * token_us / (double)file; /* reading a's file: the cost of 50 tokens */
    assert_false(cb_host_worth(&h, a, 40));
    assert_true(cb_host_worth(&h, a, 59));
    /* b's write fails: it stays in memory without a file, and goes (not to disk) when room is needed */
    cb_host_saved(&h, b, malloc(6000), 6000, 60, 10);
    cb_host_unlock(&h, b);
    assert_int_equal(take_io(&h, w, &nw, rm), 0);
    assert_ptr_equal(w[0], b);
    cb_host_written(&h, b, false, 5);
    assert_int_equal(b->file, CB_HOST_FILE_NONE);
    assert_int_equal(h.disk_failed, 1);
    assert_int_equal(h.n_disk, 1);
    cb_host_entry *c = cb_host_stash(&h, CB_HOST_STREAMS, t[2], 60);
    assert_non_null(c);
    assert_null(cb_host_match(&h, CB_HOST_STREAMS, t[1], 60, &len)); /* b went */
    cb_host_saved(&h, c, malloc(6000), 6000, 60, 10);
    cb_host_unlock(&h, c);
    assert_int_equal(take_io(&h, w, &nw, rm), 0);
    cb_host_written(&h, c, true, 5);
    /* a later turn of a's conversation supersedes it: its file is queued for removal */
    int32_t longer[70];
    memcpy(longer, t[0], sizeof(t[0]));
    for (int32_t k = 60; k < 70; k++)
        longer[k] = 7;
    cb_host_entry *a2 = cb_host_stash(&h, CB_HOST_STREAMS, longer, 70);
    assert_non_null(a2);
    assert_int_equal(take_io(&h, w, &nw, rm), 1);
    assert_true(rm[0] == cb_host_id(CB_HOST_STREAMS, t[0], 60));
    assert_int_equal(h.disk_evicted, 1);
    cb_host_fail(&h, a2);
    cb_host_unlock(&h, a2);
    /* files found on disk: at start, the least recently used (one beyond the budget is refused);
     * from another replica, the most recently used, older files evicted for it */
    assert_non_null(cb_host_add_disk(&h, CB_HOST_STREAMS, t[3], 60, 6000, file, false));
    assert_null(cb_host_add_disk(&h, CB_HOST_STREAMS, t[3], 60, 6000, file, false)); /* the same id */
    assert_non_null(cb_host_add_disk(&h, CB_HOST_LANE, t[3], 60, 6000, file, false));
    assert_null(cb_host_add_disk(&h, CB_HOST_LANE, t[1], 60, 6000, file, false)); /* no room at start */
    assert_int_equal(h.disk_used, 3 * file);
    cb_host_entry *x = cb_host_add_disk(&h, CB_HOST_LANE, t[1], 60, 6000, file, true);
    assert_non_null(x);
    assert_int_equal(take_io(&h, w, &nw, rm), 1); /* the least recently used file: the lane's found at start */
    assert_true(rm[0] == cb_host_id(CB_HOST_LANE, t[3], 60));
    assert_true(cb_host_has_id(&h, cb_host_id(CB_HOST_STREAMS, t[3], 60)));
    assert_int_equal(h.disk_used, 3 * file);
    /* a read that fails: the entry goes with its load's lock, its file is removed */
    cb_host_lock(&h, x);
    cb_host_read(&h, x, false, 10);
    assert_null(cb_host_match(&h, CB_HOST_LANE, t[1], 60, &len));
    cb_host_loaded(&h, x, false, 0);
    cb_host_unlock(&h, x);
    assert_int_equal(take_io(&h, w, &nw, rm), 1);
    assert_true(rm[0] == cb_host_id(CB_HOST_LANE, t[1], 60));
    assert_int_equal(h.disk_used, 2 * file);
    assert_true(cb_host_check(&h));
    /* a drain writes what has no file yet; a drop removes every unlocked entry and file */
    assert_int_equal(cb_host_write_all(&h), 0); /* c has its file; nothing else is in memory */
    assert_int_equal(cb_host_drop(&h), 2);
    assert_int_equal(take_io(&h, w, &nw, rm), 2);
    assert_int_equal(h.disk_used, 0);
    assert_int_equal(h.n_disk, 0);
    assert_true(cb_host_check(&h));
    cb_host_free(&h);
}

/* A request admitted with a load from the host tier that leaves in the same step (before the ops
 * run): the load is taken back, its entry unlocked, its stream left empty and not parked, the hit
 * not counted. */
static void host_load_taken_back(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 2 * 256, 2, true), 0);
    cb_host_cache host;
    assert_int_equal(cb_host_init(&host, 1 << 20, 8, 32, NULL), 0);
    cb_cache *c = cb_cache_new_streams(&kv, 2, 3, &host);
    assert_non_null(c);
    int32_t t[100];
    for (int32_t k = 0; k < 100; k++)
        t[k] = 3000 + k;
    cb_host_entry *e = cb_host_stash(&host, CB_HOST_STREAMS, t, 80);
    assert_non_null(e);
    cb_host_saved(&host, e, malloc(640), 640, 80, 1);
    cb_host_unlock(&host, e);
    cb_request *r = cb_request_new(1, t, 100, 4);
    assert_non_null(r);
    r->seq_id = -1;
    cb_kv_ops ops = {0};
    cb_cache_hit hit = cb_cache_match(c, r, NULL, 0);
    assert_ptr_equal(hit.host, e);
    assert_int_equal(hit.len, 80);
    int32_t seq = cb_cache_admit(c, r, &hit, 24, 0, &ops);
    assert_true(seq >= 0);
    r->seq_id = seq;
    assert_ptr_equal(r->cache.host, e);
    assert_int_equal(e->locks, 1);
    assert_int_equal(ops.v[ops.n - 1].src, CB_KV_OP_LOAD);
    assert_int_equal(ops.v[ops.n - 1].p1, 80);
    assert_int_equal(kv.used[seq], 80);
    cb_cache_release(c, r, &ops);
    assert_null(r->cache.host);
    assert_int_equal(e->locks, 0);
    for (int32_t i = 0; i < ops.n; i++)
        assert_int_not_equal(ops.v[i].src, CB_KV_OP_LOAD);
    assert_int_equal(ops.v[ops.n - 1].src, CB_KV_OP_RM);
    assert_int_equal(kv.total_used, 0);
    assert_int_equal(cb_cache_parked_len(c, seq), 0);
    cb_cache_stats st;
    cb_cache_get_stats(c, &st);
    assert_int_equal(st.hit_tokens, 0);
    assert_true(cb_cache_check(c));
    cb_kv_ops_free(&ops);
    cb_request_free(r);
    cb_cache_free(c);
    cb_host_free(&host);
    cb_kv_free(&kv);
}

/* The host tier holds a conversation longer than any stream does, but every stream the load could
 * go to has a copy pending this step: the admission copies the holder's shorter match instead of
 * computing the whole prompt. */
static void host_match_falls_back_to_a_stream(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 3 * 256, 3, true), 0);
    cb_host_cache host;
    assert_int_equal(cb_host_init(&host, 1 << 20, 8, 32, NULL), 0);
    cb_streams sc;
    assert_int_equal(cb_streams_init(&sc, &kv, 2, 3, &host), 0); /* 2 running streams, 1 holder */
    int32_t t[100];
    for (int32_t k = 0; k < 100; k++)
        t[k] = 5000 + k;
    cb_kv_seq_take(&kv, 2); /* the holder keeps the first 40 tokens */
    assert_true(cb_kv_grow(&kv, 2, 40));
    cb_streams_park(&sc, 2, t);
    cb_host_entry *e = cb_host_stash(&host, CB_HOST_STREAMS, t, 80); /* the host tier, 80 */
    assert_non_null(e);
    cb_host_saved(&host, e, malloc(640), 640, 80, 1);
    cb_host_unlock(&host, e);
    cb_stream_match m = {.src = -1, .len = 0};
    cb_streams_match(&sc, t, 99, &m);
    assert_ptr_equal(m.host, e);
    assert_int_equal(m.len, 80);
    assert_int_equal(m.src, 2);
    assert_int_equal(m.src_len, 40);
    sc.busy[0] = sc.busy[1] = 1; /* copies queued this step into both running streams */
    int32_t shared = -1;
    bool loaded = true;
    cb_kv_ops ops = {0};
    int32_t seq = cb_streams_admit(&sc, m, &shared, &loaded, &ops);
    assert_true(seq == 0 || seq == 1);
    assert_false(loaded);
    assert_int_equal(shared, 40);
    assert_int_equal(kv.used[seq], 40);
    bool copied = false;
    for (int32_t i = 0; i < ops.n; i++)
        copied |= ops.v[i].seq == seq && ops.v[i].src == 2;
    assert_true(copied);
    assert_int_equal(e->locks, 0);
    cb_kv_ops_free(&ops);
    cb_streams_free(&sc);
    cb_host_free(&host);
    cb_kv_free(&kv);
}

/* A sliding-window model (window 64): an entry longer than the window serves only a request that
 * continues all of it (one within it lost nothing), a longer one does not supersede it, sizes grow by what the layers
 * without a window add (two entries measured), a stream loaded from the tier keeps at least what it loaded (a copy
 * carries that floor, an emptied stream drops it), and a trim under the floor is refused: the request computes. */
static void host_tier_with_a_window(void **state) {
    (void)state;
    cb_kv kv;
    assert_int_equal(cb_kv_init(&kv, 3 * 512, 3, true), 0);
    cb_host_cache host;
    assert_int_equal(cb_host_init(&host, 1 << 20, 100, 32, NULL), 0);
    host.window = 64;
    cb_streams sc;
    assert_int_equal(cb_streams_init(&sc, &kv, 2, 3, &host), 0);
    int32_t t[300];
    for (int32_t k = 0; k < 300; k++)
        t[k] = 7000 + k;
    cb_host_entry *a = cb_host_stash(&host, CB_HOST_STREAMS, t, 100);
    assert_non_null(a);
    cb_host_saved(&host, a, malloc(20000), 20000, 100, 1); /* 100 a cell beyond the window, 200 in it */
    cb_host_unlock(&host, a);
    cb_host_entry *b = cb_host_stash(&host, CB_HOST_STREAMS, t, 200); /* the next turn: a stays */
    assert_non_null(b);
    assert_int_equal(b->bytes, 20000 + 100 * 100); /* from a (its header in), at the first guess per cell */
    cb_host_saved(&host, b, malloc(30000), 30000, 200, 1);
    cb_host_unlock(&host, b);
    assert_int_equal(host.n, 2);
    assert_true(host.cell_bytes > 99.9 && host.cell_bytes < 100.1); /* (30000 - 20000) / 100 */
    int32_t len;
    assert_ptr_equal(cb_host_match(&host, CB_HOST_STREAMS, t, 299, &len), b);
    assert_int_equal(len, 200);
    assert_ptr_equal(cb_host_match(&host, CB_HOST_STREAMS, t, 150, &len), a); /* b not whole: a */
    assert_int_equal(len, 100);
    assert_null(cb_host_match(&host, CB_HOST_STREAMS, t, 99, &len));  /* neither whole */
    assert_null(cb_host_stash(&host, CB_HOST_STREAMS, t, 100));       /* held: a, its own length */
    cb_host_entry *c = cb_host_stash(&host, CB_HOST_STREAMS, t, 150); /* b holds it, but not whole */
    assert_non_null(c);
    cb_host_fail(&host, c);
    cb_host_unlock(&host, c);
    /* loaded into a stream: its floor is what it loaded */
    cb_stream_match m = {.src = -1, .len = 0};
    cb_streams_match(&sc, t, 150, &m);
    assert_ptr_equal(m.host, a);
    assert_int_equal(m.floor, 100);
    int32_t shared = 0;
    bool loaded = false;
    cb_kv_ops ops = {0};
    int32_t s = cb_streams_admit(&sc, m, &shared, &loaded, &ops);
    assert_true(loaded);
    assert_int_equal(sc.floor[s], 100);
    assert_true(cb_kv_grow(&kv, s, 50)); /* it computed 50 more and left */
    cb_streams_park(&sc, s, t);
    assert_int_equal(sc.len[s], 150);
    /* a request sharing 90 of it: under the floor, so neither the stream nor an entry serves it */
    int32_t u[120];
    for (int32_t k = 0; k < 120; k++)
        u[k] = k < 90 ? t[k] : 1 + k;
    m = (cb_stream_match){.src = -1, .len = 0};
    cb_streams_match(&sc, u, 119, &m);
    assert_int_equal(m.len, 0);
    m = (cb_stream_match){.src = s, .len = 90}; /* (as if asked anyway: refused) */
    ops.n = 0;
    int32_t s2 = cb_streams_admit(&sc, m, &shared, &loaded, &ops);
    assert_int_equal(shared, 0);
    assert_int_equal(sc.floor[s2], 0);
    /* one sharing 120: the stream serves it, taken over in place, its floor kept */
    cb_kv_seq_release(&kv, s2);
    if (s2 == s) { /* (it took the parked stream's id: park the tokens back) */
        assert_true(cb_kv_seq_take(&kv, s) && cb_kv_grow(&kv, s, 150));
        cb_streams_park(&sc, s, t);
        sc.floor[s] = 100;
    }
    m = (cb_stream_match){.src = -1, .len = 0};
    cb_streams_match(&sc, t, 120, &m);
    assert_int_equal(m.src, s);
    assert_int_equal(m.floor, 100);
    ops.n = 0;
    assert_int_equal(cb_streams_admit(&sc, m, &shared, &loaded, &ops), s);
    assert_int_equal(shared, 120);
    assert_int_equal(sc.floor[s], 100);
    assert_int_equal(sc.len[2], 150); /* its tail went to the holder, by a copy: the floor with it */
    assert_int_equal(sc.floor[2], 100);
    /* an entry no longer than the window lost nothing: any match will do */
    int32_t v[50];
    for (int32_t k = 0; k < 50; k++)
        v[k] = 9000 + k;
    cb_host_entry *d = cb_host_stash(&host, CB_HOST_STREAMS, v, 50);
    assert_non_null(d);
    cb_host_saved(&host, d, malloc(10000), 10000, 50, 1);
    cb_host_unlock(&host, d);
    assert_ptr_equal(cb_host_match(&host, CB_HOST_STREAMS, v, 40, &len), d);
    assert_int_equal(len, 40);
    assert_true(cb_host_check(&host));
    cb_kv_ops_free(&ops);
    cb_streams_free(&sc);
    cb_host_free(&host);
    cb_kv_free(&kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(streams_share_a_running_prefix),
        cmocka_unit_test(streams_park_take_over_and_hold),
        cmocka_unit_test(turn_rest_padded_to_a_tile),
        cmocka_unit_test(split_moves_requests_into_one_block),
        cmocka_unit_test(split_admission_fills_a_hole),
        cmocka_unit_test(split_admission_extends_the_block),
        cmocka_unit_test(host_tier_records),
        cmocka_unit_test(host_tier_disk_records),
        cmocka_unit_test(host_load_taken_back),
        cmocka_unit_test(host_match_falls_back_to_a_stream),
        cmocka_unit_test(host_tier_keeps_sessions),
        cmocka_unit_test(host_tier_with_a_window),
    };
    return cmocka_run_group_tests_name("streams", tests, NULL, NULL);
}
