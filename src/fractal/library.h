/* library: the on-disk fractal library and `scaffold generate_fractals`.
 *   <fract_base_dir>/var<vt>/seed<seed>/3DIFS_param/NNNNNN.csv           classes (2 x 13, %.18e)
 *   <...>/instances/np<point_num>/<cat:06d>/<cat:06d>_<inst:04d>.npy     float32 (point_num, 3)
 * Class search runs in rounds of global attempt indices split across ranks; rank 0 keeps the
 * first valid, distinct attempts in attempt order, so the library is the same for any rank
 * count. Instances are split in blocks. Existing valid files are reused, corrupt ones redone,
 * every file is written atomically. */
#ifndef SCAFFOLD_FRACTAL_LIBRARY_H
#define SCAFFOLD_FRACTAL_LIBRARY_H

#include "core/config.h"
#include "dist/dist.h"
#include "fractal/ifs.h"

typedef struct fractal_summary {
    int classes_reused, classes_new;
    long attempts;
    long instances_total, instances_reused, instances_new, instances_fallback;
    double class_seconds, instance_seconds;
    double points; /* chaos-game points computed (all ranks) */
} fractal_summary;

/* Directory of the class CSVs and of the instances for this config (absolute if
 * fract_base_dir is). */
void fractal_class_dir(const scaffold_config *c, char *buf, size_t n);
void fractal_instance_dir(const scaffold_config *c, char *buf, size_t n);
void fractal_instance_path(const scaffold_config *c, int cat, int inst, char *buf, size_t n);

/* Reads and validates one class CSV (2 rows x 13 finite numbers). 0 or ERR_FORMAT. */
int fractal_read_class(const char *path, ifs_params *out);

/* Collective: generates whatever is missing of the library (classes, then instances), with
 * progress on rank 0. Errors are agreed on all ranks. */
int fractal_generate(const scaffold_config *c, const dist_world *w, fractal_summary *out);

#endif
