/* rng: the project's counter-based random number generator.
 *
 * Every random draw in scaffold comes from a stream keyed by (seed, purpose, a, b): the fractal
 * class proposed at attempt a, the chaos game of instance (class a, instance b), the model's
 * initial weights, the sampler permutation of epoch a... Output n of a stream is
 * mix64(key + n * GOLDEN) (SplitMix64 evaluated at an arbitrary counter), so a stream can be
 * created anywhere without replaying others. That is what makes every artifact bit-identical
 * whatever the number of ranks: no draw depends on which rank makes it.
 *
 * RATIONALE: SplitMix64 passes BigCrush, costs ~1 ns per draw (the chaos game draws once per
 * point), and its whole state is one 64-bit counter, which checkpoints store as metadata. */
#ifndef SCAFFOLD_CORE_RNG_H
#define SCAFFOLD_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Purposes: never renumber (they key on-disk artifacts). */
enum rng_purpose {
    RNG_CLASS_PARAMS = 1,   /* a = attempt index: the 26 IFS values of a proposed class */
    RNG_CLASS_CHAOS = 2,    /* a = attempt index: the chaos game testing that class */
    RNG_INSTANCE_CHAOS = 3, /* a = class, b = instance: the instance's chaos game */
    RNG_DATASET_COMPOSE = 4,
    RNG_DATASET_SPLIT = 5,
    RNG_DATASET_COLORS = 6,
    RNG_MODEL_INIT = 7, /* a = parameter tensor index */
    RNG_SAMPLER = 8,    /* a = epoch */
    RNG_CE_SAMPLE = 9,
    RNG_TEST = 100
};

typedef struct rng {
    uint64_t key; /* derived from (seed, purpose, a, b) */
    uint64_t ctr; /* number of draws made; the whole mutable state */
} rng;

#define RNG_GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A stream keyed by (seed, purpose, a, b), at counter 0. */
rng rng_make(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b);

static inline uint64_t rng_u64(rng *r) {
    r->ctr++;
    return rng_mix64(r->key + r->ctr * RNG_GOLDEN);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng *r) {
    return (double)(rng_u64(r) >> 11) * 0x1.0p-53;
}

/* Uniform float in [0, 1) with 24 random bits. */
static inline float rng_uniformf(rng *r) {
    return (float)(rng_u64(r) >> 40) * 0x1.0p-24f;
}

/* Uniform integer in [0, n) without modulo bias (n > 0). */
uint64_t rng_below(rng *r, uint64_t n);

/* Standard normal (Box-Muller, one value per call). */
double rng_normal(rng *r);

/* Fills perm[0..n) with a uniformly random permutation of 0..n-1 (Fisher-Yates). */
void rng_permutation(rng *r, uint32_t *perm, size_t n);

#endif
