/* reader_int: internals shared by the files of the trace reader (see trace.h for the pipeline):
 * input.c (paths, globs) -> gunzip.c (plain/gzip line streaming) -> jsonl.c (field scanner)
 * -> classify.c (op classes) -> chunk.c (per-part columns, string tables, sort) -> merge.c
 * (parallel driver, k-way merge into global columns). Not part of the module's interface. */
#ifndef SCAFFOLD_ANALYZE_READER_INT_H
#define SCAFFOLD_ANALYZE_READER_INT_H

#include "analyze/trace.h"

#include <stddef.h>
#include <stdint.h>

#define KEYIS(k, kn, lit) ((kn) == sizeof(lit) - 1 && !memcmp((k), (lit), sizeof(lit) - 1))

/* jsonl.c: a number token s[0..n) (sign, digits, optional fraction/exponent); 1 if parsed. */
int an_parse_num(const char *s, size_t n, int64_t *v);

/* classify.c: sub-kinds needing per-name handling when deriving bytes/offsets. */
enum { SK_NONE, SK_FRW, SK_LSEEK, SK_FSEEK, SK_FTELL, SK_OPEN };
int an_subkind(const char *name, size_t nn);

typedef struct {
    uint32_t name, cat; /* local ids in c->names / c->cats */
    uint8_t op, flags, sub;
    uint64_t records;   /* records of this (name, cat), metadata excluded */
} pairinfo;

typedef struct {
    int64_t pid;
    uint32_t hostkey; /* local id in keys */
    uint32_t exekey;  /* local id in keys of the start event's exec_hash, 0 none */
    int64_t exe_ts;   /* that start event's time */
    int rank;
    uint64_t records;
} lproc;

/* One part of one input file, loaded by one reader thread: the whole file, or for a large file
 * a byte range of it (gzip members starting in the range; plain-text lines starting in it). */
typedef struct chunk {
    size_t n, cap;
    int64_t *ts, *dur, *offset, *bytes;
    uint32_t *pair, *filekey, *proc, *tid;
    uint8_t *flags;
    an_strtab names, cats, keys;
    uint32_t *resolved; /* per key: the key holding the resolved string (FH/HH), or itself */
    uint32_t *fsof;     /* per key: the key holding its FH "fs" type, or 0 */
    uint32_t nresolved;
    pairinfo *pairs;
    uint32_t npairs;
    size_t cappairs;
    an_imap pairmap, procmap;
    an_imap threads;    /* (local proc << 32 | tid) of every thread seen */
    uint64_t last_thread;
    /* after the sort: the time order of the events (NULL: already in order), which keys name an
     * event's file, and each local process's first ts */
    uint32_t *order;
    uint8_t *key_used;
    int64_t *proc_first;
    lproc *procs;
    uint32_t nprocs;
    size_t capprocs;
    /* caches of the previous event's strings */
    const char *last_name;
    size_t last_name_n;
    uint32_t last_name_id;
    char last_cat[64];
    size_t last_cat_n;
    uint32_t last_cat_id;
    char last_host[64];
    size_t last_host_n;
    uint32_t last_host_key;
    char last_file[64];
    size_t last_file_n;
    uint32_t last_file_key;
    int file_rank;      /* rank from a DLIO-style file name, -1 */
    an_input *in;       /* the file (shared by its parts: read-only while loading) */
    int part, nparts;   /* which part of the file this chunk is */
    int64_t range_start, range_end; /* bytes of the file this part covers */
    /* what happened while loading this part (summed into `in` afterwards) */
    uint64_t lines, malformed, first_bad_line, members, unknown_meta, metadata;
    uint64_t out_of_range, first_oor_line, calls, num_events;
    int has_end, has_count, shape2, ours, empty;
    int truncated, failed;
    an_counter *ctrs;   /* counter samples (proc = local process) */
    size_t nctrs, capctrs;
    char note[256];
    /* a part after the first keeps its first line (it may continue the previous part's last
     * one) and every part its text after the last newline; merge.c joins them */
    int want_head;
    char *head, *tail;
    size_t head_n, tail_n;
    int oom;
} chunk;

int an_chunk_init(chunk *c, an_input *in);
void an_chunk_free_columns(chunk *c);
void an_chunk_free(chunk *c);
/* Grows the chunk's per-key tables to cover key id. 0 or ERR_NOMEM. */
int an_chunk_key_cover(chunk *c, uint32_t id);
/* Parses one line [p, e) into the chunk (counts it, malformed lines included). */
void an_chunk_line(chunk *c, const char *p, const char *e);
/* Finds the chunk's time order (order), then notes the file keys its events use and the first
 * timestamp of each of its processes (key_used, proc_first). 0 or ERR_NOMEM. */
static inline size_t an_chunk_at(const chunk *c, size_t i) { return c->order ? c->order[i] : i; }
int an_chunk_sort(chunk *c);

/* gunzip.c: streams the lines of c's part of c->in->path into c (plain or gzip); decides how
 * many parts a file is read in (1, or up to `threads` byte ranges for a large file). */
void an_load_part(chunk *c);
int an_plan_parts(const char *path, int threads, int64_t part_bytes, int64_t *size);

#endif
