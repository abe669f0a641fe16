/* catalog: reads the lever catalog `scaffold tune` writes (lever_catalog.yaml), the contract
 * between the tuner and `scaffold analyze --catalog`:
 *
 *   version: 1
 *   host: "node01"          # optional
 *   cpu: "AMD EPYC ..."     # optional
 *   objective: throughput   # optional: throughput | time-to-target | epoch-time
 *   levers:
 *     - name: dataloader_num_workers   # required
 *       value: "1"                      # required
 *       dimension: 7                    # required, 1..12
 *       verdict: accept                 # required: accept|revert|guard-reject|inconclusive|blocked
 *       fom_baseline: 12.3              # optional numbers
 *       fom_candidate: 13.1
 *       gain: 0.065
 *       band: 0.02
 *       guard: ""                       # optional
 *       reason: "text"                  # required
 *
 * Extra keys are ignored; a missing required key or a bad value is an error naming the file,
 * the entry (index and name) and the key. */
#include "analyze/report.h"

#include "core/err.h"
#include "core/fsutil.h"
#include "core/yamlx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static const char *scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static yaml_node_t *get(yaml_document_t *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = scalar(yaml_document_get_node(d, p->key));
        if (k && !strcmp(k, key))
            return yaml_document_get_node(d, p->value);
    }
    return NULL;
}

static int num(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    return end != s && !*end && isfinite(*v);
}

static int lever_of(const char *path, yaml_document_t *d, yaml_node_t *n, size_t idx, an_lever *l) {
    memset(l, 0, sizeof *l);
    l->fom_baseline = l->fom_candidate = l->gain = l->band = NAN;
    size_t line = n->start_mark.line + 1;
    if (n->type != YAML_MAPPING_NODE)
        return err_set(ERR_CONFIG, "analyze: %s:%zu: lever %zu is not a mapping (name, value, "
                       "dimension, verdict, reason)", path, line, idx + 1);
    const char *name = scalar(get(d, n, "name"));
    static const char *const req[] = {"name", "value", "dimension", "verdict", "reason"};
    for (size_t k = 0; k < sizeof req / sizeof req[0]; k++)
        if (!scalar(get(d, n, req[k])))
            return err_set(ERR_CONFIG, "analyze: %s:%zu: lever %zu (%s): missing required key '%s'",
                           path, line, idx + 1, name ? name : "unnamed", req[k]);
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->value, sizeof l->value, "%s", scalar(get(d, n, "value")));
    snprintf(l->reason, sizeof l->reason, "%s", scalar(get(d, n, "reason")));
    const char *g = scalar(get(d, n, "guard"));
    snprintf(l->guard, sizeof l->guard, "%s", g ? g : "");
    double dim;
    if (!num(scalar(get(d, n, "dimension")), &dim) || dim != floor(dim) || dim < 1 || dim > 12)
        return err_set(ERR_CONFIG, "analyze: %s:%zu: lever %zu (%s): dimension must be 1..12, "
                       "got '%s'", path, line, idx + 1, name, scalar(get(d, n, "dimension")));
    l->dim = (int)dim;
    const char *v = scalar(get(d, n, "verdict"));
    static const char *const verdicts[] = {"accept", "revert", "guard-reject", "inconclusive",
                                           "blocked"};
    int ok = 0;
    for (size_t k = 0; k < 5; k++)
        ok |= !strcmp(v, verdicts[k]);
    if (!ok)
        return err_set(ERR_CONFIG, "analyze: %s:%zu: lever %zu (%s): verdict '%s' is not one of "
                       "accept, revert, guard-reject, inconclusive, blocked",
                       path, line, idx + 1, name, v);
    snprintf(l->verdict, sizeof l->verdict, "%s", v);
    static const char *const nums[] = {"fom_baseline", "fom_candidate", "gain", "band"};
    double *dst[] = {&l->fom_baseline, &l->fom_candidate, &l->gain, &l->band};
    for (size_t k = 0; k < 4; k++) {
        const char *s = scalar(get(d, n, nums[k]));
        if (s && *s && !num(s, dst[k]))
            return err_set(ERR_CONFIG, "analyze: %s:%zu: lever %zu (%s): %s must be a number, got "
                           "'%s'", path, line, idx + 1, name, nums[k], s);
    }
    return 0;
}

int an_catalog_load(const char *path, an_catalog *c) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(ERR_CONFIG, "analyze: cannot open lever catalog %s", path);
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        return err_set(ERR_NOMEM, "analyze: out of memory");
    }
    yaml_parser_set_input_file(&p, f);
    int rc = 0;
    if (!yaml_parser_load(&p, &d)) {
        rc = err_set(ERR_CONFIG, "analyze: %s:%zu: YAML error: %s", path, p.problem_mark.line + 1,
                     p.problem ? p.problem : "syntax");
        yaml_parser_delete(&p);
        fclose(f);
        return rc;
    }
    char label[FS_PATH_MAX + 16];
    snprintf(label, sizeof label, "analyze: %s", path);
    if ((rc = yamlx_check_document(&d, label, ERR_CONFIG)) != 0) {
        yaml_document_delete(&d);
        yaml_parser_delete(&p);
        fclose(f);
        return rc;
    }
    yaml_node_t *root = yaml_document_get_root_node(&d);
    const char *ver = scalar(get(&d, root, "version"));
    yaml_node_t *levers = get(&d, root, "levers");
    const char *obj = scalar(get(&d, root, "objective"));
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = err_set(ERR_CONFIG, "analyze: %s: not a lever catalog (a mapping with version and "
                     "levers)", path);
    } else if (!ver) {
        rc = err_set(ERR_CONFIG, "analyze: %s: missing required key 'version'", path);
    } else if (strcmp(ver, "1")) {
        rc = err_set(ERR_CONFIG, "analyze: %s: version %s is not supported (this reader knows 1)",
                     path, ver);
    } else if (!levers || levers->type != YAML_SEQUENCE_NODE) {
        rc = err_set(ERR_CONFIG, "analyze: %s: missing required key 'levers' (a list)", path);
    } else if (obj && strcmp(obj, "throughput") && strcmp(obj, "time-to-target") &&
               strcmp(obj, "epoch-time")) {
        rc = err_set(ERR_CONFIG, "analyze: %s: objective '%s' is not throughput, time-to-target "
                     "or epoch-time", path, obj);
    } else {
        size_t n = (size_t)(levers->data.sequence.items.top - levers->data.sequence.items.start);
        c->levers = calloc(n ? n : 1, sizeof *c->levers);
        if (!c->levers)
            rc = err_set(ERR_NOMEM, "analyze: out of memory");
        for (size_t i = 0; !rc && i < n; i++) {
            yaml_node_t *ln = yaml_document_get_node(&d, levers->data.sequence.items.start[i]);
            rc = lever_of(path, &d, ln, i, &c->levers[i]);
            if (!rc)
                c->n++;
        }
        const char *h = scalar(get(&d, root, "host")), *cpu = scalar(get(&d, root, "cpu"));
        snprintf(c->host, sizeof c->host, "%s", h ? h : "");
        snprintf(c->cpu, sizeof c->cpu, "%s", cpu ? cpu : "");
        snprintf(c->objective, sizeof c->objective, "%s", obj ? obj : "");
    }
    yaml_document_delete(&d);
    yaml_parser_delete(&p);
    fclose(f);
    if (rc)
        an_catalog_free(c);
    return rc;
}

void an_catalog_free(an_catalog *c) {
    if (!c)
        return;
    free(c->levers);
    memset(c, 0, sizeof *c);
}
