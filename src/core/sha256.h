/* sha256: a small SHA-256 (FIPS 180-4). Used for the dataset cache key (config_id = the first
 * 12 hex digits of the hash of the canonical JSON of the include keys, as upstream) and for the
 * cross-rank check that every rank sees the same sample id list. Not constant-time; not meant
 * for secrets. */
#ifndef SCAFFOLD_CORE_SHA256_H
#define SCAFFOLD_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t len;       /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;        /* bytes pending in buf */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
void sha256_final(sha256_ctx *c, unsigned char out[SHA256_DIGEST_LEN]);

/* One-shot digest of `n` bytes. */
void sha256(const void *data, size_t n, unsigned char out[SHA256_DIGEST_LEN]);

/* Lower-case hex of a digest into `hex` (at least 65 bytes, NUL-terminated). */
void sha256_hex(const unsigned char digest[SHA256_DIGEST_LEN], char *hex);

#endif
