/* yamlx: checks shared by every YAML file the program reads (configurations, levers files,
 * lever catalogs, rules overrides, dataset meta.yaml). libyaml accepts a mapping that names a
 * key twice and the readers would silently keep one value (the last, usually); such a file is
 * refused instead, naming both lines. */
#ifndef SCAFFOLD_CORE_YAMLX_H
#define SCAFFOLD_CORE_YAMLX_H

#include <stddef.h>
#include <yaml.h>

/* Every mapping of a loaded document: a scalar key that appears twice gives error `code` with
 * "<label>: key 'K' appears twice in one mapping (lines A and B); keep one". 0 otherwise. */
int yamlx_check_duplicates(yaml_document_t *doc, const char *label, int code);

/* The same for YAML text, or a file, that a reader parses event by event. A text that does not
 * load is left to the reader (0): it reports its own syntax errors. */
int yamlx_check_text(const char *text, size_t n, const char *label, int code);
int yamlx_check_file(const char *path, const char *label, int code); /* label NULL: path */

#endif
