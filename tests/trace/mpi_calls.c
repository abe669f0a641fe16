/* mpi_calls: MPI workloads for the MPI tracing tests (tests/trace/mpi.sh), built with the build's
 * MPI compiler wrapper. Run with 4 ranks.
 *
 *   mpi_calls calls DIR   every traced call once, with known counts: collectives (each with
 *                         4 doubles per rank unless said), their non-blocking forms and the waits
 *                         that complete them, point-to-point in a ring, one-sided epochs, MPI-IO
 *                         on DIR/mpiio.bin; prints "calls ok" on rank 0
 *   mpi_calls stall DIR N rank 0 writes its checkpoint (256 KiB to DIR/checkpoint.fifo, a FIFO
 *                         that a thread of rank 0 drains by 64 KiB every 120 ms, so each write
 *                         sleeps ~360 ms) before every one of N barriers; the other ranks wait in
 *                         the barrier
 *   mpi_calls loop N      N back-to-back MPI_Allreduce of one double (8 bytes; the overhead
 *                         benchmark): rank 0 prints "ns_per_call X"
 */
#include <mpi.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define N 4

static void die(const char *what) {
    fprintf(stderr, "mpi_calls: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int calls(const char *dir) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4)
        die("run with 4 ranks");
    double a[N * 4], b[N * 4];
    for (int i = 0; i < N * 4; i++)
        a[i] = rank + i;
    int counts[4] = {N, N, N, N}, displs[4] = {0, N, 2 * N, 3 * N};
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Bcast(a, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Reduce(a, b, N, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Allreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allgather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Allgatherv(a, N, MPI_DOUBLE, b, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Alltoall(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD);       /* 16 doubles out */
    MPI_Alltoallv(a, counts, displs, MPI_DOUBLE, b, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Gather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gatherv(a, N, MPI_DOUBLE, b, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Scatter(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Scatterv(a, counts, displs, MPI_DOUBLE, b, N, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Reduce_scatter(a, b, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); /* 16 doubles */
    MPI_Reduce_scatter_block(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Scan(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Exscan(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* In place: the receive side is what the rank contributes. */
    MPI_Allreduce(MPI_IN_PLACE, a, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);   /* 8 bytes */

    /* Non-blocking collectives and the waits that complete them. */
    MPI_Request r[8];
    MPI_Status sts[2]; /* not MPI_STATUSES_IGNORE: MPICH defines it as (MPI_Status *)1 */
    MPI_Ibarrier(MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Iallreduce(a, b, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Ibcast(a, N, MPI_DOUBLE, 1, MPI_COMM_WORLD, &r[0]);
    MPI_Ireduce(a, b, N, MPI_DOUBLE, MPI_SUM, 2, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, sts);
    MPI_Iallgather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, MPI_COMM_WORLD, &r[0]);
    MPI_Ialltoall(a, N, MPI_DOUBLE, b + 0, N, MPI_DOUBLE, MPI_COMM_WORLD, &r[1]);
    int done = 0;
    while (!done) /* a test that completes both */
        MPI_Testall(2, r, &done, sts);
    MPI_Igather(a, N, MPI_DOUBLE, b, N, MPI_DOUBLE, 3, MPI_COMM_WORLD, &r[0]);
    MPI_Iscatter(a, N, MPI_DOUBLE, b + N, N, MPI_DOUBLE, 3, MPI_COMM_WORLD, &r[1]);
    int idx;
    MPI_Waitany(2, r, &idx, MPI_STATUS_IGNORE);
    MPI_Waitany(2, r, &idx, MPI_STATUS_IGNORE);

    /* Point-to-point in a ring: 3 doubles to the right, from the left. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double s3[3] = {1, 2, 3}, r3[3];
    if (rank % 2 == 0) {
        MPI_Send(s3, 3, MPI_DOUBLE, right, 7, MPI_COMM_WORLD);
        MPI_Recv(r3, 3, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(r3, 3, MPI_DOUBLE, left, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(s3, 3, MPI_DOUBLE, right, 7, MPI_COMM_WORLD);
    }
    int i5[5] = {0}, o5[5];
    MPI_Sendrecv(i5, 5, MPI_INT, right, 8, o5, 5, MPI_INT, left, 8, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    MPI_Irecv(r3, 3, MPI_DOUBLE, left, 9, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(s3, 3, MPI_DOUBLE, right, 9, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, sts);

    /* One-sided: a window of 8 ints; a fence epoch with a put, a lock epoch with a get. */
    int wbuf[8] = {0}, got[2];
    MPI_Win win;
    MPI_Win_create(wbuf, sizeof wbuf, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_fence(0, win);
    MPI_Put(i5, 2, MPI_INT, right, 0, 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    MPI_Win_lock(MPI_LOCK_SHARED, left, 0, win);
    MPI_Get(got, 2, MPI_INT, left, 0, 2, MPI_INT, win);
    MPI_Win_unlock(left, win);
    MPI_Win_free(&win);

    /* MPI-IO: each rank writes and reads back 1 KiB at rank * 1 KiB. */
    char path[4096], buf[1024];
    snprintf(path, sizeof path, "%s/mpiio.bin", dir);
    memset(buf, 'a' + rank, sizeof buf);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh) !=
        MPI_SUCCESS)
        die("MPI_File_open");
    MPI_File_write_at(fh, (MPI_Offset)rank * 1024, buf, 1024, MPI_CHAR, MPI_STATUS_IGNORE);
    MPI_File_write_at_all(fh, 4096 + (MPI_Offset)rank * 1024, buf, 1024, MPI_CHAR,
                          MPI_STATUS_IGNORE);
    MPI_File_sync(fh);
    MPI_File_read_at(fh, (MPI_Offset)rank * 1024, buf, 1024, MPI_CHAR, MPI_STATUS_IGNORE);
    MPI_File_set_view(fh, (MPI_Offset)rank * 1024, MPI_CHAR, MPI_CHAR, "native", MPI_INFO_NULL);
    MPI_File_read_all(fh, buf, 512, MPI_CHAR, MPI_STATUS_IGNORE);
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("calls ok\n");
    return 0;
}

/* The reader side of rank 0's checkpoint FIFO: drains one write 120 ms after it starts. */
static void *slow_reader(void *arg) {
    const char *path = arg;
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    char *b = malloc(1 << 16);
    for (;;) {
        struct timespec ts = {0, 120 * 1000 * 1000};
        nanosleep(&ts, NULL);
        ssize_t got = 0, n;
        while (got < (1 << 16) && (n = read(fd, b, (size_t)(1 << 16) - (size_t)got)) > 0)
            got += n;
        if (got <= 0)
            break;
    }
    free(b);
    close(fd);
    return NULL;
}

static int stall(const char *dir, int iters) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint.fifo", dir);
    pthread_t th;
    int fd = -1;
    char *ck = NULL;
    if (rank == 0) {
        unlink(path);
        if (mkfifo(path, 0600) != 0)
            die("mkfifo");
        pthread_create(&th, NULL, slow_reader, path);
        fd = open(path, O_WRONLY);
        ck = calloc(1, 1 << 18);
        if (fd < 0 || !ck)
            die("open fifo");
    }
    double x = 1, y;
    for (int it = 0; it < iters; it++) {
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        /* 256 KiB into a 64 KiB pipe: the write sleeps until the reader has drained 192 KiB */
        if (rank == 0 && write(fd, ck, 1 << 18) != 1 << 18)
            die("write");
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
        close(fd);
        pthread_join(th, NULL);
        unlink(path);
        free(ck);
        printf("stall ok\n");
    }
    return 0;
}

/* Rank 0 prints the wall time per call of the loop (after a warm-up and a barrier). */
static int loop(long n) {
    double x = 1, y;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (long i = 0; i < n / 10 + 1; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (rank == 0)
        printf("ns_per_call %.1f\n",
               ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rc = 2;
    if (argc >= 3 && !strcmp(argv[1], "calls"))
        rc = calls(argv[2]);
    else if (argc >= 4 && !strcmp(argv[1], "stall"))
        rc = stall(argv[2], atoi(argv[3]));
    else if (argc >= 3 && !strcmp(argv[1], "loop"))
        rc = loop(atol(argv[2]));
    else
        fprintf(stderr, "usage: mpi_calls calls DIR | stall DIR N | loop N\n");
    MPI_Finalize();
    return rc;
}
