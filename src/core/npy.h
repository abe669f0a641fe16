/* npy: reader and writer for NumPy's .npy format (versions 1.0, 2.0 and 3.0), little-endian,
 * C order. Every volume, mask and point cloud in scaffold is read and written through here.
 * Reads validate the magic, version, header dictionary, dtype, shape and the file size against
 * the header, and report the file name and the fault. Writes are atomic (fsutil). */
#ifndef SCAFFOLD_CORE_NPY_H
#define SCAFFOLD_CORE_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define NPY_MAX_DIMS 8

typedef enum npy_dtype {
    NPY_INVALID = 0,
    NPY_F32,
    NPY_F64,
    NPY_U8,
    NPY_I8,
    NPY_U16,
    NPY_I16,
    NPY_U32,
    NPY_I32,
    NPY_U64,
    NPY_I64,
    NPY_BOOL
} npy_dtype;

typedef struct npy_header {
    npy_dtype dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t data_offset; /* bytes before the array data */
    size_t nbytes;      /* bytes of array data = prod(shape) * itemsize */
} npy_header;

/* Bytes per element of a dtype (0 for NPY_INVALID). */
size_t npy_itemsize(npy_dtype dt);

/* NumPy's descr string for a dtype ("<f4", "|u1", ...). */
const char *npy_descr(npy_dtype dt);

/* Number of elements of a header's array. */
size_t npy_count(const npy_header *h);

/* Parses and validates the header of an open file (positioned anywhere); checks the file size
 * matches. `path` is only used in messages. 0 or ERR_FORMAT/ERR_IO. */
int npy_read_header(FILE *f, const char *path, npy_header *h);

/* Loads a whole array: *data is malloc'ed (caller frees). 0 or an error naming `path`. */
int npy_load(const char *path, npy_header *h, void **data);

/* Reads an array whose dtype and shape must equal the expected ones into a caller buffer of
 * prod(shape)*itemsize bytes. A mismatch is ERR_FORMAT naming the file, expected and found. */
int npy_read_into(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, void *buf);

/* Checks that header h (of file `path`) has the expected dtype and shape: 0, or ERR_FORMAT naming
 * the file, expected and found. */
int npy_expect(const char *path, const npy_header *h, npy_dtype dtype, int ndim,
               const int64_t *shape);

/* Writes the 64-byte-aligned header for (dtype, shape) to `f`. 0 or ERR_IO. */
int npy_write_header(FILE *f, npy_dtype dtype, int ndim, const int64_t *shape);

/* Writes an array atomically (temporary name, then rename). 0 or ERR_IO. */
int npy_save(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data);

/* Formats a shape as "(a, b, c)" into buf. */
const char *npy_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

#endif
