/* cali: the .cali record format, writer and reader (see cali.h). */
#include "core/cali.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/mem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Caliper's bootstrap nodes: 0..7 and 11 are the types, 8..10 the attributes that describe
 * attributes. */
#define ATTR_NAME 8
#define ATTR_TYPE 9
#define ATTR_PROP 10
#define FIRST_FREE 12
#define MAX_NODE_ID ((int64_t)1 << 26)

/* ---- writing ------------------------------------------------------------------------------ */

void cali_w_init(cali_writer *w, FILE *fp) {
    memset(w, 0, sizeof *w);
    w->fp = fp;
    w->next = FIRST_FREE;
    w->globals_tail = -1;
}

void cali_w_escaped(FILE *fp, const char *s) {
    for (; *s; s++) {
        if (*s == ',' || *s == '=' || *s == '\\')
            fputc('\\', fp);
        if (*s == '\n') {
            fputs("\\n", fp);
            continue;
        }
        fputc(*s, fp);
    }
}

int64_t cali_w_node(cali_writer *w, int64_t attr, const char *value, int64_t parent) {
    int64_t id = w->next++;
    fprintf(w->fp, "__rec=node,id=%" PRId64 ",attr=%" PRId64 ",data=", id, attr);
    cali_w_escaped(w->fp, value);
    if (parent >= 0)
        fprintf(w->fp, ",parent=%" PRId64, parent);
    fputc('\n', w->fp);
    return id;
}

/* An attribute whose definition chain starts at node `parent` (a type node, or metadata nodes
 * under one). */
static int64_t attr_at(cali_writer *w, const char *name, int prop, int64_t parent) {
    char p[32];
    snprintf(p, sizeof p, "%d", prop);
    return cali_w_node(w, ATTR_NAME, name, cali_w_node(w, ATTR_PROP, p, parent));
}

/* The metadata attributes (attribute.alias, .unit, adiak.*), defined once each. */
static int64_t meta_attr(cali_writer *w, int64_t *slot, const char *name, cali_type type) {
    if (!*slot)
        *slot = attr_at(w, name, CALI_PROP_SKIP_EVENTS | CALI_PROP_SCOPE_PROCESS, type);
    return *slot;
}

int64_t cali_w_attr(cali_writer *w, const char *name, cali_type type, int prop, const char *alias,
                    const char *unit) {
    int64_t parent = type;
    if (unit)
        parent = cali_w_node(w, meta_attr(w, &w->unit, "attribute.unit", CALI_TYPE_STRING), unit,
                             parent);
    if (alias)
        parent = cali_w_node(w, meta_attr(w, &w->alias, "attribute.alias", CALI_TYPE_STRING),
                             alias, parent);
    return attr_at(w, name, prop, parent);
}

void cali_w_ctx(cali_writer *w, const int64_t *refs, int nref, const int64_t *attrs,
                const char *const *vals, int nval) {
    fputs("__rec=ctx", w->fp);
    for (int i = 0; i < nref; i++)
        fprintf(w->fp, "%s%" PRId64, i ? "=" : ",ref=", refs[i]);
    for (int i = 0; i < nval; i++)
        fprintf(w->fp, "%s%" PRId64, i ? "=" : ",attr=", attrs[i]);
    for (int i = 0; i < nval; i++) {
        fputs(i ? "=" : ",data=", w->fp);
        cali_w_escaped(w->fp, vals[i]);
    }
    fputc('\n', w->fp);
}

void cali_w_adiak(cali_writer *w, const char *name, cali_type type, const char *atype,
                  const char *subcategory, const char *value) {
    int64_t t = meta_attr(w, &w->adiak_type, "adiak.type", CALI_TYPE_STRING);
    int64_t c = meta_attr(w, &w->adiak_cat, "adiak.category", CALI_TYPE_INT);
    int64_t s = meta_attr(w, &w->adiak_sub, "adiak.subcategory", CALI_TYPE_STRING);
    /* Adiak's "general" category (2), as its collect_all and every adiak_value of upstream */
    int64_t chain = cali_w_node(w, s, subcategory,
                                cali_w_node(w, c, "2", cali_w_node(w, t, atype, type)));
    int64_t a = attr_at(w, name,
                        CALI_PROP_GLOBAL | CALI_PROP_UNALIGNED | CALI_PROP_SKIP_EVENTS |
                            CALI_PROP_SCOPE_PROCESS,
                        chain);
    w->globals_tail = cali_w_node(w, a, value, w->globals_tail);
}

