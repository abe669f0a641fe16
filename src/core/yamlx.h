/* yamlx: what every YAML file the program reads (configurations, levers files, lever catalogs,
 * rules overrides, dataset meta.yaml) shares: the checks of a loaded document, and the reading of
 * its mappings into structs through tables of fields (below).
 *
 * libyaml accepts a mapping that names a key twice and the readers would silently keep one value
 * (the last, usually); such a file is refused instead, naming both lines.
 *
 * libyaml also loads aliases as shared nodes, so a small file can describe a graph that is huge
 * or endless once walked as a tree: an anchor whose node contains an alias to itself
 * (`k: &a [*a, *a]`, a cycle) or anchors that each repeat the previous one twice (billion
 * laughs). Such a file is refused with one message naming the file and line, before any reader
 * walks the document; the checks themselves visit every node once (linear in the file). */
#ifndef SCAFFOLD_CORE_YAMLX_H
#define SCAFFOLD_CORE_YAMLX_H

#include <stddef.h>
#include <yaml.h>

/* Deepest nesting of collections accepted, counted through aliases (a configuration needs 2, a
 * levers file or lever catalog 4): "<label>:<line>: collections nested deeper than 64 levels". */
#define YAMLX_MAX_DEPTH 64
/* How many nodes aliases may add when the document is walked as a tree (each alias counts the
 * whole node it names; legitimate files add a few dozen): "<label>:<line>: aliases expand this
 * <kind> to more than N nodes, though the file has M (aliases may add at most 100000 ...)". */
#define YAMLX_MAX_ALIAS_EXPANSION 100000

/* ------------------------------------------------------------------ reading into structs
 *
 * Every reader loads its file with yamlx_load_file (or _text), which refuses what
 * the checks above refuse, then reads each mapping into a struct through a table of
 * fields with yamlx_map_read (the configuration, whose key table is its own, value by value
 * with yamlx_set_node). A message names the file and line, the reader's context and the key,
 * then what was expected and what was found:
 *   "<label>:<line>: [<ctx>: ]key 'K': expected an integer in [1, 12], got '13'"
 *   "<label>:<line>: [<ctx>: ]key 'K': expected a list, found a scalar"
 *   "<label>:<line>: [<ctx>: ]key 'K' has no value"                      (a null, not a text)
 *   "<label>:<line>: [<ctx>: ]missing required key 'K'"                  (line of the mapping)
 *   "<label>:<line>: [<ctx>: ]unknown key 'K' (valid keys: a, b, c)"     (strict tables) */

/* A loaded document, the file as messages name it, and the error code of every message. */
typedef struct yamlx_doc {
    yaml_document_t doc;
    const char *label; /* not copied: must outlive the reading */
    int code;
} yamlx_doc;

/* Loads the first document of a file ("cannot open <what> <path>: <reason>"), or of a text, and
 * checks it, refusing with error `code` (message set) the first of:
 *   - an alias to a node that contains it: "<label>:<line>: recursive alias: ...";
 *   - nesting deeper than YAMLX_MAX_DEPTH, or aliases adding more than
 *     YAMLX_MAX_ALIAS_EXPANSION nodes (see above);
 *   - a scalar key that appears twice in one mapping: "<label>: key 'K' appears twice in one
 *     mapping (lines A and B); keep one";
 * a syntax error: "<label>:<line>:<col>: YAML syntax error: <problem>". 0 (free the document with yamlx_free) or `code` (ERR_NOMEM), nothing to free. */
int yamlx_load_file(yamlx_doc *d, const char *path, const char *what, int code);
int yamlx_load_text(yamlx_doc *d, const char *text, size_t n, const char *label, int code);
void yamlx_free(yamlx_doc *d);
yaml_node_t *yamlx_root(yamlx_doc *d); /* NULL for an empty document */

/* "scalar", "list" or "mapping"; a scalar node's text (NULL for another node or NULL); the value
 * of scalar key `key` in mapping `map` (NULL when absent or `map` is no mapping); the number of
 * items of a list (0 for another node) and item i. */
const char *yamlx_kind(const yaml_node_t *n);
const char *yamlx_text(const yaml_node_t *n);
yaml_node_t *yamlx_get(yamlx_doc *d, yaml_node_t *map, const char *key);
size_t yamlx_len(const yaml_node_t *list);
yaml_node_t *yamlx_item(yamlx_doc *d, const yaml_node_t *list, size_t i);

typedef enum {
    YAMLX_STR = 1, /* char[size]: the text (a null value is "") */
    YAMLX_INT,     /* int in [min, max] (any int when both are 0) */
    YAMLX_DOUBLE,  /* finite double in [min, max] (any when both are 0) */
    YAMLX_BOOL,    /* int 1 or 0: true or false (any case), 1 or 0 */
    YAMLX_ENUM,    /* char[size]: one of `names` */
    YAMLX_INTS,    /* struct {int n; int v[...];}: a list of ints in [min, max], from a YAML list
                    * or a text such as "1,2,1" or "[1, 2, 1]" (not empty) */
    YAMLX_LIST,    /* yaml_node_t *: the value, a list, for the reader to walk */
    YAMLX_MAP,     /* yaml_node_t *: the value, a mapping */
    YAMLX_SKIP     /* a known key whose value is not read */
} yamlx_type;

enum {
    YAMLX_REQUIRED = 1, /* yamlx_map_read: the key must be present */
    YAMLX_CUT = 2,      /* STR: a longer text is cut to size - 1 characters (else refused) */
    YAMLX_TYPED = 4     /* PyYAML's types: a quoted scalar is a text, never a number or a
                         * switch; INT and INTS take true and false as 1 and 0 */
};

typedef struct yamlx_field {
    const char *key;
    yamlx_type type;
    size_t off, size; /* the destination in the struct: YAMLX_AT(type, member) */
    double min, max;  /* INT, DOUBLE, INTS: inclusive range (none when both are 0) */
    const char *const *names; /* ENUM: the accepted words, NULL-terminated */
    unsigned flags;           /* YAMLX_REQUIRED, YAMLX_CUT, YAMLX_TYPED */
} yamlx_field;

#define YAMLX_AT(type, member) .off = offsetof(type, member), .size = sizeof(((type *)0)->member)
#define YAMLX_N(tab) (sizeof(tab) / sizeof((tab)[0]))

/* Reads mapping `map` (NULL: an empty mapping, for an empty document) into `obj` by the table
 * (at most 64 fields):
 * each key of the table converts its value into its field (keys left out keep their field);
 * other keys are ignored, or refused when `strict`; then a required key left out is an error.
 * `ctx` (NULL: none) names the mapping in messages ("levers entry 2"). 0 or d->code. */
int yamlx_map_read(yamlx_doc *d, yaml_node_t *map, const yamlx_field *tab, size_t n, void *obj,
                   const char *ctx, int strict);

/* One value into field f of obj: from a node (its kind, null and quoting checked), or from a
 * text (a command-line flag). `where` starts the message ("cfg.yml: key 'seed'", "--seed"):
 * "<where>: expected an integer, got 'x'". 0 or d->code (`code`). */
int yamlx_set_node(yamlx_doc *d, const yamlx_field *f, void *obj, yaml_node_t *v,
                   const char *where);
int yamlx_set(const yamlx_field *f, void *obj, const char *text, const char *where, int code);

#endif
