/* plot: cairo line charts written to PNG, one or more panels (see plot.h). */
#include "train/plot.h"

#include "core/err.h"
#include "core/fsutil.h"

#include <cairo.h>
#include <math.h>
#include <stdio.h>

#define PLOT_W 1200
#define PLOT_H 900
#define PLOT_L 150.0 /* margins */
#define PLOT_R 50.0
#define PLOT_T 90.0
#define PLOT_B 110.0

static cairo_status_t png_write(void *closure, const unsigned char *data, unsigned int len) {
    return fwrite(data, 1, len, (FILE *)closure) == len ? CAIRO_STATUS_SUCCESS
                                                        : CAIRO_STATUS_WRITE_ERROR;
}

/* "Nice" tick step for a range (1, 2 or 5 times a power of ten). */
static double nice_step(double range, int want) {
    double raw = range / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void text(cairo_t *cr, double x, double y, const char *s, double ax, double ay) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.width * ax - e.x_bearing, y + e.height * ay);
    cairo_show_text(cr, s);
}

static double yval(double v, int logy) {
    return logy ? (v > 0 ? log10(v) : NAN) : v;
}

static const double plot_colors[][3] = {{0.12, 0.47, 0.71}, {0.84, 0.37, 0.0},
                                        {0.17, 0.63, 0.17}, {0.58, 0.40, 0.74},
                                        {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}};

/* One panel in the box (x0, y0, width, height) of the surface. */
static void draw_panel(cairo_t *cr, const plot_panel *pp, double x0, double y0, double wd,
                       double ht) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    const int logy = pp->logy;
    for (int k = 0; k < pp->nseries; k++)
        for (int i = 0; i < pp->series[k].n; i++) {
            const double xv = pp->series[k].x[i], v = yval(pp->series[k].y[i], logy);
            if (!isfinite(v) || !isfinite(xv))
                continue;
            xmin = fmin(xmin, xv);
            xmax = fmax(xmax, xv);
            ymin = fmin(ymin, v);
            ymax = fmax(ymax, v);
        }
    if (!isfinite(xmin)) {
        xmin = 0;
        xmax = 1;
        ymin = 0;
        ymax = 1;
    }
    if (xmax - xmin < 1e-12) {
        xmin -= 0.5;
        xmax += 0.5;
    }
    if (ymax - ymin < 1e-12) {
        ymin -= logy ? 0.5 : fmax(0.5 * fabs(ymin), 0.05);
        ymax += logy ? 0.5 : fmax(0.5 * fabs(ymax), 0.05);
    }
    double pad = 0.05 * (ymax - ymin);
    ymin -= pad;
    ymax += pad;
    const double L = x0 + PLOT_L, T = y0 + PLOT_T;
    const double pw = wd - PLOT_L - PLOT_R, ph = ht - PLOT_T - PLOT_B;
