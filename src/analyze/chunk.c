/* chunk: the column load of one input part. Each reader thread owns its chunk: private string
 * tables (names, categories, hash keys), (name, category) pairs classified once, processes keyed
 * by pid, the FH/HH resolution of hash keys, and the event columns; a chunk is sorted by time
 * (LSD radix sort) before the merge. */
#include "analyze/reader_int.h"

#include "core/err.h"
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int an_chunk_init(chunk *c, an_input *in) {
    memset(c, 0, sizeof *c);
    c->in = in;
    c->file_rank = -1;
    c->last_name_id = AN_STR_NONE;
    c->last_cat_id = AN_STR_NONE;
    c->last_host_key = AN_STR_NONE;
    c->last_file_key = AN_STR_NONE;
    if (an_strtab_init(&c->names) || an_strtab_init(&c->cats) || an_strtab_init(&c->keys) ||
        an_imap_init(&c->pairmap, 64) || an_imap_init(&c->procmap, 8) ||
        an_imap_init(&c->threads, 16))
        return ERR_NOMEM;
    c->last_thread = UINT64_MAX;
    return 0;
}

void an_chunk_free_columns(chunk *c) {
    MEM_FREE(c->ts, c->dur, c->offset, c->bytes, c->pair, c->filekey, c->proc, c->tid, c->flags);
    c->ts = c->dur = c->offset = c->bytes = NULL;
    c->pair = c->filekey = c->proc = c->tid = NULL;
    c->flags = NULL;
}

void an_chunk_free(chunk *c) {
    an_chunk_free_columns(c);
    an_strtab_free(&c->names);
    an_strtab_free(&c->cats);
    an_strtab_free(&c->keys);
    an_imap_free(&c->pairmap);
    an_imap_free(&c->threads);
    an_imap_free(&c->procmap);
    MEM_FREE(c->resolved, c->fsof, c->key_used, c->order, c->proc_first, c->head, c->tail,
             c->pairs, c->procs, c->ctrs);
}

#define GROW(ptr, cap)                                                                             \
    do {                                                                                           \
        if (mem_resize(&(ptr), (cap), sizeof *(ptr)))                                              \
            return ERR_NOMEM;                                                                      \
    } while (0)

static int chunk_reserve(chunk *c) {
    if (c->n < c->cap)
        return 0;
    size_t nc = c->cap ? c->cap * 2 : 65536;
    GROW(c->ts, nc);
    GROW(c->dur, nc);
    GROW(c->offset, nc);
    GROW(c->bytes, nc);
    GROW(c->pair, nc);
    GROW(c->filekey, nc);
    GROW(c->proc, nc);
    GROW(c->tid, nc);
    GROW(c->flags, nc);
    c->cap = nc;
    return 0;
}

/* Grows `resolved` and `fsof` to cover key id. 0 or ERR_NOMEM. */
int an_chunk_key_cover(chunk *c, uint32_t id) {
    if (id < c->nresolved)
        return 0;
    uint32_t nc = c->nresolved ? c->nresolved : 64;
    while (nc <= id)
        nc *= 2;
    GROW(c->resolved, nc);
    GROW(c->fsof, nc);
    for (uint32_t i = c->nresolved; i < nc; i++) {
        c->resolved[i] = i;
        c->fsof[i] = 0;
    }
    c->nresolved = nc;
    return 0;
}

/* Interns a key (hash token or inline string) and makes sure `resolved` covers it. */
static uint32_t chunk_key(chunk *c, const char *s, size_t n) {
    uint32_t id = an_strtab_intern(&c->keys, s, n);
    if (id == AN_STR_NONE || an_chunk_key_cover(c, id))
        return AN_STR_NONE;
    return id;
}

/* Interns a string that may carry JSON escapes. */
static uint32_t chunk_key_esc(chunk *c, const char *s, size_t n, int esc) {
    if (!esc)
        return chunk_key(c, s, n);
    char buf[8192];
    size_t m = an_json_unescape(s, n, buf, sizeof buf);
    return chunk_key(c, buf, m);
}

