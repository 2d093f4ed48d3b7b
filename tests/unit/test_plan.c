/* The batch layout for llama.cpp's split KV layout (src/core/plan.c): chunk shapes, and a row
 * order checked against a simulation of llama.cpp's ubatch split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sched_harness.h"

static void split_small_chunk_cap_keeps_prompts_moving(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 128, 16, 4 * 256, true, -1);
    h_add(&h, 10, 100, 0); /* decodes throughout */
    h_step(&h);
    h_add(&h, 100, 4, 0);
    h_add(&h, 100, 4, 0);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 3); /* the decode row and two 16-token chunks */
    assert_int_equal(h.plan.items[1].n_tokens, 16);
    assert_int_equal(h.plan.items[2].n_tokens, 16);
    h_drain(&h, 300);
    h_check_outputs(&h);
    h_free(&h);
}

/* Split layout: prompts of 300, 200 and 150 tokens, chunk 256, budget 512. The first chunk (236,
 * so that its last piece is a tile of 64, not 44) sets the step's length; the 200-token prompt
 * goes whole (it ends there); the third would get only 76 tokens and waits, then goes whole in the
 * next step. */
static void split_chunks_share_one_length(void **state) {
    (void)state;
    harness h;
    h_init_px(&h, CB_MODE_CONTINUOUS, 4, 512, 256, 4 * 1024, true, -1);
    cb_request *a = h_add(&h, 300, 4, 0);
    h_add(&h, 200, 4, 0);
    cb_request *c = h_add(&h, 150, 4, 0);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 2);
    assert_int_equal(h.plan.items[0].n_tokens, 236);
    assert_int_equal(h.plan.items[1].n_tokens, 200);
    h_step(&h);
    assert_int_equal(h.plan.n_items, 3); /* the 300's last 64, the 200's decode row, all of c */
    for (int32_t i = 0; i < h.plan.n_items; i++)
        if (h.plan.items[i].req == a) assert_int_equal(h.plan.items[i].n_tokens, 64);
    assert_ptr_equal(h.plan.items[2].req, c);
    assert_int_equal(h.plan.items[2].n_tokens, 150);
    h_drain(&h, 100);
    h_check_outputs(&h);
    h_free(&h);
}

/* llama.cpp's split_equal(n_ubatch, sequential) on a batch of rows (each row: its sequence id),
 * as the pinned tree does it: the sequences of one graph run are taken in row order, each the
 * previous one's id + 1, and every one gets as many rows as the shortest has left. Fills
 * ub_rows[item] with the rows each graph run gave each sequence, run after run. */
enum { SIM_MAX = 64 };
static int32_t sim_split_equal(const int32_t *row_seq, int32_t n_rows, int32_t n_ubatch, int32_t runs[][SIM_MAX],
                               int32_t max_runs) {
    bool used[1024] = {false};
    int32_t n_used = 0, n_runs = 0;
    while (n_used < n_rows && n_runs < max_runs) {
        int32_t set[SIM_MAX], n_set = 0, last = -1;
        for (int32_t i = 0; i < n_rows; i++) {
            if (used[i]) continue;
            bool in = false;
            for (int32_t k = 0; k < n_set; k++)
                in |= set[k] == row_seq[i];
            if (in || (n_set > 0 && row_seq[i] != last + 1)) continue;
            set[n_set++] = last = row_seq[i];
        }
        for (int32_t k = 0; k < SIM_MAX; k++)
            runs[n_runs][k] = 0;
        for (int32_t round = 0;; round++) {
            bool all = true; /* every sequence of the set has an unused row left */
            for (int32_t k = 0; k < n_set && all; k++) {
                bool has = false;
                for (int32_t i = 0; i < n_rows && !has; i++)
                    has = !used[i] && row_seq[i] == set[k];
                all = has;
            }
            if (!all) break;
            for (int32_t k = 0; k < n_set; k++)
                for (int32_t i = 0; i < n_rows; i++)
                    if (!used[i] && row_seq[i] == set[k]) {
                        used[i] = true;
                        n_used++;
                        runs[n_runs][set[k]]++;
                        break;
                    }
            if ((round + 2) * n_set > n_ubatch) break;
        }
        n_runs++;
    }
    return n_runs;
}

