/* Open MPI's side of ember's collectives benchmark (bench/collectives/README.md).
 *
 * Times one collective K times (after K/10 + 2 warm-up calls) on every rank and prints,
 * on rank 0, one line in the format ember's `coll_bench` prints:
 *   op=all_reduce ranks=2 bytes=8 median_us=0.93 algbw_GBps=0.009
 * `bytes` is each rank's input buffer (f64 elements, summed, for all_reduce; each rank's
 * contribution for all_gather; 0 for barrier), `median_us` the median over the K calls of
 * the slowest rank (per call, the maximum over ranks), `algbw_GBps` = bytes / median
 * seconds / 1e9 (OSU's convention).
 *
 * Build and run (Debian's openmpi-bin, libopenmpi-dev):
 *   mpicc -O2 -o mpi_coll bench/collectives/mpi_coll.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 ./mpi_coll all_reduce 1048576 100
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_once(const char *op, double *in, double *out, long n) {
    if (strcmp(op, "barrier") == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (strcmp(op, "all_reduce") == 0) {
        MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    } else if (strcmp(op, "all_gather") == 0) {
        MPI_Allgather(in, (int)n, MPI_DOUBLE, out, (int)n, MPI_DOUBLE, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_coll barrier|all_reduce|all_gather BYTES ITERS\n");
        MPI_Finalize();
        return 2;
    }
    const char *op = argv[1];
    long bytes = strcmp(op, "barrier") == 0 ? 0 : atol(argv[2]) / 8 * 8;
    long iters = atol(argv[3]);
    if (strcmp(op, "barrier") && strcmp(op, "all_reduce") && strcmp(op, "all_gather")) {
        if (rank == 0) fprintf(stderr, "mpi_coll: unknown op %s\n", op);
        MPI_Finalize();
        return 2;
    }
    if (iters < 1) iters = 1;
    long n = bytes / 8;
    long out_n = strcmp(op, "all_gather") == 0 ? n * world : n;
    double *in = malloc(sizeof(double) * (n > 0 ? n : 1));
    double *out = malloc(sizeof(double) * (out_n > 0 ? out_n : 1));
    double *times = malloc(sizeof(double) * iters);
    double *slowest = malloc(sizeof(double) * iters);
    for (long i = 0; i < n; i++) in[i] = (double)(rank + 1) * 0.5 + (double)i;
    for (long w = 0; w < iters / 10 + 2; w++) run_once(op, in, out, n);
    MPI_Barrier(MPI_COMM_WORLD);
    for (long k = 0; k < iters; k++) {
        double t = MPI_Wtime();
        run_once(op, in, out, n);
        times[k] = MPI_Wtime() - t;
    }
    MPI_Reduce(times, slowest, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(slowest, iters, sizeof(double), cmp_double);
        double median = iters % 2 ? slowest[iters / 2]
                                  : (slowest[iters / 2 - 1] + slowest[iters / 2]) / 2;
        printf("op=%s ranks=%d bytes=%ld median_us=%.2f algbw_GBps=%.3f\n", op, world, bytes,
               median * 1e6, median > 0 ? (double)bytes / median / 1e9 : 0.0);
    }
    free(in); free(out); free(times); free(slowest);
    MPI_Finalize();
    return 0;
}
