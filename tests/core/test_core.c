/* Unit tests for src/core: err, rng, npy, fsutil, mem. */
#include "core/err.h"
#include "core/fsutil.h"
#include "core/mem.h"
#include "core/npy.h"
#include "core/rng.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_rng(void) {
    rng a = rng_make(42, RNG_TEST, 1, 2), b = rng_make(42, RNG_TEST, 1, 2);
    rng c = rng_make(42, RNG_TEST, 2, 1);
    int same = 1, diff = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = rng_u64(&a), y = rng_u64(&b), z = rng_u64(&c);
        same &= x == y;
        diff += x != z;
    }
    CHECK(same, "same key gives same stream");
    CHECK(diff == 100, "different keys give different streams (%d)", diff);
    /* Mean and variance of uniforms. */
    rng r = rng_make(7, RNG_TEST, 0, 0);
    double s = 0, s2 = 0;
    const int n = 200000;
    int inrange = 1;
    for (int i = 0; i < n; i++) {
        double u = rng_uniform(&r);
        inrange &= u >= 0 && u < 1;
        s += u;
        s2 += u * u;
    }
    CHECK(inrange, "uniform in [0,1)");
    double mean = s / n, var = s2 / n - mean * mean;
    CHECK(fabs(mean - 0.5) < 0.005, "uniform mean %g", mean);
    CHECK(fabs(var - 1.0 / 12) < 0.002, "uniform variance %g", var);
    uint32_t perm[1000];
    int seen[1000] = {0};
    rng_permutation(&r, perm, 1000);
    int ok = 1;
    for (int i = 0; i < 1000; i++)
        ok &= perm[i] < 1000 && !seen[perm[i]]++;
    CHECK(ok, "permutation is a permutation");
    int counts[3] = {0};
    for (int i = 0; i < 30000; i++)
        counts[rng_below(&r, 3)]++;
    CHECK(abs(counts[0] - 10000) < 500 && abs(counts[2] - 10000) < 500, "rng_below uniform");
}

