"""A DDP script as users write it (none of the image's helpers): Gloo, a model wrapped in
DistributedDataParallel (and torch.compile with `--compile true`), a few steps,
destroy_process_group, and an atexit handler that leaves a file behind (as W&B, TensorBoard
writers and loggers flush at exit). With torch's teardown bug (pytorch/pytorch#190489) some
ranks of such scripts crash after they returned."""

import atexit
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "/tmp"))
rank_file = out / f"atexit-{os.environ.get('RANK', '0')}"
atexit.register(rank_file.write_text, "flushed\n")

dist.init_process_group("gloo")
torch.set_num_threads(1)
model = DistributedDataParallel(torch.nn.Linear(32, 32))
net = torch.compile(model) if sys.argv[1:3] == ["--compile", "true"] else model
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    optimizer.zero_grad()
    net(torch.randn(16, 32)).sum().backward()
    optimizer.step()
total = torch.tensor([1.0])
dist.all_reduce(total)
dist.barrier()
dist.destroy_process_group()
print(f"rank {os.environ.get('RANK')}: user script done (world {int(total.item())})", flush=True)
