/* loader: samplers and the prefetching loader (see loader.h). */
#include "dataset/loader.h"

#include "core/err.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t ds_sampler_count(int split, int64_t n, int replicas, int replica) {
    if (n < 0 || replicas < 1 || replica < 0 || replica >= replicas)
        return ERR_RANGE;
    if (split == DS_TRAIN)
        return (n + replicas - 1) / replicas;
    int64_t base = n / replicas, rem = n % replicas;
    return base + (replica < rem);
}

int64_t ds_sampler_indices(int split, int64_t n, int replicas, int replica, uint64_t seed,
                           int64_t epoch, int64_t *out) {
    int64_t cnt = ds_sampler_count(split, n, replicas, replica);
    if (cnt < 0)
        return err_set(ERR_RANGE, "sampler: replica %d of %d over %lld samples is invalid",
                       replica, replicas, (long long)n);
    if (split != DS_TRAIN) {
        int64_t base = n / replicas, rem = n % replicas;
        int64_t lo = (int64_t)replica * base + (replica < rem ? replica : rem);
        for (int64_t i = 0; i < cnt; i++)
            out[i] = lo + i;
        return cnt;
    }
    if (n == 0)
        return 0;
    if (n > (int64_t)UINT32_MAX)
        return err_set(ERR_RANGE, "sampler: %lld samples exceed the 32-bit permutation",
                       (long long)n);
    uint32_t *perm = malloc((size_t)n * sizeof *perm);
    if (!perm)
        return err_set(ERR_NOMEM, "sampler: out of memory");
    rng r = rng_make(seed, RNG_SAMPLER, (uint64_t)epoch, 0);
    rng_permutation(&r, perm, (size_t)n);
    /* The padded list is the permutation repeated (torch pads with its leading entries, repeating
     * the whole list when the padding exceeds it), so entry k is perm[k % n]. */
    for (int64_t i = 0; i < cnt; i++)
        out[i] = perm[((int64_t)replica + i * replicas) % n];
    free(perm);
    return cnt;
}

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY };

typedef struct ds_slot {
    float *vol;
    uint16_t *mask;
    int64_t batch;
    int n;
    int state;
    int rc;
    char msg[ERR_MSG_MAX];
} ds_slot;

struct ds_loader {
    ds_loader_opts o;
    int64_t nsamp, nbatches;
    int64_t *order, *order_next; /* sampled indices of the current / next epoch */
    int64_t last_batch;          /* batch last delivered (for last_indices) */
    int started;
    /* Shared with the workers, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    int64_t next_batch; /* next batch to deliver */
    int64_t claim;      /* next batch a worker may claim */
    int64_t limit;      /* batches claimable in this epoch (0 while switching epochs) */
    int inflight;
    int stop;
    int nworkers, nslots;
    pthread_t *th;
    ds_slot *slots;
    int held; /* slot lent to the caller by next_ref (-1: none); released by the next call */
    float *own_vol;      /* W = 0 buffer for next_ref, allocated on first use */
    uint16_t *own_mask;
    double wait_s;
};

/* Returns the slot lent by next_ref: only now may a worker refill it. */
static void release_held(ds_loader *l) {
    if (l->held < 0)
        return;
    pthread_mutex_lock(&l->mu);
    l->slots[l->held].state = SLOT_FREE;
    l->next_batch++;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    l->held = -1;
}

static void batch_span(const ds_loader *l, int64_t b, const int64_t **idx, int *n) {
    int64_t lo = b * l->o.batch;
    int64_t k = l->nsamp - lo < l->o.batch ? l->nsamp - lo : l->o.batch;
    *idx = l->order + lo;
    *n = (int)k;
}

