/* Fuzz harness: the YAML configuration loader and the validation of what it loaded
 * (config_load_file, config_finalize, config_canonical). */
#include "core/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file(data, size, ".yml");
    static scaffold_config c; /* large: not on the stack */
    config_defaults(&c);
    if (config_load_file(&c, p) == 0 && config_finalize(&c) == 0) {
        size_t n;
        free(config_canonical(&c, &n));
    }
    err_clear();
    return 0;
}