#define PX(v) (L + ((v) - xmin) / (xmax - xmin) * pw)
#define PY(v) (T + ph - ((v) - ymin) / (ymax - ymin) * ph)
    cairo_set_font_size(cr, 24);
    cairo_set_line_width(cr, 1);
    char buf[96];
    /* Grid and ticks. */
    double xs = nice_step(xmax - xmin, 8);
    if (xs < 1 && xmax - xmin >= 1)
        xs = 1;
    for (double t = ceil(xmin / xs) * xs; t <= xmax + 1e-9; t += xs) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, PX(t), T);
        cairo_line_to(cr, PX(t), T + ph);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%g", t);
        text(cr, PX(t), T + ph + 12, buf, 0.5, 1.0);
    }
    double ys = logy ? fmax(1.0, nice_step(ymax - ymin, 6)) : nice_step(ymax - ymin, 6);
    if (logy && ymax - ymin < 1.0)
        ys = nice_step(ymax - ymin, 6);
    for (double t = ceil(ymin / ys) * ys; t <= ymax + 1e-12; t += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, L, PY(t));
        cairo_line_to(cr, L + pw, PY(t));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%.3g", logy ? pow(10, t) : (fabs(t) < 1e-12 ? 0 : t));
        text(cr, L - 10, PY(t), buf, 1.0, 0.5);
    }
    /* Axes box and labels. */
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 2);
    cairo_rectangle(cr, L, T, pw, ph);
    cairo_stroke(cr);
    text(cr, L + pw / 2, y0 + ht - 40, pp->xlabel, 0.5, 0.0);
    cairo_save(cr);
    cairo_translate(cr, x0 + 40, T + ph / 2);
    cairo_rotate(cr, -M_PI / 2);
    snprintf(buf, sizeof buf, "%s%s", pp->ylabel, logy ? " (log scale)" : "");
    text(cr, 0, 0, buf, 0.5, 0.5);
    cairo_restore(cr);
    /* The series, then the legend. */
    int legend = 0;
    for (int k = 0; k < pp->nseries; k++) {
        const plot_series *se = &pp->series[k];
        const double *col = plot_colors[k % 6];
        cairo_set_source_rgb(cr, col[0], col[1], col[2]);
        cairo_set_line_width(cr, 3);
        const double dash[1] = {12};
        cairo_set_dash(cr, dash, se->dashed ? 1 : 0, 0);
        int pen = 0;
        for (int i = 0; i < se->n; i++) {
            double v = yval(se->y[i], logy);
            if (!isfinite(v)) {
                pen = 0;
                continue;
            }
            if (pen)
                cairo_line_to(cr, PX(se->x[i]), PY(v));
            else
                cairo_move_to(cr, PX(se->x[i]), PY(v));
            pen = 1;
        }
        cairo_stroke(cr);
        cairo_set_dash(cr, dash, 0, 0);
        for (int i = 0; i < se->n && !se->dashed; i++) {
            double v = yval(se->y[i], logy);
            if (!isfinite(v))
                continue;
            cairo_arc(cr, PX(se->x[i]), PY(v), 5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
        if (se->label) {
            const double ly = T + 20 + 30 * legend++;
            cairo_move_to(cr, L + 20, ly);
            cairo_line_to(cr, L + 60, ly);
            cairo_set_dash(cr, dash, se->dashed ? 1 : 0, 0);
            cairo_stroke(cr);
            cairo_set_dash(cr, dash, 0, 0);
            cairo_set_source_rgb(cr, 0, 0, 0);
            cairo_set_font_size(cr, 20);
            text(cr, L + 70, ly, se->label, 0.0, 0.5);
        }
    }
#undef PX
#undef PY
}

int plot_png(const char *path, const char *title, const plot_panel *panels, int npanels) {
    const int H = PLOT_H * (npanels > 1 ? npanels : 1) * 3 / (npanels > 1 ? 4 : 3);
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, PLOT_W, H);
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    const double ph = (double)H / (npanels > 0 ? npanels : 1);
    for (int i = 0; i < npanels; i++)
        draw_panel(cr, &panels[i], 0, i * ph, PLOT_W, ph);
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 32);
    text(cr, PLOT_W / 2.0, 30, title, 0.5, 1.0);
    cairo_destroy(cr);
    fs_atomic a;
    int rc = fs_atomic_open(&a, path);
    if (rc == 0) {
        if (cairo_surface_write_to_png_stream(s, png_write, a.fp) != CAIRO_STATUS_SUCCESS) {
            fs_atomic_abort(&a);
            rc = err_set(ERR_IO, "cannot write %s", path);
        } else {
            rc = fs_atomic_commit(&a, 0);
        }
    }
    cairo_surface_destroy(s);
    return rc;
}

int plot_line_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  const double *x, const double *y, int n, int logy) {
    const plot_series se = {NULL, x, y, n, 0};
    const plot_panel pp = {xlabel, ylabel, logy, 1, &se};
    return plot_png(path, title, &pp, 1);
}
