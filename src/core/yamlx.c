/* yamlx: structure and duplicate-key checks of loaded YAML documents (see yamlx.h). */
#include "core/yamlx.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

const char *yamlx_kind(const yaml_node_t *n) {
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
                       yx_line(n), yamlx_kind(n));
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
                       "values out", w->label, yx_line(n), yamlx_kind(n), w->expand_limit,
                       w->nnodes, YAMLX_MAX_ALIAS_EXPANSION);
    return n->type == YAML_MAPPING_NODE ? yx_check_dups(w, n) : 0;
}

/* The checks yamlx_load_file runs on a loaded document (yamlx.h): error `code` with its
 * message, ERR_NOMEM when the bookkeeping cannot be allocated, else 0. */
static int yamlx_check_document(yaml_document_t *doc, const char *label, int code) {
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

/* ------------------------------------------------------------------ loading */

/* Loads the parser's first document into d and checks it; deletes the parser. */
static int yx_load(yamlx_doc *d, yaml_parser_t *p) {
    int ok = yaml_parser_load(p, &d->doc);
    int rc = ok ? 0 : err_set(d->code, "%s:%zu:%zu: YAML syntax error: %s", d->label,
                              p->problem_mark.line + 1, p->problem_mark.column + 1,
                              p->problem ? p->problem : "unknown");
    yaml_parser_delete(p);
    if (ok && (rc = yamlx_check_document(&d->doc, d->label, d->code)) != 0)
        yaml_document_delete(&d->doc);
    return rc;
}

int yamlx_load_text(yamlx_doc *d, const char *text, size_t n, const char *label, int code) {
    yaml_parser_t p;
    d->label = label;
    d->code = code;
    if (!yaml_parser_initialize(&p))
        return err_set(ERR_NOMEM, "%s: out of memory", label);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, n);
    return yx_load(d, &p);
}

int yamlx_load_file(yamlx_doc *d, const char *path, const char *what, int code) {
    yaml_parser_t p;
    d->label = path;
    d->code = code;
    FILE *f = fs_open_read(path);
    if (!f)
        return err_set(code, "cannot open %s %s: %s", what, path, strerror(errno));
    int rc = yaml_parser_initialize(&p) ? 0 : err_set(ERR_NOMEM, "%s: out of memory", path);
    if (rc == 0) {
        yaml_parser_set_input_file(&p, f);
        rc = yx_load(d, &p);
    }
    fclose(f);
    return rc;
}

void yamlx_free(yamlx_doc *d) {
    yaml_document_delete(&d->doc);
}

yaml_node_t *yamlx_root(yamlx_doc *d) {
    return yaml_document_get_root_node(&d->doc);
}

const char *yamlx_text(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

yaml_node_t *yamlx_get(yamlx_doc *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        const char *k = yamlx_text(yaml_document_get_node(&d->doc, p->key));
        if (k && !strcmp(k, key))
            return yaml_document_get_node(&d->doc, p->value);
    }
    return NULL;
}

size_t yamlx_len(const yaml_node_t *list) {
    return list && list->type == YAML_SEQUENCE_NODE
               ? (size_t)(list->data.sequence.items.top - list->data.sequence.items.start)
               : 0;
}

yaml_node_t *yamlx_item(yamlx_doc *d, const yaml_node_t *list, size_t i) {
    if (i >= yamlx_len(list))
        return NULL;
    return yaml_document_get_node(&d->doc, list->data.sequence.items.start[i]);
}

/* ------------------------------------------------------------------ values into fields */

static int yx_ranged(const yamlx_field *f) {
    return f->min != 0 || f->max != 0;
}

/* The most entries an INTS field holds: struct {int n; int v[cap];}. */
#define YX_INTS_MAX 64
static size_t yx_cap(const yamlx_field *f) {
    size_t cap = (f->size - sizeof(int)) / sizeof(int);
    return cap < YX_INTS_MAX ? cap : YX_INTS_MAX;
}

/* What field f takes, for messages: "an integer in [1, 12]", "one of a, b", ... */
static void yx_expected(const yamlx_field *f, char *buf, size_t n) {
    const char *noun = f->type == YAMLX_DOUBLE ? "a number" : "an integer";
    size_t o = 0;
    switch (f->type) {
    case YAMLX_STR: snprintf(buf, n, "a text of at most %zu characters", f->size - 1); return;
    case YAMLX_BOOL: snprintf(buf, n, "true or false"); return;
    case YAMLX_LIST: snprintf(buf, n, "a list"); return;
    case YAMLX_MAP: snprintf(buf, n, "a mapping"); return;
    case YAMLX_INTS:
        o = (size_t)snprintf(buf, n, "a list of up to %zu integers", yx_cap(f));
        if (yx_ranged(f) && o < n)
            snprintf(buf + o, n - o, " in [%.15g, %.15g]", f->min, f->max);
        return;
    case YAMLX_ENUM:
        for (size_t i = 0; f->names[i] && o < n; i++)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "one of ", f->names[i]);
        return;
    default:
        if (yx_ranged(f))
            snprintf(buf, n, "%s in [%.15g, %.15g]", noun, f->min, f->max);
        else
            snprintf(buf, n, "%s", noun);
        return;
    }
}

