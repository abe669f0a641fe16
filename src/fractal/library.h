/* library: the on-disk fractal library and `scaffold generate_fractals`.
 *   <base_dir>/var<vt>/seed<seed>/3DIFS_param/NNNNNN.csv                 classes (2 x 13, %.18e)
 *   <...>/instances/np<point_num>/<cat:06d>/<cat:06d>_<inst:04d>.npy     float32 (point_num, 3)
 *   <...>/instances/np<point_num>/<cat:06d>/.source                      "NNNNNN.csv <sha256>"
 *   <...>/instances/np<point_num>/rejected.csv                           "NNNNNN.csv,<sha256>,<cat>"
 * Class search runs in rounds of global attempt indices split across ranks; rank 0 keeps the
 * first valid, distinct attempts in attempt order, so the library is the same for any rank
 * count. Instances are split in blocks. Existing valid files are reused, corrupt ones redone,
 * every file is written atomically.
 *
 * One class library serves every point count (problem_scale), as upstream's layout implies, with
 * these rules so that sharing it never breaks and never mixes stale files:
 *  - Category i at a point count uses the i-th class file (in name order) unless that class
 *    cannot give all 145 instances at this point count (an instance diverges even with the
 *    class's own parameters: a class accepted at a small point count can run away at a larger
 *    one). It then takes the next class file that no other category uses, and a new class is
 *    searched for when none is left. Such a (class, category) pair is recorded in rejected.csv
 *    of that point count, so the choice is made once and is the same on every run.
 *  - Every category folder records in `.source` the class file and the SHA-256 of its bytes that
 *    its instances came from. Instances under a missing or different record are stale (the class
 *    file was deleted, regenerated or edited) and are regenerated.
 *
 *
 * Several independent jobs may build one library at once (job arrays on a shared file system):
 * rank 0 of each job works under claims (core/claim.h): `3DIFS_param/.claim` for the class
 * search, `<cat>/.claim` for a category's instances and `.source`, `np<n>/.rejected.claim` for
 * rejected.csv. A complete category is read without a claim; one claimed by another live job is
 * waited for and looked at again. Debris (temporaries, corrupt files) is removed only by a
 * claim's holder, so never under a writer that still runs. The bytes are the same whichever job
 * writes them.
 *
 * The module takes its own small spec (fractal_spec), not the whole configuration. */
#ifndef SCAFFOLD_FRACTAL_LIBRARY_H
#define SCAFFOLD_FRACTAL_LIBRARY_H

#include "core/config.h"
#include "mpi/dist.h"
#include "fractal/ifs.h"

#include <stdint.h>

/* What the library needs to know (fractal_spec_of() fills it from a configuration). */
typedef struct fractal_spec {
    const char *base_dir;      /* fract_base_dir (absolute paths give absolute results) */
    uint64_t seed;             /* seed */
    double variance_threshold; /* class acceptance */
    double normalize;          /* class acceptance */
    long point_num;            /* points per instance (vol_size^3 / 256) */
    int n_categories;
    int batch_size;            /* datagen_batch_size: per-rank class attempts per round, at most */
    int from_scratch;          /* datagen_from_scratch: delete classes and these instances first */
} fractal_spec;

fractal_spec fractal_spec_of(const scaffold_config *c);

typedef struct fractal_summary {
    int classes_reused, classes_new;
    int classes_rejected;  /* classes replaced at this point count (see above) */
    long attempts;
    long instances_total, instances_reused, instances_new, instances_fallback;
    long instances_stale;  /* removed because their class changed */
    double class_seconds, instance_seconds;
    double points; /* chaos-game points computed (all ranks) */
} fractal_summary;

/* Directory of the class CSVs and of the instances for this spec. */
void fractal_class_dir(const fractal_spec *s, char *buf, size_t n);
void fractal_instance_dir(const fractal_spec *s, char *buf, size_t n);
void fractal_instance_path(const fractal_spec *s, int cat, int inst, char *buf, size_t n);

/* Reads and validates one class CSV (2 rows x 13 finite numbers). 0 or ERR_FORMAT. */
int fractal_read_class(const char *path, ifs_params *out);

/* Collective: generates whatever is missing or stale of the library (classes, then instances),
 * with progress on rank 0. Errors are agreed on all ranks. */
int fractal_generate(const fractal_spec *s, const dist_world *w, fractal_summary *out);

#endif
