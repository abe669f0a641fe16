/* yamlx: structure and duplicate-key checks of loaded YAML documents (see yamlx.h). */
#include "core/yamlx.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What the walk knows of one node (info[index - 1]). libyaml loads an alias as a second
 * reference to its anchor's node, so the document is a graph, possibly with cycles. The walk is
 * memoized on this state: a node named by many aliases is checked once, which keeps the walk
 * linear in the file. (It used to follow every alias down to a depth of 64: `k: &a [*a, *a]`
 * took 2^64 steps, the fuzzer's "timeout" of the config harness.) */
enum { YX_NEW = 0, YX_OPEN, YX_DONE };
typedef struct {
    unsigned char state;
    unsigned char height; /* collections on the longest path from the node down (<= MAX_DEPTH) */
    size_t expanded;      /* nodes at and below it with aliases expanded, saturating */
} yx_info;

/* One scalar key of the mapping being checked for duplicates. */
typedef struct {
    const unsigned char *s;
    size_t len;
    size_t pos; /* index of its pair in the mapping */
    size_t line;
} yx_key;

typedef struct {
    yaml_document_t *doc;
    const char *label;
    int code;
    yx_info *info;
    size_t nnodes;
    size_t expand_limit; /* nnodes + YAMLX_MAX_ALIAS_EXPANSION: only aliases can go beyond */
    yx_key *keys;        /* scratch for one mapping's keys */
    size_t keys_cap;
} yx_walk;

static const char *yx_kind(const yaml_node_t *n) {
    return n->type == YAML_SEQUENCE_NODE ? "list" : n->type == YAML_MAPPING_NODE ? "mapping"
                                                                                 : "scalar";
}

static size_t yx_line(const yaml_node_t *n) {
    return n->start_mark.line + 1;
}

static int yx_key_cmp(const void *a, const void *b) {
    const yx_key *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int yx_key_same(const yx_key *x, const yx_key *y) {
    return x->len == y->len && !memcmp(x->s, y->s, x->len);
}

/* Duplicate scalar keys of one mapping, by sorting them (a mapping with many keys was compared
 * pair by pair: quadratic). Reports the pair a scan in document order meets first: the earliest
 * second occurrence of any key, with that key's first occurrence. */
static int yx_check_dups(yx_walk *w, const yaml_node_t *n) {
    size_t np = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    if (np < 2)
        return 0;
    if (np > w->keys_cap) {
        yx_key *k = realloc(w->keys, np * sizeof *k);
        if (!k)
            return err_set(ERR_NOMEM, "%s: out of memory checking the YAML document", w->label);
        w->keys = k;
        w->keys_cap = np;
    }
    size_t nk = 0;
    for (size_t i = 0; i < np; i++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, n->data.mapping.pairs.start[i].key);
        if (k && k->type == YAML_SCALAR_NODE)
            w->keys[nk++] = (yx_key){k->data.scalar.value, k->data.scalar.length, i, yx_line(k)};
    }
    if (nk < 2)
        return 0;
    qsort(w->keys, nk, sizeof *w->keys, yx_key_cmp);
    const yx_key *first = NULL, *second = NULL;
    for (size_t i = 0; i < nk;) {
        size_t j = i + 1;
        if (j < nk && yx_key_same(&w->keys[i], &w->keys[j]) &&
            (!second || w->keys[j].pos < second->pos)) {
            first = &w->keys[i];
            second = &w->keys[j];
        }
        while (j < nk && yx_key_same(&w->keys[i], &w->keys[j]))
            j++;
        i = j;
    }
    if (!second)
        return 0;
    return err_set(w->code, "%s: key '%s' appears twice in one mapping (lines %zu and %zu); keep "
                   "one", w->label, (const char *)second->s, first->line, second->line);
}

static int yx_too_deep(yx_walk *w, const yaml_node_t *n) {
    return err_set(w->code, "%s:%zu: collections nested deeper than %d levels (counting through "
                   "aliases); flatten the file", w->label, yx_line(n), YAMLX_MAX_DEPTH);
}

/* Checks node `id`, reached below `depth` collections, and everything under it. Recursion is
 * bounded by YAMLX_MAX_DEPTH: deeper nesting is an error before the next call. */
static int yx_visit(yx_walk *w, yaml_node_item_t id, int depth) {
    if (id < 1 || (size_t)id > w->nnodes)
        return 0; /* libyaml gives valid indices; a bad one is no node to check */
    yaml_node_t *n = yaml_document_get_node(w->doc, id);
    yx_info *in = &w->info[id - 1];
    if (in->state == YX_OPEN)
        return err_set(w->code, "%s:%zu: recursive alias: this %s contains an alias to itself, "
                       "so reading it would never end; write the repeated part out", w->label,
                       yx_line(n), yx_kind(n));
    if (in->state == YX_DONE)
        return depth + in->height > YAMLX_MAX_DEPTH ? yx_too_deep(w, n) : 0;
    if (n->type != YAML_SEQUENCE_NODE && n->type != YAML_MAPPING_NODE) {
        in->state = YX_DONE;
        in->expanded = 1;
        return 0;
    }
    if (depth + 1 > YAMLX_MAX_DEPTH)
        return yx_too_deep(w, n);
    in->state = YX_OPEN;
    int height = 0, rc = 0;
    size_t expanded = 1;
    /* A sequence's items, or a mapping's keys and values, in document order. */
    size_t nc = n->type == YAML_SEQUENCE_NODE
                    ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
                    : 2 * (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    for (size_t i = 0; i < nc; i++) {
        yaml_node_item_t c = n->type == YAML_SEQUENCE_NODE ? n->data.sequence.items.start[i]
                             : i % 2 ? n->data.mapping.pairs.start[i / 2].value
                                     : n->data.mapping.pairs.start[i / 2].key;
        if ((rc = yx_visit(w, c, depth + 1)) != 0)
            return rc;
        if (c < 1 || (size_t)c > w->nnodes)
            continue;
        const yx_info *ci = &w->info[c - 1];
        if (ci->height > height)
            height = ci->height;
        expanded = ci->expanded > SIZE_MAX - expanded ? SIZE_MAX : expanded + ci->expanded;
    }
    in->state = YX_DONE;
    in->height = (unsigned char)(height + 1);
    in->expanded = expanded;
    /* Without aliases a node holds at most the file's nodes; beyond the allowance, aliases
     * repeat so much that any reader walking the tree would take as long as a hang. This is the
     * innermost such node, where the repetition is. */
    if (expanded > w->expand_limit)
        return err_set(w->code, "%s:%zu: aliases expand this %s to more than %zu nodes, though "
                       "the file has %zu (aliases may add at most %d: an alias bomb?); write the "
                       "values out", w->label, yx_line(n), yx_kind(n), w->expand_limit, w->nnodes,
                       YAMLX_MAX_ALIAS_EXPANSION);
    return n->type == YAML_MAPPING_NODE ? yx_check_dups(w, n) : 0;
}

int yamlx_check_document(yaml_document_t *doc, const char *label, int code) {
    if (!yaml_document_get_root_node(doc))
        return 0;
    yx_walk w = {doc, label, code, NULL, (size_t)(doc->nodes.top - doc->nodes.start), 0, NULL, 0};
    w.expand_limit = w.nnodes + YAMLX_MAX_ALIAS_EXPANSION;
    w.info = calloc(w.nnodes, sizeof *w.info);
    if (!w.info)
        return err_set(ERR_NOMEM, "%s: out of memory checking the YAML document", label);
    int rc = yx_visit(&w, 1, 0); /* node 1 is the root */
    free(w.keys);
    free(w.info);
    return rc;
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
        rc = yamlx_check_document(&d, label, code);
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
