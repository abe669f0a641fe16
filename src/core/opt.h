/* opt: the one option-table parser of every `scaffold` subcommand.
 *
 * A command describes its options once, in a table (long name, optional one-letter alias, type,
 * destination, range, help). opt_parse() fills the destinations and reports the first problem as
 * one ERR_USAGE message naming the option and what it takes ("--threads: expected an integer in
 * [1, 65536], got 'x'"); opt_usage() prints the help from the same table, so the help and the
 * parser cannot disagree. Values are always taken from the next argument (or after '='), so
 * negative numbers reach the range check instead of being read as options. Long names match
 * with '-' and '_' interchangeable (--problem-scale = --problem_scale). -h/--help is built in.
 * The values passed to an OPT_FN callback point into argv (stable), but the array holding them
 * does not outlive the call.
 *
 * Typical use (see src/cli/common.c, cli_parse):
 *     const opt_spec opts[] = {
 *         OPT_STR_('c', "checkpoint", &ckpt, "FILE", "the checkpoint"),
 *         OPT_INT_(0, "threads", &threads, 1, 65536, "N", "OpenMP threads"),
 *         OPT_END_};
 *     const opt_cmd cmd = {"predict", "--checkpoint FILE [options]", "Runs ...", opts,
 *                          OPT_POS_NONE, NULL};
 */
#ifndef SCAFFOLD_CORE_OPT_H
#define SCAFFOLD_CORE_OPT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* Upper bound of a numeric option that has none (its type's range still applies). */
#define OPT_NO_MAX HUGE_VAL

typedef enum {
    OPT_END = 0, /* table terminator */
    OPT_FLAG,    /* no value: *(int *)dst = 1 */
    OPT_COUNT,   /* no value, repeatable (-vv): ++*(int *)dst */
    OPT_INT,     /* int in [min, max] */
    OPT_I64,     /* int64_t in [min, max] */
    OPT_SIZE,    /* int64_t, decimal with an optional binary suffix k/m/g/t, in [min, max] */
    OPT_DOUBLE,  /* finite double in [min, max] */
    OPT_STR,     /* const char * pointing into argv */
    OPT_FN,      /* fn(spec, values, n, ctx) with `nargs` values (1 after --name=value) */
    OPT_SECTION  /* not an option: `help` is printed as a heading in the option list */
} opt_type;

typedef struct opt_spec opt_spec;

/* Callback of OPT_FN: 0, or an ERR_* code after err_set() (the parser prefixes "--name: "). */
typedef int (*opt_fn)(const opt_spec *o, char **vals, int n, void *ctx);

struct opt_spec {
    const char *name; /* long name without the leading "--" */
    char shrt;        /* one-letter alias (-c) or 0 */
    opt_type type;
    void *dst;
    double min, max;  /* inclusive range of the numeric types (ignored when min == max == 0) */
    const char *arg;  /* value name in the help ("N", "FILE"); NULL: from the type */
    const char *help; /* one line; NULL hides the option from the help */
    const char *def;  /* default shown in the help as " [def]"; NULL: none */
    opt_fn fn;        /* OPT_FN */
    void *ctx;        /* OPT_FN */
    int nargs;        /* OPT_FN: values taken from the following arguments (0 = 1) */
};

/* What a command does with arguments that are not options. */
enum {
    OPT_POS_NONE = 0, /* none allowed: "unexpected argument 'x'" */
    OPT_POS_ANY,      /* anywhere; moved, in order, to the end of argv ("--" ends the options) */
    OPT_POS_REST      /* parsing stops at the first non-option or "--" (left in argv) */
};

typedef struct opt_cmd {
    const char *name;     /* subcommand name, used in messages ("see 'scaffold NAME --help'") */
    const char *synopsis; /* usage line after "usage: scaffold NAME " */
    const char *summary;  /* paragraph printed after the usage line; NULL: none */
    const opt_spec *opts; /* terminated by an OPT_END entry */
    int positional;       /* OPT_POS_* */
    const char *epilog;   /* printed after the option list (exit statuses, notes); NULL: none */
} opt_cmd;

#define OPT_HELP 1

/* Parses argv[1..argc). Returns 0 with *first = index of the first positional argument (argc if
 * none), OPT_HELP when -h/--help was given (nothing else is reported), or ERR_USAGE with one
 * message. Destinations of options that were not given are left untouched (set defaults first). */
int opt_parse(const opt_cmd *cmd, int argc, char **argv, int *first);

/* Prints the help: usage line, summary, the options of the table, epilog. */
void opt_usage(const opt_cmd *cmd, FILE *out);

/* Parses a size: "3136", "12k", "1.5m", "2g", "1t" (binary multiples) into *out. 0 or -1. */
int opt_parse_size(const char *s, int64_t *out);

/* Table entry helpers (designated initialisers; unnamed fields are zero). */
#define OPT_FLAG_(s, n, d, h) {.name = (n), .shrt = (s), .type = OPT_FLAG, .dst = (d), .help = (h)}
#define OPT_COUNT_(s, n, d, h)                                                                     \
    {.name = (n), .shrt = (s), .type = OPT_COUNT, .dst = (d), .help = (h)}
#define OPT_STR_(s, n, d, a, h)                                                                    \
    {.name = (n), .shrt = (s), .type = OPT_STR, .dst = (d), .arg = (a), .help = (h)}
#define OPT_INT_(s, n, d, lo, hi, a, h)                                                            \
    {.name = (n), .shrt = (s), .type = OPT_INT, .dst = (d), .min = (lo), .max = (hi), .arg = (a), \
     .help = (h)}
#define OPT_I64_(s, n, d, lo, hi, a, h)                                                            \
    {.name = (n), .shrt = (s), .type = OPT_I64, .dst = (d), .min = (lo), .max = (hi), .arg = (a), \
     .help = (h)}
#define OPT_SIZE_(s, n, d, lo, hi, a, h)                                                           \
    {.name = (n), .shrt = (s), .type = OPT_SIZE, .dst = (d), .min = (lo), .max = (hi),           \
     .arg = (a), .help = (h)}
#define OPT_DOUBLE_(s, n, d, lo, hi, a, h)                                                         \
    {.name = (n), .shrt = (s), .type = OPT_DOUBLE, .dst = (d), .min = (lo), .max = (hi),         \
     .arg = (a), .help = (h)}
#define OPT_FN_(s, n, f, c, k, a, h)                                                               \
    {.name = (n), .shrt = (s), .type = OPT_FN, .fn = (f), .ctx = (c), .nargs = (k), .arg = (a),  \
     .help = (h)}
#define OPT_SECTION_(h) {.type = OPT_SECTION, .help = (h)}
#define OPT_END_ {.type = OPT_END}

#endif
