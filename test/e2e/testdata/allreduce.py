# The mpi4py twin of allreduce.c: run with /usr/bin/python3 (Debian's
# python3-mpi4py, linked to Open MPI) under mpirun.openmpi.
import socket
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank, op=MPI.SUM)
expect = size * (size - 1) // 2
print(f"rank {rank}/{size} on {socket.gethostname()}: allreduce={total} (expect {expect}) mpi4py", flush=True)
raise SystemExit(0 if total == expect else 1)
