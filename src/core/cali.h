/* cali: Caliper's `.cali` text record format, written and read without the Caliper library.
 *
 * A .cali file is a sequence of lines `__rec=KIND,key=v1=v2,...` (values escaped with '\'):
 *  - `node` records build one tree of (attribute, value) nodes. Nodes 0..11 are predefined: the
 *    types (0 usr .. 7 type, 11 ptr; 1 int, 2 uint, 3 string, 5 double, 6 bool), and the
 *    attributes cali.attribute.name (8), .type (9) and .prop (10). An attribute is a chain
 *    type node -> metadata nodes (alias, unit, adiak.type...) -> prop node -> name node (attr 8),
 *    and the name node's id is the attribute's id. A region path is a chain of nodes of a
 *    nested attribute ("region", "mpi.function"), root first.
 *  - `ctx` records are snapshot rows: `ref=` nodes (a region path) and immediate `attr=`/`data=`
 *    pairs (the metrics: attributes with the as-value property).
 *  - one `globals` record references the node chain of the run's metadata (Adiak's values).
 * This is the format caliper-reader (PyPI) parses and Hatchet's and Thicket's from_caliperreader
 * read; cali_read also reads files written by Caliper itself. */
#ifndef SCAFFOLD_CORE_CALI_H
#define SCAFFOLD_CORE_CALI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Caliper's attribute properties and type nodes. */
enum {
    CALI_PROP_ASVALUE = 1,
    CALI_PROP_SCOPE_PROCESS = 12,
    CALI_PROP_SCOPE_THREAD = 20,
    CALI_PROP_SKIP_EVENTS = 64,
    CALI_PROP_HIDDEN = 128,
    CALI_PROP_NESTED = 256,
    CALI_PROP_GLOBAL = 512,
    CALI_PROP_UNALIGNED = 1024
};
typedef enum {
    CALI_TYPE_INT = 1,
    CALI_TYPE_UINT = 2,
    CALI_TYPE_STRING = 3,
    CALI_TYPE_DOUBLE = 5,
    CALI_TYPE_BOOL = 6
} cali_type;

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct cali_writer {
    FILE *fp;
    int64_t next;              /* next node id */
    int64_t alias, unit;       /* attribute.alias, attribute.unit (0: not yet defined) */
    int64_t adiak_type, adiak_cat, adiak_sub;
    int64_t globals_tail;      /* last node of the globals chain (-1: none) */
} cali_writer;

void cali_w_init(cali_writer *w, FILE *fp);

/* Defines an attribute: name, type, properties, and optional alias and unit (NULL: none).
 * Returns its id. */
int64_t cali_w_attr(cali_writer *w, const char *name, cali_type type, int prop, const char *alias,
                    const char *unit);

/* A node (attr, value) under parent (-1: a root). Returns its id. */
int64_t cali_w_node(cali_writer *w, int64_t attr, const char *value, int64_t parent);

/* A snapshot row: the nodes in refs (a region path's last node, ...) and immediate values
 * (attrs[i] = vals[i]). */
void cali_w_ctx(cali_writer *w, const int64_t *refs, int nref, const int64_t *attrs,
                const char *const *vals, int nval);

/* One Adiak value among the globals: Adiak's attribute (global, with adiak.type, category and
 * subcategory metadata; `atype` as Adiak names it: "int", "double", "string", "date",
 * "version", "path", "set of string") and its value text. Call before cali_w_globals. */
void cali_w_adiak(cali_writer *w, const char *name, cali_type type, const char *atype,
                  const char *subcategory, const char *value);

/* A global that is not Adiak's (Caliper's own: cali.channel, spot.metrics...). */
void cali_w_global(cali_writer *w, const char *name, cali_type type, const char *value);

/* The globals record (references the chain of every cali_w_adiak and cali_w_global value). */
void cali_w_globals(cali_writer *w);

/* Writes s escaped for a record value. */
void cali_w_escaped(FILE *fp, const char *s);

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct cali_node {
    int64_t attr, parent; /* parent -1: none */
    char *data;
} cali_node;

typedef struct cali_ctx {
    int nref, nimm;
    int64_t *ref;
    int64_t *attr;
    char **data;
} cali_ctx;

typedef struct cali_file {
    cali_node *node; /* indexed by id; data NULL: no such node */
    size_t nnode;
    cali_ctx *ctx;
    size_t nctx;
    cali_ctx globals;
    int has_globals;
    char *text; /* the file's bytes, which data point into */
} cali_file;

/* Reads a .cali file. 0, ERR_IO (cannot read) or ERR_FORMAT naming the file, the line and what
 * is wrong (not a .cali file, a truncated or damaged record, a reference to an unknown node). */
int cali_read(const char *path, cali_file *f);
void cali_free(cali_file *f);

/* An attribute's name, properties and type name ("double"...); NULL/0 when attr is not one. */
const char *cali_attr_name(const cali_file *f, int64_t attr);
int cali_attr_prop(const cali_file *f, int64_t attr);
const char *cali_attr_type(const cali_file *f, int64_t attr);

/* The region path of a record: the values of its nested attributes, root first, joined by '/'.
 * Returns the number of path elements (0: the record has no region). */
int cali_ctx_path(const cali_file *f, const cali_ctx *c, char *buf, size_t cap);

/* The value of attribute `name` in a record (immediate or referenced), or NULL. */
const char *cali_ctx_value(const cali_file *f, const cali_ctx *c, const char *name);

/* The value of a global (the globals record), or NULL. */
const char *cali_global(const cali_file *f, const char *name);

#endif