static uint32_t chunk_proc(chunk *c, int64_t pid, uint32_t hostkey) {
    /* Keyed by pid alone: a trace file belongs to one host, and some events (v1.0.5 metadata,
     * DLIO's) carry no host hash, which must not split the process in two. */
    uint64_t key = (uint64_t)pid;
    int ins = 0;
    uint32_t *v = an_imap_get(&c->procmap, key, c->nprocs, &ins);
    if (!v)
        return AN_STR_NONE;
    if (ins) {
        if (MEM_RESERVE(c->procs, c->capprocs, c->nprocs, 8))
            return AN_STR_NONE;
        c->procs[c->nprocs] = (lproc){.pid = pid, .hostkey = hostkey, .rank = -1};
        return c->nprocs++;
    }
    if (hostkey && !c->procs[*v].hostkey)
        c->procs[*v].hostkey = hostkey;
    return *v;
}

static uint32_t chunk_pair(chunk *c, const an_rawev *ev) {
    uint32_t nid;
    if (c->last_name_id != AN_STR_NONE && ev->name_n == c->last_name_n &&
        !memcmp(ev->name, c->last_name, ev->name_n)) {
        nid = c->last_name_id;
    } else {
        if (ev->name_esc) {
            char buf[1024];
            size_t m = an_json_unescape(ev->name, ev->name_n, buf, sizeof buf);
            nid = an_strtab_intern(&c->names, buf, m);
        } else {
            nid = an_strtab_intern(&c->names, ev->name, ev->name_n);
        }
        if (nid == AN_STR_NONE)
            return nid;
        /* The cached name points into the names arena, which may move; keep the arena copy. */
        c->last_name_id = nid;
        c->last_name = an_strtab_get(&c->names, nid);
        c->last_name_n = an_strtab_len(&c->names, nid);
        if (ev->name_esc)
            c->last_name_id = AN_STR_NONE; /* escaped forms do not compare equal to raw text */
    }
    uint32_t cid;
    if (c->last_cat_id != AN_STR_NONE && ev->cat_n == c->last_cat_n &&
        !memcmp(ev->cat, c->last_cat, ev->cat_n)) {
        cid = c->last_cat_id;
    } else {
        cid = an_strtab_intern(&c->cats, ev->cat, ev->cat_n);
        if (cid == AN_STR_NONE)
            return cid;
        if (ev->cat_n < sizeof c->last_cat) {
            memcpy(c->last_cat, ev->cat, ev->cat_n);
            c->last_cat_n = ev->cat_n;
            c->last_cat_id = cid;
        }
    }
    int ins = 0;
    uint32_t *v = an_imap_get(&c->pairmap, ((uint64_t)nid << 32) | cid, c->npairs, &ins);
    if (!v)
        return AN_STR_NONE;
    if (!ins)
        return *v;
    if (MEM_RESERVE(c->pairs, c->cappairs, c->npairs, 64))
        return AN_STR_NONE;
    const char *nm = an_strtab_get(&c->names, nid);
    size_t nl = an_strtab_len(&c->names, nid);
    const char *ct = an_strtab_get(&c->cats, cid);
    size_t cl = an_strtab_len(&c->cats, cid);
    unsigned fl = 0;
    int op = an_classify(nm, nl, ct, cl, &fl);
    c->pairs[c->npairs] = (pairinfo){.name = nid, .cat = cid, .op = (uint8_t)op,
                                     .flags = (uint8_t)fl,
                                     .sub = (uint8_t)(AN_IS_IO(op) ? an_subkind(nm, nl) : SK_NONE)};
    return c->npairs++;
}

static uint32_t chunk_host(chunk *c, const an_rawev *ev) {
    const char *h = ev->hhash ? ev->hhash : ev->hostname;
    size_t hn = ev->hhash ? ev->hhash_n : ev->hostname_n;
    if (!h)
        return 0;
    if (c->last_host_key != AN_STR_NONE && hn == c->last_host_n && !memcmp(h, c->last_host, hn))
        return c->last_host_key;
    uint32_t k = chunk_key(c, h, hn);
    if (k != AN_STR_NONE && hn < sizeof c->last_host) {
        memcpy(c->last_host, h, hn);
        c->last_host_n = hn;
        c->last_host_key = k;
    }
    return k;
}

