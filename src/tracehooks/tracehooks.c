/* tracehooks: the lazy link between scaffold code and the tracer library (scaffold/trace.h).
 * It owns the cached pointer to the tracer's API table. Looking the table up once with
 * dlsym(RTLD_DEFAULT) keeps libscaffold.a free of any link-time dependency on the tracer, so a
 * run without LD_PRELOAD pays one load and one branch per annotation. */
#include "scaffold/trace.h"

#include <dlfcn.h>
#include <stddef.h>

static const scaffold_trace_api trace_hooks_none = {1, sizeof(scaffold_trace_api), NULL, NULL,
                                                    NULL, NULL, NULL, NULL};

const scaffold_trace_api *scaffold_trace_hooks_cache = NULL;

const scaffold_trace_api *scaffold_trace_hooks_resolve(void) {
    /* Racing first calls resolve the same answer; the store is idempotent. */
    const scaffold_trace_api *a = dlsym(RTLD_DEFAULT, "scaffold_trace_api_v1");
    if (!a || a->version != 1 || a->size < sizeof(scaffold_trace_api) || !a->region_int ||
        !a->region_str || !a->region_end)
        a = &trace_hooks_none;
    __atomic_store_n(&scaffold_trace_hooks_cache, a, __ATOMIC_RELEASE);
    return a;
}
