/* real.c: the one resolver of the real libc functions behind every wrapper. The pointers are
 * generated from the call table (calls.h) and filled at load time by trc_real_resolve_all (a
 * wrapper called before that, e.g. from another library's constructor, resolves its own symbol
 * on first use). Symbols that exist only as compat versions in new glibc (the pre-2.33 stat ABI)
 * are found with dlvsym under the architecture's base version, as Darshan's dynamic wrappers do. */
#include "trace_int.h"

#include "calls.h"

#include <dlfcn.h>
#include <stddef.h>

#define TRC_DEFINE_REAL(shape, ret, sym, params, ...) ret(*trc_real_##sym) params;
TRC_POSIX_CALLS(TRC_DEFINE_REAL)
TRC_STDIO_CALLS(TRC_DEFINE_REAL)
TRC_EXTRA_REALS(TRC_DEFINE_REAL)
#undef TRC_DEFINE_REAL

int trc_real_resolve(const char *symbol, void **slot) {
    /* Base symbol versions of glibc: x86-64, aarch64 (compat symbols carry only these). */
    static const char *const base[] = {"GLIBC_2.2.5", "GLIBC_2.17"};
    void *p = dlsym(RTLD_NEXT, symbol);
    for (size_t i = 0; !p && i < sizeof base / sizeof base[0]; i++)
        p = dlvsym(RTLD_NEXT, symbol, base[i]);
    if (p)
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    return p != NULL;
}

typedef struct {
    const char *symbol;
    void **slot;
} trc_real_row;

static const trc_real_row rows[] = {
#define TRC_REAL_ROW(shape, ret, sym, params, ...) {#sym, (void **)&trc_real_##sym},
    TRC_POSIX_CALLS(TRC_REAL_ROW) TRC_STDIO_CALLS(TRC_REAL_ROW)
#undef TRC_REAL_ROW
#define TRC_EXTRA_ROW(shape, ret, sym, params, args, fail, symbol) {symbol, (void **)&trc_real_##sym},
    TRC_EXTRA_REALS(TRC_EXTRA_ROW)
#undef TRC_EXTRA_ROW
};

void trc_real_resolve_all(void) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!*rows[i].slot)
            trc_real_resolve(rows[i].symbol, rows[i].slot);
}
