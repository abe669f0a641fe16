/* settings: the CPU engine's environment variables (SCAFFOLD_ISA, SCAFFOLD_BF16DP, SCAFFOLD_AMX
 * and SCAFFOLD_NN_*). One table (settings.c) gives each its name, kind, default, accepted values
 * and a line of documentation; the environment is read once, at the first nn_settings() call
 * (pthread_once: any thread may be first), into struct nn_settings, which the engine reads
 * instead of calling getenv. docs/nn.md ("Environment variables") documents the same list
 * (tests/nn/run.sh fails when the two differ); `scaffold benchmark -vv` prints the values.
 *
 * A value the engine cannot use is handled where it is used, as it always was: an unknown
 * SCAFFOLD_ISA is a warning when the kernel path is chosen (gemm.c), an unknown
 * SCAFFOLD_NN_ALGO and a bad SCAFFOLD_NN_ALGO_PIN file are ERR_CONFIG from nn_algo_init
 * (algo.c); the others fall back to what they always did (mostly the default).
 *
 * The CUDA backend's SCAFFOLD_CUDA_SKIP (read per context, nn/cuda) and the training driver's
 * variables are not in the table: docs/gpu.md and docs/dist.md document them. */
#ifndef SCAFFOLD_NN_SETTINGS_H
#define SCAFFOLD_NN_SETTINGS_H

#include <stddef.h>

/* Numeric defaults (plain numbers: the table shows them as written). Why these values: the
 * comments where they are used (conv_pack.c, conv_wino.c, conv_wgrad.c). */
#define NN_SETTINGS_SLAB_BYTES 50331648 /* 48 MiB of padded planes per slab */
#define NN_SETTINGS_WINO_UMAX 134217728 /* 128 MiB of Winograd's U per column group */
#define NN_SETTINGS_DW_REPLICAS 8       /* per-thread weight-gradient copies, at most */
#define NN_SETTINGS_ALGO_QUIET 80       /* percent of the CPUs a cached measurement had */

/* Enum values that are no choice of the variable's own. */
enum {
    NN_SET_UNSET = -1,   /* unset or empty: the engine's (or the program's) own choice */
    NN_SET_UNKNOWN = -2, /* a value it does not know (reported where it is used) */
};
/* SCAFFOLD_NN_ALGO's modes (its other values are NN_ALGO_* algorithms, forced). */
enum { NN_SET_ALGO_RULE = -3, NN_SET_ALGO_MEASURE = -4 };
/* SCAFFOLD_BF16DP. */
enum { NN_SET_BF16DP_OFF = 0, NN_SET_BF16DP_ON = 1, NN_SET_BF16DP_EMULATE = 2 };
/* SCAFFOLD_NN_BF16_STORE and SCAFFOLD_NN_KEEP_A1: 0 off, 1 on, or by the memory (unet_plan.c). */
enum { NN_SET_STORE_AUTO = 2 };

/* The values the engine uses. The strings point into copies of the environment's text that
 * live until the next nn_settings_reload. */
