/* grad: bucketed, overlapped gradient all-reduce (see grad.h). */
#include "parallel/grad.h"

#include "core/err.h"
#include "core/log.h"
#include "core/prof.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRAD_PIECE_MAX ((size_t)1 << 30) /* floats per MPI call (counts are int) */

/* The nap between progress calls. Each wake-up preempts the computing thread when ranks fill
 * the cores, so it is long (1 ms): at 100 us the thread cost a 2-rank step on 2 cores 30%, and
 * 1 ms still completes a 4 MiB bucket within a few naps (bench/dist). */
static long progress_nap_us(void) {
    const char *e = getenv("SCAFFOLD_PROGRESS_US");
    long us = e && *e ? atol(e) : 1000;
    return us < 1 ? 1 : us > 1000000 ? 1000000 : us;
}

static void *progress_main(void *arg) {
    par_grad *g = arg;
    const long us = progress_nap_us();
    const struct timespec nap = {us / 1000000, us % 1000000 * 1000};
    pthread_mutex_lock(&g->mu);
    while (!g->quit) {
        if (!g->active) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        pthread_mutex_unlock(&g->mu);
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g->probe, &flag, MPI_STATUS_IGNORE);
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static double env_double(const char *name, double def) {
    const char *e = getenv(name);
    return e && *e ? atof(e) : def;
}

int par_grad_init(par_grad *g, const dist_world *w, nn_unet *m, double scale) {
    memset(g, 0, sizeof *g);
    g->w = w;
    g->grads = m->grads;
    g->scale = (float)scale;
    g->probe = MPI_COMM_NULL;
    g->overlap = env_double("SCAFFOLD_GRAD_OVERLAP", 1) != 0;
    size_t bucket = (size_t)(env_double("SCAFFOLD_GRAD_BUCKET_MB", 4) * 1048576.0 / sizeof(float));
    if (bucket < 1)
        bucket = 1;
    /* Buckets in reverse tensor order, each cut into pieces of at most GRAD_PIECE_MAX floats. */
    size_t cap = m->nparams / (bucket < GRAD_PIECE_MAX ? bucket : GRAD_PIECE_MAX) +
                 (size_t)m->ntensors + 1;
    g->piece = malloc(cap * sizeof *g->piece);
    g->req = malloc(cap * sizeof *g->req);
    int rc = g->piece && g->req ? 0 : err_set(ERR_NOMEM, "out of memory for gradient buckets");
    size_t hi = m->nparams, acc = 0;
    for (int t = m->ntensors - 1; t >= 0 && rc == 0; t--) {
        acc += m->tensors[t].numel;
        if (acc < bucket && t > 0)
            continue;
        size_t lo = m->tensors[t].offset;
        for (size_t a = hi; a > lo;) { /* pieces from the top, in backward order */
            size_t b = a - lo > GRAD_PIECE_MAX ? a - GRAD_PIECE_MAX : lo;
            g->piece[g->np++] = (par_grad_piece){t, b, a};
            a = b;
        }
        hi = lo;
        acc = 0;
    }
    rc = dist_agree(w, rc);
    if (rc) {
        free(g->piece);
        free(g->req);
        g->piece = NULL;
        g->req = NULL;
        return rc;
    }
    m->grad_ready = par_grad_ready;
    m->grad_ctx = g;
    if (w->size > 1 && w->thread_level == MPI_THREAD_MULTIPLE) {
        MPI_Comm_dup(w->comm, &g->probe);
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->has_thread = pthread_create(&g->thread, NULL, progress_main, g) == 0;
        if (!g->has_thread) {
            pthread_mutex_destroy(&g->mu);
            pthread_cond_destroy(&g->cv);
        }
    }
    return 0;
}

void par_grad_free(par_grad *g) {
    if (!g || !g->piece)
        return;
    if (g->has_thread) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    if (g->probe != MPI_COMM_NULL)
        MPI_Comm_free(&g->probe);
    free(g->piece);
    free(g->req);
    memset(g, 0, sizeof *g);
}

static void set_active(par_grad *g, int on) {
    if (!g->has_thread)
        return;
    pthread_mutex_lock(&g->mu);
    g->active = on;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void par_grad_begin(par_grad *g) {
    g->started = 0;
    set_active(g, 1);
}

static void start_piece(par_grad *g) {
    const par_grad_piece *p = &g->piece[g->started];
    prof_begin(PROF_MPI_IALLREDUCE);
    MPI_Iallreduce(MPI_IN_PLACE, g->grads + p->lo, (int)(p->hi - p->lo), MPI_FLOAT, MPI_SUM,
                   g->w->comm, &g->req[g->started]);
    prof_end(PROF_MPI_IALLREDUCE);
    g->bytes += (long long)((p->hi - p->lo) * sizeof(float));
    g->started++;
}

void par_grad_ready(void *ctx, int first) {
    par_grad *g = ctx;
    if (!g->overlap || g->w->size == 1)
        return;
    while (g->started < g->np && g->piece[g->started].first >= first)
        start_piece(g);
    if (!g->has_thread && g->started > 0) {
        int done = 0;
        MPI_Testall(g->started, g->req, &done, MPI_STATUSES_IGNORE);
    }
}

void par_grad_finish(par_grad *g) {
    if (g->w->size > 1) {
        while (g->started < g->np)
            start_piece(g);
        double t0 = time_now();
        prof_begin(PROF_MPI_WAITALL);
        MPI_Waitall(g->np, g->req, MPI_STATUSES_IGNORE);
        prof_end(PROF_MPI_WAITALL);
        g->exposed_s += time_now() - t0;
    }
    set_active(g, 0);
    g->steps++;
    if (g->scale != 1.0f) {
        const size_t n = g->piece[0].hi;
        const float sc = g->scale;
        for (size_t i = 0; i < n; i++)
            g->grads[i] *= sc;
    }
}
