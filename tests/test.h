/* test.h: the tiny C test harness. CHECK records file:line and keeps going; test_report() prints
 * "N passed, N failed" and returns the exit status. check_close() is the one tolerance rule:
 * pass if |got - want| <= atol + rtol * |want| for every element. */
#ifndef SCAFFOLD_TEST_H
#define SCAFFOLD_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) {                                                                                \
            test_passed++;                                                                         \
        } else {                                                                                   \
            test_failed++;                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static inline int check_close(const char *name, const float *got, const float *want, size_t n,
                              float atol, float rtol) {
    size_t bad = 0;
    double maxabs = 0, maxrel = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double r = d / (fabs((double)want[i]) + 1e-30);
        if (d > maxabs)
            maxabs = d;
        if (r > maxrel && fabs((double)want[i]) > atol)
            maxrel = r;
        if (!(d <= atol + rtol * fabs((double)want[i]))) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g\n", name, i, (double)got[i],
                        (double)want[i]);
            bad++;
        }
    }
    if (bad) {
        fprintf(stderr, "FAIL %s: %zu/%zu mismatches (max abs %.3g, max rel %.3g)\n", name, bad,
                n, maxabs, maxrel);
        test_failed++;
        return 1;
    }
    test_passed++;
    return 0;
}

static inline int test_report(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed ? 1 : 0;
}

#endif