struct nn_settings {
    int isa;                /* SCAFFOLD_ISA: NN_ISA_*, NN_SET_UNSET (the best path the CPU
                               runs) or NN_SET_UNKNOWN */
    int bf16dp;             /* SCAFFOLD_BF16DP: NN_SET_BF16DP_* (ON: where the path has them) */
    int amx;                /* SCAFFOLD_AMX: 0 off, 1 where the CPU has AMX-BF16 */
    int algo;               /* SCAFFOLD_NN_ALGO: NN_ALGO_* (forced), NN_SET_ALGO_RULE,
                               NN_SET_ALGO_MEASURE, NN_SET_UNSET (the program's mode) or
                               NN_SET_UNKNOWN */
    const char *algo_cache; /* SCAFFOLD_NN_ALGO_CACHE: NULL (unset: the default file), "" (no
                               file: "0" or empty) or the file */
    const char *algo_pin;   /* SCAFFOLD_NN_ALGO_PIN: NULL (unset or empty) or the file */
    int algo_strict;        /* SCAFFOLD_NN_ALGO_BUDGET: 1 for strict */
    int algo_quiet;         /* SCAFFOLD_NN_ALGO_QUIET: percent of its CPUs a measured run must
                               get for its choice to be cached (algo.c) */
    int dw_replicas;        /* SCAFFOLD_NN_DW_REPLICAS: cap on the copies, 0..8 */
    int winograd;           /* SCAFFOLD_NN_WINOGRAD: 0 takes Winograd out of every choice */
    size_t wino_umax;       /* SCAFFOLD_NN_WINO_UMAX: bytes of U per column group */
    int wino_own;           /* SCAFFOLD_NN_WINO_OWN: 0 keeps every Winograd chunk shared */
    int wino_planes;        /* SCAFFOLD_NN_WINO_PLANES: transformed planes per fp32 Winograd
                               pass over the tiles, 1, 2 or 4; 0 by the size of U */
    int bf16_store;         /* SCAFFOLD_NN_BF16_STORE: 0 keeps bf16 conv outputs in fp32, 1
                               as bf16, NN_SET_STORE_AUTO as bf16 where that saves much */
    int keep_a1;            /* SCAFFOLD_NN_KEEP_A1: 0 makes each block's inner activation again
                               in the backward pass, 1 keeps it from the forward pass,
                               NN_SET_STORE_AUTO keeps it where that takes little memory */
    size_t slab_bytes;      /* SCAFFOLD_NN_SLAB_BYTES: bytes of padded planes per slab */
};

/* The values, read from the environment on the first call. */
const struct nn_settings *nn_settings(void);

/* Reads the environment again, and redoes what the engine derived from it (the kernel path:
 * SCAFFOLD_ISA, SCAFFOLD_BF16DP, SCAFFOLD_AMX; a path set with nn_isa_set is replaced). For
 * tests, and for programs that change the environment on purpose: call it right after
 * setenv/unsetenv, while no engine call runs (the strings of the previous values are freed).
 * The algorithm choices already made stay (nn_algo_reset forgets them). */
void nn_settings_reload(void);

/* The table. */
typedef enum { NN_SET_BOOL, NN_SET_INT, NN_SET_SIZE, NN_SET_ENUM, NN_SET_STRING } nn_setting_kind;
typedef struct nn_setting {
    const char *name;    /* the environment variable */
    nn_setting_kind kind;
    const char *def;     /* the default, as nn_settings_describe shows it */
    const char *allowed; /* the values or the range it takes */
    const char *doc;     /* what it does, in one line */
    size_t off;          /* its field in struct nn_settings */
    /* Sets the field from a value in the environment (v: never NULL): 0, or 1 when the value is
     * not one it knows (the field then holds what the engine makes of it, mostly the default). */
    int (*parse)(const char *v, void *field);
    const char *(*label)(int v); /* NN_SET_ENUM: a field value's name */
} nn_setting;
int nn_settings_count(void);
const nn_setting *nn_settings_at(int i); /* NULL out of range */

/* The text a variable of the table had when it was read (NULL: unset or not in the table). */
const char *nn_settings_env(const char *name);

/* Setting i's value as the engine uses it and where it came from: "1 (default)",
 * "150000 (environment)", "0 (environment \"abc\", not recognised)". */
void nn_settings_describe(int i, char *buf, size_t n);

/* The table with its values, a log_info line per variable (scaffold benchmark -vv). */
void nn_settings_log(void);

/* One warning (log_warn) per variable set to a value it does not take, naming the variable,
 * what it takes and the value used instead; SCAFFOLD_ISA and SCAFFOLD_NN_ALGO are reported where
 * they are used. scaffold benchmark calls it at every verbosity. */
void nn_settings_warn(void);

#endif
