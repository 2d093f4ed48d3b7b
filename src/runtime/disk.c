#include "disk.h"

#include "../util/buf.h"
#include "../util/sha256.h"
#include "../util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DISK_MAGIC "CBKVFILE"
#define DISK_VERSION 1u
#define DISK_RESCAN_US 250000     /* the folder looked at for other replicas' files at most this often */
#define DISK_STALE_TMP_S 3600     /* a temporary file this old whose lock cannot be tested: its writer is gone */
#define DISK_MAX_TOKENS (1 << 24) /* a header naming more is corrupt */

/* The file's header, as this (little-endian) host writes it: CB_HOST_FILE_HEADER bytes. */
typedef struct {
    char magic[8];
    uint32_t version;
    int32_t kind;
    int32_t n_tokens;
    uint32_t pad;
    uint64_t id;
    uint64_t data_size;
    uint64_t fingerprint;
    uint64_t checksum;   /* over the tokens and the cells */
    uint64_t head_check; /* over the bytes before it */
    uint8_t rest[CB_HOST_FILE_HEADER - 64];
} disk_header;

_Static_assert(sizeof(disk_header) == CB_HOST_FILE_HEADER, "the header is its size on disk");

typedef struct {
    cb_host_entry *e; /* WRITING and locked: its tokens and data stay until its end is taken */
    bool ok;
    int64_t us;
} disk_job;

struct cb_disk {
    char *dir; /* DIR/<fingerprint> */
    uint64_t fp;
    char host[64]; /* (temporary names: this host's, its pid and a count) */
    pthread_t writer;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cond, idle;
    disk_job *queue, *done; /* (cap each) writes to make, and made: a job is in one of the two */
    size_t n_queue, n_done, cap_queue, cap_done;
    bool busy, stop;
    uint64_t n_tmp;       /* temporary names made (the writer's only) */
    struct timespec seen; /* the folder's mtime at the last scan */
    void (*wake)(void *);
    void *wake_arg;
    int64_t last_scan_us;
};

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------------- checksums ------------------ */

/* 64 bits over n bytes, eight at a time (a multiply and a shift each: GB/s on one core). */
static uint64_t checksum(uint64_t x, const void *p, size_t n) {
    const uint8_t *b = p;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        x = (x ^ w) * 0x9E3779B97F4A7C15ULL;
        x ^= x >> 29;
    }
    for (; n > 0; n--, b++)
        x = (x ^ *b) * 0x100000001B3ULL;
    return x;
}

static uint64_t head_check(const disk_header *h) { return checksum(17, h, offsetof(disk_header, head_check)); }

/* ---------------------------------------------------------------- whole reads and writes ---- */

