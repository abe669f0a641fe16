/* strtab: string interning and a uint64 -> uint32 map for the trace analyzer (see strtab.h). */
#include "analyze/strtab.h"

#include "core/err.h"
#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

uint64_t an_hash_bytes(const void *p, size_t n) {
    /* A small multiply-xorshift hash over 8-byte words: names and paths are short, and this
     * runs once or twice per event, so it must be cheap rather than cryptographic. */
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ ((uint64_t)n << 56)) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

static int strtab_rehash(an_strtab *t, uint32_t nslots) {
    uint32_t *slots = calloc(nslots, sizeof *slots);
    uint64_t *shash = malloc((size_t)nslots * sizeof *shash);
    if (!slots || !shash) {
        MEM_FREE(slots, shash);
        return err_set(ERR_NOMEM, "analyze: out of memory growing a string table");
    }
    for (uint32_t i = 0; i < t->nslots; i++) {
        if (!t->slots[i])
            continue;
        uint32_t j = (uint32_t)t->shash[i] & (nslots - 1);
        while (slots[j])
            j = (j + 1) & (nslots - 1);
        slots[j] = t->slots[i];
        shash[j] = t->shash[i];
    }
    MEM_FREE(t->slots, t->shash);
    t->slots = slots;
    t->shash = shash;
    t->nslots = nslots;
    return 0;
}

int an_strtab_init(an_strtab *t) {
    memset(t, 0, sizeof *t);
    t->arena_cap = 4096;
    t->arena = malloc(t->arena_cap);
    t->cap = 64;
    t->off = malloc(t->cap * sizeof *t->off);
    t->len = malloc(t->cap * sizeof *t->len);
    t->nslots = 128;
    t->slots = calloc(t->nslots, sizeof *t->slots);
    t->shash = malloc(t->nslots * sizeof *t->shash);
    if (!t->arena || !t->off || !t->len || !t->slots || !t->shash) {
        an_strtab_free(t);
        return err_set(ERR_NOMEM, "analyze: out of memory creating a string table");
    }
    t->arena[0] = 0;
    t->arena_len = 1;
    t->off[0] = 0;
    t->len[0] = 0;
    t->n = 1;
    return 0;
}

void an_strtab_free(an_strtab *t) {
    if (!t)
        return;
    MEM_FREE(t->arena, t->off, t->len, t->slots, t->shash);
    memset(t, 0, sizeof *t);
}

static uint32_t strtab_lookup(const an_strtab *t, const char *s, size_t n, uint64_t h,
                              uint32_t *slot) {
    uint32_t j = (uint32_t)h & (t->nslots - 1);
    while (t->slots[j]) {
        uint32_t id = t->slots[j] - 1;
        if (t->shash[j] == h && t->len[id] == n && !memcmp(t->arena + t->off[id], s, n)) {
            *slot = j;
            return id;
        }
        j = (j + 1) & (t->nslots - 1);
    }
    *slot = j;
    return AN_STR_NONE;
}

uint32_t an_strtab_find(const an_strtab *t, const char *s, size_t n) {
    if (n == 0)
        return 0;
    uint32_t slot;
    return strtab_lookup(t, s, n, an_hash_bytes(s, n), &slot);
}

uint32_t an_strtab_intern(an_strtab *t, const char *s, size_t n) {
    if (n == 0)
        return 0;
    if (n > UINT32_MAX / 2)
        return AN_STR_NONE;
    uint64_t h = an_hash_bytes(s, n);
    uint32_t slot;
    uint32_t id = strtab_lookup(t, s, n, h, &slot);
    if (id != AN_STR_NONE)
        return id;
    if ((uint64_t)(t->n + 1) * 2 > t->nslots) {
        if (strtab_rehash(t, t->nslots * 2))
            return AN_STR_NONE;
        strtab_lookup(t, s, n, h, &slot);
    }
    if (t->n == t->cap) {
        uint32_t nc = t->cap * 2;
        if (mem_resize(&t->off, nc, sizeof *t->off) || mem_resize(&t->len, nc, sizeof *t->len))
            return AN_STR_NONE;
        t->cap = nc;
    }
    if (MEM_RESERVE(t->arena, t->arena_cap, t->arena_len + n, 4096))
        return AN_STR_NONE;
    id = t->n++;
    t->off[id] = t->arena_len;
    t->len[id] = (uint32_t)n;
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = 0;
    t->arena_len += n + 1;
    t->slots[slot] = id + 1;
    t->shash[slot] = h;
    return id;
}

/* ---- uint64 -> uint32 map ---- */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

int an_imap_init(an_imap *m, uint32_t hint) {
    uint32_t ns = 64;
    while (ns < hint * 2u && ns < (1u << 30))
        ns *= 2;
    m->n = 0;
    m->nslots = ns;
    m->keys = malloc((size_t)ns * sizeof *m->keys);
    m->vals = malloc((size_t)ns * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        an_imap_free(m);
        return err_set(ERR_NOMEM, "analyze: out of memory creating a map");
    }
    memset(m->keys, 0xff, (size_t)ns * sizeof *m->keys);
    return 0;
}

void an_imap_free(an_imap *m) {
    if (!m)
        return;
    MEM_FREE(m->keys, m->vals);
    memset(m, 0, sizeof *m);
}

static int imap_grow(an_imap *m) {
    uint32_t ns = m->nslots * 2;
    uint64_t *k = malloc((size_t)ns * sizeof *k);
    uint32_t *v = malloc((size_t)ns * sizeof *v);
    if (!k || !v) {
        MEM_FREE(k, v);
        return ERR_NOMEM;
    }
    memset(k, 0xff, (size_t)ns * sizeof *k);
    for (uint32_t i = 0; i < m->nslots; i++) {
        if (m->keys[i] == UINT64_MAX)
            continue;
        uint32_t j = (uint32_t)mix64(m->keys[i]) & (ns - 1);
        while (k[j] != UINT64_MAX)
            j = (j + 1) & (ns - 1);
        k[j] = m->keys[i];
        v[j] = m->vals[i];
    }
    MEM_FREE(m->keys, m->vals);
    m->keys = k;
    m->vals = v;
    m->nslots = ns;
    return 0;
}

uint32_t *an_imap_get(an_imap *m, uint64_t key, uint32_t dflt, int *inserted) {
    if ((uint64_t)(m->n + 1) * 2 > m->nslots && imap_grow(m))
        return NULL;
    uint32_t j = (uint32_t)mix64(key) & (m->nslots - 1);
    while (m->keys[j] != UINT64_MAX) {
        if (m->keys[j] == key) {
            if (inserted)
                *inserted = 0;
            return &m->vals[j];
        }
        j = (j + 1) & (m->nslots - 1);
    }
    m->keys[j] = key;
    m->vals[j] = dflt;
    m->n++;
    if (inserted)
        *inserted = 1;
    return &m->vals[j];
}

uint32_t an_imap_find(const an_imap *m, uint64_t key) {
    if (!m->nslots)
        return AN_STR_NONE;
    uint32_t j = (uint32_t)mix64(key) & (m->nslots - 1);
    while (m->keys[j] != UINT64_MAX) {
        if (m->keys[j] == key)
            return m->vals[j];
        j = (j + 1) & (m->nslots - 1);
    }
    return AN_STR_NONE;
}
