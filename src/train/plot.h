/* plot: the benchmark's figures (train_loss.png, val_dice.png, val_loss.png) and the scaling
 * study's (scaling.png) as PNG line charts drawn with cairo: one or more panels stacked
 * vertically, each with axes, ticks, optional log-scale y, several series (solid or dashed,
 * with a legend). Written atomically. */
#ifndef SCAFFOLD_TRAIN_PLOT_H
#define SCAFFOLD_TRAIN_PLOT_H

typedef struct plot_series {
    const char *label; /* legend entry (NULL: none) */
    const double *x, *y;
    int n;
    int dashed;        /* 1: a reference line (ideal scaling), no markers */
} plot_series;

typedef struct plot_panel {
    const char *xlabel, *ylabel;
    int logy;
    int nseries;
    const plot_series *series;
} plot_panel;

/* Draws the panels under a title. Non-positive or non-finite values are skipped on a log axis.
 * 0 or ERR_IO. */
int plot_png(const char *path, const char *title, const plot_panel *panels, int npanels);

/* One panel, one series: y[i] against x[i] (n points, n >= 1). */
int plot_line_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  const double *x, const double *y, int n, int logy);

#endif