/* The row order keeps items of different lengths out of one graph run: every item runs whole in
 * one graph run, or gives its first row to the one-row run of its block of consecutive ids and
 * the rest in one more. With rows simply by sequence id (the order before cb_plan_row_order) a
 * 76-row chunk next to a 100-row one left a 24-row run, and decode rows next to a chunk took a row
 * of it. The count of graph runs is what the simulator finds, never more than one per block of
 * consecutive ids with equal row counts (the bound of the order's first version, one run a block),
 * and fewer when decode rows surround a chunk. */
static void row_order_gives_each_chunk_its_graph_run(void **state) {
    (void)state;
    uint64_t rng = 12345;
    cb_plan plan;
    assert_int_equal(cb_plan_init(&plan, SIM_MAX), 0);
    static cb_request reqs[SIM_MAX];
    cb_row_piece pieces[2 * SIM_MAX];
    int32_t row_seq[1024];
    static int32_t runs[256][SIM_MAX];
    int bad_by_id = 0, fewer = 0;
    for (int trial = 0; trial < 2000; trial++) {
        harness tmp = {.rng = rng + (uint64_t)trial * 7919};
        int32_t n = 1 + (int32_t)rnd(&tmp, 12), total = 0;
        bool taken[SIM_MAX] = {false};
        plan.n_items = n;
        for (int32_t i = 0; i < n; i++) {
            int32_t id;
            do
                id = (int32_t)rnd(&tmp, 16);
            while (taken[id]);
            taken[id] = true;
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].seq_id = id;
            plan.items[i].req = &reqs[i];
            int32_t kind = (int32_t)rnd(&tmp, 3); /* decode rows, or chunks of a few lengths */
            plan.items[i].n_tokens = kind == 0 ? 1 : kind == 1 ? 40 : 1 + (int32_t)rnd(&tmp, 80);
            total += plan.items[i].n_tokens;
        }
        /* the first version's bound: blocks of consecutive ids with equal row counts */
        int32_t blocks = 0;
        for (int32_t id = 0; id < 16; id++) {
            int32_t i = -1, prev = -1;
            for (int32_t k = 0; k < n; k++) {
                if (reqs[k].seq_id == id) i = k;
                if (id > 0 && reqs[k].seq_id == id - 1) prev = k;
            }
            if (i >= 0 && (prev < 0 || plan.items[prev].n_tokens != plan.items[i].n_tokens)) blocks++;
        }
        for (int pass = 0; pass < 2; pass++) {
            int32_t np;
            if (pass == 0) {
                np = cb_plan_row_order(&plan, 64, 256, 0, pieces);
            } else { /* whole items by id alone */
                np = n;
                for (int32_t i = 0; i < n; i++)
                    pieces[i] = (cb_row_piece){.item = i, .k0 = 0, .n = plan.items[i].n_tokens};
                for (int32_t i = 1; i < n; i++)
                    for (int32_t k = i; k > 0 && reqs[pieces[k - 1].item].seq_id > reqs[pieces[k].item].seq_id; k--) {
                        cb_row_piece t = pieces[k];
                        pieces[k] = pieces[k - 1];
                        pieces[k - 1] = t;
                    }
            }
            int32_t next_row[SIM_MAX] = {0}, n_rows = 0; /* each item's rows once, in order */
            for (int32_t j = 0; j < np; j++) {
                assert_int_equal(pieces[j].k0, next_row[pieces[j].item]);
                assert_true(pieces[j].n >= 1);
                next_row[pieces[j].item] += pieces[j].n;
                for (int32_t k = 0; k < pieces[j].n; k++)
                    row_seq[n_rows++] = reqs[pieces[j].item].seq_id;
            }
            for (int32_t i = 0; i < n; i++)
                assert_int_equal(next_row[i], plan.items[i].n_tokens);
            assert_int_equal(n_rows, total);
            int32_t nr = sim_split_equal(row_seq, n_rows, total, runs, 256);
            bool ok = true;
            for (int32_t i = 0; i < n; i++) {
                int32_t id = reqs[i].seq_id, in = 0, first = -1;
                for (int32_t u = 0; u < nr; u++)
                    if (runs[u][id] > 0) {
                        in++;
                        if (first < 0) first = runs[u][id];
                    }
                ok &= in == 1 || (in == 2 && first == 1);
                /* a chunk of 64 rows or more keeps 64 a run beyond its first row (the tiled kernel) */
                for (int32_t u = 0; u < nr && plan.items[i].n_tokens >= 64; u++)
                    if (pass == 0 && runs[u][id] > 1) assert_true(runs[u][id] >= 64);
            }
            if (pass == 0) {
                assert_true(ok);
                assert_int_equal(cb_plan_graph_runs(&plan, pieces, np), nr);
                assert_true(nr <= blocks);
                fewer += nr < blocks;
            }
            if (pass == 1 && (!ok || nr > blocks)) bad_by_id++;
        }
    }
    cb_plan_free(&plan);
    assert_true(bad_by_id > 100); /* the simulator tells the orders apart */
    assert_true(fewer > 100);     /* and the first-row runs save graph runs */
}

