/* replay: a main() for the fuzz harnesses without libFuzzer: runs LLVMFuzzerTestOneInput on
 * every file given (directories are walked one level), so `make test` replays the committed
 * corpora (seeds and past findings) through the normal and sanitizer builds. Prints
 * "N passed, 0 failed" (a crash or sanitizer report ends the process instead). */
#include "fuzz.h"

#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb)
                break;
            buf = nb;
        }
    }
    fclose(f);
    if (!buf)
        return 0;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0)
            continue;
        if (!S_ISDIR(st.st_mode)) {
            ran += run_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            ran += run_file(p);
        }
        if (d)
            closedir(d);
    }
    printf("%d passed, 0 failed\n", ran);
    return ran ? 0 : 1;
}
