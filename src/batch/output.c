/* output.c — result and error lines, resume. */
#include "output.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/util.h"

/* ---------------------------------------------------------------- lines --------------------- */

static int put(char **buf, size_t *cap, size_t at, int c) {
    if (!cb_grow((void **)buf, cap, at + 2, 1, 4096)) return -1;
    (*buf)[at] = (char)c;
    return 0;
}

long cb_batch_read_line(FILE *f, char **buf, size_t *cap, size_t max, bool *too_long, bool *complete) {
    size_t n = 0;
    int c = EOF;
    *too_long = false;
    *complete = false;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (n >= max) {
            *too_long = true;
            continue;
        }
        if (put(buf, cap, n, c) != 0) { /* out of memory: treat as too long */
            *too_long = true;
            continue;
        }
        n++;
    }
    if (c == EOF && n == 0 && !*too_long) return -1;
    *complete = c == '\n';
    if (n > 0 && (*buf)[n - 1] == '\r') n--;
    if (put(buf, cap, n, '\0') != 0) return -1;
    (*buf)[n] = '\0';
    return (long)n;
}

/* ---------------------------------------------------------------- resume -------------------- */

#define RESULT_LINE_MAX (64u << 20) /* a result line longer than this is not one we wrote */

static int note_done(cb_idset *done, const char *line, size_t len) {
    cJSON *root = cJSON_ParseWithLength(line, len);
    cJSON *cid = root ? cJSON_GetObjectItemCaseSensitive(root, "custom_id") : NULL;
    int rc = cJSON_IsString(cid) && cb_idset_add(done, cid->valuestring) < 0 ? -1 : 0;
    cJSON_Delete(root);
    return rc;
}