static void chunk_metadata(chunk *c, const an_rawev *ev) {
    c->metadata++;
    const char *nm = ev->name;
    size_t nn = ev->name_n;
    if ((KEYIS(nm, nn, "FH") || KEYIS(nm, nn, "HH") || KEYIS(nm, nn, "SH")) && ev->m_value &&
        ev->m_name) {
        uint32_t hk = chunk_key(c, ev->m_value, ev->m_value_n);
        uint32_t sk = chunk_key_esc(c, ev->m_name, ev->m_name_n, ev->m_name_esc);
        uint32_t fk = ev->m_fs ? chunk_key(c, ev->m_fs, ev->m_fs_n) : 0;
        if (hk != AN_STR_NONE && sk != AN_STR_NONE && fk != AN_STR_NONE) {
            c->resolved[hk] = sk;
            if (fk)
                c->fsof[hk] = fk;
        } else {
            c->oom = 1;
        }
        return;
    }
    if (KEYIS(nm, nn, "CM") || KEYIS(nm, nn, "thread_name") || KEYIS(nm, nn, "FS"))
        return;
    if (KEYIS(nm, nn, "PR") || KEYIS(nm, nn, "process_name")) {
        int64_t rank = -1;
        if (KEYIS(nm, nn, "PR") && ev->m_name && KEYIS(ev->m_name, ev->m_name_n, "rank") &&
            ev->m_value) {
            if (!an_parse_num(ev->m_value, ev->m_value_n, &rank))
                rank = -1;
        } else {
            /* process_name "Rank N" (dftracer under MPI), in name or value. */
            const char *s[2] = {ev->m_name, ev->m_value};
            size_t sn[2] = {ev->m_name_n, ev->m_value_n};
            for (int i = 0; i < 2 && rank < 0; i++)
                if (s[i] && sn[i] > 5 && !strncasecmp(s[i], "rank ", 5) &&
                    !an_parse_num(s[i] + 5, sn[i] - 5, &rank))
                    rank = -1;
        }
        if (rank >= 0 && ev->has_pid) {
            uint32_t pr = chunk_proc(c, ev->pid, chunk_host(c, ev));
            if (pr != AN_STR_NONE)
                c->procs[pr].rank = (int)rank;
        }
        return;
    }
    c->unknown_meta++;
}

/* The file key of an event: its fhash, or an inline file name (early v1). AN_STR_NONE on OOM. */
static uint32_t event_file(chunk *c, const an_rawev *ev) {
    if (ev->fhash) {
        /* Consecutive events mostly touch the same file: skip the hash lookup then. */
        if (c->last_file_key != AN_STR_NONE && ev->fhash_n == c->last_file_n &&
            !memcmp(ev->fhash, c->last_file, ev->fhash_n))
            return c->last_file_key;
        uint32_t fk = chunk_key(c, ev->fhash, ev->fhash_n);
        if (fk != AN_STR_NONE && ev->fhash_n < sizeof c->last_file) {
            memcpy(c->last_file, ev->fhash, ev->fhash_n);
            c->last_file_n = ev->fhash_n;
            c->last_file_key = fk;
        }
        return fk;
    }
    if (ev->fname)
        return chunk_key_esc(c, ev->fname, ev->fname_n, ev->fname_esc);
    return 0;
}

/* An MPI event's communicator as one non-negative number: a 32-bit hash of the tracer's comm id
 * above 24 bits of its size (the analyzer matches collective instances on it); -1 unknown. */
static int64_t mpi_comm_key(const an_rawev *ev) {
    if (!ev->comm || !(ev->has & AN_RAW_COMMSZ) || ev->comm_size < 1)
        return -1;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < ev->comm_n; i++)
        h = (h ^ (unsigned char)ev->comm[i]) * 16777619u;
    int64_t sz = ev->comm_size > 0xffffff ? 0xffffff : ev->comm_size;
    return (int64_t)((uint64_t)h << 24 | (uint64_t)sz);
}

/* A counter sample of the tracer's system-metrics sampler (kept beside the events). */
static int chunk_counter(chunk *c, const an_rawev *ev, uint32_t proc) {
    if (!ev->ctr_has)
        return 0;
    if (MEM_RESERVE(c->ctrs, c->capctrs, c->nctrs, 64))
        return ERR_NOMEM;
    an_counter *k = &c->ctrs[c->nctrs++];
    k->proc = proc;
    k->ts = ev->ts;
    k->has = ev->ctr_has;
    memcpy(k->v, ev->ctr, sizeof k->v);
    return 0;
}

