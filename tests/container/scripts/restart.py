"""A short training that tests/container/test_restarts.py kills once, or fails every attempt.

Each step's samples are recorded with the weights in one checkpoint, replaced atomically after
every step by rank 0, so a restarted job resumes at the step after the last one saved (rank 0
reads it, as only its host has it, and sends it to every rank). At the end rank 0 prints how
often each sample went into the weights (COVERAGE), how far every rank's weights are from rank
0's (WEIGHTS) and from a serial replay of the whole training (REPLAY): once each, 0 and 0 when
nothing was trained twice or lost. Under Horovod or torchrun (Gloo), by the launcher's own
variables; float64 throughout, so the replay is exact.

KILL_RANK (default 1) SIGKILLs itself before step KILL_AT_STEP (default 3) of attempt 1
(BYOC_ATTEMPT, set by `train`); with FAIL_ALWAYS=1 it raises there in every attempt instead.
"""

import os
import signal
from pathlib import Path

import torch

STEPS, BATCH, FEATURES, LR = 8, 4, 8, 0.1
KILL_RANK = int(os.environ.get("KILL_RANK", "1"))
KILL_AT_STEP = int(os.environ.get("KILL_AT_STEP", "3"))
FAIL_ALWAYS = os.environ.get("FAIL_ALWAYS") == "1"

if "RANK" in os.environ:  # torchrun
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    def allreduce(tensor):  # the sum over the ranks
        dist.all_reduce(tensor)
        return tensor

    def broadcast(tensor):
        dist.broadcast(tensor, 0)
        return tensor
else:
    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    def allreduce(tensor):
        return hvd.allreduce(tensor, op=hvd.Sum)

    def broadcast(tensor):
        return hvd.broadcast(tensor, root_rank=0)


attempt = int(os.environ.get("BYOC_ATTEMPT", "1"))
samples = STEPS * BATCH * size
g = torch.Generator().manual_seed(0)
x = torch.randn(samples, FEATURES, generator=g, dtype=torch.float64)
y = x @ torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)
w_init = 0.1 * torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)


def batch(step: int, r: int) -> torch.Tensor:
    """The samples rank r trains at step: each sample belongs to one step of one rank."""
    start = (step * size + r) * BATCH
    return torch.arange(start, start + BATCH)


def grad(w: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The gradient of the mean squared error of the linear model w over the samples idx."""
    return 2 * x[idx].T @ (x[idx] @ w - y[idx]) / len(idx)


# The checkpoint: [steps done, weights..., times each sample went into them...].
checkpoint = Path(os.environ.get("SM_CHECKPOINT_DIR", "/opt/ml/checkpoints")) / "restart.pt"
state = torch.zeros(1 + FEATURES + samples, dtype=torch.float64)
if rank == 0:
    if checkpoint.exists():
        state = torch.load(checkpoint)
    else:
        state[1 : 1 + FEATURES] = w_init.flatten()
state = broadcast(state)
first = int(state[0].item())
w = state[1 : 1 + FEATURES].clone().view(FEATURES, 1)
counts = state[1 + FEATURES :].clone()
print(f"rank {rank}: attempt {attempt} resumes at step {first}", flush=True)

for step in range(first, STEPS):
    if rank == KILL_RANK and step == KILL_AT_STEP:
        if FAIL_ALWAYS:
            raise RuntimeError(f"deliberate failure on attempt {attempt}")
        if attempt == 1:
            print(f"rank {rank}: killing itself at step {step} of attempt 1", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    idx = batch(step, rank)
    seen = torch.zeros(samples, dtype=torch.float64)
    seen[idx] = 1
    total = allreduce(torch.cat([grad(w, idx).flatten(), seen]))
    w = w - LR * total[:FEATURES].view(FEATURES, 1) / size
    counts = counts + total[FEATURES:]
    if rank == 0:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save(
            torch.cat([torch.tensor([step + 1.0], dtype=torch.float64), w.flatten(), counts]), tmp
        )
        os.replace(tmp, checkpoint)  # atomic: a kill mid-write leaves the previous one

# Every rank's distance from rank 0's weights, summed over the ranks.
apart = allreduce((w - broadcast(w.clone())).abs().max().reshape(1)).item()
if rank == 0:
    replay = w_init.clone()
    for step in range(STEPS):
        replay = replay - LR * sum(grad(replay, batch(step, r)) for r in range(size)) / size
    print(
        f"COVERAGE samples={samples} once={int((counts == 1).sum())} "
        f"missing={int((counts == 0).sum())} twice={int((counts > 1).sum())}",
        flush=True,
    )
    print(f"WEIGHTS max_diff={apart:g} ranks={size}", flush=True)
    print(f"REPLAY max_diff={(replay - w).abs().max().item():g}", flush=True)
print(f"rank {rank}: done", flush=True)