void cali_w_global(cali_writer *w, const char *name, cali_type type, const char *value) {
    int64_t a = attr_at(w, name, CALI_PROP_GLOBAL, type);
    w->globals_tail = cali_w_node(w, a, value, w->globals_tail);
}

void cali_w_globals(cali_writer *w) {
    if (w->globals_tail >= 0)
        fprintf(w->fp, "__rec=globals,ref=%" PRId64 "\n", w->globals_tail);
    else
        fputs("__rec=globals\n", w->fp);
}

/* ---- reading ------------------------------------------------------------------------------ */

static const char *const boot_data[FIRST_FREE] = {
    "usr", "int", "uint", "string", "addr", "double", "bool", "type",
    "cali.attribute.name", "cali.attribute.type", "cali.attribute.prop", "ptr"};
static const int64_t boot_attr[FIRST_FREE] = {9, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 9};
static const int64_t boot_parent[FIRST_FREE] = {-1, -1, -1, -1, -1, -1, -1, -1, 3, 7, 1, -1};

void cali_free(cali_file *f) {
    for (size_t i = 0; i < f->nctx; i++) {
        MEM_FREE(f->ctx[i].ref, f->ctx[i].attr, f->ctx[i].data);
    }
    MEM_FREE(f->ctx, f->globals.ref, f->globals.attr, f->globals.data, f->node, f->text);
    memset(f, 0, sizeof *f);
}

/* One record's entries: key, then its values (tokens in the line, unescaped in place). */
typedef struct entry {
    char *key;
    char **val;
    int nval;
} entry;

typedef struct parser {
    char **tok;
    size_t ntok, cap;
    entry ent[16];
    int nent;
} parser;

static int push_tok(parser *ps, char *t) {
    if (MEM_RESERVE(ps->tok, ps->cap, ps->ntok, 64))
        return ERR_NOMEM;
    ps->tok[ps->ntok++] = t;
    return 0;
}

/* Splits line [s, e) into entries (',' between entries, '=' between key and values; '\'
 * escapes the next character, '\n' is a newline). */
static int split_line(parser *ps, char *s, char *e) {
    ps->ntok = 0;
    ps->nent = 0;
    size_t first[16];
    char *w = s, *start = s;
    int nent = 0;
    first[0] = 0;
    for (char *r = s;; r++) {
        int end = r == e;
        if (!end && *r == '\\' && r + 1 < e) {
            r++;
            *w++ = *r == 'n' ? '\n' : *r;
            continue;
        }
        const char sep = end ? ',' : *r; /* read before the token's NUL may overwrite it */
        if (sep == ',' || sep == '=') {
            *w = 0;
            if (push_tok(ps, start))
                return ERR_NOMEM;
            w = start = r + 1;
            if (sep == ',') {
                if (nent == 16)
                    return ERR_FORMAT;
                nent++;
                if (nent < 16)
                    first[nent] = ps->ntok;
            }
            if (end)
                break;
            continue;
        }
        *w++ = *r;
    }
    for (int i = 0; i < nent; i++) {
        size_t a = first[i], b = i + 1 < nent ? first[i + 1] : ps->ntok;
        ps->ent[i] = (entry){ps->tok[a], ps->tok + a + 1, (int)(b - a - 1)};
    }
    ps->nent = nent;
    return 0;
}

static const entry *find_ent(const parser *ps, const char *key) {
    for (int i = 0; i < ps->nent; i++)
        if (!strcmp(ps->ent[i].key, key))
            return &ps->ent[i];
    return NULL;
}

static int parse_id(const char *s, int64_t *out) {
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || v < 0 || v >= MAX_NODE_ID)
        return -1;
    *out = v;
    return 0;
}

static int have_node(const cali_file *f, int64_t id) {
    return id >= 0 && (size_t)id < f->nnode && f->node[id].data;
}

static int grow_nodes(cali_file *f, int64_t id) {
    return MEM_COVER(f->node, f->nnode, (size_t)id, 64);
}

