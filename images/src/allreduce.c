/*
 * podmpi-allreduce: the smoke test shipped in every podmpi MPI image.
 *
 *   mpirun -np N podmpi-allreduce [count]
 *
 * Every rank contributes rank+1 to a scalar MPI_Allreduce (sum) and the vector
 * (rank+1)*(i+1) for i < count (default 65536 doubles, 512 KiB, enough to
 * cross the network in several packets). Every rank checks both results
 * against the closed form and prints one line; rank 0 prints a summary with
 * the time of the vector allreduce. A wrong result makes the job fail
 * (MPI_Abort with exit code 3), so "mpirun ... podmpi-allreduce" exiting 0 is
 * the proof that collectives work across the pods.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

int main(int argc, char **argv) {
	int rank = 0, size = 0, namelen = 0;
	char host[MPI_MAX_PROCESSOR_NAME];
	long count = 65536;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &namelen);

	if (argc > 1) {
		char *end = NULL;
		errno = 0;
		count = strtol(argv[1], &end, 10);
		if (errno != 0 || end == argv[1] || *end != '\0' || count < 1 || count > (1L << 26)) {
			if (rank == 0)
				fprintf(stderr, "podmpi-allreduce: count %s: want an integer from 1 to %ld\n", argv[1], 1L << 26);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}

	long mine = rank + 1, sum = 0;
	long want = (long)size * (size + 1) / 2;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);

	double *in = malloc(sizeof(double) * (size_t)count);
	double *out = malloc(sizeof(double) * (size_t)count);
	if (in == NULL || out == NULL) {
		fprintf(stderr, "podmpi-allreduce: rank %d: cannot allocate 2 x %ld doubles\n", rank, count);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	for (long i = 0; i < count; i++)
		in[i] = (double)(rank + 1) * (double)(i + 1);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	double dt = MPI_Wtime() - t0;
	long bad = 0;
	for (long i = 0; i < count; i++) {
		/* Exact in double: every term is an integer below 2^53. */
		if (out[i] != (double)want * (double)(i + 1))
			bad++;
	}

	int ok = (sum == want && bad == 0);
	printf("rank %d/%d on %s: allreduce=%ld (expect %ld), vector of %ld doubles %s\n", rank, size, host, sum, want,
	       count, bad == 0 ? "ok" : "WRONG");
	fflush(stdout);

	int all_ok = 0;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	if (rank == 0) {
		if (all_ok)
			printf("podmpi-allreduce: OK: %d ranks, sum %ld, %ld-double allreduce in %.3f ms\n", size, want, count,
			       dt * 1e3);
		else
			printf("podmpi-allreduce: FAILED: a rank got a wrong result (see its line above)\n");
		fflush(stdout);
	}
	free(in);
	free(out);
	if (!all_ok)
		MPI_Abort(MPI_COMM_WORLD, 3);
	MPI_Finalize();
	return 0;
}
