/* rng: stream keying and the non-inline draws (see rng.h). */
#include "core/rng.h"

#include <math.h>

rng rng_make(uint64_t seed, uint64_t purpose, uint64_t a, uint64_t b) {
    /* Chain the four words through the mixer so that nearby tuples give unrelated keys. */
    uint64_t k = rng_mix64(seed ^ 0x5CAFF01DULL);
    k = rng_mix64(k ^ (purpose * RNG_GOLDEN));
    k = rng_mix64(k ^ rng_mix64(a + 0x632BE59BD9B4E019ULL));
    k = rng_mix64(k ^ rng_mix64(b + 0x8CB92BA72F3D8DD7ULL));
    rng r = {k, 0};
    return r;
}

uint64_t rng_below(rng *r, uint64_t n) {
    /* Lemire's multiply-shift with rejection of the biased low range. */
    uint64_t x = rng_u64(r);
    __uint128_t m = (__uint128_t)x * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            x = rng_u64(r);
            m = (__uint128_t)x * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double rng_normal(rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void rng_permutation(rng *r, uint32_t *perm, size_t n) {
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(r, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}