/* Bytes an aggregated read/write record stands for: the sum the tracer wrote (bytes_sum,
 * size_sum), else ret_sum (times the item size for fread/fwrite), else a constant ret times the
 * calls (dftracer writes a field that never varied plain, without _sum); -1 unknown or beyond
 * int64. */
static int64_t agg_bytes(const an_rawev *ev, const pairinfo *pi, int64_t cnt) {
    int64_t b;
    if (ev->has & AN_RAW_SIZESUM)
        return ev->size_sum;
    if (ev->has & AN_RAW_RETSUM) {
        if (pi->sub != SK_FRW || !(ev->has & AN_RAW_SIZE))
            return ev->ret_sum;
        return __builtin_mul_overflow(ev->ret_sum, ev->size, &b) ? -1 : b;
    }
    if (ev->has & AN_RAW_RET) {
        int64_t per = ev->ret;
        if (pi->sub == SK_FRW && (ev->has & AN_RAW_SIZE) && __builtin_mul_overflow(per, ev->size, &per))
            return -1;
        return __builtin_mul_overflow(per, cnt, &b) ? -1 : b;
    }
    return -1;
}

/* An aggregated record's call count and summed duration (*cnt, *dur); 1 when the duration is
 * out of range (the record is skipped), else 0. */
static int agg_count_dur(const an_rawev *ev, int64_t *cnt, int64_t *dur) {
    *cnt = (ev->has & AN_RAW_DFTCNT) ? ev->dft_cnt : (ev->has & AN_RAW_COUNT) ? ev->count : 1;
    if (*cnt < 1)
        *cnt = 1;
    if (ev->has & AN_RAW_DURSUM)
        *dur = ev->dur_sum;
    else if ((ev->has & AN_RAW_ADUR) && __builtin_mul_overflow(ev->adur, *cnt, dur))
        return 1;
    if (*dur > AN_TS_MAX)
        return 1;
    return 0;
}

/* The tracer's own start and end records: the event count the end record states, the
 * executable and whether the file is ours from the start record. */
static int tracer_record(chunk *c, const an_rawev *ev, const pairinfo *pi, uint32_t proc) {
    const char *nm = an_strtab_get(&c->names, pi->name);
    if (nm[0] == 'e') {
        /* dftracer 2.x writes num_events only with metadata on */
        if ((ev->has & AN_RAW_NUMEV) && ev->num_events >= 0) {
            c->num_events += (uint64_t)ev->num_events;
            c->has_count = 1;
        }
        c->has_end = 1;
    } else if (nm[0] == 's') {
        if (ev->exec_hash) {
            uint32_t k = chunk_key(c, ev->exec_hash, ev->exec_hash_n);
            if (k == AN_STR_NONE)
                return ERR_NOMEM;
            c->procs[proc].exekey = k;
            c->procs[proc].exe_ts = ev->ts;
        }
        if (ev->version && ev->version_n >= 14 && !memcmp(ev->version, "scaffold-trace", 14))
            c->ours = 1;
    }
    return 0;
}

/* The bytes, offset and flag columns of an event, by what its op records there (the offset
 * column holds a call count, a communicator, a sample count or a file position). */
