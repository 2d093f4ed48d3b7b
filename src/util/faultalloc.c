/* faultalloc.c — the counter behind faultalloc.h. */
#define CB_FAULTALLOC_IMPL
#include "faultalloc.h"

/* the real functions here, also when the header was forced in before CB_FAULTALLOC_IMPL */
#undef malloc
#undef calloc
#undef realloc
#undef strdup
#undef strndup

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static atomic_uint_fast64_t every, calls, failed;
static atomic_int_fast64_t until_ns; /* 0: no deadline */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool cb_fault_alloc_available(void) {
#ifdef COBATCH_FAULT_ALLOC
    return true;
#else
    return false;
#endif
}

void cb_fault_alloc_set(uint64_t n) {
    atomic_store(&until_ns, 0);
    atomic_store(&calls, 0);
    atomic_store(&every, cb_fault_alloc_available() ? n : 0);
}

bool cb_fault_alloc_arm_from_env(void) {
    const char *v = getenv("COBATCH_FAIL_ALLOC");
    unsigned long long n = 0, s = 0;
    if (!cb_fault_alloc_available() || !v || sscanf(v, "every=%llu,seconds=%llu", &n, &s) < 1 || n == 0) return false;
    cb_fault_alloc_set(n);
    if (s > 0) atomic_store(&until_ns, now_ns() + (int64_t)s * 1000000000);
    fprintf(stderr, "cobatch: every %llu-th allocation fails%s (COBATCH_FAIL_ALLOC)\n", n, s ? " for a while" : "");
    return true;
}

uint64_t cb_fault_alloc_failed(void) { return atomic_load(&failed); }

static bool fail_now(void) {
    uint64_t e = atomic_load(&every);
    if (e == 0) return false;
    int64_t u = atomic_load(&until_ns);
    if (u && now_ns() > u) {
        atomic_store(&every, 0);
        return false;
    }
    if ((atomic_fetch_add(&calls, 1) + 1) % e != 0) return false;
    atomic_fetch_add(&failed, 1);
    return true;
}

void *cb_fa_malloc(size_t n) { return fail_now() ? NULL : malloc(n); }
void *cb_fa_calloc(size_t n, size_t m) { return fail_now() ? NULL : calloc(n, m); }
void *cb_fa_realloc(void *p, size_t n) { return fail_now() ? NULL : realloc(p, n); }
char *cb_fa_strdup(const char *s) { return fail_now() ? NULL : strdup(s); }
char *cb_fa_strndup(const char *s, size_t n) { return fail_now() ? NULL : strndup(s, n); }
