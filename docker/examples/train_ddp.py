"""Example PyTorch DDP training on generated data (the Horovod example's task, torch.distributed).

The same small MLP and the same generated data as train_synthetic.py, with what both share in
synthetic_task.py beside it. Shows what a real DDP script needs: env:// initialisation (torchrun
sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK), NCCL on GPUs and Gloo on CPUs,
one device per process, DistributedSampler sharding with set_epoch, LR scaled by the world size,
optional AMP (CUDA) and torch.compile (--compile true), logs and checkpoints on rank 0 only, a
checkpoint every epoch in SM_CHECKPOINT_DIR (/opt/ml/checkpoints) and resume from it at start
(rank 0 reads it and broadcasts it, as in a multi-host job only rank 0's host has it), the final
model in SM_MODEL_DIR, and an exit that skips the interpreter's teardown, where a torch bug can
abort a rank that has finished (synthetic_task.exit_after_success; `train` runs every torchrun
program through byoc.clean_exit for the same reason).

Run it with torchrun, e.g. `torchrun --nproc-per-node 2 train_ddp.py --epochs 1`; in the image,
`train` runs it for SageMaker's torch_distributed. A plain `python train_ddp.py` runs one process.
Under elastic torchrun (`--nnodes MIN:MAX`, docs/elastic.md) a lost or added node restarts every
process, which resume from the last checkpoint; --pg-timeout bounds how long the survivors of a
lost node wait in a collective before they fail and torchrun restarts them.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from pathlib import Path

import synthetic_task as task
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler


def parse_args() -> argparse.Namespace:
    p = task.parser(__doc__.splitlines()[0])
    p.add_argument(
        "--pg-timeout",
        "--pg_timeout",
        type=float,
        default=0.0,
        help="seconds a collective waits for its peers before it fails (0: torch's default, "
        "30 min with Gloo, 10 min with NCCL); above the slowest step, below the wait you "
        "accept after a node dies",
    )
    args = p.parse_args()
    if args.pg_timeout < 0:
        p.error("--pg-timeout must be 0 (torch's default) or more seconds")
    return args


@record  # torchrun's failure summary then shows a rank's exception, not only its exit code
def main() -> None:
    args = parse_args()
    slurm = [os.environ.get(n, "") for n in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS")]
    if "WORLD_SIZE" not in os.environ and all(slurm):
        # `srun python train_ddp.py`, a task per GPU and no torchrun: the step's variables, and
        # the first node's address from the batch script (docs/slurm.md).
        if not os.environ.get("MASTER_ADDR"):
            raise SystemExit(
                "train_ddp.py: started by srun without torchrun: export MASTER_ADDR (the "
                "first node: scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) first"
            )
        os.environ.update(
            RANK=slurm[0], WORLD_SIZE=slurm[1], LOCAL_RANK=os.environ.get("SLURM_LOCALID", "0")
        )
        os.environ.setdefault("MASTER_PORT", "29500")
    else:
        task.world_of_one_unless_launched()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = task.pick_device(local_rank)
    use_cuda = device.type == "cuda"
    timeout = {"timeout": timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", **timeout)  # env://
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    dataset = task.make_data(args)
    sampler = DistributedSampler(
        dataset, num_replicas=size, rank=rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = task.make_model(args).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)

    # Rank 0 reads the checkpoint (only its host has it in a multi-host job) and sends it, with
    # its tensors on the CPU, to every rank; each loads it before DDP wraps the model.
    checkpoint = Path(args.checkpoint_dir) / "checkpoint.pt"
    state = [task.load_checkpoint(checkpoint) if rank == 0 else None]
    dist.broadcast_object_list(state, src=0, device=device)
    start_epoch = task.restore(state[0], model, optimizer)
    del state
    restarts = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restarts is not None and rank == 0:  # torchrun's try: 0 first, +1 on each restart
        print(f"TORCHRUN restart={restarts} size={size} epoch={start_epoch}", flush=True)

    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    net = task.compiled(args, ddp, rank)  # --compile: DDP's hooks stay on the parameters
    amp = args.amp and use_cuda
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    loss_fn = torch.nn.MSELoss()
    task.print_start(rank, size, local_rank, device)

    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        net.train()
        start, seen, total = time.perf_counter(), 0, 0.0
        for step, (xb, yb) in enumerate(loader):
            t0 = time.perf_counter()
            x, y = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            optimizer.zero_grad()
            with torch.autocast(device.type, enabled=amp):
                loss = loss_fn(net(x), y)
            scaler.scale(loss).backward()  # DDP averages the gradients over ranks here
            scaler.step(optimizer)
            scaler.update()
            seen += len(x)
            total += loss.item() * len(x)
            first = step == 0 and epoch == start_epoch
            task.after_step(args, rank, first, time.perf_counter() - t0)
        loss_avg, rate = task.dist_epoch_stats(total, seen, start, device)
        if rank == 0:
            task.print_epoch(epoch, loss_avg, rate)
            task.save_checkpoint(checkpoint, model, optimizer, epoch)
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)

    if rank == 0:
        task.save_model(args.model_dir, model)  # the plain module: keys without "module."
    dist.barrier(device_ids=[local_rank] if use_cuda else None)
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
    task.exit_after_success()  # no interpreter teardown: see its docstring (pytorch#190489)