static void *worker_main(void *arg) {
    ds_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !(l->claim < l->limit && l->claim < l->next_batch + l->nslots))
            pthread_cond_wait(&l->cv_work, &l->mu);
        if (l->stop)
            break;
        int64_t b = l->claim++;
        ds_slot *s = &l->slots[b % l->nslots];
        s->state = SLOT_FILLING;
        l->inflight++;
        const int64_t *idx;
        int n;
        batch_span(l, b, &idx, &n);
        pthread_mutex_unlock(&l->mu);
        /* The read runs unlocked: order[] and the slot are not touched by anyone else until the
         * slot is marked ready (start_epoch waits for inflight == 0 before rewriting order). */
        err_clear();
        int rc = l->o.src.read(l->o.src.ctx, l->o.split, idx, n, s->vol, s->mask);
        pthread_mutex_lock(&l->mu);
        s->batch = b;
        s->n = n;
        s->rc = rc;
        if (rc)
            snprintf(s->msg, sizeof s->msg, "%s", err_msg());
        s->state = SLOT_READY;
        l->inflight--;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int ds_loader_create(ds_loader **out, const ds_loader_opts *o) {
    *out = NULL;
    if (!o->src.read || o->batch < 1 || o->workers < 0 || o->n < 0 ||
        (o->split != DS_TRAIN && o->split != DS_VAL) || !o->src.vol_elems || !o->src.mask_elems)
        return err_set(ERR_USAGE, "loader: invalid options (batch %d, workers %d, split %d)",
                       o->batch, o->workers, o->split);
    int64_t cnt = ds_sampler_count(o->split, o->n, o->replicas, o->replica);
    if (cnt < 0)
        return err_set(ERR_RANGE, "loader: replica %d of %d is invalid", o->replica, o->replicas);
    ds_loader *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(ERR_NOMEM, "loader: out of memory");
    l->o = *o;
    l->nsamp = cnt;
    l->nbatches = (cnt + o->batch - 1) / o->batch;
    l->last_batch = -1;
    l->held = -1;
    l->order = malloc((size_t)(cnt ? cnt : 1) * sizeof *l->order);
    l->order_next = malloc((size_t)(cnt ? cnt : 1) * sizeof *l->order_next);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    if (!l->order || !l->order_next) {
        ds_loader_destroy(l);
        return err_set(ERR_NOMEM, "loader: out of memory");
    }
    int w = o->src.concurrent ? o->workers : 0;
    if (w > 0) {
        int pf = o->prefetch > 0 ? o->prefetch : 2;
        l->nslots = w * pf;
        l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
        l->th = calloc((size_t)w, sizeof *l->th);
        if (!l->slots || !l->th) {
            ds_loader_destroy(l);
            return err_set(ERR_NOMEM, "loader: out of memory");
        }
        for (int i = 0; i < l->nslots; i++) {
            l->slots[i].vol = malloc((size_t)o->batch * o->src.vol_elems * sizeof(float));
            l->slots[i].mask = malloc((size_t)o->batch * o->src.mask_elems * sizeof(uint16_t));
            if (!l->slots[i].vol || !l->slots[i].mask) {
                ds_loader_destroy(l);
                return err_set(ERR_NOMEM,
                               "loader: cannot allocate %d prefetch slots of %d samples; lower "
                               "dataloader_num_workers",
                               l->nslots, o->batch);
            }
        }
        for (int i = 0; i < w; i++) {
            if (pthread_create(&l->th[i], NULL, worker_main, l) != 0) {
                ds_loader_destroy(l);
                return err_set(ERR_NOMEM, "loader: cannot start worker thread %d", i);
            }
            l->nworkers++;
        }
    }
    *out = l;
    return 0;
}

int64_t ds_loader_num_batches(const ds_loader *l) {
    return l->nbatches;
}

int64_t ds_loader_num_samples(const ds_loader *l) {
    return l->nsamp;
}

int ds_loader_start_epoch(ds_loader *l, int64_t epoch) {
    return ds_loader_start_epoch_at(l, epoch, 0);
}

