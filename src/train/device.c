/* device: where the benchmark computes (the `device` key, docs/gpu.md): the decision, agreed by
 * every rank, between the CPU engine and one GPU per rank; the model's backend (the CUDA
 * table of src/nn/cuda in a CUDA build); and the gradient all-reduce that goes with it: MPI over
 * host memory (src/parallel/grad.c) for the CPU backends, NCCL over the device slab for CUDA.
 *
 * SCAFFOLD_DEVMEM=1 (tests) runs a CPU decision on nn_backend_cpu_devmem: the CPU engine behind a
 * device backend's discipline, so the training loop's uploads and downloads are exercised (and a
 * missing one caught) on machines without a GPU. */
#include "train/train.h"

#include "core/err.h"
#include "core/log.h"
#ifdef SCAFFOLD_CUDA
#include "nn/cuda/cu.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuDNN's algorithm workspace per GPU: SCAFFOLD_CUDNN_WS_MB, default 2 GiB. */
#ifdef SCAFFOLD_CUDA
static size_t cudnn_ws_bytes(void) {
    const char *e = getenv("SCAFFOLD_CUDNN_WS_MB");
    const double mb = e && *e ? atof(e) : 2048;
    return (size_t)(mb > 0 ? mb : 0) * 1048576;
}
#endif

int train_device_open(const scaffold_config *c, const ds_layout *l, const dist_world *w,
                      train_device *d) {
    memset(d, 0, sizeof *d);
    d->gpu = -1;
    int rc = 0;
#ifdef SCAFFOLD_CUDA
    /* A spatially sharded run needs the halo exchanges and spatial sums of the CPU engine. */
    const char *cpu_only = ds_layout_total(l) > 1
                               ? "spatial sharding (dc_num_shards) runs on the CPU backend only"
                               : NULL;
    rc = cu_device_select(c->device, w->comm, cpu_only, &d->gpu, d->note, sizeof d->note);
    rc = dist_agree(w, rc);
    if (rc == 0 && d->gpu >= 0) {
        rc = dist_agree(w, cu_backend_create(&d->be, d->gpu, c->torch_amp, cudnn_ws_bytes()));
        if (rc)
            train_device_close(d);
    }
    if (rc)
        return rc;
#else
    (void)c, (void)l, (void)w;
#endif
    const char *dm = getenv("SCAFFOLD_DEVMEM");
    if (d->gpu < 0 && dm && !strcmp(dm, "1")) {
        rc = dist_agree(w, nn_backend_cpu_devmem(&d->be));
        const size_t n = strlen(d->note);
        if (rc == 0)
            snprintf(d->note + n, sizeof d->note - n, "%sthe CPU engine with memory of its own "
                                                      "(SCAFFOLD_DEVMEM=1, tests)",
                     n ? "; " : "device: ");
    }
    return rc;
}

void train_device_close(train_device *d) {
    if (d->be && d->be->destroy)
        d->be->destroy(d->be);
    d->be = NULL;
}

/* ---- the gradient all-reduce ---------------------------------------------------------------- */

static int nccl_grad(train_state *s, double scale) {
#ifdef SCAFFOLD_CUDA
    nn_unet *m = &s->model;
    size_t *off = malloc(sizeof *off * (size_t)m->ntensors);
    size_t *num = malloc(sizeof *num * (size_t)m->ntensors);
    int rc = off && num ? 0 : err_set(ERR_NOMEM, "gradient buckets: out of memory");
    for (int i = 0; rc == 0 && i < m->ntensors; i++) {
        off[i] = m->tensors[i].offset;
        num[i] = m->tensors[i].numel;
    }
    /* The CPU path's bucket size (src/parallel/grad.c): SCAFFOLD_GRAD_BUCKET_MB, default 4. */
    const char *e = getenv("SCAFFOLD_GRAD_BUCKET_MB");
    double mb = e && *e ? atof(e) : 4;
    size_t cap = (size_t)(mb * 1048576.0 / sizeof(float));
    cap = cap ? cap : 1;
    cu_comm *comm = NULL;
    cu_grad *g = NULL;
    rc = dist_agree(s->w, rc);
    if (rc == 0)
        rc = cu_comm_create(&comm, cu_backend_ctx(s->dev.be), s->w->comm); /* agreed inside */
    if (rc == 0)
        rc = dist_agree(s->w, cu_grad_create(&g, comm, m->dgrads, off, num, m->ntensors, cap,
                                             (float)scale));
    free(off);
    free(num);
    if (rc) {
        cu_grad_free(g);
        cu_comm_free(comm);
        return rc;
    }
    s->dev.comm = comm;
    s->dev.grad = g;
    m->grad_ready = cu_grad_ready;
    m->grad_ctx = g;
    return 0;
#else
    (void)s, (void)scale;
    return err_set(ERR_INTERNAL, "NCCL all-reduce without the CUDA backend");
#endif
}

int train_grad_init(train_state *s, double scale) {
    nn_backend *be = s->dev.be;
    if (be && be->device && !be->host_access) {
        /* One rank: nothing to reduce, and scale is 1. */
        return s->w->size > 1 ? nccl_grad(s, scale) : 0;
    }
    /* MPI over the memory the model computes on (m->grads itself on the CPU engine): a view of
     * the model whose grads are those, so src/parallel/grad.c attaches its hook unchanged. */
    nn_unet view = s->model;
    view.grads = s->model.dgrads;
    int rc = par_grad_init(&s->grad, s->w, &view, scale);
    s->model.grad_ready = view.grad_ready;
    s->model.grad_ctx = view.grad_ctx;
    return rc;
}

void train_grad_begin(train_state *s) {
#ifdef SCAFFOLD_CUDA
    if (s->dev.grad) {
        cu_grad_begin(s->dev.grad);
        return;
    }
#endif
    if (s->grad.piece) /* not on one GPU: nothing to reduce */
        par_grad_begin(&s->grad);
}

int train_grad_finish(train_state *s) {
#ifdef SCAFFOLD_CUDA
    if (s->dev.grad)
        return cu_grad_finish(s->dev.grad);
#endif
    if (s->grad.piece)
        par_grad_finish(&s->grad);
    return 0;
}

void train_grad_free(train_state *s) {
#ifdef SCAFFOLD_CUDA
    cu_grad_free(s->dev.grad);
    cu_comm_free(s->dev.comm);
#endif
    s->dev.grad = s->dev.comm = NULL;
    par_grad_free(&s->grad);
}
