/* mem: the growable-array and cleanup helpers that the modules' containers share: resizing an
 * array, making room for one more element by doubling its capacity, and freeing a list of
 * pointers in one call; and the large blocks that want transparent huge pages. */
#ifndef SCAFFOLD_CORE_MEM_H
#define SCAFFOLD_CORE_MEM_H

#include <stddef.h>

/* Resizes the array that `pp` points to (a T **) to n elements of elt bytes. On failure the array
 * is left as it was. 0 or ERR_NOMEM (no message recorded). */
int mem_resize(void *pp, size_t n, size_t elt);

/* Makes index `i` fit in the array that `pp` points to (a T **) of capacity *cap: when i >= *cap,
 * doubles *cap (from `first` > 0 when it is 0) until it exceeds i and resizes the array, zeroing
 * the new elements when `zero` is set. On failure the array and *cap are left as they were.
 * 0 or ERR_NOMEM (no message recorded). */
int mem_reserve(void *pp, size_t *cap, size_t i, size_t elt, size_t first, int zero);

/* mem_reserve on an array lvalue `arr` with its size_t capacity lvalue `cap`; MEM_COVER zeroes
 * the elements it adds. */
#define MEM_RESERVE(arr, cap, i, first) mem_reserve(&(arr), &(cap), (i), sizeof *(arr), (first), 0)
#define MEM_COVER(arr, cap, i, first) mem_reserve(&(arr), &(cap), (i), sizeof *(arr), (first), 1)

/* Frees each of the n pointers of p (NULL ones included). */
void mem_free_n(void *const *p, size_t n);

/* Frees every pointer argument: MEM_FREE(a->x, a->y, a->z). */
#define MEM_FREE(...)                                                                              \
    mem_free_n((void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* Large blocks on transparent huge pages. Where the kernel's setting is `madvise` (Debian's and
 * Ubuntu's default) only advised memory gets them; the engine's walks read 16 to 32 rows a slab
 * apart per tile, each in its own 4 KiB page, and its optimizer streams 5.4 M parameters four
 * times a step: on a Xeon with AMX, scale 5 / base 64 bf16 steps ran 0.127 s on 4 KiB pages and
 * 0.118 s on huge ones. */
#define MEM_HUGE_PAGE ((size_t)2 << 20)

/* Advises the whole 2 MiB pages within [p, p + bytes) for huge pages. Advice only: where the
 * kernel has none the memory works as before. */
void mem_advise_huge(void *p, size_t bytes);

/* An uninitialised block for free(): 64-byte aligned, and from MEM_HUGE_PAGE bytes up aligned to
 * and advised for huge pages. NULL when out of memory. */
void *mem_alloc_big(size_t bytes);

#endif
