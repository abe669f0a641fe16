/* algo: which algorithm runs each Conv3d k3 pass (forward, input gradient, weight gradient),
 * chosen by measurement as cuDNN's Find and PyTorch's cudnn.benchmark do, with the choices
 * cached per CPU model, kernel path, thread count and shape.
 *
 * The algorithms (conv3d.c runs them; which apply depends on the shape, the precision and the
 * CPU):
 *   direct         implicit GEMM over the 27 taps on the fp32 kernels (bf16: on bf16-rounded
 *                  operands, one rounding of the result: exact products, fp32 sums)
 *   winograd       F(4x4x2, 3x3x3) with fp32 transforms and GEMMs (bf16: on bf16-rounded
 *                  operands, one rounding; the transforms' fp32 error is ~1e-5 of the result)
 *   direct-bf16    the direct walk on vdpbf16ps (AVX512_BF16; bf16 forward and input gradient)
 *   winograd-bf16  Winograd whose transformed-domain GEMMs run on vdpbf16ps: fp32 transforms and
 *                  accumulation, the transformed operands rounded to bf16 (conv_wino.c,
 *                  kern_wino16.h, kern_avx512bf16.c)
 *   amx            AMX tiles (bf16; channels multiples of 32)
 *   amx-x3         fp32 on AMX tiles, each product as three bf16 products (hi*hi + lo*hi +
 *                  hi*lo, fp32 sums; about 2^-16 of each product left out, conv3d.c); fp32
 *                  forward and input gradient, channels multiples of 32; measured or forced only
 *
 * How a pass gets its algorithm (nn_algo_pick), first match wins:
 *   1. SCAFFOLD_NN_ALGO=NAME forces NAME wherever it applies (elsewhere the rule below);
 *   2. a pinned file (SCAFFOLD_NN_ALGO_PIN=FILE, the run folder's nn_algorithms.tsv of an
 *      earlier run) gives the shape's algorithm: bit-for-bit the earlier run's choices;
 *   3. in measure mode (nn_algo_set_mode, SCAFFOLD_NN_ALGO=measure; the training driver's
 *      default) the cache (SCAFFOLD_NN_ALGO_CACHE, default $XDG_CACHE_HOME/scaffold/
 *      nn-algo.tsv or ~/.cache/scaffold/nn-algo.tsv; "0" keeps it in memory only) or, on the
 *      first use of a shape, a measurement: every applicable algorithm runs the pass on the
 *      call's own data (the input and weight gradients into the call's outputs or a scratch
 *      weight gradient), the most accurate one first as the reference; an algorithm whose
 *      result leaves the accuracy budget on a sample of the elements is dropped, and the
 *      fastest of the others (best of up to 3 runs) is kept, added to the cache and used.
 *      A run whose OpenMP team got under SCAFFOLD_NN_ALGO_QUIET percent of its CPUs
 *      (nn_team_cpu_seconds) is not quiet: such times are run again, and a choice that still
 *      rests on one is used but not cached (busy). The cache keeps each choice's runner-up.
 *      A cached choice's first use in a process is timed; quiet and 1.5x faster than the time
 *      of one measurement, the entry was measured on a busy host: the shape is measured again
 *      before it is used. A runner-up within 2x runs once just before it (up to 7 process
 *      starts): the entry's two times become the means of these pairs, and where the
 *      runner-up's is the lower the cache swaps them for later processes (this one keeps its
 *      choice: deterministic given the cache);
 *   4. otherwise the built-in rule (nn_algo_rule: the choice the measurements below gave on
 *      the CPUs measured; the library's default mode, so a test is deterministic).
 * The accuracy budget (nn_algo_within_budget): fp32, every sampled element within 1e-4 of the
 * reference's largest magnitude plus 1e-4 relative (the Winograd tests' tolerance); bf16, every
 * element within one bf16 ulp plus 3% of the largest magnitude and the difference's norm within
 * 2% of the reference's (the tests hold our bf16 passes to one ulp plus 2% of PyTorch's
 * autocast, whose own CPU backward passes are 0.6% of the norm and 0.9% of the largest value
 * off the one-rounding result; winograd-bf16 is 1.2-1.5% and 1.5-2.2% off it).
 * Results are bitwise deterministic given the choices: the same algorithm computes the same
 * bits whatever the thread count, so a run with a pinned file reproduces its losses.
 * Not thread-safe: called from the thread that runs the layers, as the layers are. */
#ifndef SCAFFOLD_NN_ALGO_H
#define SCAFFOLD_NN_ALGO_H

#include "nn/layers.h"

#include <stddef.h>

typedef enum {
    NN_ALGO_DIRECT = 0,
    NN_ALGO_WINOGRAD = 1,
    NN_ALGO_DIRECT_BF16 = 2,
    NN_ALGO_WINOGRAD_BF16 = 3,
    NN_ALGO_AMX = 4,
    NN_ALGO_AMX_X3 = 5,
    NN_ALGO_COUNT = 6
} nn_algo;

typedef enum { NN_PASS_FWD = 0, NN_PASS_BWD_DATA = 1, NN_PASS_BWD_WEIGHT = 2 } nn_pass;

/* "direct", "winograd", ...; NULL for an unknown index. nn_algo_parse: the index, or -1. */
const char *nn_algo_name(int algo);
int nn_algo_parse(const char *name);
/* "fwd", "bwd_data", "bwd_weight". */
const char *nn_pass_name(int pass);

