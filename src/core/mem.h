/* mem: the growable-array and cleanup helpers that the modules' containers share: resizing an
 * array, making room for one more element by doubling its capacity, and freeing a list of
 * pointers in one call. */
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

#endif
