/* fault: the one table of fault-injection points that the crash and error tests arm through
 * environment variables (SCAFFOLD_FAULT_<NAME>). Product code asks fault_hit() at the point
 * where the fault belongs; nothing else in the product reads these variables. Unset points cost
 * one load and one branch after the first call.
 *
 * Each point is "KEY:COUNT", "KEY" or "COUNT" (integers): a keyed point fires only at hits whose
 * key matches (a rank, an epoch); a counted point fires at the COUNT-th (matching) hit of the
 * process; a point with neither a count nor a key fires at the first matching hit. Extra values
 * (the K of KILL_IN_SAVE) are read with fault_arg(). A malformed value is reported once on stderr
 * and leaves the point unarmed. */
#ifndef SCAFFOLD_CORE_FAULT_H
#define SCAFFOLD_CORE_FAULT_H

/* X(name, keyed, counted, nvals, format, what it does) */
#define FAULT_POINTS(X)                                                                            \
    X(KILL_AT_COMMIT, 0, 1, 1, "N",                                                                \
      "SIGKILL inside the N-th atomic file write of the process, after the data reached the "     \
      "temporary file and before the rename")                                                      \
    X(KILL_IN_SAVE, 1, 0, 2, "E:K",                                                                \
      "SIGKILL inside the K-th file write (1 = optimizer sidecar, 2 = model) of the checkpoint "  \
      "save of epoch E")                                                                           \
    X(KILL_IN_PAIR, 1, 0, 2, "E:K",                                                                \
      "SIGKILL before the K-th rename of the checkpoint save of epoch E (1 = last's sidecar, "    \
      "2 = last's model, 3 = best's sidecar, 4 = best's model), both files complete")             \
    X(KILL_AT_EPOCH, 1, 0, 1, "E", "SIGKILL on rank 0 after the first training step of epoch E") \
    X(SIGNAL_AT_STEP, 1, 1, 3, "R:S:K",                                                            \
      "rank R sends itself signal S (15 = SIGTERM) during its K-th training step, as a launcher " \
      "that signals one rank would")                                                              \
    X(FAIL_STEP, 1, 1, 2, "R:K", "rank R fails its K-th training step as a read error would")   \
    X(HALO, 1, 1, 2, "R:K",                                                                        \
      "rank R records a failure in its K-th halo exchange and completes it (spatial shards)")    \
    X(SLOW_READ, 0, 0, 1, "MS",                                                                    \
      "every dataset sample read from a file sleeps MS milliseconds (a slow file system)")        \
    X(SKIP_BATCHES, 0, 0, 1, "K",                                                                  \
      "the training loop drops every K-th batch unseen (a do-less knob for the tuner's tests)")

typedef enum {
#define FAULT_ENUM(name, keyed, counted, nvals, fmt, what) FAULT_##name,
    FAULT_POINTS(FAULT_ENUM)
#undef FAULT_ENUM
        FAULT_NPOINTS
} fault_point;

#define FAULT_MAX_VALS 3

/* Counts a hit of point p with `key` (ignored by points without a key) and returns 1 when this
 * hit is the armed one, 0 otherwise (always 0 when the point is not armed). Thread-safe. */
int fault_hit(fault_point p, long key);

/* The i-th value of an armed point (KILL_IN_SAVE: fault_arg(p, 1) = K); -1 when unarmed. */
long fault_arg(fault_point p, int i);

/* Arms a counted point to fire at its n-th hit from now (n >= 1), whatever its variable says. */
void fault_arm(fault_point p, long n);

/* The environment variable of a point ("SCAFFOLD_FAULT_KILL_AT_COMMIT"), its value format and
 * its description, for documentation and messages. */
const char *fault_env(fault_point p);
const char *fault_format(fault_point p);
const char *fault_what(fault_point p);

#endif
