/* strtab: string interning for the trace analyzer (names, categories, file paths, hosts, hashes).
 *
 * Every distinct string is stored once in an append-only arena and gets a dense uint32 id;
 * id 0 is always the empty string, so "no file" can be 0 in the event columns. Also provides a
 * small uint64 -> uint32 open-addressing map (an_imap) used for (name, category) pairs and
 * (process, file) keys. Neither structure is thread-safe: each reader thread owns its own. */
#ifndef SCAFFOLD_ANALYZE_STRTAB_H
#define SCAFFOLD_ANALYZE_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#define AN_STR_NONE UINT32_MAX

typedef struct an_strtab {
    char *arena;       /* all strings, each NUL-terminated */
    size_t arena_len, arena_cap;
    uint64_t *off;     /* off[id] = offset of string id in arena */
    uint32_t *len;     /* len[id] */
    uint32_t n, cap;   /* number of strings, capacity of off/len */
    uint32_t *slots;   /* open addressing: id+1, 0 = empty */
    uint64_t *shash;   /* hash per slot */
    uint32_t nslots;   /* power of two */
} an_strtab;

/* Initialises an empty table holding only "" (id 0). 0 or ERR_NOMEM. */
int an_strtab_init(an_strtab *t);
/* Frees everything (NULL-safe, idempotent). */
void an_strtab_free(an_strtab *t);
/* Returns the id of s[0..n) (interning it if new), or AN_STR_NONE when out of memory. */
uint32_t an_strtab_intern(an_strtab *t, const char *s, size_t n);
/* Returns the id of s[0..n) if present, else AN_STR_NONE. */
uint32_t an_strtab_find(const an_strtab *t, const char *s, size_t n);
/* The NUL-terminated string of `id` (valid until the next intern). */
static inline const char *an_strtab_get(const an_strtab *t, uint32_t id) {
    return t->arena + t->off[id];
}
static inline uint32_t an_strtab_len(const an_strtab *t, uint32_t id) {
    return t->len[id];
}

/* 64-bit hash of a byte string (also used for file identities). */
uint64_t an_hash_bytes(const void *p, size_t n);

/* uint64 key -> uint32 value map. Key UINT64_MAX is reserved. */
typedef struct an_imap {
    uint64_t *keys;
    uint32_t *vals;
    uint32_t n, nslots;
} an_imap;

int an_imap_init(an_imap *m, uint32_t hint);
void an_imap_free(an_imap *m);
/* Returns a pointer to the value slot of `key`, inserting it with value `dflt` when absent
 * (*inserted set to 1). NULL when out of memory. The pointer is valid until the next insert. */
uint32_t *an_imap_get(an_imap *m, uint64_t key, uint32_t dflt, int *inserted);
/* Returns the value of key or AN_STR_NONE. */
uint32_t an_imap_find(const an_imap *m, uint64_t key);

#endif
