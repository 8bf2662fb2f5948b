"""torch.distributed (env://, as torchrun starts it): who runs where, and an exact all_reduce.

Prints one line per rank, `WORLD {"rank", "size", "hostname", "sum", "args"}`; rank 0 saves
model.pt into SM_MODEL_DIR.
"""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
line = {
    "rank": rank,
    "size": size,
    "hostname": socket.gethostname(),
    "sum": total.item(),
    "args": sys.argv[1:],
}
sys.stdout.write("WORLD " + json.dumps(line) + "\n")  # one write: ranks share the pipe
sys.stdout.flush()
if rank == 0:
    torch.save(
        {"sum": total.item()},
        os.path.join(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"), "model.pt"),
    )
dist.barrier()
dist.destroy_process_group()
