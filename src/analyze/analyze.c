/* analyze: the whole `scaffold analyze` pipeline behind one call (see analyze.h). */
#include "analyze/analyze.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>

int an_analyze(const char *const *paths, int npaths, const an_opts *o, FILE *out, FILE *warn) {
    an_ruleset rs;
    int rc = an_rules_default(&rs);
    if (rc)
        return rc;
    if (o->rules && (rc = an_rules_load_overrides(&rs, o->rules))) {
        an_rules_free(&rs);
        return rc;
    }
    an_catalog cat = {0};
    if (o->catalog && (rc = an_catalog_load(o->catalog, &cat))) {
        an_rules_free(&rs);
        return rc;
    }
    char **files = NULL;
    size_t nf = 0;
    if ((rc = an_expand_inputs(paths, npaths, &files, &nf))) {
        an_catalog_free(&cat);
        an_rules_free(&rs);
        return rc;
    }
    an_trace t;
    an_metrics m;
    an_report rep;
    memset(&m, 0, sizeof m);
    memset(&rep, 0, sizeof rep);
    rc = an_trace_read(&t, files, nf, &o->read);
    for (size_t i = 0; i < nf; i++)
        free(files[i]);
    free(files);
    if (rc)
        goto out;
    size_t nempty = 0;
    const char *empty1 = NULL;
    for (size_t i = 0; i < t.ninputs && warn; i++) {
        if (t.inputs[i].note[0])
            fprintf(warn, "scaffold analyze: warning: %s: %s\n", t.inputs[i].path,
                    t.inputs[i].note);
        if (t.inputs[i].empty && !nempty++)
            empty1 = t.inputs[i].path;
    }
    /* Said once for all of them: dftracer leaves one empty file per forked child. */
    if (nempty && warn)
        fprintf(warn, "scaffold analyze: note: %zu empty trace file(s) skipped (%s%s): processes "
                      "that traced nothing\n", nempty, empty1, nempty > 1 ? ", ..." : "");
    if ((rc = an_metrics_compute(&t, o->window_s, &m)) || (rc = an_report_build(&rep, &t, &m, &rs, o->catalog ? &cat : NULL)))
        goto out;
    int top = o->top > 0 ? o->top : 10;
    if (o->json)
        an_report_json(&rep, out, top);
    else
        an_report_text(&rep, out, top);
    if (o->html && (rc = an_report_html(&rep, o->html, top)))
        goto out;
    if (o->html && !o->json)
        fprintf(out, "html report: %s\n", o->html);
out:
    an_report_free(&rep);
    an_metrics_free(&m);
    an_trace_free(&t);
    an_catalog_free(&cat);
    an_rules_free(&rs);
    return rc;
}
