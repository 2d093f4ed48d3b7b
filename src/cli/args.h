/* args.h — value parsing for the flag table (flags.h) and the default model. */
#ifndef CB_ARGS_H
#define CB_ARGS_H

#include <cobatch.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses a whole decimal integer in [lo, hi]; returns false otherwise. */
bool cb_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parses a finite float in [lo, hi]. */
bool cb_parse_float(const char *s, double lo, double hi, double *out);

/* The model to use when -m is not given: $COBATCH_MODEL, else the one `make` fetched. */
const char *cb_default_model(void);

#endif