int ds_loader_start_epoch_at(ds_loader *l, int64_t epoch, int64_t first) {
    release_held(l);
    if (first < 0)
        first = 0;
    if (first > l->nbatches)
        first = l->nbatches;
    int64_t cnt = ds_sampler_indices(l->o.split, l->o.n, l->o.replicas, l->o.replica, l->o.seed,
                                     epoch, l->order_next);
    if (cnt < 0)
        return (int)cnt;
    pthread_mutex_lock(&l->mu);
    l->limit = 0; /* no new claims; wait for reads into the old order to finish */
    while (l->inflight > 0)
        pthread_cond_wait(&l->cv_ready, &l->mu);
    for (int i = 0; i < l->nslots; i++)
        l->slots[i].state = SLOT_FREE;
    int64_t *t = l->order;
    l->order = l->order_next;
    l->order_next = t;
    l->claim = first;
    l->next_batch = first;
    l->last_batch = -1;
    l->limit = l->nbatches;
    l->started = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Waits for batch b in its slot (W > 0). Returns the slot. */
static ds_slot *wait_slot(ds_loader *l, int64_t b) {
    ds_slot *s = &l->slots[b % l->nslots];
    double t0 = time_now();
    pthread_mutex_lock(&l->mu);
    while (!(s->state == SLOT_READY && s->batch == b))
        pthread_cond_wait(&l->cv_ready, &l->mu);
    pthread_mutex_unlock(&l->mu);
    l->wait_s += time_now() - t0;
    return s;
}

/* The W = 0 buffers of next_ref, allocated on first use. 0 or ERR_NOMEM. */
static int own_buffers(ds_loader *l) {
    if (l->own_vol)
        return 0;
    l->own_vol = malloc((size_t)l->o.batch * l->o.src.vol_elems * sizeof(float));
    l->own_mask = malloc((size_t)l->o.batch * l->o.src.mask_elems * sizeof(uint16_t));
    if (l->own_vol && l->own_mask)
        return 0;
    MEM_FREE(l->own_vol, l->own_mask);
    l->own_vol = NULL;
    l->own_mask = NULL;
    return err_set(ERR_NOMEM, "loader: out of memory");
}

/* The next batch (after releasing the one held): W = 0 reads it into vol and mask (the own
 * buffers when vol is NULL), else *slot is its ready slot, held until release_held. 1 and *count,
 * 0 after the last batch, or the error. */
static int next_batch(ds_loader *l, float *vol, uint16_t *mask, ds_slot **slot, int *count) {
    *count = 0;
    release_held(l);
    if (!l->started || l->next_batch >= l->nbatches)
        return 0;
    int64_t b = l->next_batch;
    const int64_t *idx;
    int n;
    batch_span(l, b, &idx, &n);
    l->last_batch = b;
    if (l->nworkers == 0) {
        if (!vol && own_buffers(l))
            return ERR_NOMEM;
        double t0 = time_now();
        int rc = l->o.src.read(l->o.src.ctx, l->o.split, idx, n, vol ? vol : l->own_vol,
                               vol ? mask : l->own_mask);
        l->wait_s += time_now() - t0;
        l->next_batch++;
        if (rc)
            return rc;
        *count = n;
        return 1;
    }
    *slot = wait_slot(l, b);
    l->held = (int)(b % l->nslots); /* next_batch advances when the slot is released */
    if ((*slot)->rc)
        return err_set((*slot)->rc, "%s", (*slot)->msg);
    *count = n;
    return 1;
}

int ds_loader_next(ds_loader *l, float *vol, uint16_t *mask, int *count) {
    ds_slot *s = NULL;
    int rc = next_batch(l, vol, mask, &s, count);
    if (rc == 1 && s) {
        memcpy(vol, s->vol, (size_t)*count * l->o.src.vol_elems * sizeof(float));
        memcpy(mask, s->mask, (size_t)*count * l->o.src.mask_elems * sizeof(uint16_t));
    }
    release_held(l); /* the slot is free again as soon as it is copied */
    return rc;
}

int ds_loader_next_ref(ds_loader *l, const float **vol, const uint16_t **mask, int *count) {
    *vol = NULL;
    *mask = NULL;
    ds_slot *s = NULL;
    int rc = next_batch(l, NULL, NULL, &s, count);
    if (rc == 1) {
        *vol = s ? s->vol : l->own_vol;
        *mask = s ? s->mask : l->own_mask;
    }
    return rc;
}

const int64_t *ds_loader_last_indices(const ds_loader *l) {
    if (l->last_batch < 0)
        return NULL;
    return l->order + l->last_batch * l->o.batch;
}

void ds_loader_stop(ds_loader *l) {
    if (!l)
        return;
    release_held(l);
    if (l->nworkers == 0)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        pthread_join(l->th[i], NULL);
    l->nworkers = 0; /* later next() calls read on the owner thread from next_batch on */
}

void ds_loader_destroy(ds_loader *l) {
    if (!l)
        return;
    ds_loader_stop(l);
    for (int i = 0; l->slots && i < l->nslots; i++) {
        free(l->slots[i].vol);
        free(l->slots[i].mask);
    }
    MEM_FREE(l->slots, l->th, l->order, l->order_next, l->own_vol, l->own_mask);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_ready);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

double ds_loader_wait_seconds(const ds_loader *l) {
    return l->wait_s;
}
