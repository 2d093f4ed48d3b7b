#include "cpu.h"

#include <ggml-backend.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define MAX_BUFTS 16

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static ggml_backend_buffer_type_t *offered;         /* ggml's array, rewritten in place */
static ggml_backend_buffer_type_t first[MAX_BUFTS]; /* what it held before the first rewrite */
static int n_first = -1;                            /* -1: not read yet */

void cb_cpu_load_lock(void) { pthread_mutex_lock(&load_mu); }
void cb_cpu_load_unlock(void) { pthread_mutex_unlock(&load_mu); }

/* CPUID leaf 7 EDX: AMX-TILE (bit 24), AMX-INT8 (bit 25); XCR0 bits 17-18: the OS saves tile
 * state (Linux then grants the tiles per process on request, which ggml's AMX init makes). */
static bool cpu_has_amx(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; /* OSXSAVE: xgetbv works */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);
#else
    return false;
#endif
}

/* ggml's extra buffer types, and a copy of them as first offered. Under load_mu. */
static void read_offered(void) {
    if (n_first >= 0) return;
    n_first = 0;
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu) return;
    ggml_backend_dev_get_extra_bufts_t fn = (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(cpu), "ggml_backend_dev_get_extra_bufts");
    if (!fn || !(offered = fn(cpu))) return;
    while (offered[n_first] && n_first < MAX_BUFTS - 1) {
        first[n_first] = offered[n_first];
        n_first++;
    }
}

static bool is_amx(ggml_backend_buffer_type_t b) { return strcmp(ggml_backend_buft_name(b), "AMX") == 0; }

cb_cpu_features cb_cpu_features_probe(void) {
    cb_cpu_features f = {.cpu_amx = cpu_has_amx()};
    pthread_mutex_lock(&load_mu);
    read_offered();
    for (int i = 0; i < n_first; i++) {
        if (is_amx(first[i]))
            f.ggml_amx = true;
        else
            f.ggml_pack = true;
    }
    pthread_mutex_unlock(&load_mu);
    return f;
}

bool cb_cpu_bufts_apply(const cb_repack_decision *d) {
    read_offered();
    int n = 0;
    for (int i = 0; i < n_first; i++)
        if (is_amx(first[i]) ? d->amx : d->repack) offered[n++] = first[i];
    if (offered) offered[n] = NULL; /* the array held n_first + 1 entries: n + 1 fit */
    return n > 0;
}

/* ------------------------------------------------------------ the load's buffer types ----- */

/* per thread: a load's lines come from the thread that loads, and other threads log meanwhile */
static _Thread_local bool capturing;
static _Thread_local char captured[160];

void cb_cpu_capture_begin(void) {
    captured[0] = 0;
    capturing = true;
}

void cb_cpu_capture_end(char *out, size_t cap) {
    capturing = false;
    snprintf(out, cap, "%s", captured);
}

/* "load_tensors:   CPU_REPACK model buffer size =    33.75 MiB": the name before the marker. */
void cb_cpu_log_line(const char *text) {
    if (!capturing) return;
    const char *mark = strstr(text, " model buffer size");
    const char *colon = strchr(text, ':');
    if (!mark || !colon || colon > mark) return;
    const char *p = colon + 1;
    while (p < mark && *p == ' ')
        p++;
    size_t len = (size_t)(mark - p), have = strlen(captured);
    if (len == 0 || have + len + 2 > sizeof(captured)) return;
    snprintf(captured + have, sizeof(captured) - have, "%s%.*s", have ? "," : "", (int)len, p);
}
