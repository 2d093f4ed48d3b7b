/* attn.c — the engine's attention path: the operator's auto flash attention and cache types made
 * one path by measuring the candidates (core/attn.h) with runtime/attnprobe.h, once per host,
 * model shape and llama.cpp build: the times are kept in the process and in a file under the
 * user's cache (COBATCH_CACHE, else $XDG_CACHE_HOME/cobatch or ~/.cache/cobatch), as
 * "attn-<hash>.txt" whose first line is the whole key. A probe takes seconds; a cached one nothing. */
#include "engine_internal.h"

#include "../core/attn.h"
#include "../runtime/attnprobe.h"
#include "../runtime/model.h"
#include "../util/util.h"
#include "testing.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ATTN_MARGIN 0.05  /* another path must be this much faster than the reference to replace it */
#define ATTN_MEMO 8       /* probes kept in the process */
#define ATTN_STEADY 1.5   /* the reference timed again at the end within this factor: the host was steady */
#define ATTN_POINTS 6     /* two contexts x (one decode row, a batch of them, a prompt chunk) */
#define ATTN_KEY_LEN 1024 /* the cache key's text */
#define ATTN_SEQ_BYTES (256.0 * 1024 * 1024) /* a decode point's streams: at most this much of one layer */

typedef struct {
    char key[ATTN_KEY_LEN];
    double ms[CB_ATTN_MAX_PATHS * ATTN_POINTS];
} attn_memo;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static double steady_tol = ATTN_STEADY; /* (a test may accept any) */
static attn_memo memo[ATTN_MEMO];
static int memo_n;

void cobatch_test_attn_forget(void) {
    pthread_mutex_lock(&memo_mu);
    memo_n = 0;
    pthread_mutex_unlock(&memo_mu);
}

void cobatch_test_attn_steady(double tol) {
    pthread_mutex_lock(&memo_mu);
    steady_tol = tol;
    pthread_mutex_unlock(&memo_mu);
}

