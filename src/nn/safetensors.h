/* safetensors: reader and writer for the safetensors format (Hugging Face), the checkpoint
 * format of scaffold. Layout: an 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {"key": "value", ...}, "name": {"dtype": "F32", "shape": [...],
 * "data_offsets": [begin, end]}, ...}, then the tensor bytes (offsets relative to the byte
 * buffer after the header). The writer pads the header with spaces to a multiple of 8 and
 * writes atomically (temporary name + fsync + rename). The reader validates the header length,
 * JSON syntax, dtypes, shapes against byte ranges and ranges against the file size, and names
 * the file and the fault in every error. */
#ifndef SCAFFOLD_NN_SAFETENSORS_H
#define SCAFFOLD_NN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define NN_ST_MAX_DIMS 8
#define NN_ST_MAX_HEADER (100u * 1000u * 1000u) /* the reference implementation's limit */

/* A float32 tensor to write. */
typedef struct nn_st_out {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[NN_ST_MAX_DIMS];
} nn_st_out;

/* Writes tensors (in the given order) and string metadata (meta[2i] = key, meta[2i+1] = value,
 * nmeta pairs; may be 0) to `path` atomically. 0 or ERR_IO. */
int nn_st_write(const char *path, const nn_st_out *t, int nt, const char *const *meta, int nmeta);

typedef struct nn_st_entry {
    char *name;
    char dtype[8]; /* "F32", "F16", "BF16", "F64", "I64", ... as written */
    int ndim;
    int64_t shape[NN_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data buffer */
} nn_st_entry;

typedef struct nn_st_file {
    char *path;
    int nt;
    nn_st_entry *t;
    int nmeta;
    char **meta; /* 2*nmeta strings: key, value */
    uint64_t data_start; /* file offset of the data buffer */
} nn_st_file;

/* Opens and validates `path` (reads only the header). 0, ERR_IO or ERR_FORMAT. */
int nn_st_open(nn_st_file *st, const char *path);
void nn_st_close(nn_st_file *st); /* NULL-safe; frees everything */

const nn_st_entry *nn_st_find(const nn_st_file *st, const char *name);
const char *nn_st_meta(const nn_st_file *st, const char *key); /* NULL if absent */

/* Elements of a tensor (product of its shape). */
size_t nn_st_numel(const nn_st_entry *e);

/* Reads tensor `e` as float32 into dst[numel] (F32 as is; F16, BF16 and F64 converted).
 * 0, ERR_IO or ERR_FORMAT (unsupported dtype, naming the tensor). */
int nn_st_read_f32(const nn_st_file *st, const nn_st_entry *e, float *dst);

#endif
