/* scaffold/trace.h: the annotation API of the scaffold I/O tracer (libscaffold_trace.so).
 *
 * Code calls these macros unconditionally. When the tracer library is not preloaded the calls
 * cost one load and one predictable branch: the first call looks the tracer up once with
 * dlsym(RTLD_DEFAULT) (in src/tracehooks/tracehooks.c, part of libscaffold.a) and caches the
 * answer. When it is preloaded, regions become dftracer "X" events with a name, a category,
 * per-thread nesting (args.level, args.p_idx) and the arguments attached with the _INT and _STR
 * macros; metadata becomes a dftracer "CM" line.
 *
 *   scaffold_trace_region r = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EPOCH,
 *                                                         SCAFFOLD_TRACE_CAT_PIPELINE);
 *   SCAFFOLD_TRACE_REGION_INT(r, "epoch", epoch);
 *   ... work, nested regions, I/O ...
 *   SCAFFOLD_TRACE_REGION_END(r);
 *
 * Contract: END every region you BEGIN, on the same thread, innermost first (an END for an outer
 * region also closes the inner ones still open). Names, categories and keys are copied (names are
 * truncated to 63 bytes, categories to 31, keys to 31, string values to 127), so they may live on
 * the stack. A region handle of 0 means "not traced"; every macro accepts it. All functions are
 * thread-safe and never change errno. */
#ifndef SCAFFOLD_TRACE_H
#define SCAFFOLD_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dftracer's AI categories (pydftracer ai_common.py), so existing analysis presets recognise the
 * events. */
#define SCAFFOLD_TRACE_CAT_PIPELINE "pipeline"
#define SCAFFOLD_TRACE_CAT_DATALOADER "dataloader"
#define SCAFFOLD_TRACE_CAT_DATA "data"
#define SCAFFOLD_TRACE_CAT_COMPUTE "compute"
#define SCAFFOLD_TRACE_CAT_COMM "comm"
#define SCAFFOLD_TRACE_CAT_DEVICE "device"
#define SCAFFOLD_TRACE_CAT_CHECKPOINT "checkpoint"
#define SCAFFOLD_TRACE_CAT_OTHER "other"

/* dftracer's AI event names, by category. */
#define SCAFFOLD_TRACE_EPOCH "epoch"       /* pipeline */
#define SCAFFOLD_TRACE_TRAIN "train"       /* pipeline */
#define SCAFFOLD_TRACE_EVALUATE "evaluate" /* pipeline */
#define SCAFFOLD_TRACE_TEST "test"         /* pipeline */
#define SCAFFOLD_TRACE_FETCH "fetch"       /* dataloader */
#define SCAFFOLD_TRACE_PREPROCESS "preprocess" /* data */
#define SCAFFOLD_TRACE_ITEM "item"         /* data */
#define SCAFFOLD_TRACE_FORWARD "forward"   /* compute */
#define SCAFFOLD_TRACE_BACKWARD "backward" /* compute */
#define SCAFFOLD_TRACE_STEP "step"         /* compute */
#define SCAFFOLD_TRACE_ALL_REDUCE "all_reduce" /* comm */
#define SCAFFOLD_TRACE_BCAST "bcast"       /* comm */
#define SCAFFOLD_TRACE_BARRIER "barrier"   /* comm */
#define SCAFFOLD_TRACE_CAPTURE "capture"   /* checkpoint */
#define SCAFFOLD_TRACE_RESTART "restart"   /* checkpoint */

typedef uint64_t scaffold_trace_region;

/* The table the tracer library exports under the symbol "scaffold_trace_api_v1". Any pointer may
 * be NULL. */
typedef struct scaffold_trace_api {
    uint32_t version; /* 1 */
    uint32_t size;    /* sizeof(scaffold_trace_api) of the library */
    scaffold_trace_region (*region_begin)(const char *name, const char *cat);
    void (*region_int)(scaffold_trace_region r, const char *key, int64_t value);
    void (*region_str)(scaffold_trace_region r, const char *key, const char *value);
    void (*region_end)(scaffold_trace_region r);
    void (*metadata)(const char *key, const char *value);
    int (*active)(void);
} scaffold_trace_api;

/* Resolved table (never NULL once resolved: a table of NULL pointers when no tracer is loaded).
 * Defined in src/tracehooks/tracehooks.c. */
extern const scaffold_trace_api *scaffold_trace_hooks_cache;
const scaffold_trace_api *scaffold_trace_hooks_resolve(void);

static inline const scaffold_trace_api *scaffold_trace_hooks(void) {
    const scaffold_trace_api *a = __atomic_load_n(&scaffold_trace_hooks_cache, __ATOMIC_ACQUIRE);
    if (__builtin_expect(a == 0, 0))
        a = scaffold_trace_hooks_resolve();
    return a;
}

/* Opens a region on the calling thread; returns 0 when not tracing. */
static inline scaffold_trace_region scaffold_trace_region_begin(const char *name, const char *cat) {
    const scaffold_trace_api *a = scaffold_trace_hooks();
    return a->region_begin ? a->region_begin(name, cat) : 0;
}
static inline void scaffold_trace_region_int(scaffold_trace_region r, const char *key, int64_t v) {
    if (r)
        scaffold_trace_hooks()->region_int(r, key, v);
}
static inline void scaffold_trace_region_str(scaffold_trace_region r, const char *key,
                                             const char *v) {
    if (r)
        scaffold_trace_hooks()->region_str(r, key, v);
}
static inline void scaffold_trace_region_end(scaffold_trace_region r) {
    if (r)
        scaffold_trace_hooks()->region_end(r);
}
/* Writes a "CM" metadata line (key, value) into this process's trace. */
static inline void scaffold_trace_metadata(const char *key, const char *value) {
    const scaffold_trace_api *a = scaffold_trace_hooks();
    if (a->metadata)
        a->metadata(key, value);
}
/* 1 when the tracer is loaded and recording in this process. */
static inline int scaffold_trace_active(void) {
    const scaffold_trace_api *a = scaffold_trace_hooks();
    return a->active ? a->active() : 0;
}

#define SCAFFOLD_TRACE_REGION_BEGIN(name, cat) scaffold_trace_region_begin((name), (cat))
#define SCAFFOLD_TRACE_REGION_INT(r, key, v) scaffold_trace_region_int((r), (key), (int64_t)(v))
#define SCAFFOLD_TRACE_REGION_STR(r, key, v) scaffold_trace_region_str((r), (key), (v))
#define SCAFFOLD_TRACE_REGION_END(r) scaffold_trace_region_end(r)
#define SCAFFOLD_TRACE_METADATA(key, value) scaffold_trace_metadata((key), (value))

#ifdef __cplusplus
}
#endif
#endif