static void test_npy(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    float data[6] = {1, 2, 3, 4, 5, 6.5f};
    int64_t shape[2] = {2, 3};
    CHECK(npy_save(path, NPY_F32, 2, shape, data) == 0, "save: %s", err_msg());
    npy_header h;
    void *back = NULL;
    CHECK(npy_load(path, &h, &back) == 0, "load: %s", err_msg());
    CHECK(h.dtype == NPY_F32 && h.ndim == 2 && h.shape[0] == 2 && h.shape[1] == 3, "header");
    CHECK(h.data_offset % 64 == 0, "header aligned to 64 (%zu)", h.data_offset);
    CHECK(back && !memcmp(back, data, sizeof data), "data round trip");
    free(back);
    float into[6];
    CHECK(npy_read_into(path, NPY_F32, 2, shape, into) == 0, "read_into");
    int64_t wrong[2] = {3, 2};
    CHECK(npy_read_into(path, NPY_F32, 2, wrong, into) == ERR_FORMAT, "shape mismatch detected");
    CHECK(strstr(err_msg(), "a.npy") && strstr(err_msg(), "(3, 2)"), "message names file: %s",
          err_msg());
    /* Truncate: must be rejected with a message naming the file. */
    CHECK(truncate(path, 100) == 0, "truncate");
    CHECK(npy_load(path, &h, &back) == ERR_FORMAT, "truncated rejected");
    CHECK(strstr(err_msg(), "truncated") != NULL, "truncated message: %s", err_msg());
    /* Garbage. */
    const char junk[] = "hello world, not numpy at all";
    CHECK(fs_write_file(path, junk, sizeof junk, 0) == 0, "write junk");
    CHECK(npy_load(path, &h, &back) == ERR_FORMAT, "bad magic rejected");
    /* 1-D and 0-D shapes, uint16. */
    uint16_t m[4] = {0, 1, 2, 65535};
    int64_t s1[1] = {4};
    CHECK(npy_save(path, NPY_U16, 1, s1, m) == 0, "save u16");
    CHECK(npy_load(path, &h, &back) == 0 && h.dtype == NPY_U16 && h.ndim == 1, "load u16");
    CHECK(back && !memcmp(back, m, sizeof m), "u16 data");
    free(back);
    CHECK(npy_load("/nonexistent/x.npy", &h, &back) == ERR_IO, "missing file");
    /* No temporary file left behind. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -q tmp", dir);
    CHECK(system(cmd) != 0, "no temporary files left");
}

static void test_fs(const char *dir) {
    char p[512], out[512];
    snprintf(p, sizeof p, "%s/x/y/z", dir);
    CHECK(fs_mkdir_p(p) == 0 && fs_is_dir(p), "mkdir -p");
    CHECK(fs_abspath("/a/./b//c/../d", out, sizeof out) == 0 && !strcmp(out, "/a/b/d"),
          "abspath: %s", out);
    CHECK(fs_abspath("/..", out, sizeof out) == 0 && !strcmp(out, "/"), "abspath root: %s", out);
    snprintf(p, sizeof p, "%s/x", dir);
    CHECK(fs_rm_rf(p) == 0 && !fs_exists(p), "rm -rf");
    CHECK(err_exit_status(ERR_CONFIG) == 2 && err_exit_status(ERR_IO) == 1, "exit statuses");
}

static void test_mem(void) {
    int *a = NULL;
    size_t cap = 0;
    CHECK(MEM_RESERVE(a, cap, 0, 4) == 0 && a && cap == 4, "reserve from empty: cap %zu", cap);
    CHECK(MEM_RESERVE(a, cap, 3, 4) == 0 && cap == 4, "reserve inside: cap %zu", cap);
    CHECK(MEM_RESERVE(a, cap, 4, 4) == 0 && cap == 8, "reserve doubles: cap %zu", cap);
    a[7] = 5;
    CHECK(MEM_COVER(a, cap, 20, 4) == 0 && cap == 32 && a[7] == 5 && a[8] == 0 && a[31] == 0,
          "cover keeps and zeroes: cap %zu", cap);
    CHECK(mem_resize(&a, SIZE_MAX / 2, sizeof *a) == ERR_NOMEM && a[7] == 5, "resize overflow");
    char *b = malloc(3), *c = NULL;
    MEM_FREE(a, b, c);
}

/* The VmFlags line of the mapping holding p in /proc/self/smaps into buf; 0 when not found. */
static int vm_flags(const void *p, char *buf, size_t cap) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return 0;
    char line[512];
    int in = 0, found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && !strncmp(line, "VmFlags:", 8)) {
            snprintf(buf, cap, "%s", line + 8);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* Large blocks are aligned to huge pages and advised for them ("hg" in the mapping's VmFlags,
 * whatever the kernel's setting); small ones are plain 64-byte aligned blocks. */
static void test_mem_big(void) {
    const size_t big = 5 * MEM_HUGE_PAGE / 2;
    char *a = mem_alloc_big(big), *b = mem_alloc_big(1000), fl[512];
    CHECK(a && (uintptr_t)a % MEM_HUGE_PAGE == 0, "big block on a huge page: %p", (void *)a);
    CHECK(b && (uintptr_t)b % 64 == 0, "small block 64-byte aligned: %p", (void *)b);
    if (a) {
        memset(a, 1, big);
        if (vm_flags(a, fl, sizeof fl))
            CHECK(strstr(fl, " hg") != NULL, "big block advised for huge pages: VmFlags%s", fl);
        else
            fprintf(stderr, "test_core: no VmFlags in /proc/self/smaps, huge-page advice "
                            "unchecked\n");
    }
    /* the advice covers only whole huge pages: a range inside one is left alone */
    char *c = mem_alloc_big(3 * MEM_HUGE_PAGE);
    if (c) {
        mem_advise_huge(c + 4096, MEM_HUGE_PAGE);
        CHECK(!vm_flags(c, fl, sizeof fl) || strstr(fl, " hg"), "whole block advised: %s", fl);
    }
    MEM_FREE(a, b, c);
    char *d = malloc(3 * MEM_HUGE_PAGE);
    if (d) {
        mem_advise_huge(d + 4096, MEM_HUGE_PAGE - 8192);
        CHECK(!vm_flags(d + 8192, fl, sizeof fl) || !strstr(fl, " hg"),
              "a range within one huge page not advised: VmFlags%s", fl);
        free(d);
    }
}

/* Interop with numpy: `--write DIR` writes files for tests/core/npy_interop.py to load;
 * `--read DIR` reads the files that script wrote with numpy (v1.0, v2.0, 0-d, empty). */
static int interop(const char *mode, const char *dir) {
    char p[512];
    if (!strcmp(mode, "--write")) {
        float f[6] = {1.5f, -2, 3, 4, 5, 6};
        int64_t s[2] = {2, 3};
        snprintf(p, sizeof p, "%s/c_f32.npy", dir);
        CHECK(npy_save(p, NPY_F32, 2, s, f) == 0, "%s", err_msg());
        uint16_t m[3] = {0, 7, 65535};
        int64_t s1[1] = {3};
        snprintf(p, sizeof p, "%s/c_u16.npy", dir);
        CHECK(npy_save(p, NPY_U16, 1, s1, m) == 0, "%s", err_msg());
        return test_report();
    }
    const char *names[] = {"np_v1.npy", "np_v2.npy", "np_0d.npy", "np_empty.npy"};
    const int ndims[] = {3, 2, 0, 2};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        npy_header h;
        void *d = NULL;
        CHECK(npy_load(p, &h, &d) == 0, "%s: %s", names[i], err_msg());
        CHECK(h.ndim == ndims[i], "%s ndim %d", names[i], h.ndim);
        if (i == 0 && d) {
            double *x = d;
            CHECK(h.dtype == NPY_F64 && x[0] == 0.25 && x[23] == 23.25, "v1 values");
        }
        if (i == 1 && d) {
            int32_t *x = d;
            CHECK(h.dtype == NPY_I32 && x[0] == -1 && x[5] == 4, "v2 values");
        }
        free(d);
    }
    return test_report();
}

int main(int argc, char **argv) {
    if (argc == 3)
        return interop(argv[1], argv[2]);
    char dir[] = "/tmp/scaffold-core-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    test_rng();
    test_npy(dir);
    test_fs(dir);
    test_mem();
    test_mem_big();
    fs_rm_rf(dir);
    return test_report();
}