int cb_batch_out_load_done(const char *path, cb_idset *done, char *err, size_t errlen) {
    FILE *f = fopen(path, "r+");
    if (!f) {
        if (errno == ENOENT) return 0;
        cb_set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t cap = 0;
    bool too_long, complete;
    long n, kept = 0; /* bytes up to the end of the last complete line */
    int rc = 0;
    while ((n = cb_batch_read_line(f, &buf, &cap, RESULT_LINE_MAX, &too_long, &complete)) >= 0) {
        if (!complete) break;
        kept = ftell(f);
        if (!too_long && note_done(done, buf, (size_t)n) != 0) {
            cb_set_err(err, errlen, "out of memory reading %s", path);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        cb_set_err(err, errlen, "cannot read %s", path);
        rc = -1;
    }
    if (rc == 0 && fseek(f, 0, SEEK_END) == 0 && ftell(f) > kept && ftruncate(fileno(f), (off_t)kept) != 0) {
        cb_set_err(err, errlen, "cannot cut the unfinished last line of %s: %s", path, strerror(errno));
        rc = -1;
    }
    free(buf);
    fclose(f);
    return rc;
}

/* ---------------------------------------------------------------- writing ------------------- */

int cb_batch_out_open(cb_batch_out *o, const char *out_path, const char *err_path, const char *model_path, char *err,
                      size_t errlen) {
    memset(o, 0, sizeof(*o));
    o->out = o->err = -1;
    const char *slash = strrchr(model_path, '/'); /* like the server: the model is named by its file */
    snprintf(o->model, sizeof(o->model), "%s", slash ? slash + 1 : model_path);
    o->created = (long)time(NULL);
    o->out = open(out_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (o->out < 0) {
        cb_set_err(err, errlen, "cannot write %s: %s", out_path, strerror(errno));
        return -1;
    }
    o->err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (o->err < 0) {
        cb_set_err(err, errlen, "cannot write %s: %s", err_path, strerror(errno));
        close(o->out);
        o->out = -1;
        return -1;
    }
    return 0;
}

/* Appends s and a newline to fd in one write (or as few as the kernel takes); a failure cuts the
 * file back to where the line began, so no half line is left for the next one to be glued to. */
static int append_line(cb_batch_out *o, int fd, const char *s) {
    size_t n = strlen(s);
    char *line = malloc(n + 1);
    if (!line) {
        snprintf(o->why, sizeof(o->why), "out of memory");
        o->failed = true;
        return -1;
    }
    memcpy(line, s, n);
    line[n++] = '\n';
    off_t start = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, line + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            snprintf(o->why, sizeof(o->why), "%s", w < 0 ? strerror(errno) : "nothing written");
            if (start >= 0 && ftruncate(fd, start) != 0) /* a resume drops a cut last line anyway */
                snprintf(o->why, sizeof(o->why), "%s (and the cut line stays)", strerror(errno));
            o->failed = true;
            break;
        }
        done += (size_t)w;
    }
    free(line);
    return o->failed ? -1 : 0;
}

/* Prints o as one line to fd; takes ownership of o. */
static int write_line(cb_batch_out *o, int fd, cJSON *line) {
    char *s = line ? cJSON_PrintUnformatted(line) : NULL;
    cJSON_Delete(line);
    if (!s) {
        snprintf(o->why, sizeof(o->why), "out of memory");
        o->failed = true;
        return -1;
    }
    int rc = append_line(o, fd, s);
    free(s);
    return rc;
}

static void next_id(cb_batch_out *o, char *out, size_t len, const char *prefix) {
    snprintf(out, len, "%s%lx%06llx", prefix, (unsigned long)o->created, (unsigned long long)++o->seq);
}

int cb_batch_out_result(cb_batch_out *o, const char *custom_id, cb_openai_kind kind, const char *text,
                        const struct cobatch_chat_output *calls, const char *finish, int n_prompt, int n_generated,
                        int n_cached, int n_reasoning) {
    char id[64], suffix[48], body_id[64], req_id[64];
    next_id(o, suffix, sizeof(suffix), "");
    snprintf(id, sizeof(id), "batch_req_%s", suffix);
    snprintf(req_id, sizeof(req_id), "req_%s", suffix);
    snprintf(body_id, sizeof(body_id), "%s-%s", kind == CB_OPENAI_CHAT ? "chatcmpl" : "cmpl", suffix);
    size_t n_calls = calls ? calls->n_calls : 0;
    char(*ids)[80] = n_calls ? calloc(n_calls, sizeof(*ids)) : NULL;
    const char **id_of = n_calls ? calloc(n_calls, sizeof(char *)) : NULL;
    char *body = NULL;
    if (!n_calls || (ids && id_of)) {
        for (size_t k = 0; k < n_calls; k++) { /* unique in the file: the line's suffix and the call */
            snprintf(ids[k], sizeof(ids[k]), "call_%s_%zu", suffix, k);
            id_of[k] = ids[k];
        }
        body = cb_openai_response_json(kind, body_id, o->created, o->model,
                                       &(cb_openai_choice){.text = text,
                                                           .reasoning = calls ? calls->reasoning : NULL,
                                                           .finish = finish,
                                                           .calls = n_calls ? calls->calls : NULL,
                                                           .n_calls = n_calls,
                                                           .call_ids = id_of},
                                       1, &(cb_openai_usage){n_prompt, n_generated, n_cached, n_reasoning, -1, 0});
    }
    free(ids);
    free(id_of);
    cJSON *b = body ? cJSON_Parse(body) : NULL;
    free(body);
    cJSON *line = cJSON_CreateObject(), *resp = cJSON_CreateObject();
    if (!b || !line || !resp) {
        cJSON_Delete(b);
        cJSON_Delete(line);
        cJSON_Delete(resp);
        o->failed = true;
        return -1;
    }
    cJSON_AddStringToObject(line, "id", id);
    cJSON_AddStringToObject(line, "custom_id", custom_id);
    cJSON_AddNumberToObject(resp, "status_code", 200);
    cJSON_AddStringToObject(resp, "request_id", req_id);
    cJSON_AddItemToObject(resp, "body", b);
    cJSON_AddItemToObject(line, "response", resp);
    cJSON_AddNullToObject(line, "error");
    if (write_line(o, o->out, line) != 0) return -1;
    o->n_result++;
    return 0;
}

int cb_batch_out_error(cb_batch_out *o, int32_t line_no, const char *custom_id, const char *code, const char *fmt,
                       ...) {
    char id[64], msg[512];
    next_id(o, id, sizeof(id), "batch_req_");
    int k = snprintf(msg, sizeof(msg), "line %d: ", line_no);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + k, sizeof(msg) - (size_t)k, fmt, ap);
    va_end(ap);
    cJSON *line = cJSON_CreateObject();
    if (!line) {
        o->failed = true;
        return -1;
    }
    cJSON_AddStringToObject(line, "id", id);
    if (custom_id)
        cJSON_AddStringToObject(line, "custom_id", custom_id);
    else
        cJSON_AddNullToObject(line, "custom_id");
    cJSON_AddNullToObject(line, "response");
    cJSON *e = cJSON_AddObjectToObject(line, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    if (write_line(o, o->err, line) != 0) return -1;
    o->n_error++;
    return 0;
}

void cb_batch_out_close(cb_batch_out *o) {
    if (o->out >= 0) close(o->out);
    if (o->err >= 0) close(o->err);
    o->out = o->err = -1;
}

/* realpath of p's directory, then its last component: a name for a file that may not exist yet. */
static char *canonical(const char *p) {
    char *r = realpath(p, NULL);
    if (r) return r;
    const char *slash = strrchr(p, '/');
    char *dir = slash ? strndup(p, (size_t)(slash - p) + (slash == p)) : strdup(".");
    char *d = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!d) return NULL;
    const char *base = slash ? slash + 1 : p;
    size_t n = strlen(d) + strlen(base) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s/%s", d, base);
    free(d);
    return out;
}

bool cb_batch_same_file(const char *a, const char *b) {
    if (!strcmp(a, b)) return true;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char *ca = canonical(a), *cb = canonical(b);
    bool same = ca && cb && !strcmp(ca, cb);
    free(ca);
    free(cb);
    return same;
}

bool cb_batch_regular_file(const char *path, bool may_be_missing) {
    struct stat st;
    if (stat(path, &st) != 0) return may_be_missing && errno == ENOENT;
    struct stat null;
    return S_ISREG(st.st_mode) || (stat("/dev/null", &null) == 0 && st.st_rdev == null.st_rdev &&
                                   S_ISCHR(st.st_mode)); /* nothing read, all written: it ends */
}