/* The simulated graph runs' attention in row-cells: each run's rows times the most cells one of its
 * streams holds after it, padded to 256 (llama.cpp's n_kv). */
static int64_t sim_attended(const cb_plan *plan, const cb_request *reqs, int32_t n, int32_t runs[][SIM_MAX],
                            int32_t nr) {
    int64_t total = 0;
    int32_t done[SIM_MAX] = {0};
    for (int32_t u = 0; u < nr; u++) {
        int64_t rows = 0, cells = 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t id = reqs[i].seq_id;
            if (runs[u][id] == 0) continue;
            rows += runs[u][id];
            done[i] += runs[u][id];
            int64_t c = (plan->items[i].pos0 + done[i] + 255) / 256 * 256;
            if (c > cells) cells = c;
        }
        total += rows * cells;
    }
    return total;
}

/* Fills the plan with n items of these ids, rows and positions; returns the simulated graph runs of
 * cb_plan_row_order's order (checked against cb_plan_graph_runs and cb_plan_attended) and its
 * attention in *attended. */
static int32_t order_and_simulate(cb_plan *plan, cb_request *reqs, int32_t n, double run_cells, int64_t *attended,
                                  int32_t runs[][SIM_MAX]) {
    cb_row_piece pieces[2 * SIM_MAX];
    int32_t row_seq[1024], n_rows = 0, total = 0;
    plan->n_items = n;
    for (int32_t i = 0; i < n; i++) {
        plan->items[i].req = &reqs[i];
        total += plan->items[i].n_tokens;
    }
    int32_t np = cb_plan_row_order(plan, 64, 256, run_cells, pieces);
    int32_t next_row[SIM_MAX] = {0};
    for (int32_t j = 0; j < np; j++) {
        assert_int_equal(pieces[j].k0, next_row[pieces[j].item]);
        next_row[pieces[j].item] += pieces[j].n;
        for (int32_t k = 0; k < pieces[j].n; k++)
            row_seq[n_rows++] = reqs[pieces[j].item].seq_id;
    }
    assert_int_equal(n_rows, total);
    int32_t nr = sim_split_equal(row_seq, n_rows, total, runs, 256);
    for (int32_t i = 0; i < n; i++) { /* whole in one run, or its first row and then the rest */
        int32_t in = 0, first = -1;
        for (int32_t u = 0; u < nr; u++)
            if (runs[u][reqs[i].seq_id] > 0) {
                in++;
                if (first < 0) first = runs[u][reqs[i].seq_id];
            }
        assert_true(in == 1 || (in == 2 && first == 1));
    }
    assert_int_equal(cb_plan_graph_runs(plan, pieces, np), nr);
    *attended = sim_attended(plan, reqs, n, runs, nr);
    assert_int_equal(cb_plan_attended(plan, pieces, np, 256), *attended);
    return nr;
}

