/* The engine's sizes, resolved from its parameters before anything loads (src/engine/sizes.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "../../src/engine/sizes.h"

static void defaults_split_with_holder_streams(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    cb_engine_sizes z;
    char err[256];
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), 0);
    assert_true(z.split);
    assert_int_equal(z.cache, CB_CACHE_STREAMS);
    assert_int_equal(z.holders, 4);             /* max_num_seqs / 4 */
    assert_int_equal(z.n_ctx, 1024 * (16 + 4)); /* a stream each, holders included */
    assert_int_equal(z.n_seq_max, 20);
    assert_int_equal(z.budget, 512);
    assert_int_equal(z.sched_seqs, 16);
    assert_int_equal(z.aging_us, 0); /* FCFS */
}

/* Holder streams by default: twice the running ones within what the running streams leave of an
 * eighth of the host's memory (at most 8 GiB), never under a quarter of the running ones. */
static void default_cache_streams_by_memory(void **state) {
    (void)state;
    const int64_t gib = (int64_t)1 << 30;
    /* SmolLM2-135M: 23,040 bytes a cell, 1024-cell streams (23.6 MB each), 24 GiB: twice 16 */
    assert_int_equal(cb_default_cache_streams(16, 1024, 23040, 24 * gib), 32);
    /* 4096-cell streams (94.4 MB): the running 16 take 1.51 GB of 3 GiB, 18 more fit */
    assert_int_equal(cb_default_cache_streams(16, 4096, 23040, 24 * gib), 18);
    /* a 7B model's 0.5 MiB a cell: 8 GiB of running streams leave nothing of 3 GiB: the quarter */
    assert_int_equal(cb_default_cache_streams(16, 1024, 512 * 1024, 24 * gib), 4);
    /* 8 running streams of it (4 GiB) on 256 GiB: 8 GiB at most, 8 more */
    assert_int_equal(cb_default_cache_streams(8, 1024, 512 * 1024, 256 * gib), 8);
    /* a small host: the quarter still */
    assert_int_equal(cb_default_cache_streams(16, 1024, 512 * 1024, 4 * gib), 4);
    /* unknown sizes: the quarter */
    assert_int_equal(cb_default_cache_streams(16, 1024, 0, 24 * gib), 4);
    assert_int_equal(cb_default_cache_streams(16, 1024, 23040, 0), 4);
    assert_int_equal(cb_default_cache_streams(1, 4096, 23040, 24 * gib), 2);
    /* the host tier: an eighth of memory, at most 8 GiB */
    assert_int_equal(cb_default_cache_ram(24 * gib), 3 * gib);
    assert_int_equal(cb_default_cache_ram(512 * gib), 8 * gib);
    assert_int_equal(cb_default_cache_ram(0), 0);
}

/* A running stream's cells by default: 4096 where 1.25 x max_num_seqs streams of it fit the
 * default KV bytes, else 2048, else 1024; never past the trained context. */
static void default_stream_cells_by_memory(void **state) {
    (void)state;
    const int64_t gib = (int64_t)1 << 30;
    /* SmolLM2-135M (23,040 bytes a cell, trained on 8192): 20 x 4096 cells = 1.89 GB fit 3 GiB */
    assert_int_equal(cb_default_stream_cells(16, 8192, 23040, 24 * gib), 4096);
    assert_int_equal(cb_default_stream_cells(16, 8192, 23040, 16 * gib), 4096); /* 2 GiB */
    assert_int_equal(cb_default_stream_cells(16, 8192, 23040, 8 * gib), 2048);  /* 1 GiB */
    assert_int_equal(cb_default_stream_cells(16, 8192, 23040, 2 * gib), 1024);  /* 256 MiB */
    /* the trained context bounds it */
    assert_int_equal(cb_default_stream_cells(16, 2048, 23040, 24 * gib), 2048);
    assert_int_equal(cb_default_stream_cells(16, 1024, 23040, 24 * gib), 1024);
    assert_int_equal(cb_default_stream_cells(16, 0, 23040, 24 * gib), 4096); /* unknown: memory alone */
    /* a 7B model's 0.5 MiB a cell: 1024 on 24 GiB; 8 GiB at most even on 512 GiB (20 x 1024 = 10 GiB) */
    assert_int_equal(cb_default_stream_cells(16, 32768, 512 * 1024, 24 * gib), 1024);
    assert_int_equal(cb_default_stream_cells(16, 32768, 512 * 1024, 512 * gib), 1024);
    assert_int_equal(cb_default_stream_cells(4, 32768, 512 * 1024, 512 * gib), 2048); /* 5 x 2048 = 5 GiB */
    /* unknown sizes: 1024 */
    assert_int_equal(cb_default_stream_cells(16, 8192, 0, 24 * gib), 1024);
    assert_int_equal(cb_default_stream_cells(16, 8192, 23040, 0), 1024);
}

