/* yamlx: duplicate keys in YAML mappings (see yamlx.h). */
#include "core/yamlx.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <stdlib.h>
#include <string.h>

static int check_node(yaml_document_t *doc, yaml_node_t *n, const char *label, int code,
                      int depth) {
    if (!n || depth > 64)
        return 0;
    if (n->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             it < n->data.sequence.items.top; it++) {
            int rc = check_node(doc, yaml_document_get_node(doc, *it), label, code, depth + 1);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (n->type != YAML_MAPPING_NODE)
        return 0;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE) {
            for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
                yaml_node_t *k0 = yaml_document_get_node(doc, q->key);
                if (k0 && k0->type == YAML_SCALAR_NODE &&
                    k0->data.scalar.length == k->data.scalar.length &&
                    !memcmp(k0->data.scalar.value, k->data.scalar.value, k->data.scalar.length))
                    return err_set(code, "%s: key '%s' appears twice in one mapping (lines %zu "
                                   "and %zu); keep one", label, (const char *)k->data.scalar.value,
                                   k0->start_mark.line + 1, k->start_mark.line + 1);
            }
        }
        int rc = check_node(doc, yaml_document_get_node(doc, p->value), label, code, depth + 1);
        if (rc)
            return rc;
    }
    return 0;
}

int yamlx_check_duplicates(yaml_document_t *doc, const char *label, int code) {
    return check_node(doc, yaml_document_get_root_node(doc), label, code, 0);
}

int yamlx_check_text(const char *text, size_t n, const char *label, int code) {
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p))
        return err_set(ERR_NOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, n);
    int rc = 0;
    /* Every document of the stream (a reader may accept several). */
    while (rc == 0 && yaml_parser_load(&p, &d)) {
        int empty = yaml_document_get_root_node(&d) == NULL;
        rc = yamlx_check_duplicates(&d, label, code);
        yaml_document_delete(&d);
        if (empty)
            break;
    }
    yaml_parser_delete(&p);
    return rc;
}

int yamlx_check_file(const char *path, const char *label, int code) {
    char *text = NULL;
    size_t n = 0;
    if (fs_read_file(path, &text, &n) != 0) {
        err_clear();
        return 0; /* the reader reports an unreadable file itself */
    }
    int rc = yamlx_check_text(text, n, label ? label : path, code);
    free(text);
    return rc;
}
