/* plot: cairo line charts written to PNG (see plot.h). */
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

int plot_line_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  const double *x, const double *y, int n, int logy) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < n; i++) {
        double v = logy ? (y[i] > 0 ? log10(y[i]) : NAN) : y[i];
        if (!isfinite(v) || !isfinite(x[i]))
            continue;
        xmin = fmin(xmin, x[i]);
        xmax = fmax(xmax, x[i]);
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
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, PLOT_W, PLOT_H);
    cairo_t *cr = cairo_create(s);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    const double pw = PLOT_W - PLOT_L - PLOT_R, ph = PLOT_H - PLOT_T - PLOT_B;
#define PX(v) (PLOT_L + ((v) - xmin) / (xmax - xmin) * pw)
#define PY(v) (PLOT_T + ph - ((v) - ymin) / (ymax - ymin) * ph)
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 24);
    cairo_set_line_width(cr, 1);
    char buf[64];
    /* Grid and ticks. */
    double xs = nice_step(xmax - xmin, 8);
    if (xs < 1 && xmax - xmin >= 1)
        xs = 1;
    for (double t = ceil(xmin / xs) * xs; t <= xmax + 1e-9; t += xs) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, PX(t), PLOT_T);
        cairo_line_to(cr, PX(t), PLOT_T + ph);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%g", t);
        text(cr, PX(t), PLOT_T + ph + 12, buf, 0.5, 1.0);
    }
    double ys = logy ? fmax(1.0, nice_step(ymax - ymin, 6)) : nice_step(ymax - ymin, 6);
    if (logy && ymax - ymin < 1.0)
        ys = nice_step(ymax - ymin, 6);
    for (double t = ceil(ymin / ys) * ys; t <= ymax + 1e-12; t += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, PLOT_L, PY(t));
        cairo_line_to(cr, PLOT_L + pw, PY(t));
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        snprintf(buf, sizeof buf, "%.3g", logy ? pow(10, t) : (fabs(t) < 1e-12 ? 0 : t));
        text(cr, PLOT_L - 10, PY(t), buf, 1.0, 0.5);
    }
    /* Axes box, labels, title. */
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_line_width(cr, 2);
    cairo_rectangle(cr, PLOT_L, PLOT_T, pw, ph);
    cairo_stroke(cr);
    text(cr, PLOT_L + pw / 2, PLOT_H - 40, xlabel, 0.5, 0.0);
    cairo_save(cr);
    cairo_translate(cr, 40, PLOT_T + ph / 2);
    cairo_rotate(cr, -M_PI / 2);
    snprintf(buf, sizeof buf, "%s%s", ylabel, logy ? " (log scale)" : "");
    text(cr, 0, 0, buf, 0.5, 0.5);
    cairo_restore(cr);
    cairo_set_font_size(cr, 32);
    text(cr, PLOT_W / 2.0, 30, title, 0.5, 1.0);
    /* The series. */
    cairo_set_source_rgb(cr, 0.12, 0.47, 0.71);
    cairo_set_line_width(cr, 3);
    int pen = 0;
    for (int i = 0; i < n; i++) {
        double v = logy ? (y[i] > 0 ? log10(y[i]) : NAN) : y[i];
        if (!isfinite(v)) {
            pen = 0;
            continue;
        }
        if (pen)
            cairo_line_to(cr, PX(x[i]), PY(v));
        else
            cairo_move_to(cr, PX(x[i]), PY(v));
        pen = 1;
    }
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        double v = logy ? (y[i] > 0 ? log10(y[i]) : NAN) : y[i];
        if (!isfinite(v))
            continue;
        cairo_arc(cr, PX(x[i]), PY(v), 5, 0, 2 * M_PI);
        cairo_fill(cr);
    }
#undef PX
#undef PY
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