static void event_columns(const an_rawev *ev, const pairinfo *pi, int kind, int64_t cnt,
                          int64_t *bytes_out, int64_t *off_out, uint8_t *fl_out) {
    int64_t bytes = -1, off = -1;
    uint8_t fl = pi->flags;
    if (kind == AN_PH_AGG) {
        fl |= AN_F_AGG;
        off = cnt; /* an aggregated record's offset column holds its call count */
        if (pi->op == AN_OP_READ || pi->op == AN_OP_WRITE)
            bytes = agg_bytes(ev, pi, cnt);
    } else if (pi->op == AN_OP_MPI) {
        off = mpi_comm_key(ev);
        if (ev->has & AN_RAW_BYTES)
            bytes = ev->bytes;
    } else if (pi->op >= AN_OP_COMPUTE && pi->op < AN_OP_TRACER) {
        /* Application work the annotation states: samples (batch_size) and bytes handed over,
         * whatever tier served them (compare's notion of work). */
        if (ev->has & AN_RAW_ITEMS)
            off = ev->items;
        if (ev->has & AN_RAW_BYTES)
            bytes = ev->bytes;
    } else if (pi->op == AN_OP_READ || pi->op == AN_OP_WRITE) {
        if (ev->has & AN_RAW_BYTES) {
            bytes = ev->bytes;
        } else if (pi->sub == SK_FRW && (ev->has & AN_RAW_SIZE) && (ev->has & AN_RAW_RET)) {
            /* fread/fwrite return items, not bytes; a product past INT64_MAX is no size */
            if (__builtin_mul_overflow(ev->ret, ev->size, &bytes))
                bytes = -1;
        } else if (ev->has & AN_RAW_RET) {
            bytes = ev->ret;
        }
        if (ev->has & AN_RAW_OFFSET)
            off = ev->offset;
    } else if (pi->sub == SK_LSEEK && (ev->has & AN_RAW_RET) && ev->ret >= 0) {
        off = ev->ret;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_FSEEK && (ev->has & AN_RAW_OFFSET) && (ev->has & AN_RAW_WHENCE) &&
               ev->whence == 0) {
        off = ev->offset;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_FTELL && (ev->has & AN_RAW_RET) && ev->ret >= 0) {
        off = ev->ret;
        fl |= AN_F_SEEKPOS;
    } else if (pi->sub == SK_OPEN) {
        off = 0;
        if ((ev->has & AN_RAW_FLAGS) && (ev->flags & 02000))
            fl |= AN_F_APPEND;
    }
    *bytes_out = bytes < 0 ? -1 : bytes;
    *off_out = off;
    *fl_out = fl;
}

/* 0 stored (or ignored), 1 skipped for an out-of-range number, -1 malformed, ERR_NOMEM. */
static int chunk_add(chunk *c, const an_rawev *ev) {
    int kind = ev->ph_kind;
    if (ev->ph_int)
        c->shape2 = 1;
    if (kind == AN_PH_META) {
        chunk_metadata(c, ev);
        return 0;
    }
    if (kind == AN_PH_OTHER)
        return 0; /* B/E/i/... events are not produced by dftracer; ignore them */
    if (!ev->has_ts || !ev->name)
        return -1;
    /* A number beyond int64, a negative duration or a time beyond 2^61 us: skipped and counted
     * (never wrapped or clamped into a plausible value). */
    if (ev->out_of_range)
        return 1;
    int64_t cnt = 1, dur = ev->has_dur ? ev->dur : 0;
    if (kind == AN_PH_AGG && agg_count_dur(ev, &cnt, &dur))
        return 1;
    if (chunk_reserve(c))
        return ERR_NOMEM;
    uint32_t pr = chunk_pair(c, ev);
    if (pr == AN_STR_NONE)
        return ERR_NOMEM;
    pairinfo *pi = &c->pairs[pr];
    uint32_t hk = chunk_host(c, ev);
    uint32_t proc = chunk_proc(c, ev->has_pid ? ev->pid : 0, hk == AN_STR_NONE ? 0 : hk);
    if (proc == AN_STR_NONE)
        return ERR_NOMEM;
    pi->records++;
    c->procs[proc].records++;
    if (kind == AN_PH_COUNTER)
        return chunk_counter(c, ev, proc);
    c->calls += (uint64_t)cnt;
    if (pi->op == AN_OP_TRACER && tracer_record(c, ev, pi, proc))
        return ERR_NOMEM;
    uint32_t fk = event_file(c, ev);
    if (fk == AN_STR_NONE)
        return ERR_NOMEM;
    size_t i = c->n++;
    event_columns(ev, pi, kind, cnt, &c->bytes[i], &c->offset[i], &c->flags[i]);
    c->ts[i] = ev->ts;
    c->dur[i] = dur;
    c->pair[i] = pr;
    c->filekey[i] = fk;
    c->proc[i] = proc;
    c->tid[i] = (uint32_t)ev->tid;
    /* Threads per process, counted here (in parallel) rather than over the merged events. */
    uint64_t th = ((uint64_t)proc << 32) | (uint32_t)ev->tid;
    if (th != c->last_thread) {
        int ins;
        if (!an_imap_get(&c->threads, th, 0, &ins))
            return ERR_NOMEM;
        c->last_thread = th;
    }
    return 0;
}