/* Without flash attention a graph run's rows attend over its longest stream's cells: a chat's
 * decode row beside an agent's 4,096 tokens pays for 4,096. Given what one more run costs in
 * row-cells, a block of consecutive streams is cut where that saves more than the run costs: the
 * long stream alone, first or in the middle; never when the run costs more than the cells saved, or
 * when run_cells is 0 (flash attention). Random plans: the simulated split agrees with the counted
 * runs and attention, and for decode rows (where the cost model is exact) cutting never costs more
 * than not cutting. */
static void row_order_cuts_blocks_by_context(void **state) {
    (void)state;
    cb_plan plan;
    assert_int_equal(cb_plan_init(&plan, SIM_MAX), 0);
    static cb_request reqs[SIM_MAX];
    static int32_t runs[256][SIM_MAX];
    int64_t att;
    for (int32_t where = 0; where < 16; where += 7) { /* the long stream 0, 7 or 14 of 16 */
        for (int32_t i = 0; i < 16; i++) {
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].seq_id = i;
            plan.items[i] = (cb_plan_item){.pos0 = i == where ? 4095 : 255, .n_tokens = 1, .logits = true};
        }
        assert_int_equal(order_and_simulate(&plan, reqs, 16, 0, &att, runs), 1);
        assert_int_equal(att, 16 * 4096);
        assert_int_equal(order_and_simulate(&plan, reqs, 16, 60000, &att, runs), 1); /* saves 57,600 */
        int32_t nr = order_and_simulate(&plan, reqs, 16, 3000, &att, runs);
        assert_int_equal(nr, where == 0 || where == 15 ? 2 : 3);
        assert_int_equal(att, 4096 + 15 * 256);
        for (int32_t u = 0; u < nr; u++) /* the long stream runs alone */
            if (runs[u][where] > 0)
                for (int32_t i = 0; i < 16; i++)
                    assert_true(i == where || runs[u][i] == 0);
    }
    uint64_t rng = 777;
    int cut = 0;
    for (int trial = 0; trial < 3000; trial++) {
        harness tmp = {.rng = rng + (uint64_t)trial * 104729};
        int32_t n = 1 + (int32_t)rnd(&tmp, 16);
        bool taken[SIM_MAX] = {false}, decode_only = trial % 2 == 0;
        for (int32_t i = 0; i < n; i++) {
            int32_t id;
            do
                id = (int32_t)rnd(&tmp, 20);
            while (taken[id]);
            taken[id] = true;
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].seq_id = id;
            int32_t kind = decode_only ? 0 : (int32_t)rnd(&tmp, 3);
            plan.items[i] = (cb_plan_item){.pos0 = (int32_t)rnd(&tmp, 8000),
                                           .n_tokens = kind == 0   ? 1
                                                       : kind == 1 ? 64
                                                                   : 1 + (int32_t)rnd(&tmp, 80)};
        }
        static const double costs[] = {500, 5000, 50000};
        double q = costs[rnd(&tmp, 3)];
        int64_t att0, att1;
        int32_t r0 = order_and_simulate(&plan, reqs, n, 0, &att0, runs);
        int32_t r1 = order_and_simulate(&plan, reqs, n, q, &att1, runs);
        cut += r1 > r0;
        if (decode_only) assert_true(q * r1 + (double)att1 <= q * r0 + (double)att0);
    }
    assert_true(cut > 300); /* the random plans do get cut */
    cb_plan_free(&plan);
}

/* A step's cost fitted from runs, rows and attended cells: one more run's cost in row-cells is the
 * ratio of the two fitted costs; nothing until steps tell the three apart. */