/* A ctx or globals record into c: its refs (known nodes) and immediate (attr, data) pairs. */
static int read_ctx(const cali_file *f, const parser *ps, cali_ctx *c, const char **why) {
    memset(c, 0, sizeof *c);
    const entry *ref = find_ent(ps, "ref"), *attr = find_ent(ps, "attr"),
                *data = find_ent(ps, "data");
    int nr = ref ? ref->nval : 0, na = attr ? attr->nval : 0, nd = data ? data->nval : 0;
    if (na != nd) {
        *why = "its attr= and data= lists differ in length";
        return ERR_FORMAT;
    }
    c->ref = malloc((size_t)(nr ? nr : 1) * sizeof *c->ref);
    c->attr = malloc((size_t)(na ? na : 1) * sizeof *c->attr);
    c->data = malloc((size_t)(na ? na : 1) * sizeof *c->data);
    if (!c->ref || !c->attr || !c->data)
        return ERR_NOMEM;
    for (int i = 0; i < nr; i++) {
        if (parse_id(ref->val[i], &c->ref[i]) || !have_node(f, c->ref[i])) {
            *why = "it refers to a node that is not defined before it";
            return ERR_FORMAT;
        }
        c->nref++;
    }
    for (int i = 0; i < na; i++) {
        if (parse_id(attr->val[i], &c->attr[i]) || !cali_attr_name(f, c->attr[i])) {
            *why = "its attr= names something that is not an attribute";
            return ERR_FORMAT;
        }
        c->data[i] = data->val[i];
        c->nimm++;
    }
    return 0;
}

