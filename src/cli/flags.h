/* flags.h — one table-driven command-line parser for every subcommand: a flag is a row (names,
 * type, range, help, destination), so parsing, validation, error messages and help read the same
 * everywhere. Every value is checked; a bad one is an error naming the flag, never a silent
 * default. */
#ifndef CB_FLAGS_H
#define CB_FLAGS_H

#include <cobatch.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    CB_FLAG_SET,   /* no value: *(bool *)dst = true */
    CB_FLAG_CLEAR, /* no value: *(bool *)dst = false */
    CB_FLAG_CONST, /* no value: *(int *)dst = lo */
    CB_FLAG_I32,   /* a whole number in [lo, hi] into int32_t */
    CB_FLAG_INT,   /* ... into int */
    CB_FLAG_I64,   /* ... into int64_t */
    CB_FLAG_U32,   /* ... into uint32_t */
    CB_FLAG_U64,   /* ... into uint64_t */
    CB_FLAG_SIZE,  /* ... into size_t */
    CB_FLAG_F32,   /* a finite number in [lo, hi] into float */
    CB_FLAG_F64,   /* ... into double */
    CB_FLAG_STR,   /* the text, into const char * (argv's own string) */
    CB_FLAG_ENUM,  /* one of choices ("a|b|c"), its values[index] (or the index) into int */
    CB_FLAG_LIST,  /* repeatable: appended to the const char * array dst, *count of at most max */
    CB_FLAG_FN,    /* parse(value, dst) decides; false is an error saying what it takes */
} cb_flag_type;

typedef struct {
    const char *names; /* "-m, --model": every spelling, comma-separated */
    const char *meta;  /* the value's name in help ("FILE"); NULL for flags without a value */
    cb_flag_type type;
    void *dst;
    double lo, hi;                               /* number types */
    const char *choices;                         /* ENUM: "continuous|static|sequential" */
    const int *values;                           /* ENUM: the value of each choice; NULL = its index */
    size_t *count;                               /* LIST */
    size_t max;                                  /* LIST */
    bool (*parse)(const char *value, void *dst); /* FN */
    const char *takes;                           /* FN: what a value must be, for the error ("a token count or none") */
    const char *help;                            /* lines joined by '\n' */
} cb_flag;

typedef struct {
    const char *title; /* "engine", "sampling", ... */
    const cb_flag *flags;
    size_t n;
} cb_flag_group;

typedef struct {
    const char *cmd;    /* "cobatch serve" */
    const char *usage;  /* the usage line(s), printed first by --help */
    const char *footer; /* printed last, or NULL */
    cb_flag_group groups[6];
    size_t n_groups;
} cb_cli;

/* Parses argv[1..argc) against cli's groups (the first group with a spelling wins). Returns 0
 * (parsed), 1 (-h or --help: help printed to out) or 2 (an error printed to err: unknown flag,
 * missing or bad value, a list over its max). */
int cb_flags_parse(const cb_cli *cli, int argc, char **argv, FILE *out, FILE *err);

/* The usage line, every group's flags with their help, and the footer. */
void cb_flags_help(const cb_cli *cli, FILE *out);

/* The engine flags shared by run, bench, serve and batch, writing into p (not owned; it must
 * outlive the group); and the sampling flags of run. */
#define CB_ENGINE_FLAGS 46
#define CB_SAMPLING_FLAGS 10
cb_flag_group cb_flags_engine(cb_flag *room, struct cobatch_engine_params *p);
cb_flag_group cb_flags_sampling(cb_flag *room, struct cobatch_sampling *s);

#endif
