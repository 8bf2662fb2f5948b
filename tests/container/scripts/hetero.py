"""A heterogeneous job's program (tests/container/test_hetero.py): on a world host it joins the
world (Horovod or torch.distributed, whichever launched it) and allreduces its rank; on a host
outside the world it is alone (a data host). Every rank prints what it sees of its own host.
--fail-on HOST makes the program on that host raise (the world's last rank, or the outsider);
--linger-outsider S keeps an outsider running, as a data server would, until the job ends it;
--linger-world S keeps the world's ranks running (until another host's failure ends them)."""

from __future__ import annotations

import argparse
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--fail-on", default="")
p.add_argument("--linger-outsider", type=float, default=0)
p.add_argument("--linger-world", type=float, default=0)
args, _ = p.parse_known_args()

host = os.environ["SM_CURRENT_HOST"]
group = os.environ["SM_CURRENT_INSTANCE_GROUP"]
training_env = json.loads(os.environ["SM_TRAINING_ENV"])
if "TORCHELASTIC_RUN_ID" in os.environ:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    total = total.item()
elif "HOROVOD_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
    import horovod.torch as hvd
    import torch

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    total = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum).item()
else:
    rank, size, total = 0, 1, 0.0
print(
    f"HETERO rank={rank} size={size} host={host} group={group} "
    f"type={os.environ['SM_CURRENT_INSTANCE_TYPE']} env_host={training_env['current_host']} "
    f"env_type={training_env['current_instance_type']} master={os.environ['SM_MASTER_ADDR']} "
    f"hosts={','.join(json.loads(os.environ['SM_HOSTS']))} sum={total:g}",
    flush=True,
)
if args.fail_on == host and (size == 1 or rank == size - 1):
    raise RuntimeError(f"deliberate on {host}")
time.sleep(args.linger_world if size > 1 else args.linger_outsider)
