/* mem: growable arrays, freeing pointer lists and huge-page blocks (see mem.h). */
#include "core/mem.h"

#include "core/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int mem_resize(void *pp, size_t n, size_t elt) {
    void *p;
    if (elt && n > SIZE_MAX / elt)
        return ERR_NOMEM;
    memcpy(&p, pp, sizeof p);
    p = realloc(p, n && elt ? n * elt : 1); /* realloc(p, 0) may free p and return NULL */
    if (!p)
        return ERR_NOMEM;
    memcpy(pp, &p, sizeof p);
    return 0;
}

int mem_reserve(void *pp, size_t *cap, size_t i, size_t elt, size_t first, int zero) {
    if (i < *cap)
        return 0;
    size_t nc = *cap ? *cap : first;
    while (nc <= i) {
        if (nc > SIZE_MAX / 2)
            return ERR_NOMEM;
        nc *= 2;
    }
    if (mem_resize(pp, nc, elt))
        return ERR_NOMEM;
    if (zero) {
        char *p;
        memcpy(&p, pp, sizeof p);
        memset(p + *cap * elt, 0, (nc - *cap) * elt);
    }
    *cap = nc;
    return 0;
}

void mem_free_n(void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(p[i]);
}

void mem_advise_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t lo = ((uintptr_t)p + MEM_HUGE_PAGE - 1) & ~(uintptr_t)(MEM_HUGE_PAGE - 1);
    const uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(MEM_HUGE_PAGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void *mem_alloc_big(size_t bytes) {
    void *p = NULL;
    const int big = bytes >= MEM_HUGE_PAGE;
    if (posix_memalign(&p, big ? MEM_HUGE_PAGE : 64, bytes ? bytes : 64))
        return NULL;
    if (big)
        mem_advise_huge(p, bytes);
    return p;
}
