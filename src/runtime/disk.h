/* disk.h — the prefix cache's disk tier: the files under the host tier (core/hostcache.h), which
 * outlive the process and are shared by the replicas that use one directory.
 *
 * Layout: DIR/<fingerprint>/<id>.cbkv, one file per entry, where the fingerprint (16 hex digits)
 * hashes everything that makes saved cells readable: the model file (its size and 64 samples of its
 * bytes), llama.cpp's build, the KV cache's types, flash attention, the contexts' layout and RoPE
 * (K is saved rotated). A
 * server never opens another fingerprint's folder, so a foreign entry is never loaded. Its text is
 * in DIR/<fingerprint>/FINGERPRINT for people.
 *
 * A file: a 128-byte header (magic, version, kind, token count, id, cells' bytes, fingerprint, a
 * checksum over the tokens and cells, a checksum over the header), the tokens, the cells as llama.cpp
 * saved them. Written once: to a temporary name, fsync, rename, fsync of the folder, so a reader sees
 * a whole file or none, whatever kills the writer; two replicas writing one entry each rename a
 * whole file. Every read checks the header, the tokens against the entry's and the checksum: a file
 * that fails is removed and its tokens computed instead.
 *
 * Writes run on a thread of their own (the engine hands entries over with cb_disk_pump and takes their
 * ends back at the next pump); reads run on the engine thread, in the runner's load (a read of a
 * conversation's cells costs less than computing it, or the tier does not offer it). */
#ifndef CB_DISK_H
#define CB_DISK_H

#include "../core/hostcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cb_disk cb_disk;

/* Opens (creates) DIR/<fingerprint of fp_text>/, removes the temporary files of writers that are
 * gone (a writer holds a lock on its own) and files that fail their header's checks, and indexes the
 * rest into h (newest first; those beyond h's disk budget are removed);
 * sets h->disk. h's disk tier must be on (cb_host_disk_on). wake(arg) is called from the writer's
 * thread after each write (NULL: none). NULL with err set when the folder cannot be made or the
 * writer cannot start. */
cb_disk *cb_disk_open(const char *dir, const char *fp_text, cb_host_cache *h, void (*wake)(void *), void *arg,
                      char *err, size_t errlen);
/* Engine thread, once a step: the tier's queued file work (writes to the writer, removals made), the
 * writes that ended since, and at most every 250 ms, when the folder changed, files other replicas
 * wrote indexed. */
void cb_disk_pump(cb_disk *d, cb_host_cache *h);
/* Waits until every queued write has ended (a drain), pumping. */
void cb_disk_flush(cb_disk *d, cb_host_cache *h);
/* Stops the writer (the writes queued are made first) and frees d. NULL: nothing. */
void cb_disk_close(cb_disk *d, cb_host_cache *h);

/* The cells of ON_DISK entry e, read and checked (malloc'ed, e->size bytes), or NULL: the file is
 * missing, short, foreign or corrupt. Engine thread. */
uint8_t *cb_disk_read(cb_disk *d, const cb_host_entry *e);

/* The fingerprint of a model file: its size and a SHA-256 over 64 samples of 64 KiB spread over it,
 * as hex into out (65 bytes). Returns 0, or -1 when the file cannot be read. */
int cb_disk_model_hash(const char *path, char out[65]);

/* The folder's path (for logs). */
const char *cb_disk_path(const cb_disk *d);

#endif
