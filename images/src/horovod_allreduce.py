"""podmpi-horovod-check: Horovod + PyTorch smoke test shipped in the Horovod image.

    mpirun -np N python3 /usr/local/share/podmpi/horovod_allreduce.py

Every rank allreduces rank+1 (sum) and checks the closed form, then runs three
steps of a DistributedOptimizer on a tiny linear model and checks that the
parameters stayed identical on every rank. Each rank names its host. Exit
status 0 means both worked.
"""

import socket
import sys

import horovod.torch as hvd
import torch


def main() -> int:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    got = hvd.allreduce(torch.tensor([float(rank + 1)]), op=hvd.Sum).item()
    want = size * (size + 1) / 2
    ok = got == want
    host = socket.gethostname()
    print(f"rank {rank}/{size} on {host}: allreduce={got:g} (expect {want:g}) {'ok' if ok else 'WRONG'}", flush=True)

    torch.manual_seed(1234 + rank)  # different on purpose: broadcast must fix it
    model = torch.nn.Linear(8, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(3):
        x = torch.full((4, 8), float(rank + step))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    mean = hvd.allreduce(flat, op=hvd.Average)
    same = torch.allclose(flat, mean)
    print(f"rank {rank}/{size} on {host}: parameters identical across ranks after 3 steps: {same}", flush=True)

    all_ok = hvd.allreduce(torch.tensor([1.0 if ok and same else 0.0]), op=hvd.Min).item() == 1.0
    if rank == 0:
        print("podmpi-horovod-check: " + ("OK" if all_ok else "FAILED"), flush=True)
    return 0 if all_ok else 3


if __name__ == "__main__":
    sys.exit(main())