static bool write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n > 0) {
        ssize_t r = read(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

static void file_path(const cb_disk *d, uint64_t id, char *out, size_t n) {
    snprintf(out, n, "%s/%016llx.cbkv", d->dir, (unsigned long long)id);
}

/* fsync of the folder: a rename into it survives a crash of the host. */
static bool sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0;
    close(fd);
    return ok;
}

/* ---------------------------------------------------------------- the writer ---------------- */

/* e's file, once: to a temporary name, fsync, rename over the final name (another replica's copy of
 * the same entry is as good), fsync of the folder. */
static bool write_entry(cb_disk *d, const cb_host_entry *e) {
    char tmp[4096], path[4096];
    file_path(d, e->id, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-%ld-%llu", d->dir, d->host, (long)getpid(), (unsigned long long)++d->n_tmp);
    disk_header h = {.version = DISK_VERSION,
                     .kind = e->kind,
                     .n_tokens = e->len,
                     .id = e->id,
                     .data_size = e->size,
                     .fingerprint = d->fp};
    memcpy(h.magic, DISK_MAGIC, 8);
    h.checksum = checksum(checksum(3, e->tok, sizeof(int32_t) * (size_t)e->len), e->data, e->size);
    h.head_check = head_check(&h);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    flock(fd, LOCK_EX | LOCK_NB); /* held while written: a scan leaves a locked temporary file alone */
    bool ok = write_all(fd, &h, sizeof(h)) && write_all(fd, e->tok, sizeof(int32_t) * (size_t)e->len) &&
              write_all(fd, e->data, e->size) && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        unlink(tmp);
        return false;
    }
    sync_dir(d->dir); /* (the file is whole either way; this makes it outlive the host's crash) */
    return true;
}

static void *writer_main(void *arg) {
    cb_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->n_queue == 0 && !d->stop)
            pthread_cond_wait(&d->cond, &d->mu);
        if (d->n_queue == 0) break; /* stopping, and every write made */
        disk_job job = d->queue[0];
        memmove(d->queue, d->queue + 1, sizeof(*d->queue) * --d->n_queue);
        d->busy = true;
        pthread_mutex_unlock(&d->mu);
        int64_t t0 = now_us();
        job.ok = write_entry(d, job.e);
        job.us = now_us() - t0;
        pthread_mutex_lock(&d->mu);
        d->busy = false;
        d->done[d->n_done++] = job; /* (room made when it was queued) */
        pthread_cond_broadcast(&d->idle);
        if (d->wake) {
            pthread_mutex_unlock(&d->mu);
            d->wake(d->wake_arg);
            pthread_mutex_lock(&d->mu);
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---------------------------------------------------------------- reading ------------------- */

/* Opens the file of `id` and checks its header against this folder's fingerprint. -1 when it is
 * missing, short or foreign (*damaged: it was opened and failed the checks; may be NULL). */
static int open_checked(const cb_disk *d, uint64_t id, disk_header *h, int64_t *file_bytes, struct timespec *mtime,
                        bool *damaged) {
    char path[4096];
    file_path(d, id, path, sizeof(path));
    if (damaged) *damaged = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && read_all(fd, h, sizeof(*h)) && memcmp(h->magic, DISK_MAGIC, 8) == 0 &&
              h->version == DISK_VERSION && h->head_check == head_check(h) && h->fingerprint == d->fp && h->id == id &&
              h->n_tokens > 0 && h->n_tokens <= DISK_MAX_TOKENS &&
              (uint64_t)st.st_size == sizeof(*h) + sizeof(int32_t) * (uint64_t)h->n_tokens + h->data_size;
    if (!ok) {
        close(fd);
        if (damaged) *damaged = true;
        return -1;
    }
    *file_bytes = (int64_t)st.st_size;
    if (mtime) *mtime = st.st_mtim;
    return fd;
}

uint8_t *cb_disk_read(cb_disk *d, const cb_host_entry *e) {
    disk_header h;
    int64_t bytes;
    int fd = open_checked(d, e->id, &h, &bytes, NULL, NULL);
    if (fd < 0) return NULL;
    int32_t *tok = NULL;
    uint8_t *data = NULL;
    bool ok = h.kind == e->kind && h.n_tokens == e->len && h.data_size == e->size && e->size > 0 &&
              (tok = malloc(sizeof(int32_t) * (size_t)e->len)) && (data = malloc(e->size)) &&
              read_all(fd, tok, sizeof(int32_t) * (size_t)e->len) &&
              memcmp(tok, e->tok, sizeof(int32_t) * (size_t)e->len) == 0 && read_all(fd, data, e->size) &&
              checksum(checksum(3, tok, sizeof(int32_t) * (size_t)e->len), data, e->size) == h.checksum;
    close(fd);
    free(tok);
    if (!ok) {
        free(data);
        return NULL;
    }
    return data;
}

/* ---------------------------------------------------------------- scanning ------------------ */

typedef struct {
    struct timespec mtime;
    int32_t kind, n;
    int32_t *tok;
    size_t size;
    int64_t bytes;
    uint64_t id;
} disk_found;

static int newest_first(const void *a, const void *b) {
    const disk_found *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 0;
}

/* A temporary file whose writer is gone: its lock can be taken (a writer holds it until its rename),
 * or, where the filesystem has no locks, it is over an hour old. */
static bool stale_tmp(const char *path, const struct stat *st) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool gone;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        gone = true;
    else
        gone = errno != EWOULDBLOCK && time(NULL) - st->st_mtime > DISK_STALE_TMP_S;
    close(fd);
    return gone;
}

/* Every file in the folder that h does not index yet: indexed (at start, newest first, those beyond
 * the budget removed; later, as the newest, room made), stale temporary files removed. */
static void scan(cb_disk *d, cb_host_cache *h, bool at_start) {
    DIR *dir = opendir(d->dir);
    if (!dir) return;
    struct stat st;
    if (stat(d->dir, &st) == 0) d->seen = st.st_mtim;
    disk_found *found = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", d->dir, de->d_name);
        if (strncmp(de->d_name, ".tmp-", 5) == 0) {
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && stale_tmp(path, &st)) unlink(path);
            continue;
        }
        char *end;
        unsigned long long id = strtoull(de->d_name, &end, 16);
        if (end != de->d_name + 16 || strcmp(end, ".cbkv") != 0 || cb_host_has_id(h, id)) continue;
        disk_header hd;
        disk_found f = {.id = id};
        bool damaged;
        int fd = open_checked(d, id, &hd, &f.bytes, &f.mtime, &damaged);
        if (fd < 0) {
            if (damaged) unlink(path); /* short or corrupt (a rename brings whole files only): nobody reads it */
            continue;
        }
        f.kind = hd.kind, f.n = hd.n_tokens, f.size = (size_t)hd.data_size;
        f.tok = malloc(sizeof(int32_t) * (size_t)f.n);
        bool read = f.tok && read_all(fd, f.tok, sizeof(int32_t) * (size_t)f.n);
        bool ok =
            read && cb_host_id(f.kind, f.tok, f.n) == id && cb_grow((void **)&found, &cap, n + 1, sizeof(*found), 16);
        close(fd);
        if (!ok) {
            if (read && cb_host_id(f.kind, f.tok, f.n) != id) unlink(path); /* its tokens are not its name's */
            free(f.tok);
            continue;
        }
        found[n++] = f;
    }
    closedir(dir);
    if (n > 1) qsort(found, n, sizeof(*found), newest_first);
    for (size_t k = 0; k < n; k++) { /* at start newest first (each the least recently used so far);
                                      * later oldest first (each the most recently used so far) */
        disk_found *f = &found[at_start ? k : n - 1 - k];
        if (!cb_host_add_disk(h, f->kind, f->tok, f->n, f->size, f->bytes, !at_start) && at_start) {
            char path[4096];
            file_path(d, f->id, path, sizeof(path));
            unlink(path); /* beyond the budget, oldest out */
        }
        free(f->tok);
    }
    free(found);
}

