/*
 * allreduce: every rank contributes its rank number; MPI_Allreduce sums them
 * and each rank checks the sum against size*(size-1)/2. Compiled by the e2e
 * tests with mpicc.openmpi and mpicc.mpich.
 *
 * usage: allreduce [seconds]
 *   With seconds, every rank prints "rank R sleeping" after the allreduce and
 *   sleeps that long before MPI_Finalize: the failure drills kill a worker or
 *   the launcher while the job runs.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank = 0, size = 0, sum = -1;
	char host[256] = "?";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(host, sizeof host - 1);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	int expect = size * (size - 1) / 2;
	printf("rank %d/%d on %s: allreduce=%d (expect %d)\n", rank, size, host, sum, expect);
	fflush(stdout);
	if (argc > 1) {
		int secs = atoi(argv[1]);
		printf("rank %d sleeping %d s\n", rank, secs);
		fflush(stdout);
		sleep(secs);
	}
	MPI_Finalize();
	return sum == expect ? 0 : 1;
}
