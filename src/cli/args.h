/* args.h — strict command-line parsing shared by the cobatch subcommands: every value is checked
 * and a bad one is an error with the flag's name, never a silent default. */
#ifndef CB_ARGS_H
#define CB_ARGS_H

#include <cobatch.h>
#include <stdbool.h>
#include <stdint.h>

/* Parses a whole decimal integer in [lo, hi]; returns false otherwise. */
bool cb_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Parses a finite float in [lo, hi]. */
bool cb_parse_float(const char *s, double lo, double hi, double *out);

/* Engine flags shared by run, bench, serve and batch. If argv[*i] is one of them, consumes it
 * (and its value), sets *p and returns 1; returns 0 if it is not an engine flag, -1 on a bad value
 * (message printed). */
int cb_args_engine(int argc, char **argv, int *i, struct cobatch_engine_params *p);
/* The same for sampling flags (temperature, top-k, ...). */
int cb_args_sampling(int argc, char **argv, int *i, struct cobatch_sampling *s);
void cb_args_engine_help(void);
void cb_args_sampling_help(void);

/* The model to use when -m is not given: $COBATCH_MODEL, else the one `make` fetched. */
const char *cb_default_model(void);

#endif
