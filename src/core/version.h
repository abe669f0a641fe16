/* version: the scaffold version, shown by `scaffold --version` and recorded in datasets'
 * directory names and meta.yaml (upstream records a git commit there; we have none at run time). */
#ifndef SCAFFOLD_CORE_VERSION_H
#define SCAFFOLD_CORE_VERSION_H

#define SCAFFOLD_VERSION "0.1.0"

#endif
