/* yamlx: checks shared by every YAML file the program reads (configurations, levers files,
 * lever catalogs, rules overrides, dataset meta.yaml).
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

/* Checks a loaded document and returns error `code` (message set) for the first of:
 *   - an alias to a node that contains it: "<label>:<line>: recursive alias: ...";
 *   - nesting deeper than YAMLX_MAX_DEPTH, or aliases adding more than
 *     YAMLX_MAX_ALIAS_EXPANSION nodes (see above);
 *   - a scalar key that appears twice in one mapping: "<label>: key 'K' appears twice in one
 *     mapping (lines A and B); keep one".
 * ERR_NOMEM if its bookkeeping cannot be allocated; 0 otherwise. */
int yamlx_check_document(yaml_document_t *doc, const char *label, int code);

/* The same for YAML text, or a file, that a reader parses event by event. A text that does not
 * load is left to the reader (0): it reports its own syntax errors. */
int yamlx_check_text(const char *text, size_t n, const char *label, int code);
int yamlx_check_file(const char *path, const char *label, int code); /* label NULL: path */

#endif
