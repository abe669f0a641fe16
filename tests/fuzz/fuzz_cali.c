/* Fuzz harness: the .cali reader (core/cali.h) and the profile loader of `scaffold compare`
 * (analyze/profcmp.h): the input is one file, read as records, every record's path and values
 * and the globals looked up, then loaded and compared with itself as a profile. */
#include "analyze/profcmp.h"
#include "core/cali.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_file(data, size, ".cali");
    cali_file f;
    if (cali_read(p, &f) == 0) {
        char path[512];
        for (size_t i = 0; i < f.nctx; i++) {
            cali_ctx_path(&f, &f.ctx[i], path, sizeof path);
            cali_ctx_value(&f, &f.ctx[i], "avg#inclusive#sum#time.duration");
            for (int k = 0; k < f.ctx[i].nimm; k++) {
                cali_attr_prop(&f, f.ctx[i].attr[k]);
                cali_attr_type(&f, f.ctx[i].attr[k]);
            }
        }
        cali_global(&f, "jobsize");
        cali_free(&f);
    }
    err_clear();
    an_prof_run run[2];
    if (an_prof_load(p, &run[0]) == 0) {
        if (an_prof_load(p, &run[1]) == 0) {
            an_prof_result r;
            if (an_prof_compare(&run[0], 1, &run[1], 1, 0.01, &r) == 0) {
                an_prof_text(&run[0], 1, &run[1], 1, &r, fuzz_null());
                an_prof_json(&run[0], 1, &run[1], 1, &r, fuzz_null());
            }
            an_prof_result_free(&r);
            an_prof_free(&run[1]);
        }
        an_prof_free(&run[0]);
    }
    err_clear();
    return 0;
}
