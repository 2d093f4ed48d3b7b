/* noamx.c — an LD_PRELOAD shim for benchmarks: the OS refuses the AMX tiles (arch_prctl
 * ARCH_REQ_XCOMP_PERM fails), so ggml offers no AMX buffer type, as on a host without AMX. Lets
 * one AMX machine stand in for a host without it when comparing builds (scripts/bench_repack.py).
 * Build: cc -shared -fPIC -O2 -o noamx.so scripts/noamx.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023

long syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_arch_prctl && a[0] == ARCH_REQ_XCOMP_PERM) {
        errno = EPERM;
        return -1;
    }
    static long (*real)(long, ...);
    if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