/* A Conv3d k3 pass: cat(inA (ca channels), inB (cb)) -> cout over N samples of D x H x W;
 * split: an input gradient written as two tensors (ca | cb columns). */
typedef struct nn_algo_key {
    int pass;
    nn_prec prec;
    int N, D, H, W, ca, cb, cout, split;
} nn_algo_key;

/* One pass to choose for (conv3d.c fills it): which algorithms apply (bit 1 << algo), the rule's
 * choice, and a runner that computes the pass with a given algorithm. For a measurement, the
 * forward and input-gradient runners write the call's outputs (out[0], out[1]: nout[i] floats
 * each, compared between algorithms); the weight gradient's writes into `dw` (ndw floats,
 * zeroed by the caller, the accumulation target of that run). */
typedef struct nn_algo_job {
    nn_algo_key key;
    unsigned eligible;
    int rule;
    void (*run)(const struct nn_algo_job *j, int algo, float *dw);
    void *ctx;
    const float *out[2];
    size_t nout[2];
    size_t ndw;
    /* the workspace the runners share (nws floats from ws; scratch at the call, NULL: none):
     * its pages that no earlier measurement on it reached are zeroed before a measurement's
     * first run (a high-water mark: the runners use a prefix of it), so that the first runner
     * to reach fresh pages does not pay their faults inside its timing; not before a cached
     * choice's run, which touches only what that algorithm uses (a bf16 run keeps fp32
     * Winograd's part of the workspace out of memory) */
    float *ws;
    size_t nws;
} nn_algo_job;

/* The algorithm for this job (see above). *done is set to 1 when a measurement left the
 * chosen algorithm's own result in the outputs (forward and input gradient: nothing more to
 * run), else 0. */
int nn_algo_pick(const nn_algo_job *j, int *done);

/* The choice nn_algo_pick would make, without measuring (the rule where it would measure) and
 * without recording it. */
int nn_algo_peek(const nn_algo_job *j);

/* The accuracy budget (see above): bf16 elements within one ulp plus NN_ALGO_BF16_ELEM of the
 * largest magnitude, and the difference's norm within NN_ALGO_BF16_NORM of the reference's.
 * SCAFFOLD_NN_ALGO_BUDGET=strict narrows the elements to NN_ALGO_BF16_STRICT (the bound of
 * fp32 Winograd over bf16 operands), which leaves winograd-bf16 out of the rule and of the
 * measurements (forcing or pinning it still runs it). */
#define NN_ALGO_BF16_ELEM 0.03
#define NN_ALGO_BF16_NORM 0.02
#define NN_ALGO_BF16_STRICT 3e-5
int nn_algo_within_budget(const float *got, const float *ref, size_t n, nn_prec prec);
int nn_algo_strict(void);
/* The algorithms a job may choose from: its eligible set, less winograd-bf16 when strict. */
unsigned nn_algo_eligible(const nn_algo_job *j);

/* The built-in rule, from the CPU's features and the shape: fp32 on Winograd where it applies;
 * bf16 on AMX where it applies, else on winograd-bf16 or Winograd, else on the pair kernels
 * (except a K that is no multiple of 32 on an AMX CPU: the fp32 kernels), else direct. */
int nn_algo_rule(const nn_algo_job *j);

/* Modes. NN_ALGO_RULE (the library's default: the rule, no measurement, no cache) or
 * NN_ALGO_MEASURE. SCAFFOLD_NN_ALGO=rule|measure overrides what a program sets. */
enum { NN_ALGO_MODE_RULE = 0, NN_ALGO_MODE_MEASURE = 1 };
void nn_algo_set_mode(int mode);
int nn_algo_mode(void);

/* Takes SCAFFOLD_NN_ALGO and SCAFFOLD_NN_ALGO_PIN (nn/settings.h) and reads the pinned file now
 * (they are otherwise taken at first use): 0, or ERR_CONFIG for an unknown SCAFFOLD_NN_ALGO value
 * and ERR_IO / ERR_FORMAT for a pinned file that cannot be read or has a malformed line (the
 * message names the file and line). */
int nn_algo_init(void);

/* Forgets every choice, the cache and the pin, and takes the settings again at next use
 * (tests; after changing the environment, nn_settings_reload first). */
void nn_algo_reset(void);

/* Choices made so far in this process (each shape once), for printing and the run folder. */
typedef struct nn_algo_choice {
    nn_algo_key key;
    int algo;
    char how[12];      /* "measured", "cached", "pinned", "forced", "rule" */
    double ms;         /* its time (measured or from the cache), 0 when not measured */
    double ms_all[NN_ALGO_COUNT]; /* measured: each algorithm's time, 0 not run, -1 over budget */
    int busy; /* measured while a run did not get its share of the CPUs: not cached */
} nn_algo_choice;
int nn_algo_count(void);
const nn_algo_choice *nn_algo_get(int i);
/* Seconds spent measuring (every algorithm's runs and the reference sampling), and how many
 * shapes were measured. */
double nn_algo_select_seconds(int *measured);

/* One line per choice "conv3d fwd bf16 1x32x32x32 64+0->64: winograd-bf16 (measured 4.1 ms;
 * winograd 6.0, direct 17.2)" into buf (NUL-terminated, truncated to n). */
void nn_algo_describe(const nn_algo_choice *c, char *buf, size_t n);

/* Writes this process's choices to path in the cache / pin format (atomically). 0 or ERR_IO. */
int nn_algo_write(const char *path);

/* The cache file in use (NULL: none). */
const char *nn_algo_cache_path(void);

#endif
