/* plot: the benchmark's figures (train_loss.png, val_dice.png, val_loss.png) as PNG line charts
 * drawn with cairo: axes, ticks, optional log-scale y, a title. Written atomically. */
#ifndef SCAFFOLD_TRAIN_PLOT_H
#define SCAFFOLD_TRAIN_PLOT_H

/* Draws y[i] against x[i] (n points, n >= 1). Non-positive or non-finite values are skipped on
 * a log axis. 0 or ERR_IO. */
int plot_line_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                  const double *x, const double *y, int n, int logy);

#endif