/* The CPU's name (/proc/cpuinfo's first "model name"), or "unknown". */
static void cpu_name(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (v) snprintf(out, cap, "%s", v + 1 + (v[1] == ' '));
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* The key: everything the times depend on. */
static void make_key(char *key, const cb_model_shape *s, int threads, const cb_attn_path *paths, int n,
                     const cb_attn_point *pts, int n_pts) {
    char cpu[160], build[160];
    cpu_name(cpu, sizeof cpu);
    cb_attn_probe_build(build, sizeof build);
    int at = snprintf(key, ATTN_KEY_LEN, "attn v1; cpu %s; threads %d; ggml %s; shape %d/%d/%d/%d/%d; paths", cpu,
                      threads, build, s->n_layer, s->n_head, s->n_head_kv, s->head_k, s->head_v);
    for (int i = 0; i < n && at < ATTN_KEY_LEN; i++)
        at += snprintf(key + at, ATTN_KEY_LEN - (size_t)at, " %s:%s/%s", paths[i].fa ? "fa" : "plain",
                       cobatch_kv_type_name(paths[i].type_k), cobatch_kv_type_name(paths[i].type_v));
    for (int p = 0; p < n_pts && at < ATTN_KEY_LEN; p++)
        at += snprintf(key + at, ATTN_KEY_LEN - (size_t)at, "%s %dx%dx%d", p ? "," : "; points", pts[p].n_ctx,
                       pts[p].n_seqs, pts[p].n_rows);
}

/* The cache file for key, or false when there is no home for it. */
static bool cache_path(const char *key, char *out, size_t cap) {
    const char *root = getenv("COBATCH_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[512];
    if (root && root[0])
        snprintf(dir, sizeof dir, "%s", root);
    else if (xdg && xdg[0])
        snprintf(dir, sizeof dir, "%s/cobatch", xdg);
    else if (home && home[0])
        snprintf(dir, sizeof dir, "%s/.cache/cobatch", home);
    else
        return false;
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return snprintf(out, cap, "%s/attn-%016llx.txt", dir, (unsigned long long)h) < (int)cap;
}

static bool cache_read(const char *file, const char *key, double *ms, int n) {
    FILE *f = fopen(file, "r");
    if (!f) return false;
    char line[ATTN_KEY_LEN + 2];
    bool ok = fgets(line, sizeof line, f) && (line[strcspn(line, "\n")] = 0, !strcmp(line, key));
    for (int i = 0; ok && i < n; i++)
        ok = fscanf(f, "%lf", &ms[i]) == 1;
    fclose(f);
    return ok;
}

/* Written whole or not at all (a temporary file renamed over): processes starting together may race. */
static void cache_write(const char *file, const char *key, const double *ms, int n, int n_pts) {
    char tmp[640], dir[600];
    snprintf(dir, sizeof dir, "%s", file);
    for (char *c = dir + 1; *c; c++) /* mkdir -p of the file's folder (errors show at the open) */
        if (*c == '/') {
            *c = 0;
            mkdir(dir, 0755);
            *c = '/';
        }
    if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", file, (int)getpid()) >= (int)sizeof tmp) return;
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%s\n", key);
    for (int i = 0; i < n; i++)
        fprintf(f, "%.4f%s", ms[i], (i + 1) % n_pts ? " " : "\n");
    bool ok = fclose(f) == 0;
    if (!ok || rename(tmp, file) != 0) unlink(tmp);
}

/* The times for key: the process's, the cache file's, or a probe's (then kept in both). from says
 * which ("measured", "cached"). */
static bool times_for(const char *key, const cb_model_shape *s, int threads, const cb_attn_path *paths, int n,
                      const cb_attn_point *pts, int n_pts, double *ms, const char **from) {
    int len = n * n_pts;
    pthread_mutex_lock(&memo_mu); /* held through a probe: engines starting together probe once */
    for (int i = 0; i < memo_n; i++)
        if (!strcmp(memo[i].key, key)) {
            memcpy(ms, memo[i].ms, sizeof(double) * (size_t)len);
            pthread_mutex_unlock(&memo_mu);
            *from = "measured earlier";
            return true;
        }
    char file[600];
    bool have_file = cache_path(key, file, sizeof file);
    bool ok = have_file && cache_read(file, key, ms, len);
    *from = "cached";
    if (!ok) {
        double again[ATTN_POINTS];
        ok = cb_attn_probe(s, threads, paths, n, pts, n_pts, ms, again) == 0;
        bool steady = ok && (steady_tol <= 0 || cb_attn_steady(ms, again, n_pts, steady_tol, 5.0));
        *from = steady ? "measured" : "measured on a busy host: not kept";
        if (steady && have_file) cache_write(file, key, ms, len, n_pts);
    }
    if (ok) {
        attn_memo *m = &memo[memo_n < ATTN_MEMO ? memo_n++ : ATTN_MEMO - 1];
        snprintf(m->key, sizeof m->key, "%s", key);
        memcpy(m->ms, ms, sizeof(double) * (size_t)len);
    }
    pthread_mutex_unlock(&memo_mu);
    return ok;
}

/* The points: decode of one sequence and of 16 (fewer where a layer's cells would pass 256 MB),
 * and a 256-token prompt chunk, at an agent's contexts (1,024 and 4,096 tokens, or the trained
 * context below that). The same for every engine setting, so one probe a host and shape serves
 * them all. */
static int make_points(const cb_model_shape *s, cb_attn_point *pts) {
    int32_t cap = s->n_ctx_train > 0 && s->n_ctx_train < 4096 ? s->n_ctx_train : 4096;
    int32_t ctxs[2] = {cap < 1024 ? cap : 1024, cap};
    int32_t rows = 256; /* the default chunk; fixed, as the batch is: one probe serves every setting */
    int n = 0;
    for (int c = 0; c < 2; c++) {
        if (c == 1 && ctxs[1] == ctxs[0]) break;
        int32_t seqs = 16;
        double per = cb_attn_probe_bytes(s, COBATCH_KV_F32, COBATCH_KV_F32, ctxs[c]);
        while (seqs > 1 && per * seqs > ATTN_SEQ_BYTES)
            seqs /= 2;
        pts[n++] = (cb_attn_point){ctxs[c], 1, 1};
        if (seqs > 1) pts[n++] = (cb_attn_point){ctxs[c], seqs, 1};
        pts[n++] = (cb_attn_point){ctxs[c], 1, rows < ctxs[c] ? rows : ctxs[c]};
    }
    return n;
}

static const char *path_name(const cb_attn_path *a, char *buf, size_t cap) {
    snprintf(buf, cap, "flash %s, KV %s/%s", a->fa ? "on" : "off", cobatch_kv_type_name(a->type_k),
             cobatch_kv_type_name(a->type_v));
    return buf;
}

/* The why line of a measured choice: the chosen path, the runner-up, and what a promise costs. */
static void say_choice(const cb_attn_path *paths, int n, int pick, const double *scores, const char *from,
                       const cb_attn_point *pts, int n_pts, char *why, size_t cap) {
    char a[64], b[64];
    int at = snprintf(why, cap, "%s: measured fastest of %d paths at %d and %d tokens (%s)",
                      path_name(&paths[pick], a, sizeof a), n, pts[0].n_ctx, pts[n_pts - 1].n_ctx, from);
    int next = -1, kept = -1; /* the best other eligible path, the best ineligible one */
    for (int i = 0; i < n; i++) {
        if (i == pick || scores[i] <= 0) continue;
        int *slot = paths[i].eligible ? &next : &kept;
        if (*slot < 0 || scores[i] < scores[*slot]) *slot = i;
    }
    if (next >= 0 && at < (int)cap)
        at += snprintf(why + at, cap - (size_t)at, "; %s %.2fx its time", path_name(&paths[next], b, sizeof b),
                       scores[next] / scores[pick]);
    if (kept >= 0 && scores[kept] < scores[pick] && at < (int)cap)
        snprintf(why + at, cap - (size_t)at, "; %s would take %.2fx but breaks %s",
                 path_name(&paths[kept], b, sizeof b), scores[kept] / scores[pick], paths[kept].why_not);
}

void cb_attn_resolve(struct cobatch_engine_params *p, char *why, size_t cap) {
    bool open = p->flash_attn < 0 || p->cache_type_k == COBATCH_KV_AUTO || p->cache_type_v == COBATCH_KV_AUTO;
    if (!open) return;
    cb_attn_ask ask = {.fa = p->flash_attn < 0 ? CB_ATTN_AUTO : p->flash_attn != 0,
                       .type_k = p->cache_type_k == COBATCH_KV_AUTO ? CB_ATTN_AUTO : p->cache_type_k,
                       .type_v = p->cache_type_v == COBATCH_KV_AUTO ? CB_ATTN_AUTO : p->cache_type_v,
                       .unified = p->kv_layout == COBATCH_KV_UNIFIED,
                       .exact_hits = p->kv_layout == COBATCH_KV_SPLIT && p->prefix_caching && p->exact_hits};
    cb_attn_path paths[CB_ATTN_MAX_PATHS];
    int n = cb_attn_candidates(&ask, paths), pick = 0;
    cb_model_shape s;
    cb_attn_point pts[ATTN_POINTS];
    char name[64];
    const char *not_measured = !cb_attn_open(paths, n)                   ? "the only path the flags leave"
                               : p->rpc_servers                          ? "not measured: the layers run on RPC servers"
                               : cb_gpu_free_bytes() > 0                 ? "not measured: attention runs on the GPU"
                               : !cb_model_file_shape(p->model_path, &s) ? "not measured: no model shape to measure"
                                                                         : NULL;
    if (!not_measured) {
        int n_pts = make_points(&s, pts);
        int threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        char key[ATTN_KEY_LEN];
        make_key(key, &s, threads, paths, n, pts, n_pts);
        double ms[CB_ATTN_MAX_PATHS * ATTN_POINTS], scores[CB_ATTN_MAX_PATHS];
        const char *from = "";
        if (times_for(key, &s, threads, paths, n, pts, n_pts, ms, &from)) {
            pick = cb_attn_choose(paths, n, ms, n_pts, ATTN_MARGIN, scores);
            if (why) say_choice(paths, n, pick, scores, from, pts, n_pts, why, cap);
        } else
            not_measured = "not measured: the probe could not run";
    }
    if (not_measured && why) snprintf(why, cap, "%s: %s", path_name(&paths[0], name, sizeof name), not_measured);
    p->flash_attn = paths[pick].fa;
    p->cache_type_k = paths[pick].type_k;
    p->cache_type_v = paths[pick].type_v;
}
