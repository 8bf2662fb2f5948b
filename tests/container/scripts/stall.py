"""A rank that stops before the first allreduce (rank STALL_RANK, default 1): the others wait in
it forever. Under Horovod (horovod.torch) or torchrun (torch.distributed, Gloo), by the
launcher's own variables."""

import os
import threading

import torch


def never_arrives():
    threading.Event().wait()  # what a lost rank looks like: alive, blocked, silent


if "RANK" in os.environ:  # torchrun
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def allreduce(tensor):
        dist.all_reduce(tensor)
else:
    import horovod.torch as hvd

    hvd.init()
    rank = hvd.rank()

    def allreduce(tensor):
        hvd.allreduce(tensor)


print(f"rank {rank}: started", flush=True)
if rank == int(os.environ.get("STALL_RANK", "1")):
    never_arrives()
allreduce(torch.ones(1))
print(f"rank {rank}: done", flush=True)