void an_chunk_line(chunk *c, const char *p, const char *e) {
    c->lines++;
    an_rawev ev;
    int r = an_parse_line(p, e, &ev);
    if (r == 0)
        return;
    if (r > 0) {
        int rc = chunk_add(c, &ev);
        if (rc == 0)
            return;
        if (rc == 1) {
            if (!c->out_of_range)
                c->first_oor_line = c->lines;
            c->out_of_range++;
            return;
        }
        if (rc == ERR_NOMEM) {
            c->oom = 1;
            return;
        }
    }
    if (!c->malformed)
        c->first_bad_line = c->lines;
    c->malformed++;
}

/* ------------------------------------------------------------------ sorting */

/* Stable ordering of ts[0..n) into perm: an LSD radix sort on ts - min with 11-bit digits (a
 * 2048-entry histogram stays in L1, so the scatter does not thrash the cache). Returns 1 when ts
 * is already sorted (perm untouched), 0 when perm holds the order, ERR_NOMEM. */
static int sort_perm(const int64_t *ts, size_t n, uint32_t *perm) {
    int sorted = 1;
    int64_t mn = n ? ts[0] : 0, mx = mn;
    for (size_t i = 0; i < n; i++) {
        if (ts[i] < mn)
            mn = ts[i];
        if (ts[i] > mx)
            mx = ts[i];
        if (i && ts[i] < ts[i - 1])
            sorted = 0;
    }
    if (sorted || n < 2)
        return 1;
    enum { BITS = 11, RADIX = 1 << BITS };
    uint64_t range = (uint64_t)mx - (uint64_t)mn; /* wraps, never overflows */
    int passes = 0;
    while (passes < 6 && (range >> (BITS * passes)))
        passes++;
    uint64_t *key = malloc(n * sizeof *key), *key2 = malloc(n * sizeof *key2);
    uint32_t *perm2 = malloc(n * sizeof *perm2);
    size_t *cnt = malloc(RADIX * sizeof *cnt);
    int rc = ERR_NOMEM;
    if (!key || !key2 || !perm2 || !cnt)
        goto out;
    for (size_t i = 0; i < n; i++) {
        key[i] = (uint64_t)ts[i] - (uint64_t)mn;
        perm[i] = (uint32_t)i;
    }
    uint32_t *pa = perm, *pb = perm2;
    for (int p = 0; p < passes; p++) {
        int sh = BITS * p;
        memset(cnt, 0, RADIX * sizeof *cnt);
        for (size_t i = 0; i < n; i++)
            cnt[(key[i] >> sh) & (RADIX - 1)]++;
        size_t sum = 0;
        for (size_t d = 0; d < RADIX; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) {
            size_t dst = cnt[(key[i] >> sh) & (RADIX - 1)]++;
            key2[dst] = key[i];
            pb[dst] = pa[i];
        }
        uint64_t *tk = key;
        key = key2;
        key2 = tk;
        uint32_t *tp = pa;
        pa = pb;
        pb = tp;
    }
    if (pa != perm)
        memcpy(perm, pa, n * sizeof *perm);
    rc = 0;
out:
    MEM_FREE(key, key2, perm2, cnt);
    return rc;
}

/* The time order of the chunk's events: c->order (NULL when they are already in order). The
 * columns stay where they are; the merge reads them through the order. */
static int sort_columns(chunk *c) {
    if (c->n < 2)
        return 0;
    uint32_t *perm = malloc(c->n * sizeof *perm);
    if (!perm)
        return ERR_NOMEM;
    int r = sort_perm(c->ts, c->n, perm);
    if (r != 0) {
        free(perm);
        return r == 1 ? 0 : ERR_NOMEM;
    }
    c->order = perm;
    return 0;
}

int an_chunk_sort(chunk *c) {
    if (sort_columns(c))
        return ERR_NOMEM;
    c->key_used = calloc(c->keys.n + 1, 1);
    c->proc_first = malloc((c->nprocs + 1) * sizeof *c->proc_first);
    if (!c->key_used || !c->proc_first)
        return ERR_NOMEM;
    for (uint32_t p = 0; p < c->nprocs; p++)
        c->proc_first[p] = INT64_MAX;
    for (size_t i = 0; i < c->n; i++) {
        c->key_used[c->filekey[i]] = 1;
        if (c->ts[i] < c->proc_first[c->proc[i]])
            c->proc_first[c->proc[i]] = c->ts[i];
    }
    return 0;
}
