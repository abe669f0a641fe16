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
 * Extra keys are ignored; a missing required key or a bad value is an error naming the file and
 * line, the entry (index and name) and the key (core/yamlx.h). */
#include "analyze/report.h"

#include "core/err.h"
#include "core/yamlx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const verdicts[] = {"accept", "revert", "guard-reject", "inconclusive",
                                       "blocked", NULL};
static const char *const objectives[] = {"throughput", "time-to-target", "epoch-time", NULL};

#define REQ_TEXT (YAMLX_REQUIRED | YAMLX_CUT)
static const yamlx_field lever_fields[] = {
    {"name", YAMLX_STR, YAMLX_AT(an_lever, name), .flags = REQ_TEXT},
    {"value", YAMLX_STR, YAMLX_AT(an_lever, value), .flags = REQ_TEXT},
    {"dimension", YAMLX_INT, YAMLX_AT(an_lever, dim), .min = 1, .max = 12, .flags = YAMLX_REQUIRED},
    {"verdict", YAMLX_ENUM, YAMLX_AT(an_lever, verdict), .names = verdicts,
     .flags = YAMLX_REQUIRED},
    {"reason", YAMLX_STR, YAMLX_AT(an_lever, reason), .flags = REQ_TEXT},
    {"guard", YAMLX_STR, YAMLX_AT(an_lever, guard), .flags = YAMLX_CUT},
    {"fom_baseline", YAMLX_DOUBLE, YAMLX_AT(an_lever, fom_baseline)},
    {"fom_candidate", YAMLX_DOUBLE, YAMLX_AT(an_lever, fom_candidate)},
    {"gain", YAMLX_DOUBLE, YAMLX_AT(an_lever, gain)},
    {"band", YAMLX_DOUBLE, YAMLX_AT(an_lever, band)},
};

typedef struct {
    an_catalog c;
    char version[16];
    yaml_node_t *levers;
} cat_root;

static const yamlx_field root_fields[] = {
    {"version", YAMLX_STR, YAMLX_AT(cat_root, version), .flags = REQ_TEXT},
    {"host", YAMLX_STR, YAMLX_AT(cat_root, c.host), .flags = YAMLX_CUT},
    {"cpu", YAMLX_STR, YAMLX_AT(cat_root, c.cpu), .flags = YAMLX_CUT},
    {"objective", YAMLX_ENUM, YAMLX_AT(cat_root, c.objective), .names = objectives},
    {"levers", YAMLX_LIST, YAMLX_AT(cat_root, levers), .flags = YAMLX_REQUIRED},
};

static int read_catalog(yamlx_doc *d, an_catalog *out) {
    yaml_node_t *root = yamlx_root(d);
    if (!root || root->type != YAML_MAPPING_NODE)
        return err_set(ERR_CONFIG, "%s: not a lever catalog (a mapping with version and levers)",
                       d->label);
    cat_root r;
    memset(&r, 0, sizeof r);
    int rc = yamlx_map_read(d, root, root_fields, YAMLX_N(root_fields), &r, NULL, 0);
    if (rc)
        return rc;
    if (strcmp(r.version, "1"))
        return err_set(ERR_CONFIG, "%s: version %s is not supported (this reader knows 1)",
                       d->label, r.version);
    size_t n = yamlx_len(r.levers);
    *out = r.c;
    out->levers = calloc(n ? n : 1, sizeof *out->levers);
    if (!out->levers)
        return err_set(ERR_NOMEM, "out of memory");
    for (; out->n < n; out->n++) {
        yaml_node_t *ln = yamlx_item(d, r.levers, out->n);
        an_lever *l = &out->levers[out->n];
        l->fom_baseline = l->fom_candidate = l->gain = l->band = NAN;
        const char *name = yamlx_text(yamlx_get(d, ln, "name"));
        char ctx[160];
        snprintf(ctx, sizeof ctx, "lever %zu (%.100s)", out->n + 1, name ? name : "unnamed");
        if ((rc = yamlx_map_read(d, ln, lever_fields, YAMLX_N(lever_fields), l, ctx, 0)))
            return rc;
    }
    return 0;
}

int an_catalog_load(const char *path, an_catalog *c) {
    memset(c, 0, sizeof *c);
    yamlx_doc d;
    int rc = yamlx_load_file(&d, path, "lever catalog", ERR_CONFIG);
    if (rc == 0) {
        rc = read_catalog(&d, c);
        yamlx_free(&d);
    }
    if (rc) {
        an_catalog_free(c);
        err_prefix("analyze");
    }
    return rc;
}

void an_catalog_free(an_catalog *c) {
    if (!c)
        return;
    free(c->levers);
    memset(c, 0, sizeof *c);
}