static void run_cost_prices_a_graph_run_in_cells(void **state) {
    (void)state;
    cb_run_cost one = {0}, c = {0};
    assert_true(cb_run_cost_cells(&c) == 0);
    for (int i = 0; i < 50; i++) /* one context: cells follow rows, no cell cost */
        cb_run_cost_note(&one, 1, 1 + i % 16, 4096LL * (1 + i % 16), 20000 + 7000 * (1 + i % 16), 0.98);
    assert_true(cb_run_cost_cells(&one) == 0);
    for (int i = 0; i < 200; i++) { /* 18 ms a run, 6 ms a row, 5 us a row-cell */
        int32_t runs = 1 + i % 3, rows = 1 + (i * 7) % 16;
        int64_t cells = (int64_t)rows * 256 * (1 + (i * 5) % 16);
        cb_run_cost_note(&c, runs, rows, cells, (int64_t)(18000.0 * runs + 6000.0 * rows + 5.0 * cells), 0.98);
    }
    assert_float_equal(cb_run_cost_cells(&c), 18000 / 5.0, 18000 / 5.0 * 1e-3);
    cb_run_cost_note(&c, 0, 1, 1, 100, 0.98); /* ignored */
    cb_run_cost d = {0};
    for (int i = 0; i < 50; i++) /* cells that seem to cost less than nothing (noise): no price */
        cb_run_cost_note(&d, 1 + i % 2, 1 + i % 16, 256LL * (1 + i % 7),
                         20000 * (1 + i % 2) + 7000 * (1 + i % 16) - 256 * (1 + i % 7), 1);
    assert_true(cb_run_cost_cells(&d) == 0);
}

/* The chunk rules one call at a time: a last piece goes whole; a cut chunk under the tile waits
 * unless the plan is empty; the first cut chunk sets the step's length, longer ones are cut to it,
 * shorter ones wait; a configuration's cap below the tile lowers the tile; a cut leaves a last
 * piece of a tile or more. */
static void split_chunk_rules(void **state) {
    (void)state;
    int32_t sc = 0;
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 100, 100), 100);
    assert_int_equal(sc, 0);
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 40, 300), 0);
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, true, 40, 300), 40);
    assert_int_equal(sc, 40);
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 128, 300), 40);
    sc = 96;
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 80, 300), 0);
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 96, 300), 96);
    sc = 0;
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 32, false, 32, 300), 32);
    assert_int_equal(sc, 32);
    sc = 0; /* a cut leaving a last piece under the tile leaves a tile */
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 256, 300), 236);
    assert_int_equal(sc, 236);
    sc = 0; /* unless the cut chunk would go under the tile itself */
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, true, 64, 100), 64);
    sc = 256; /* or under the step's length (it would wait): the step's length, as before */
    assert_int_equal(cb_plan_split_chunk(&sc, 64, 256, false, 256, 300), 256);
}

/* One pool's prompt chunks around the flash-attention tile (64): whole when it fits; a cut leaves
 * a tail of a tile; under two tiles all of it, within the batch; a piece under the tile waits beside
 * other rows and runs alone. */
static void tile_chunk_rules(void **state) {
    (void)state;
    assert_int_equal(cb_plan_tile_chunk(50, 100, 128, 64, false), 50);   /* fits: whole */
    assert_int_equal(cb_plan_tile_chunk(300, 100, 128, 64, false), 100); /* a cut, a long tail */
    assert_int_equal(cb_plan_tile_chunk(150, 100, 128, 64, false), 86);  /* leaves a tile, not 50 */
    assert_int_equal(cb_plan_tile_chunk(120, 100, 128, 64, false), 120); /* under two tiles: all */
    /* three decode rows in a batch of 128: the whole 127 would not fit the batch (125 left) */
    assert_int_equal(cb_plan_tile_chunk(127, 61, 125, 64, false), 0); /* 61 is under the tile: waits */
    assert_int_equal(cb_plan_tile_chunk(127, 61, 125, 64, true), 61); /* alone it runs */
    assert_int_equal(cb_plan_tile_chunk(127, 100, 125, 64, false), 100);
    assert_int_equal(cb_plan_tile_chunk(127, 100, 100, 64, false), 100); /* strict: cap is the room */
    assert_int_equal(cb_plan_tile_chunk(200, 30, 128, 64, false), 0);    /* under the tile: waits */
    assert_int_equal(cb_plan_tile_chunk(200, 30, 128, 64, true), 30);
    assert_int_equal(cb_plan_tile_chunk(10, 0, 128, 64, false), 0); /* the budget spent: nothing more */
}

