"""podmpi-horovod-elastic: elastic Horovod + PyTorch training shipped in the Horovod image.

    horovodrun -np 2 --min-np 2 --max-np 3 -p 2222 \\
        --host-discovery-script /usr/local/share/podmpi/discover-hosts \\
        python3 /usr/local/share/podmpi/horovod_elastic.py --grow-to 3

Trains a tiny linear model with Horovod's DistributedOptimizer under
hvd.elastic.run, committing the state after every step. Whenever the set of
workers changes (a host the discovery script lists now, a host gone), every
rank starts over from the last commit and prints

    elastic: rank R/S on HOST at step N

It stops after --steps-after steps at --grow-to ranks or more (at any size
when --grow-to is 0), or after --max-steps steps. Rank 0 then prints one
"podmpi-horovod-elastic: ..." line. Exit status 0 means the job reached
--grow-to ranks and the parameters are identical on every rank; 4 means it
never reached --grow-to ranks; 3 means the parameters differ.
"""

import argparse
import socket
import sys
import time

import horovod.torch as hvd
import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grow-to", type=int, default=0, help="ranks to reach before counting --steps-after (0: any)")
    ap.add_argument("--steps-after", type=int, default=20, help="steps to train at --grow-to ranks")
    ap.add_argument("--max-steps", type=int, default=3000, help="steps after which training stops anyway")
    ap.add_argument("--step-seconds", type=float, default=0.05, help="pause after each step")
    args = ap.parse_args()

    hvd.init()
    host = socket.gethostname()
    torch.manual_seed(1234)
    model = torch.nn.Linear(8, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    # A worker that joins later gets rank 0's model, optimizer and counters
    # when the state is synchronised at the start of train().
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0, at_size=0)

    @hvd.elastic.run
    def train(state):
        print(f"elastic: rank {hvd.rank()}/{hvd.size()} on {host} at step {state.step}", flush=True)
        while state.step < args.max_steps and state.at_size < args.steps_after:
            x = torch.full((4, 8), float(hvd.rank() + state.step % 7))
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if hvd.size() >= args.grow_to:
                state.at_size += 1
            state.step += 1
            # Saves the state and raises HostsUpdatedInterrupt when the
            # driver says the hosts changed: train() then starts over.
            state.commit()
            time.sleep(args.step_seconds)

    train(state)

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    same = torch.allclose(flat, hvd.allreduce(flat, op=hvd.Average))
    all_same = hvd.allreduce(torch.tensor([1.0 if same else 0.0]), op=hvd.Min).item() == 1.0
    grew = state.at_size >= args.steps_after
    if hvd.rank() == 0:
        verdict = "OK" if grew and all_same else "FAILED"
        print(f"podmpi-horovod-elastic: {verdict}: {state.step} steps, {hvd.size()} ranks at the end "
              f"(wanted {args.grow_to or 'any'} for {args.steps_after} steps), "
              f"parameters identical: {all_same}", flush=True)
    if not grew:
        return 4
    return 0 if all_same else 3


if __name__ == "__main__":
    sys.exit(main())