/* "<where>: expected <what f takes>, <got>" (the text shown cut at 80 characters). */
static int yx_bad(const yamlx_field *f, const char *where, int code, const char *kind,
                  const char *text) {
    char what[512];
    yx_expected(f, what, sizeof what);
    if (kind)
        return err_set(code, "%s: expected %s, found a %s", where, what, kind);
    return err_set(code, "%s: expected %s, got '%.80s%s'", where, what, text,
                   strlen(text) > 80 ? "..." : "");
}

static int yx_int(const yamlx_field *f, const char *s, int *out) {
    if ((f->flags & YAMLX_TYPED) && (!strcasecmp(s, "true") || !strcasecmp(s, "false"))) {
        *out = (s[0] | 0x20) == 't';
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < INT_MIN || v > INT_MAX ||
        (yx_ranged(f) && (v < f->min || v > f->max)))
        return -1;
    *out = (int)v;
    return 0;
}

static int yx_double(const yamlx_field *f, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || (yx_ranged(f) && (v < f->min || v > f->max)))
        return -1;
    *out = v;
    return 0;
}

/* INTS from its items' texts (NULL: not a scalar): 1 to the field's capacity. */
static int yx_ints(const yamlx_field *f, const char *const *item, size_t n, int *dst) {
    int v[YX_INTS_MAX];
    if (n == 0 || n > yx_cap(f))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!item[i] || yx_int(f, item[i], &v[i]))
            return -1;
    dst[0] = (int)n;
    memcpy(dst + 1, v, n * sizeof *v);
    return 0;
}

/* INTS from a text: "1,2,1", "[1, 2, 1]". */
static int yx_ints_text(const yamlx_field *f, const char *s, int *dst) {
    const char *item[YX_INTS_MAX + 1];
    size_t n = 0;
    char tmp[256], *save = NULL;
    if (strlen(s) >= sizeof tmp)
        return -1;
    strcpy(tmp, s);
    for (char *t = strtok_r(tmp, "[], ", &save); t && n <= YX_INTS_MAX;
         t = strtok_r(NULL, "[], ", &save))
        item[n++] = t;
    return yx_ints(f, item, n, dst);
}

int yamlx_set(const yamlx_field *f, void *obj, const char *text, const char *where, int code) {
    char *dst = (char *)obj + f->off;
    size_t len = strlen(text);
    int bad = 0;
    switch (f->type) {
    case YAMLX_STR:
        if (len >= f->size && !(f->flags & YAMLX_CUT))
            return yx_bad(f, where, code, NULL, text);
        snprintf(dst, f->size, "%s", text);
        return 0;
    case YAMLX_ENUM:
        for (size_t i = 0; f->names[i]; i++)
            if (!strcmp(f->names[i], text) && len < f->size) {
                memcpy(dst, text, len + 1);
                return 0;
            }
        return yx_bad(f, where, code, NULL, text);
    case YAMLX_INT: bad = yx_int(f, text, (int *)dst); break;
    case YAMLX_DOUBLE: bad = yx_double(f, text, (double *)dst); break;
    case YAMLX_INTS: bad = yx_ints_text(f, text, (int *)dst); break;
    case YAMLX_BOOL:
        bad = strcasecmp(text, "true") && strcasecmp(text, "false") && strcmp(text, "1") &&
              strcmp(text, "0");
        if (!bad)
            *(int *)dst = (text[0] | 0x20) == 't' || text[0] == '1';
        break;
    case YAMLX_SKIP: break;
    default: return yx_bad(f, where, code, "scalar", text);
    }
    return bad ? yx_bad(f, where, code, NULL, text) : 0;
}

/* INTS from a YAML list of scalars (shown as "[a, b, ...]" in a message). */
static int yx_ints_node(yamlx_doc *d, const yamlx_field *f, int *dst, yaml_node_t *v,
                        const char *where) {
    const char *item[YX_INTS_MAX + 1];
    char shown[256] = "[";
    size_t n = yamlx_len(v), o = 1;
    for (size_t i = 0; i < n && i <= YX_INTS_MAX; i++) {
        item[i] = yamlx_text(yamlx_item(d, v, i));
        /* o stays inside shown: a long list is shown cut, never written past its end */
        if (o < sizeof shown - 1) {
            int w = snprintf(shown + o, sizeof shown - o, "%s%s", i ? ", " : "",
                             item[i] ? item[i] : "...");
            o = w < 0 ? o : o + (size_t)w;
            if (o > sizeof shown - 1)
                o = sizeof shown - 1;
        }
    }
    if (o + 1 < sizeof shown)
        strcpy(shown + o, "]");
    return yx_ints(f, item, n, dst) ? yx_bad(f, where, d->code, NULL, shown) : 0;
}

