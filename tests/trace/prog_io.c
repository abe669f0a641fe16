/* prog_io: the workloads the tracer tests run under LD_PRELOAD. Each mode does a known sequence
 * of I/O in a directory so that tests/trace/check.py can assert the exact events, arguments,
 * byte counts, FH mapping and summaries. It also checks errno preservation itself (exit 3 when a
 * wrapper changed errno). Usage: prog_io MODE DIR [ARGS]. */
#include "scaffold/trace.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static void path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

#define MUST(x)                                                                                    \
    do {                                                                                           \
        if (!(x)) {                                                                                \
            fprintf(stderr, "prog_io: %s failed at line %d: %s\n", #x, __LINE__, strerror(errno)); \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

#define ERRNO_IS(want, what)                                                                       \
    do {                                                                                           \
        if (errno != (want)) {                                                                     \
            fprintf(stderr, "prog_io: errno after %s is %d, want %d\n", what, errno, want);       \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)

static int mode_basic(void) {
    char p[4096], q[4096], buf[8192];
    memset(buf, 'x', sizeof buf);
    path(p, sizeof p, "data.bin");
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    MUST(fd >= 0);
    MUST(write(fd, "abcdef", 6) == 6);
    MUST(write(fd, buf, 100) == 100);
    MUST(pwrite(fd, buf, 4096, 8192) == 4096);
    struct iovec iov[2] = {{buf, 50}, {buf, 50}};
    MUST(writev(fd, iov, 2) == 100);
    MUST(fsync(fd) == 0);
    MUST(fdatasync(fd) == 0);
    MUST(close(fd) == 0);

    fd = open(p, O_RDONLY);
    MUST(fd >= 0);
    MUST(read(fd, buf, 6) == 6);
    MUST(lseek(fd, 100, SEEK_SET) == 100);
    MUST(read(fd, buf, 10) == 10);
    MUST(pread(fd, buf, 1, 3) == 1);
    MUST(preadv(fd, iov, 2, 0) == 100);
    MUST(posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL) == 0);
    struct stat sb;
    MUST(fstat(fd, &sb) == 0);
    int d = dup(fd);
    MUST(d >= 0);
    MUST(read(d, buf, 1) == 1);
    MUST(dup2(fd, 50) == 50);
    MUST(pread(50, buf, 2, 0) == 2);
    MUST(close(50) == 0);
    int nfd = fcntl(fd, F_DUPFD, 60);
    MUST(nfd >= 60);
    MUST(pread(nfd, buf, 3, 0) == 3);
    MUST(close(nfd) == 0);
    void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    MUST(m != MAP_FAILED);
    MUST(munmap(m, 4096) == 0);
    MUST(close(d) == 0);
    MUST(close(fd) == 0);

    MUST(stat(p, &sb) == 0);
    MUST(lstat(p, &sb) == 0);
    MUST(access(p, R_OK) == 0);
    struct statx stx;
    MUST(statx(AT_FDCWD, p, 0, STATX_SIZE, &stx) == 0);
    /* The pre-2.33 stat ABI that old binaries still call: only the tracer exports it as a default
     * symbol, so this finds the wrapper (which forwards to glibc's compat version). */
    int (*xstat)(int, const char *, struct stat *) =
        (int (*)(int, const char *, struct stat *))dlsym(RTLD_DEFAULT, "__xstat");
    MUST(xstat != NULL);
    MUST(xstat(1, p, &sb) == 0 && sb.st_size == 8192 + 4096);

    FILE *fp = fopen(p, "r");
    MUST(fp);
    MUST(fread(buf, 4, 3, fp) == 3);
    MUST(fseek(fp, 10, SEEK_SET) == 0);
    MUST(fread(buf, 1, 5, fp) == 5);
    MUST(ftell(fp) == 15);
    MUST(fclose(fp) == 0);

    path(q, sizeof q, "text.txt");
    fp = fopen(q, "w");
    MUST(fp);
    MUST(fprintf(fp, "x=%d\n", 42) == 5);
    MUST(fputs("hello\n", fp) >= 0);
    MUST(fwrite(buf, 2, 5, fp) == 5);
    MUST(fclose(fp) == 0);

    /* Relative paths after chdir, and openat against a directory descriptor. */
    char cwd[4096];
    MUST(getcwd(cwd, sizeof cwd));
    MUST(chdir(dir) == 0);
    fd = open("rel.txt", O_CREAT | O_WRONLY, 0644);
    MUST(fd >= 0);
    MUST(write(fd, "r", 1) == 1);
    MUST(close(fd) == 0);
    MUST(chdir(cwd) == 0);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    MUST(dfd >= 0);
    fd = openat(dfd, "sub.txt", O_CREAT | O_WRONLY, 0600);
    MUST(fd >= 0);
    MUST(write(fd, "sub", 3) == 3);
    MUST(close(fd) == 0);
    MUST(close(dfd) == 0);

    /* Copies between traced files. */
    int in = open(p, O_RDONLY), out;
    path(q, sizeof q, "copy.bin");
    out = open(q, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    MUST(in >= 0 && out >= 0);
    MUST(copy_file_range(in, NULL, out, NULL, 64, 0) == 64);
    off_t off = 0;
    MUST(sendfile(out, in, &off, 32) == 32);
    MUST(close(in) == 0 && close(out) == 0);

    DIR *dp = opendir(dir);
    MUST(dp);
    int entries = 0;
    while (readdir(dp))
        entries++;
    MUST(entries >= 4);
    MUST(closedir(dp) == 0);

    path(q, sizeof q, "newdir");
    MUST(mkdir(q, 0755) == 0);
    MUST(rmdir(q) == 0);
    path(p, sizeof p, "sub.txt");
    path(q, sizeof q, "sub2.txt");
    MUST(rename(p, q) == 0);
    MUST(unlink(q) == 0);

    /* Default exclusions: none of these may appear. */
    fd = open("/proc/self/status", O_RDONLY);
    MUST(fd >= 0);
    MUST(read(fd, buf, 100) > 0);
    MUST(close(fd) == 0);
    fd = open("/dev/null", O_WRONLY);
    MUST(fd >= 0);
    MUST(write(fd, buf, 10) == 10);
    MUST(close(fd) == 0);

    /* errno: failures keep the libc errno, successes leave errno untouched. */
    path(q, sizeof q, "does-not-exist");
    errno = 0;
    MUST(open(q, O_RDONLY) == -1);
    ERRNO_IS(ENOENT, "failed open");
    errno = 0;
    MUST(stat(q, &sb) == -1);
    ERRNO_IS(ENOENT, "failed stat");
    path(p, sizeof p, "data.bin");
    fd = open(p, O_RDONLY);
    MUST(fd >= 0);
    errno = 777;
    MUST(read(fd, buf, 1) == 1);
    ERRNO_IS(777, "successful read");
    errno = 555;
    MUST(stat(p, &sb) == 0);
    ERRNO_IS(555, "successful stat");
    errno = 0;
    MUST(read(fd, NULL, 0) == 0);
    ERRNO_IS(0, "empty read");
    MUST(close(fd) == 0);
    errno = 0;
    MUST(close(fd) == -1);
    ERRNO_IS(EBADF, "double close");
    fp = fopen(q, "r");
    MUST(fp == NULL);
    ERRNO_IS(ENOENT, "failed fopen");
    printf("basic done\n");
    return 0;
}

typedef struct {
    int i, k;
} targ;

static void *thread_main(void *p) {
    targ *a = p;
    char q[4096], name[64], buf[64];
    memset(buf, 't', sizeof buf);
    snprintf(name, sizeof name, "t%d.bin", a->i);
    path(q, sizeof q, name);
    scaffold_trace_region r = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FETCH,
                                                          SCAFFOLD_TRACE_CAT_DATALOADER);
    SCAFFOLD_TRACE_REGION_INT(r, "thread", a->i);
    int fd = open(q, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    MUST(fd >= 0);
    for (int j = 0; j < a->k; j++)
        MUST(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    MUST(close(fd) == 0);
    SCAFFOLD_TRACE_REGION_END(r);
    return NULL;
}

static int mode_threads(int n, int k) {
    pthread_t th[64];
    targ a[64];
    if (n > 64)
        n = 64;
    for (int i = 0; i < n; i++) {
        a[i].i = i;
        a[i].k = k;
        MUST(pthread_create(&th[i], NULL, thread_main, &a[i]) == 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    printf("threads done\n");
    return 0;
}

static void write_n(const char *name, int n) {
    char q[4096];
    path(q, sizeof q, name);
    int fd = open(q, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    MUST(fd >= 0);
    for (int j = 0; j < n; j++)
        MUST(write(fd, "0123456789", 10) == 10);
    MUST(close(fd) == 0);
}

static int mode_fork(int use_exit) {
    write_n("parent_before.bin", 3);
    fflush(stdout);
    pid_t pid = fork();
    MUST(pid >= 0);
    if (pid == 0) {
        write_n("child.bin", 2);
        if (use_exit)
            exit(0);
        _exit(0);
    }
    int st;
    MUST(waitpid(pid, &st, 0) == pid);
    MUST(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    write_n("parent_after.bin", 4);
    printf("child %d\n", (int)pid);
    return 0;
}

static int mode_exec(const char *self) {
    write_n("pre_exec.bin", 2);
    fflush(stdout);
    /* A failing exec first: tracing must go on in this image. */
    char *bad[] = {"nonexistent-program-xyz", NULL};
    MUST(execvp("nonexistent-program-xyz", bad) == -1);
    write_n("after_failed_exec.bin", 1);
    char *args[] = {(char *)self, "exec2", (char *)dir, NULL};
    execv(self, args);
    perror("execv");
    return 2;
}

static int mode_sleep(int n) {
    write_n("sig.bin", n);
    char q[4096];
    path(q, sizeof q, "ready");
    int fd = open(q, O_CREAT | O_WRONLY, 0644); /* tells the test we are ready */
    MUST(fd >= 0);
    MUST(close(fd) == 0);
    for (;;)
        pause();
}

static int mode_annot(void) {
    scaffold_trace_region e = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_EPOCH,
                                                          SCAFFOLD_TRACE_CAT_PIPELINE);
    SCAFFOLD_TRACE_REGION_INT(e, "epoch", 3);
    SCAFFOLD_TRACE_REGION_INT(e, "neg", -42);
    scaffold_trace_region t = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_TRAIN,
                                                          SCAFFOLD_TRACE_CAT_PIPELINE);
    scaffold_trace_region f = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_FORWARD,
                                                          SCAFFOLD_TRACE_CAT_COMPUTE);
    SCAFFOLD_TRACE_REGION_STR(f, "note", "quote\" back\\ nl\n tab\t \xff end");
    write_n("inside.bin", 1);
    SCAFFOLD_TRACE_REGION_END(f);
    SCAFFOLD_TRACE_REGION_END(t);
    /* An END for an outer region closes a forgotten inner one. */
    scaffold_trace_region c = SCAFFOLD_TRACE_REGION_BEGIN(SCAFFOLD_TRACE_CAPTURE,
                                                          SCAFFOLD_TRACE_CAT_CHECKPOINT);
    scaffold_trace_region lost = SCAFFOLD_TRACE_REGION_BEGIN("inner", "other");
    (void)lost;
    SCAFFOLD_TRACE_REGION_END(c);
    SCAFFOLD_TRACE_REGION_END(e);
    SCAFFOLD_TRACE_METADATA("config", "unet-\"small\"");
    printf("active %d\n", scaffold_trace_active());
    return 0;
}

static int mode_escape(void) {
    char q[4096];
    path(q, sizeof q, "we\"ird\\na\nme\xff-\xc3\xa9.bin");
    int fd = open(q, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    MUST(fd >= 0);
    MUST(write(fd, "e", 1) == 1);
    MUST(close(fd) == 0);
    return 0;
}

static int mode_loop(int n) {
    /* Many small events: exercises ring wrap-around and several flushes. */
    char q[4096], b[16];
    path(q, sizeof q, "loop.bin");
    int fd = open(q, O_CREAT | O_RDWR | O_TRUNC, 0644);
    MUST(fd >= 0);
    MUST(write(fd, "0123456789abcdef", 16) == 16);
    for (int i = 0; i < n; i++)
        MUST(pread(fd, b, 1, i % 16) == 1);
    MUST(close(fd) == 0);
    return 0;
}

/* stress T N: T threads each issue N back-to-back 1-byte preads of their own file, then (with
 * a third argument "wait") the process announces it is done and sleeps until killed. */
static int stress_n;

static void *stress_thread(void *arg) {
    char q[4096], name[32], b[1];
    snprintf(name, sizeof name, "s%d.bin", (int)(intptr_t)arg);
    path(q, sizeof q, name);
    int fd = open(q, O_CREAT | O_RDWR | O_TRUNC, 0644);
    MUST(fd >= 0);
    MUST(write(fd, "0123456789abcdef", 16) == 16);
    for (int i = 0; i < stress_n; i++)
        MUST(pread(fd, b, 1, i % 16) == 1);
    MUST(close(fd) == 0);
    return NULL;
}

static int mode_stress(int t, int n, int wait) {
    pthread_t th[64];
    stress_n = n;
    if (t < 1 || t > 64)
        return 2;
    for (int i = 0; i < t; i++)
        MUST(pthread_create(&th[i], NULL, stress_thread, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    if (!wait)
        return 0;
    char q[4096];
    path(q, sizeof q, "ready");
    int fd = open(q, O_CREAT | O_WRONLY, 0644);
    MUST(fd >= 0);
    MUST(close(fd) == 0);
    for (;;)
        pause();
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: prog_io MODE DIR [N [K]]\n");
        return 2;
    }
    dir = argv[2];
    const char *m = argv[1];
    int n = argc > 3 ? atoi(argv[3]) : 4, k = argc > 4 ? atoi(argv[4]) : 100;
    if (!strcmp(m, "basic"))
        return mode_basic();
    if (!strcmp(m, "threads"))
        return mode_threads(n, k);
    if (!strcmp(m, "fork"))
        return mode_fork(0);
    if (!strcmp(m, "fork-exit"))
        return mode_fork(1);
    if (!strcmp(m, "exec"))
        return mode_exec(argv[0]);
    if (!strcmp(m, "exec2")) {
        write_n("post_exec.bin", 3);
        return 0;
    }
    if (!strcmp(m, "sleep"))
        return mode_sleep(n);
    if (!strcmp(m, "annot"))
        return mode_annot();
    if (!strcmp(m, "escape"))
        return mode_escape();
    if (!strcmp(m, "loop"))
        return mode_loop(n);
    if (!strcmp(m, "stress"))
        return mode_stress(n, k, argc > 5 && !strcmp(argv[5], "wait"));
    fprintf(stderr, "prog_io: unknown mode %s\n", m);
    return 2;
}
