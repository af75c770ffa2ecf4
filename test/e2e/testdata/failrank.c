/*
 * failrank: every rank starts, meets the others in a barrier and prints
 * "rank R/N on HOST: ready"; then rank TARGET fails the way MODE says while
 * the others sleep 60 s (the job is torn down long before). Compiled by the
 * e2e tests with mpicc.openmpi.
 *
 * usage: failrank oom|segv|sleep TARGET [MIB]
 *        failrank exithost HOST CODE
 *   oom    rank TARGET allocates and touches MIB MiB (default 1024) in 8 MiB
 *          steps, 20 ms apart, as a training step's memory grows; in a memory
 *          cgroup with a lower limit the kernel's OOM killer ends it. If it
 *          is not killed it says so and exits 0, so that the test fails.
 *   segv   rank TARGET writes through a null pointer (SIGSEGV).
 *   sleep  nobody fails: every rank sleeps (a worker pod is killed meanwhile).
 *   exithost
 *          the lowest rank whose host name is HOST exits with status CODE
 *          without MPI_Finalize (a rank on the launcher's own pod, wherever
 *          the MPI placed it).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank = 0, size = 0;
	char host[256] = "?";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(host, sizeof host - 1);
	if (argc < 3) {
		if (rank == 0)
			fprintf(stderr, "usage: failrank oom|segv|sleep TARGET [MIB] | exithost HOST CODE\n");
		MPI_Finalize();
		return 2;
	}
	const char *mode = argv[1];
	int target = atoi(argv[2]);
	long mib = argc > 3 ? atol(argv[3]) : 1024;
	if (strcmp(mode, "exithost") == 0) {
		int mine = strcmp(host, argv[2]) == 0 ? rank : size;
		MPI_Allreduce(&mine, &target, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	printf("rank %d/%d on %s: ready\n", rank, size, host);
	fflush(stdout);
	sleep(1);
	if (rank == target && strcmp(mode, "oom") == 0) {
		const size_t step = 8 << 20;
		for (long done = 0; done < mib; done += 8) {
			char *p = malloc(step);
			if (p == NULL) {
				fprintf(stderr, "rank %d: malloc failed after %ld MiB\n", rank, done);
				return 3;
			}
			memset(p, 1, step);
			usleep(20000);
		}
		printf("rank %d: allocated %ld MiB and was not killed\n", rank, mib);
		fflush(stdout);
		return 0;
	}
	if (rank == target && strcmp(mode, "exithost") == 0) {
		fprintf(stderr, "rank %d on %s: exiting with status %ld\n", rank, host, mib);
		exit((int)mib);
	}
	if (rank == target && strcmp(mode, "segv") == 0) {
		volatile int *null = NULL;
		*null = 1;
	}
	sleep(60);
	MPI_Finalize();
	return 0;
}
