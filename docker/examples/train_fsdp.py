"""Example FSDP2 training (fully_shard) with sharded checkpoints (torch.distributed.checkpoint).

The task of train_ddp.py (same model, data, options but --amp, and printed lines, from
synthetic_task.py beside it), with each Linear layer and then the whole model sharded over the
ranks by `fully_shard`: each rank holds 1/world of every parameter, gradient and optimizer
state, and gathers a layer's parameters only while it runs. NCCL on GPUs, Gloo on CPUs.

Checkpoints are DCP's: every rank writes its own shards of the model and optimizer (and rank 0
the metadata) into SM_CHECKPOINT_DIR/fsdp/epoch-NNNNN/ at the end of each epoch, no rank ever
holding the whole state; the two newest are kept. At start, the newest one every rank sees
whole (DCP's metadata and every file it names) is loaded back into the sharded model and
optimizer, and training resumes after its epoch; a different world size reshards on load. Every
rank reads the checkpoint, so its directory must be the same on every host: on SageMaker, pass
checkpoint_s3_uri (SageMaker copies what every host wrote to S3 and back to every host when a
job starts); on Kubernetes or Slurm, a shared volume. When checkpoints exist but none is whole
on every rank, the job stops with a message saying so. The final model is gathered once into a
plain state_dict (the keys of the unwrapped module, as the other examples write) and saved by
rank 0 in SM_MODEL_DIR.

Run it with torchrun (`torchrun --nproc-per-node 2 train_fsdp.py --epochs 2`); in the image,
`train` runs it with `sagemaker_program=/opt/byoc/examples/train_fsdp.py` and torch_distributed.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import synthetic_task as task
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler

KEEP = 2  # checkpoints kept


class TrainState(Stateful):
    """What a checkpoint holds: the sharded model and optimizer, and the epoch they finished.
    DCP calls state_dict() to save and load_state_dict() to load (get_state_dict/set_state_dict
    turn FSDP2's DTensor shards into savable tensors and back)."""

    def __init__(self, model, optimizer, epoch: int = -1) -> None:
        self.model, self.optimizer, self.epoch = model, optimizer, epoch

    def state_dict(self) -> dict:
        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optimizer": optimizer, "epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
        self.epoch = int(state["epoch"])


def epoch_dir(root: Path, epoch: int) -> Path:
    return root / f"epoch-{epoch:05d}"


def saved_epochs(root: Path) -> list[int]:
    """The epochs with a checkpoint directory under root, newest first."""
    names = (d.name.removeprefix("epoch-") for d in root.glob("epoch-*"))
    return sorted((int(n) for n in names if n.isdigit()), reverse=True)


def complete(root: Path, epoch: int) -> bool:
    """Whether this rank sees all of epoch's checkpoint: DCP's metadata and every file it names
    (a rank may read any shard: a different world size reshards)."""
    where = epoch_dir(root, epoch)
    try:
        metadata = dcp.FileSystemReader(str(where)).read_metadata()
    except Exception:  # noqa: BLE001 - missing, torn or unreadable: not complete
        return False
    files = {info.relative_path for info in metadata.storage_data.values()}
    return all((where / name).is_file() for name in files)


def resume_epoch(root: Path, rank: int, device: torch.device) -> int:
    """The newest epoch whose checkpoint every rank sees whole (-1: none was saved). Rank 0's
    list is tried in order; every rank takes part in each check, so all stop or none."""
    listed = [saved_epochs(root) if rank == 0 else None]
    dist.broadcast_object_list(listed, src=0, device=device)
    for epoch in listed[0]:
        missing = torch.tensor([0 if complete(root, epoch) else 1], device=device)
        dist.all_reduce(missing)
        if missing.item() == 0:
            return epoch
        if rank == 0:
            print(f"{epoch_dir(root, epoch)} is incomplete on {missing.item()} rank(s)", flush=True)
    if listed[0]:
        raise SystemExit(
            f"train_fsdp.py: no checkpoint under {root} is complete on every rank (rank {rank} on "
            f"{os.uname().nodename} sees {[e for e in listed[0] if complete(root, e)] or 'none'} "
            "whole): sharded checkpoints need the same checkpoint directory on every host "
            "(SageMaker: checkpoint_s3_uri; elsewhere a shared volume)"
        )
    return -1


def prune(root: Path, newest: int) -> None:
    """Each host's first rank removes the checkpoints older than the KEEP newest."""
    for d in root.glob("epoch-*"):
        number = d.name.removeprefix("epoch-")
        if number.isdigit() and int(number) <= newest - KEEP:
            shutil.rmtree(d, ignore_errors=True)


@record
def main() -> None:
    args = task.parser(__doc__.splitlines()[0]).parse_args()
    task.world_of_one_unless_launched()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = task.pick_device(local_rank)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial weights on every rank, before sharding

    dataset = task.make_data(args)
    sampler = DistributedSampler(
        dataset, num_replicas=size, rank=rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = task.make_model(args).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)  # its own unit: gathered only while it runs
    fully_shard(model)
    # After sharding: the optimizer keeps state for this rank's shards only.
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)

    root = Path(args.checkpoint_dir) / "fsdp"
    state = TrainState(model, optimizer)
    found = resume_epoch(root, rank, device)
    if found >= 0:
        dcp.load({"train": state}, checkpoint_id=str(epoch_dir(root, found)))
        if rank == 0:
            print(f"resumed from {epoch_dir(root, found)} at epoch {found + 1}", flush=True)
    start_epoch = found + 1
    net = task.compiled(args, model, rank)
    loss_fn = torch.nn.MSELoss()
    task.print_start(rank, size, local_rank, device)

    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        net.train()
        start, seen, total = time.perf_counter(), 0, 0.0
        for step, (xb, yb) in enumerate(loader):
            t0 = time.perf_counter()
            x, y = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()  # FSDP reduce-scatters each layer's gradients to their shards here
            optimizer.step()
            seen += len(x)
            total += loss.item() * len(x)
            first = step == 0 and epoch == start_epoch
            task.after_step(args, rank, first, time.perf_counter() - t0)
        loss_avg, rate = task.dist_epoch_stats(total, seen, start, device)
        state.epoch = epoch
        dcp.save({"train": state}, checkpoint_id=str(epoch_dir(root, epoch)))  # every rank
        if rank == 0:
            task.print_epoch(epoch, loss_avg, rate)
        if local_rank == 0:
            prune(root, epoch)
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)

    # Every rank takes part in gathering the full weights; rank 0 alone keeps them.
    full = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if rank == 0:
        path = Path(args.model_dir) / "model.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(full, path)
        print(f"saved {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
    task.exit_after_success()  # no interpreter teardown: see its docstring (pytorch#190489)