/* A step's tokens by time: until measured the budget in tokens; then what fits the time at the
 * measured cost, within the bounds; a costlier graph (the pool filling) gets fewer. */
static void pace_gives_the_tokens_that_fit_a_time(void **state) {
    (void)state;
    cb_pace p = {0};
    assert_int_equal(cb_pace_tokens(&p, 1e5, 8, 128), 128);
    cb_pace_note(&p, 0, 1000); /* nothing ran: not a measurement */
    cb_pace_note(&p, 10, 0);
    assert_int_equal(cb_pace_tokens(&p, 1e5, 8, 128), 128);
    cb_pace_note(&p, 100, 1000000); /* 10 ms a token */
    assert_int_equal(cb_pace_tokens(&p, 320000, 8, 128), 32);
    assert_int_equal(cb_pace_tokens(&p, 5e6, 8, 128), 128);
    assert_int_equal(cb_pace_tokens(&p, 1000, 8, 128), 8);
    cb_pace_note(&p, 10, 300000); /* 30 ms: the average goes to 20 ms */
    assert_int_equal(cb_pace_tokens(&p, 320000, 8, 128), 16);
    cb_pace_note(&p, 64, 64 * 20000);
    assert_int_equal(cb_pace_tokens(&p, 320000, 8, 128), 16);
}

/* A step's prompt beside decode rows: nothing until both costs are measured (in steps with half
 * the sequences decoding or more), then what takes the decoding requests, in sum, a share of a full
 * decode step; more with fewer decoding; never under the floor. */
static void step_pace_bounds_a_steps_prompt_by_time(void **state) {
    (void)state;
    cb_step_pace p = {0};
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), INT32_MAX);
    cb_step_pace_note(&p, 4, 0, 40000, 16);  /* a quarter of the sequences: not a full step's row */
    cb_step_pace_note(&p, 15, 0, 45000, 16); /* 3 ms a row */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), INT32_MAX); /* no prompt token measured */
    cb_step_pace_note(&p, 15, 20, 45000, 16); /* as long as its decode rows: noise, not measured */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), INT32_MAX);
    cb_step_pace_note(&p, 2, 100, 300000, 16); /* few decoding: not the paced case */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), INT32_MAX);
    cb_step_pace_note(&p, 15, 20, 95000, 16); /* 50 ms over the rows: 2.5 ms a prompt token */
    /* 16 x 16 x 3 ms / (15 x 2.5 ms) = 20.48: the 15 requests wait 20 x 2.5 = 50 ms each, about
     * the 48 ms a full step of 16 rows takes */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), 20);
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 0.5), 10);
    assert_int_equal(cb_step_pace_prompt(&p, 4, 16, 1.0), 76);        /* fewer wait: a longer chunk */
    assert_int_equal(cb_step_pace_prompt(&p, 0, 16, 1.0), INT32_MAX); /* nobody waits */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 0), INT32_MAX);  /* off */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 0.1), CB_STEP_PACE_MIN);
    cb_step_pace_note(&p, 15, 10, 45000 + 10 * 5000, 16); /* 5 ms: the average goes to 3 ms */
    assert_int_equal(cb_step_pace_prompt(&p, 15, 16, 1.0), 17);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_chunk_rules),
        cmocka_unit_test(split_chunks_share_one_length),
        cmocka_unit_test(split_small_chunk_cap_keeps_prompts_moving),
        cmocka_unit_test(row_order_gives_each_chunk_its_graph_run),
        cmocka_unit_test(row_order_cuts_blocks_by_context),
        cmocka_unit_test(run_cost_prices_a_graph_run_in_cells),
        cmocka_unit_test(tile_chunk_rules),
        cmocka_unit_test(pace_gives_the_tokens_that_fit_a_time),
        cmocka_unit_test(step_pace_bounds_a_steps_prompt_by_time),
    };
    return cmocka_run_group_tests_name("batch layout", tests, NULL, NULL);
}