int yamlx_set_node(yamlx_doc *d, const yamlx_field *f, void *obj, yaml_node_t *v,
                   const char *where) {
    if (f->type == YAMLX_LIST || f->type == YAMLX_MAP) {
        if (v->type != (f->type == YAMLX_LIST ? YAML_SEQUENCE_NODE : YAML_MAPPING_NODE))
            return yx_bad(f, where, d->code, yamlx_kind(v), NULL);
        *(yaml_node_t **)((char *)obj + f->off) = v;
        return 0;
    }
    if (f->type == YAMLX_SKIP)
        return 0;
    if (f->type == YAMLX_INTS && v->type == YAML_SEQUENCE_NODE)
        return yx_ints_node(d, f, (int *)((char *)obj + f->off), v, where);
    const char *s = yamlx_text(v);
    if (!s)
        return yx_bad(f, where, d->code, yamlx_kind(v), NULL);
    int quoted = v->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                 v->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    int number = f->type == YAMLX_INT || f->type == YAMLX_DOUBLE || f->type == YAMLX_BOOL;
    if (!quoted && (!*s || !strcmp(s, "~") || !strcmp(s, "null"))) {
        if (f->type != YAMLX_STR)
            return err_set(d->code, "%s has no value", where);
        s = "";
    }
    if (quoted && number && (f->flags & YAMLX_TYPED)) {
        char what[512];
        yx_expected(f, what, sizeof what);
        return err_set(d->code, "%s: expected %s, got the quoted text \"%.80s\" (a quoted value "
                       "is a text; remove the quotes)", where, what, s);
    }
    return yamlx_set(f, obj, s, where, d->code);
}

/* ------------------------------------------------------------------ mappings */

/* "<label>:<line>: " and "<ctx>: " when there is one. */
static void yx_at(char *buf, size_t n, const yamlx_doc *d, const yaml_node_t *node,
                  const char *ctx) {
    snprintf(buf, n, "%s:%zu: %s%s", d->label, node ? yx_line(node) : 1, ctx ? ctx : "",
             ctx ? ": " : "");
}

static int yx_unknown(yamlx_doc *d, const char *at, const char *key, const yamlx_field *tab,
                      size_t n) {
    char keys[512];
    size_t o = 0;
    keys[0] = '\0';
    for (size_t i = 0; i < n && o < sizeof keys; i++)
        o += (size_t)snprintf(keys + o, sizeof keys - o, "%s%s", i ? ", " : "", tab[i].key);
    return err_set(d->code, "%sunknown key '%s' (valid keys: %s)", at, key, keys);
}

int yamlx_map_read(yamlx_doc *d, yaml_node_t *map, const yamlx_field *tab, size_t n, void *obj,
                   const char *ctx, int strict) {
    char at[FS_PATH_MAX + 256], where[FS_PATH_MAX + 512];
    unsigned long long seen = 0;
    if (n > 64)
        return err_set(ERR_INTERNAL, "yamlx_map_read: more than 64 fields");
    yx_at(at, sizeof at, d, map, ctx);
    if (map && map->type != YAML_MAPPING_NODE)
        return err_set(d->code, "%sexpected a mapping, found a %s", at, yamlx_kind(map));
    for (yaml_node_pair_t *p = map ? map->data.mapping.pairs.start : NULL;
         map && p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(&d->doc, p->key);
        const char *key = yamlx_text(k);
        yx_at(at, sizeof at, d, k, ctx);
        if (!key)
            return err_set(d->code, "%skeys must be plain names, found a %s", at,
                           k ? yamlx_kind(k) : "nothing");
        size_t i = 0;
        while (i < n && strcmp(tab[i].key, key))
            i++;
        if (i == n && strict)
            return yx_unknown(d, at, key, tab, n);
        if (i == n)
            continue;
        snprintf(where, sizeof where, "%skey '%s'", at, key);
        int rc = yamlx_set_node(d, &tab[i], obj, yaml_document_get_node(&d->doc, p->value),
                                where);
        if (rc)
            return rc;
        seen |= 1ULL << i;
    }
    yx_at(at, sizeof at, d, map, ctx);
    for (size_t i = 0; i < n; i++)
        if ((tab[i].flags & YAMLX_REQUIRED) && !(seen & 1ULL << i))
            return err_set(d->code, "%smissing required key '%s'", at, tab[i].key);
    return 0;
}
