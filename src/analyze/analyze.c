/* analyze: the whole `scaffold analyze` pipeline behind one call (see analyze.h). */
#include "analyze/analyze.h"

#include "core/err.h"

#include <stdlib.h>
#include <string.h>

/* The per-file notes of the reader, as warnings on `warn` (NULL: none). */
static void warn_inputs(const an_trace *t, FILE *warn) {
    size_t nempty = 0;
    const char *empty1 = NULL;
    for (size_t i = 0; i < t->ninputs && warn; i++) {
        if (t->inputs[i].note[0])
            fprintf(warn, "scaffold analyze: warning: %s: %s\n", t->inputs[i].path,
                    t->inputs[i].note);
        if (t->inputs[i].empty && !nempty++)
            empty1 = t->inputs[i].path;
    }
    /* Said once for all of them: dftracer leaves one empty file per forked child. */
    if (nempty && warn)
        fprintf(warn, "scaffold analyze: note: %zu empty trace file(s) skipped (%s%s): processes "
                      "that traced nothing\n", nempty, empty1, nempty > 1 ? ", ..." : "");
}

int an_session_run(an_session *s, const char *const *paths, int npaths, const an_opts *o,
                   FILE *warn) {
    memset(s, 0, sizeof *s);
    int rc = an_rules_default(&s->rs);
    if (rc == 0 && o->rules)
        rc = an_rules_load_overrides(&s->rs, o->rules);
    if (rc == 0 && o->catalog)
        rc = an_catalog_load(o->catalog, &s->cat);
    char **files = NULL;
    size_t nf = 0;
    if (rc == 0 && (rc = an_expand_inputs(paths, npaths, &files, &nf)) == 0) {
        rc = an_trace_read(&s->t, files, nf, &o->read);
        for (size_t i = 0; i < nf; i++)
            free(files[i]);
        free(files);
    }
    if (rc)
        return rc;
    warn_inputs(&s->t, warn);
    if ((rc = an_metrics_compute(&s->t, o->window_s, &s->m)) == 0)
        rc = an_report_build(&s->rep, &s->t, &s->m, &s->rs, o->catalog ? &s->cat : NULL);
    return rc;
}

void an_session_free(an_session *s) {
    an_report_free(&s->rep);
    an_metrics_free(&s->m);
    an_trace_free(&s->t);
    an_catalog_free(&s->cat);
    an_rules_free(&s->rs);
}

int an_analyze(const char *const *paths, int npaths, const an_opts *o, FILE *out, FILE *warn) {
    an_session s;
    int rc = an_session_run(&s, paths, npaths, o, warn);
    if (rc)
        goto out;
    int top = o->top > 0 ? o->top : 10;
    if (o->json)
        an_report_json(&s.rep, out, top);
    else
        an_report_text(&s.rep, out, top);
    if (o->html && (rc = an_report_html(&s.rep, o->html, top)))
        goto out;
    if (o->html && !o->json)
        fprintf(out, "html report: %s\n", o->html);
out:
    an_session_free(&s);
    return rc;
}
