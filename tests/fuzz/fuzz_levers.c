/* Fuzz harness: the tuner's levers file (YAML parsing, every entry's checks, each configuration
 * value validated through the configuration parser against a small base configuration). */
#include "fuzz.h"
#include "tune/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char cfg[512];
    static char *argv[4];
    if (!cfg[0]) {
        static const char base[] = "problem_scale: 4\nunet_bottleneck_dim: 2\n";
        snprintf(cfg, sizeof cfg, "%s", fuzz_file((const uint8_t *)base, sizeof base - 1,
                                                  "-base.yml"));
        argv[0] = "tune";
        argv[1] = "-c";
        argv[2] = cfg;
    }
    static tune_levers lv; /* large: not on the stack */
    tune_levers_parse((const char *)data, size, "fuzz.yml", 3, argv, &lv);
    err_clear();
    return 0;
}
