/* libFuzzer: the batch runner's JSONL reader (envelope, custom_id set, body through the OpenAI
 * parser), error lines written to /dev/null. */
#include "../../src/batch/input.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The engine's schema converter is llama.cpp's (not in this build of the pure parsers): here a
 * schema of an odd length converts, one of an even length is refused, so both paths run. */
char *cobatch_json_schema_grammar(const char *schema, char *err, size_t errlen) {
    if (strlen(schema) % 2) return strdup("root ::= \"{}\"");
    snprintf(err, errlen, "refused");
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fmemopen((void *)data, size, "r");
    if (!f) return 0;
    cb_batch_out o;
    memset(&o, 0, sizeof(o));
    o.out = open("/dev/null", O_WRONLY);
    o.err = open("/dev/null", O_WRONLY);
    snprintf(o.model, sizeof(o.model), "m");
    cb_idset done;
    cb_idset_init(&done);
    cb_batch_input in;
    char err[256];
    if (cb_batch_input_read(f, &done, NULL, &o, &in, err, sizeof(err)) == 0) {
        if (in.n + (size_t)in.refused + (size_t)in.skipped != (size_t)in.lines) abort();
        for (size_t i = 0; i < in.n; i++)
            if (!in.items[i]->custom_id || !in.items[i]->custom_id[0]) abort();
    }
    cb_batch_input_free(&in);
    cb_idset_free(&done);
    cb_batch_out_close(&o);
    fclose(f);
    return 0;
}
