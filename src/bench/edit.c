/* edit.c — the `edit` workload: an agent's edit of a file it read. Each request holds a file of
 * Python functions and asks for the whole file back with one function renamed; a greedy answer
 * copies most of its prompt, which is where drafts from the request's own text (or the file sent as
 * a prediction) hold. Files are made from templates and word lists by the workload's seed. */
#include "workload.h"
#include "../util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *VERBS[] = {"compute", "collect", "filter", "merge", "count", "scale", "update", "parse",
                              "format",  "check",   "load",   "store", "split", "group", "sort",   "find"};
static const char *NOUNS[] = {"prices", "orders", "scores", "names", "items", "events", "rows",  "users",
                              "totals", "ranges", "labels", "files", "lines", "tokens", "rates", "counts"};
static const char *ARGS[] = {"values", "data", "records", "limit", "factor", "offset", "key", "size", "step"};

#define PICK(a) (a)[cb_rng_range(rng, 0, (int32_t)(sizeof(a) / sizeof((a)[0])) - 1)]

/* One function of 6 to 9 lines after a blank line, appended to b (room: cap); its name in name. */
static size_t one_function(uint64_t *rng, char *b, size_t len, size_t cap, char *name, size_t name_len) {
    const char *a = PICK(ARGS), *c = PICK(ARGS);
    if (a == c) c = "other";
    snprintf(name, name_len, "%s_%s", PICK(VERBS), PICK(NOUNS));
    int k = cb_rng_range(rng, 2, 9), shape = cb_rng_range(rng, 0, 2);
    if (shape == 0)
        len += (size_t)snprintf(
            b + len, cap - len,
            "\ndef %s(%s, %s):\n    result = []\n    for item in %s:\n        if item > %s:\n"
            "            result.append(item * %d)\n        else:\n            result.append(item + %d)\n"
            "    return result\n",
            name, a, c, a, c, k, k);
    else if (shape == 1)
        len += (size_t)snprintf(b + len, cap - len,
                                "\ndef %s(%s, %s):\n    total = 0\n    for index, item in enumerate(%s):\n"
                                "        if index %% %d == 0:\n            total += item\n    return total + %s\n",
                                name, a, c, a, k, c);
    else
        len += (size_t)snprintf(b + len, cap - len,
                                "\ndef %s(%s, %s=%d):\n    \"\"\"Return the %s of %s, %s at a time.\"\"\"\n"
                                "    out = {}\n    for item in %s:\n        out[item] = out.get(item, 0) + %s\n"
                                "    return out\n",
                                name, a, c, k, name, a, c, a, c);
    return len < cap ? len : cap - 1;
}

int cb_workload_edit(const cb_workload_opts *o, uint64_t *rng, cb_workload *w, char *err, size_t errlen) {
    if (!o->chat_fn) {
        cb_set_err(err, errlen, "edit: needs the model's chat template (a tokenizer of chats)");
        return -1;
    }
    int lines = o->edit_lines > 0 ? o->edit_lines : 40;
    for (int i = 0; i < w->n; i++) {
        cb_work_item *it = &w->items[i];
        size_t cap = (size_t)lines * 96 + 1024;
        char *file = malloc(cap), *msg = malloc(cap + 256), names[64][48];
        if (!file || !msg) {
            free(file), free(msg);
            cb_set_err(err, errlen, "out of memory");
            return -1;
        }
        size_t len = (size_t)snprintf(file, cap, "import math\n");
        int nf = 0;
        while (nf < 64 && (int)(len / 28) < lines) /* ~28 bytes a line */
            len = one_function(rng, file, len, cap, names[nf], sizeof(names[nf])), nf++;
        const char *old = names[cb_rng_range(rng, 0, nf - 1)];
        int head = snprintf(msg, cap + 256,
                            "Rename the function %s to %s_v2 in this file. Reply with the whole file "
                            "and nothing else.\n\n",
                            old, old);
        int32_t n_msg = 0, n_bare = 0;
        int32_t *bare = o->chat_fn(o->chat_ctx, msg, &n_bare); /* the instruction alone */
        snprintf(msg + head, cap + 256 - (size_t)head, "%s", file);
        int32_t *toks = bare ? o->chat_fn(o->chat_ctx, msg, &n_msg) : NULL;
        free(bare);
        if (!toks) {
            free(file), free(msg);
            cb_set_err(err, errlen, "edit: request %d could not be rendered with the chat template", i + 1);
            return -1;
        }
        it->tokens = toks;
        it->n_in = n_msg;
        /* the answer is the file again (its tokens, and a few for the new names and a fence) */
        it->n_out = o->output_len > 0 ? o->output_len : n_msg - n_bare + 16;
        it->text = msg;
        it->prediction = file;
    }
    return 0;
}