static void unified_radix_and_caps(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.kv_layout = COBATCH_KV_UNIFIED;
    cb_engine_sizes z;
    assert_int_equal(cb_engine_resolve(&p, &z, NULL, 0), 0);
    assert_int_equal(z.cache, CB_CACHE_RADIX);
    assert_int_equal(z.holders, 32); /* 2 x max_num_seqs, at least 32 */
    assert_int_equal(z.n_ctx, 4096); /* holders take ids, not cells */
    p.max_num_seqs = 200;
    p.max_num_batched_tokens = 512;
    assert_int_equal(cb_engine_resolve(&p, &z, NULL, 0), 0);
    assert_int_equal(z.holders, 56); /* llama.cpp's 256 sequence ids in all */
    assert_int_equal(z.n_seq_max, 256);
    p.prefix_caching = false;
    assert_int_equal(cb_engine_resolve(&p, &z, NULL, 0), 0);
    assert_int_equal(z.cache, CB_CACHE_NONE);
    assert_int_equal(z.holders, 0);
}

static void no_chunking_grows_the_step(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    p.prefill_chunk = 0;
    p.max_model_len = 1000; /* rounded up to llama.cpp's 256 cells */
    cb_engine_sizes z;
    assert_int_equal(cb_engine_resolve(&p, &z, NULL, 0), 0);
    assert_int_equal(z.budget, 1024);
    p.mode = COBATCH_MODE_SEQUENTIAL;
    p.sched_policy = COBATCH_SCHED_PRIORITY;
    p.priority_aging_ms = 250;
    assert_int_equal(cb_engine_resolve(&p, &z, NULL, 0), 0);
    assert_int_equal(z.sched_seqs, 1);
    assert_int_equal(z.aging_us, 250000);
}

static void bad_parameters_are_named(void **state) {
    (void)state;
    struct cobatch_engine_params p = cobatch_engine_default_params();
    cb_engine_sizes z;
    char err[256];
    p.max_num_batched_tokens = 8;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
    assert_string_equal(err, "max_num_batched_tokens (8) must be at least max_num_seqs (16)");
    p = cobatch_engine_default_params();
    p.max_queue = 0;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max_queue"));
    /* a pace is off or a share in range; NaN is neither */
    p = cobatch_engine_default_params();
    float shares[] = {0.5f, 0.05f, 16, 0}, bad[] = {-1, 0.01f, 17, NAN};
    for (int i = 0; i < 4; i++) {
        p.step_pacing = shares[i];
        assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), 0);
        p.step_pacing = bad[i];
        assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "step_pacing"));
    }
    /* the host tier holds the split layout's streams: refused where there are none */
    p = cobatch_engine_default_params();
    p.cache_ram = 1;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), 0);
    p.kv_layout = COBATCH_KV_UNIFIED;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cache_ram"));
    p = cobatch_engine_default_params();
    p.prefix_caching = false;
    p.cache_ram = 0.5f;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
    p.cache_ram = 0;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), 0);
    p.cache_ram = -2;
    assert_int_equal(cb_engine_resolve(&p, &z, err, sizeof(err)), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_split_with_holder_streams), cmocka_unit_test(default_cache_streams_by_memory),
        cmocka_unit_test(default_stream_cells_by_memory),     cmocka_unit_test(unified_radix_and_caps),
        cmocka_unit_test(no_chunking_grows_the_step),         cmocka_unit_test(bad_parameters_are_named),
    };
    return cmocka_run_group_tests_name("sizes", tests, NULL, NULL);
}
