"""Run under horovodrun: an exact allreduce and one DistributedOptimizer step (fp16 compression)."""

import socket

import horovod.torch as hvd
import torch

hvd.init()
rank, size = hvd.rank(), hvd.size()

# Each rank contributes rank + 1: the sum is known exactly.
total = hvd.allreduce(torch.full((8,), float(rank + 1)), op=hvd.Sum, name="sum")
expected = size * (size + 1) / 2
assert torch.equal(total, torch.full((8,), expected)), (rank, total)

# One SGD step, lr 1, weights 0: rank r's gradient is r + 1 everywhere, so the averaged step
# leaves every weight at -(size + 1) / 2, which fp16 represents exactly for small sizes.
model = torch.nn.Linear(4, 1, bias=False)
with torch.no_grad():
    model.weight.zero_()
opt = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=1.0),
    named_parameters=model.named_parameters(),
    compression=hvd.Compression.fp16,
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
opt.zero_grad()
model(torch.full((1, 4), float(rank + 1))).sum().backward()
opt.step()
expected_w = -(size + 1) / 2
assert torch.equal(model.weight.detach(), torch.full((1, 4), expected_w)), (rank, model.weight)
print(
    f"RESULT rank={rank} size={size} sum={total[0].item()} weight={model.weight[0, 0].item()}"
    f" host={socket.gethostname()}"
)