int cali_read(const char *path, cali_file *f) {
    memset(f, 0, sizeof *f);
    size_t len = 0;
    int rc = fs_read_file(path, &f->text, &len);
    if (rc)
        return rc;
    if (grow_nodes(f, FIRST_FREE)) {
        cali_free(f);
        return err_set(ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0; i < FIRST_FREE; i++)
        f->node[i] = (cali_node){boot_attr[i], boot_parent[i], (char *)boot_data[i]};
    parser ps = {0};
    const char *why = NULL;
    long line = 0, records = 0;
    char *s = f->text, *end = f->text + len;
    while (rc == 0 && s < end) {
        char *e = memchr(s, '\n', (size_t)(end - s));
        if (!e)
            e = end;
        line++;
        if (e == s) { /* empty line */
            s = e + 1;
            continue;
        }
        if ((size_t)(e - s) < 6 || strncmp(s, "__rec=", 6)) {
            why = "it does not start with __rec= (not a Caliper .cali file?)";
            rc = ERR_FORMAT;
            break;
        }
        *e = 0;
        if ((rc = split_line(&ps, s, e)) != 0) {
            why = rc == ERR_FORMAT ? "it has too many fields" : NULL;
            break;
        }
        s = e + 1;
        records++;
        const entry *kind = &ps.ent[0];
        const char *k = kind->nval ? kind->val[0] : "";
        if (!strcmp(k, "node")) {
            const entry *id = find_ent(&ps, "id"), *attr = find_ent(&ps, "attr"),
                        *data = find_ent(&ps, "data"), *parent = find_ent(&ps, "parent");
            int64_t nid, aid, pid = -1;
            if (!id || id->nval != 1 || parse_id(id->val[0], &nid) || !attr ||
                attr->nval != 1 || parse_id(attr->val[0], &aid) ||
                (parent && (parent->nval != 1 || parse_id(parent->val[0], &pid)))) {
                why = "a node record needs integer id= and attr= (and parent=)";
                rc = ERR_FORMAT;
            } else if (!have_node(f, aid) || (pid >= 0 && !have_node(f, pid))) {
                why = "the node's attr= or parent= refers to an undefined node";
                rc = ERR_FORMAT;
            } else if (have_node(f, nid)) {
                why = "it defines a node id a second time";
                rc = ERR_FORMAT;
            } else if ((rc = grow_nodes(f, nid)) == 0) {
                /* "" lives in the binary, a value in the text: both outlive the parse */
                f->node[nid] = (cali_node){aid, pid, data && data->nval ? data->val[0] : ""};
            }
        } else if (!strcmp(k, "ctx")) {
            if (f->nctx % 256 == 0) {
                cali_ctx *n = realloc(f->ctx, (f->nctx + 256) * sizeof *n);
                if (!n) {
                    rc = ERR_NOMEM;
                    break;
                }
                f->ctx = n;
            }
            rc = read_ctx(f, &ps, &f->ctx[f->nctx], &why);
            f->nctx++; /* counted even on failure, so cali_free frees its arrays */
        } else if (!strcmp(k, "globals")) {
            MEM_FREE(f->globals.ref, f->globals.attr, f->globals.data);
            rc = read_ctx(f, &ps, &f->globals, &why);
            f->has_globals = 1;
        } else {
            /* other record kinds (Caliper writes none today): skipped as caliper-reader does */
        }
    }
    free(ps.tok);
    if (rc == 0 && records == 0) {
        why = "it holds no records (empty)";
        rc = ERR_FORMAT;
        line = 0;
    } else if (rc == 0 && !f->has_globals) {
        why = "it has no globals record, which Caliper writes last (a truncated file?)";
        rc = ERR_FORMAT;
        line = 0;
    }
    if (rc) {
        cali_free(f);
        if (rc == ERR_NOMEM)
            return err_set(ERR_NOMEM, "%s: out of memory", path);
        if (line)
            return err_set(ERR_FORMAT, "%s: line %ld is not a valid .cali record: %s", path, line,
                           why ? why : "damaged");
        return err_set(ERR_FORMAT, "%s: not a complete .cali file: %s", path, why);
    }
    return 0;
}

const char *cali_attr_name(const cali_file *f, int64_t attr) {
    if (!have_node(f, attr) || f->node[attr].attr != ATTR_NAME)
        return NULL;
    return f->node[attr].data;
}

/* The nearest node above `from` (inclusive) whose attribute is `attr`, or -1. */
static int64_t up_to(const cali_file *f, int64_t from, int64_t attr) {
    for (int hops = 0; from >= 0 && have_node(f, from) && hops < 4096; hops++) {
        if (f->node[from].attr == attr)
            return from;
        from = f->node[from].parent;
    }
    return -1;
}

int cali_attr_prop(const cali_file *f, int64_t attr) {
    if (!cali_attr_name(f, attr))
        return 0;
    int64_t p = up_to(f, f->node[attr].parent, ATTR_PROP);
    return p >= 0 ? atoi(f->node[p].data) : 0;
}

const char *cali_attr_type(const cali_file *f, int64_t attr) {
    if (!cali_attr_name(f, attr))
        return NULL;
    int64_t t = up_to(f, f->node[attr].parent, ATTR_TYPE);
    return t >= 0 ? f->node[t].data : NULL;
}

int cali_ctx_path(const cali_file *f, const cali_ctx *c, char *buf, size_t cap) {
    int n = 0;
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (int r = 0; r < c->nref; r++) {
        int64_t chain[256];
        int nc = 0;
        for (int64_t id = c->ref[r]; id >= 0 && have_node(f, id) && nc < 256;
             id = f->node[id].parent)
            if (cali_attr_prop(f, f->node[id].attr) & CALI_PROP_NESTED)
                chain[nc++] = id;
        for (int k = nc - 1; k >= 0; k--) {
            int w = snprintf(buf + len, cap > len ? cap - len : 0, "%s%s", n ? "/" : "",
                             f->node[chain[k]].data);
            if (w > 0)
                len += (size_t)w;
            if (len >= cap)
                len = cap ? cap - 1 : 0;
            n++;
        }
    }
    return n;
}

static const char *value_in(const cali_file *f, const cali_ctx *c, const char *name) {
    for (int i = 0; i < c->nimm; i++) {
        const char *an = cali_attr_name(f, c->attr[i]);
        if (an && !strcmp(an, name))
            return c->data[i];
    }
    for (int r = 0; r < c->nref; r++)
        for (int64_t id = c->ref[r]; id >= 0 && have_node(f, id); id = f->node[id].parent) {
            const char *an = cali_attr_name(f, f->node[id].attr);
            if (an && !strcmp(an, name))
                return f->node[id].data;
        }
    return NULL;
}

const char *cali_ctx_value(const cali_file *f, const cali_ctx *c, const char *name) {
    return value_in(f, c, name);
}

const char *cali_global(const cali_file *f, const char *name) {
    return f->has_globals ? value_in(f, &f->globals, name) : NULL;
}
