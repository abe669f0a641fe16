/* ring.c: the per-thread single-producer rings. A thread gets its ring on its first event (a
 * finished thread's drained ring is reused); records are written in place and published by their
 * header word (see trace_int.h), so the producer never stores to memory the flusher polls. The
 * flusher is woken once per FLUSH_MIB written, not per event. A full ring makes the producer
 * wait for the flusher (back-pressure) for at most ~2 s, then drop and count. */
#include "trace_int.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

TRC_TLS trc_thread *trc_self;

static pthread_key_t thread_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static int thread_key_ok;

static void thread_exit(void *p) {
    trc_thread *t = p;
    if (t && t == trc_self) {
        trc_self = NULL;
        __atomic_store_n(&t->state, TRC_T_EXITED, __ATOMIC_RELEASE);
    }
}

static void make_key(void) { thread_key_ok = pthread_key_create(&thread_key, thread_exit) == 0; }

trc_thread *trc_thread_get(void) {
    if (trc_self)
        return trc_self;
    if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING)
        return NULL;
    pthread_once(&key_once, make_key);
    trc_thread *t = NULL;
    for (trc_thread *c = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE); c; c = c->next) {
        int fr = TRC_T_FREE;
        if (__atomic_load_n(&c->state, __ATOMIC_RELAXED) == TRC_T_FREE &&
            __atomic_compare_exchange_n(&c->state, &fr, TRC_T_OWNED, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            t = c;
            /* The flusher drained it: continue where it stopped (a zero header slot). */
            t->head = t->tail_cache = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
            break;
        }
    }
    if (!t) {
        size_t cap = trc_g.cfg.ring_bytes;
        size_t hdr = (sizeof(trc_thread) + 4095) & ~(size_t)4095;
        void *m = mmap(NULL, hdr + cap, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        t = m;
        t->ring = (char *)m + hdr;
        t->cap = cap;
        t->mask = cap - 1;
        t->state = TRC_T_OWNED;
        trc_thread *h = __atomic_load_n(&trc_g.threads, __ATOMIC_ACQUIRE);
        do
            t->next = h;
        while (!__atomic_compare_exchange_n(&trc_g.threads, &h, t, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE));
    }
    t->tid = (pid_t)syscall(SYS_gettid);
    t->depth = 0;
    t->dropped = 0;
    t->unwoken = 0;
    t->next_id = t->id_end = 0;
    trc_self = t;
    if (thread_key_ok)
        pthread_setspecific(thread_key, t);
    if (!__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
        trc_start_flusher();
    return t;
}

uint64_t trc_new_id(trc_thread *t) {
    if (t->next_id == t->id_end) {
        /* Ids come in blocks so threads do not share a cache line per event. */
        t->next_id = __atomic_fetch_add(&trc_g.next_id, 1024, __ATOMIC_RELAXED);
        t->id_end = t->next_id + 1024;
    }
    return t->next_id++;
}

void trc_wake_batch(trc_thread *t) {
    t->unwoken = 0;
    if (!__atomic_load_n(&trc_g.flusher_on, __ATOMIC_ACQUIRE))
        trc_start_flusher();
    trc_wake_flusher();
}

/* Room for need bytes plus the 8-byte header slot a publication clears after them. */
static int has_room(trc_thread *t, uint64_t need) {
    if (t->head + need + 8 - t->tail_cache <= t->cap)
        return 1;
    t->tail_cache = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
    return t->head + need + 8 - t->tail_cache <= t->cap;
}

void *trc_reserve_slow(trc_thread *t, uint32_t size) {
    uint64_t off = t->head & t->mask;
    /* A record never wraps: the end of the ring is padded and the record starts at 0. */
    uint64_t need = size + ((off + size > t->cap) ? t->cap - off : 0);
    if (!has_room(t, need)) {
        /* Full: wake the flusher and wait for it (back-pressure), for at most ~2 s. */
        trc_wake_batch(t);
        for (int i = 0; i < 20000 && !has_room(t, need); i++) {
            if (__atomic_load_n(&trc_g.state, __ATOMIC_ACQUIRE) != TRC_S_RUNNING)
                break;
            if (i < 64) {
                sched_yield();
                continue;
            }
            if (i % 64 == 0)
                trc_wake_batch(t);
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        if (!has_room(t, need)) {
            t->dropped++;
            return NULL;
        }
    }
    if (off + size > t->cap) {
        uint32_t pad = (uint32_t)(t->cap - off);
        trc_publish(t, t->ring + off, trc_hdr(pad, TRC_REC_PAD, 0, 0));
    }
    return t->ring + (t->head & t->mask);
}

void trc_emit_io(int op, int fd, uint64_t fhash, uint64_t t0, uint64_t t1, int64_t offset,
                 int64_t count, int64_t ret, int64_t a1, int64_t a2, uint64_t h2) {
    trc_thread *t = trc_self;
    if (TRC_UNLIKELY(!t) && !(t = trc_thread_get()))
        return;
    int f = trc_ops[op].fields;
    uint32_t size = TRC_IO_BASE + ((f & (TF_A1 | TF_A2 | TF_H2)) ? 8 : 0) +
                    ((f & (TF_A2 | TF_H2)) ? 8 : 0);
    trc_io_rec *r = trc_reserve(t, size);
    if (TRC_UNLIKELY(!r))
        return;
    unsigned level = (unsigned)(t->depth < TRC_MAX_DEPTH ? t->depth : TRC_MAX_DEPTH) + 1;
    r->t0 = t0;
    r->dur_level = ((t1 - t0) & 0x00ffffffffffffffull) | (uint64_t)level << 56;
    r->fhash = fhash;
    r->offset = offset;
    r->count = count;
    r->ret = ret;
    if (size > TRC_IO_BASE) {
        r->a1 = a1;
        if (size > TRC_IO_BASE + 8)
            r->a2 = (f & TF_H2) ? (int64_t)h2 : a2;
    }
    trc_publish(t, r, trc_hdr(size, TRC_REC_IO, (unsigned)op, fd));
}

/* In a fork child the records between the flusher and the producer are the parent's (its own
 * file holds them): both positions move to the producer's, whose header slot is cleared (a
 * parent thread may have been publishing there when the process forked). */
void trc_ring_forget(trc_thread *t) {
    t->tail = t->tail_cache = t->head;
    *(uint64_t *)(t->ring + (t->head & t->mask)) = 0;
}

void trc_rings_fork_child(void) {
    for (trc_thread *t = trc_g.threads; t; t = t->next) {
        trc_ring_forget(t);
        t->unwoken = 0;
        if (t != trc_self) {
            t->depth = 0;
            t->state = TRC_T_FREE;
        } else {
            t->tid = (pid_t)syscall(SYS_gettid);
            trc_annot_fork_child(t);
        }
    }
}