/* ---------------------------------------------------------------- the engine's side --------- */

int cb_disk_model_hash(const char *path, char out[65]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    cb_sha256 s;
    cb_sha256_init(&s);
    uint64_t size = (uint64_t)st.st_size;
    cb_sha256_update(&s, &size, sizeof(size));
    enum { SAMPLES = 64, SAMPLE = 64 << 10 };
    uint8_t *buf = malloc(SAMPLE);
    bool ok = buf != NULL;
    for (int i = 0; ok && i < SAMPLES; i++) {
        off_t at = size > SAMPLE ? (off_t)((size - SAMPLE) / (SAMPLES - 1) * (uint64_t)i) : 0;
        ssize_t r = pread(fd, buf, SAMPLE, at);
        ok = r >= 0;
        if (ok) cb_sha256_update(&s, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    if (!ok) return -1;
    uint8_t dig[32];
    cb_sha256_final(&s, dig);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", dig[i]);
    return 0;
}

static bool make_dir(const char *path) { return mkdir(path, 0755) == 0 || errno == EEXIST; }

cb_disk *cb_disk_open(const char *dir, const char *fp_text, cb_host_cache *h, void (*wake)(void *), void *arg,
                      char *err, size_t errlen) {
    cb_disk *d = calloc(1, sizeof(*d));
    if (!d) {
        cb_set_err(err, errlen, "out of memory");
        return NULL;
    }
    d->wake = wake;
    d->wake_arg = arg;
    d->fp = checksum(5, fp_text, strlen(fp_text));
    if (gethostname(d->host, sizeof(d->host) - 1) != 0) snprintf(d->host, sizeof(d->host), "host");
    for (char *c = d->host; *c; c++)
        if (*c == '-' || *c == '/') *c = '_';
    size_t n = strlen(dir) + 32;
    d->dir = malloc(n);
    if (!d->dir) {
        free(d);
        cb_set_err(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(d->dir, n, "%s/%016llx", dir, (unsigned long long)d->fp);
    struct stat st;
    if (!make_dir(dir) || !make_dir(d->dir) || stat(d->dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        access(d->dir, W_OK | X_OK) != 0) {
        cb_set_err(err, errlen, "cache_disk: cannot use %s: %s", d->dir, strerror(errno ? errno : ENOTDIR));
        free(d->dir);
        free(d);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/FINGERPRINT", d->dir);
    if (access(path, F_OK) != 0) { /* for people; written once, whole (a temporary and a rename) */
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "w");
        if (f) {
            bool ok = fprintf(f, "%s\n", fp_text) > 0;
            ok = fclose(f) == 0 && ok;
            if (!ok || rename(tmp, path) != 0) unlink(tmp);
        }
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, NULL);
    pthread_cond_init(&d->idle, NULL);
    h->disk = d;
    scan(d, h, true);
    d->last_scan_us = now_us();
    if (pthread_create(&d->writer, NULL, writer_main, d) != 0) {
        h->disk = NULL;
        cb_set_err(err, errlen, "cache_disk: cannot start its writer");
        cb_disk_close(d, h);
        return NULL;
    }
    d->started = true;
    return d;
}

/* The writes that ended, handed back to h. */
static void take_done(cb_disk *d, cb_host_cache *h) {
    pthread_mutex_lock(&d->mu);
    size_t n = d->n_done;
    disk_job jobs[64];
    if (n > 64) n = 64;
    memcpy(jobs, d->done, sizeof(*jobs) * n);
    memmove(d->done, d->done + n, sizeof(*d->done) * (d->n_done - n));
    d->n_done -= n;
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < n; i++)
        cb_host_written(h, jobs[i].e, jobs[i].ok, jobs[i].us);
}

/* Hands job to the writer; false when there is no room for it (it is ended as failed). */
static void queue_write(cb_disk *d, cb_host_cache *h, cb_host_entry *e) {
    pthread_mutex_lock(&d->mu);
    size_t held = d->n_queue + d->n_done + 1 + (d->busy ? 1 : 0);
    bool ok = d->started && cb_grow((void **)&d->queue, &d->cap_queue, d->n_queue + 1, sizeof(*d->queue), 16) &&
              cb_grow((void **)&d->done, &d->cap_done, held, sizeof(*d->done), 16);
    if (ok) {
        d->queue[d->n_queue++] = (disk_job){.e = e};
        pthread_cond_signal(&d->cond);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok) cb_host_written(h, e, false, 0);
}

void cb_disk_pump(cb_disk *d, cb_host_cache *h) {
    if (!d) return;
    int32_t n;
    const cb_host_io *io = cb_host_take_io(h, &n);
    for (int32_t i = 0; i < n; i++) {
        if (io[i].op == CB_HOST_IO_WRITE) {
            queue_write(d, h, io[i].e);
        } else {
            char path[4096];
            file_path(d, io[i].id, path, sizeof(path));
            unlink(path); /* (gone already: another replica's eviction) */
        }
    }
    for (;;) {
        pthread_mutex_lock(&d->mu);
        size_t done = d->n_done;
        pthread_mutex_unlock(&d->mu);
        if (done == 0) break;
        take_done(d, h);
    }
    int64_t t = now_us();
    if (t - d->last_scan_us < DISK_RESCAN_US) return;
    d->last_scan_us = t;
    struct stat st;
    if (stat(d->dir, &st) != 0) return;
    if (st.st_mtim.tv_sec == d->seen.tv_sec && st.st_mtim.tv_nsec == d->seen.tv_nsec) return;
    scan(d, h, false);
}

void cb_disk_flush(cb_disk *d, cb_host_cache *h) {
    if (!d) return;
    cb_disk_pump(d, h);
    pthread_mutex_lock(&d->mu);
    while (d->started && (d->n_queue > 0 || d->busy))
        pthread_cond_wait(&d->idle, &d->mu);
    pthread_mutex_unlock(&d->mu);
    cb_disk_pump(d, h);
}

void cb_disk_close(cb_disk *d, cb_host_cache *h) {
    if (!d) return;
    if (d->started) {
        pthread_mutex_lock(&d->mu);
        d->stop = true;
        pthread_cond_signal(&d->cond);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->writer, NULL);
        d->started = false;
        if (h) cb_disk_pump(d, h); /* the writes' ends (any queued now end as failed) */
    }
    if (h && h->disk == d) h->disk = NULL;
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cond);
    pthread_cond_destroy(&d->idle);
    free(d->queue);
    free(d->done);
    free(d->dir);
    free(d);
}

const char *cb_disk_path(const cb_disk *d) { return d->dir; }
