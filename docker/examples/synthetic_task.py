"""What the example training scripts share: options, data, model, checkpoints, printed lines.

The examples beside it (train_synthetic.py and train_elastic.py with Horovod, train_ddp.py and
train_fsdp.py with torch.distributed) import it from their own directory, which is first on
sys.path when a script runs (`python train_x.py`, horovodrun, torchrun, and `train`'s
byoc.clean_exit alike). They train the same model on the same generated data, the first three
write checkpoints of the same format (the plain module's state_dict, the optimizer's, the
epoch), and all print the same lines, which the container tests grep.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

import torch
from torch.utils.data import TensorDataset


def str2bool(value: str) -> bool:
    # SageMaker passes booleans as True/False strings: argparse's type=bool would take "False".
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {value!r}")


def parser(description: str) -> argparse.ArgumentParser:
    """The options both scripts take, in both spellings (SageMaker passes --key value as given)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", "--batch_size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01, help="per-process LR (scaled by size)")
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--amp", type=str2bool, default=False)
    p.add_argument(
        "--compile",
        type=str2bool,
        default=False,
        help="train through torch.compile(model) (inductor: C++ on CPUs, Triton on GPUs); "
        "checkpoints and the model stay the plain module's",
    )
    p.add_argument(
        "--epoch-sleep",
        "--epoch_sleep",
        type=float,
        default=0.0,
        help="seconds to sleep per epoch (tests use it to stop a job mid-training)",
    )
    p.add_argument(
        "--fail-on-rank",
        "--fail_on_rank",
        type=int,
        default=-1,
        help="raise on this rank after the first step (tests of failure handling)",
    )
    p.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    p.add_argument(
        "--checkpoint-dir", default=os.environ.get("SM_CHECKPOINT_DIR", "/opt/ml/checkpoints")
    )
    return p


def world_of_one_unless_launched() -> None:
    """`python train_x.py` without torchrun (no WORLD_SIZE): env:// for a world of one."""
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")


def pick_device(local_rank: int) -> torch.device:
    """This process's device: its local rank's GPU, made current before the first collective
    (NCCL: one GPU per process), else the CPU with one thread (ranks share the host's cores)."""
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    torch.set_num_threads(1)
    return torch.device("cpu")


def make_data(args: argparse.Namespace) -> TensorDataset:
    """A fixed random linear map with noise: the same data for a seed, on every rank."""
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=g)
    w = torch.randn(args.features, 1, generator=g)
    y = x @ w + 0.01 * torch.randn(args.samples, 1, generator=g)
    return TensorDataset(x, y)


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 1),
    )


def compiled(args: argparse.Namespace, model: torch.nn.Module, rank: int) -> torch.nn.Module:
    """What the training loop calls: torch.compile(model) with --compile, else model itself.
    The compiled module shares model's parameters (model may be a DDP or FSDP wrapper), so an
    optimizer or a Horovod DistributedOptimizer built on model's parameters trains both, and
    model's state_dict
    keeps its plain keys (the compiled one's have an "_orig_mod." prefix). Compiling happens at
    the first step, which takes longer (each rank prints how long)."""
    if not args.compile:
        return model
    if rank == 0:
        print("compiling the model with torch.compile (at the first step)", flush=True)
    return torch.compile(model)


def print_start(rank: int, size: int, local_rank: int, device: torch.device) -> None:
    print(
        f"rank {rank}/{size} local_rank {local_rank} on {os.uname().nodename} "
        f"host {os.environ.get('SM_CURRENT_HOST', '?')} device {device}",
        flush=True,
    )


def after_step(args: argparse.Namespace, rank: int, first: bool, took: float | None = None) -> None:
    """The per-step test hooks: the first-step line (with its time where given: compiling
    happens there), then --fail-on-rank."""
    if first:
        timing = "" if took is None else f" in {took:.1f} s"
        print(f"rank {rank}: first step done{timing}", flush=True)
    if rank == args.fail_on_rank:
        raise RuntimeError(f"deliberate failure on rank {rank} (--fail-on-rank)")


def dist_epoch_stats(total: float, seen: int, start: float, device) -> tuple[float, float]:
    """This epoch's loss averaged over the torch.distributed ranks and their samples/s summed
    (one all_reduce of sums: Gloo has no ReduceOp.AVG)."""
    import torch.distributed as dist

    stats = torch.tensor(
        [total / max(seen, 1), seen / (time.perf_counter() - start)],
        dtype=torch.float64,
        device=device,
    )
    dist.all_reduce(stats)
    return stats[0].item() / dist.get_world_size(), stats[1].item()


def print_epoch(epoch: int, loss: float, samples_per_s: float) -> None:
    """The per-epoch JSON line (rank 0): loss averaged over ranks, samples/s summed."""
    print(
        json.dumps(
            {"epoch": epoch, "loss": round(loss, 6), "samples_per_s": round(samples_per_s, 1)}
        ),
        flush=True,
    )


def save_checkpoint(path: Path, model, optimizer, epoch: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp
    )
    os.replace(tmp, path)  # atomic: a stop mid-write never leaves a torn checkpoint


def load_checkpoint(path: Path) -> dict | None:
    """The checkpoint at path with its tensors on the CPU, or None; says it resumes from it."""
    if not path.exists():
        return None
    state = torch.load(path, map_location="cpu")
    print(f"resumed from {path} at epoch {state['epoch'] + 1}", flush=True)
    return state


def restore(state: dict | None, model, optimizer) -> int:
    """Loads a checkpoint from load_checkpoint into model and optimizer: the epoch to start at."""
    if state is None:
        return 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"] + 1


def save_model(model_dir: str, model) -> None:
    path = Path(model_dir) / "model.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    print(f"saved {path}", flush=True)


def exit_after_success() -> NoReturn:
    """End a torch.distributed worker that finished its work: flush stdout and stderr, then
    leave with 0 without Python's interpreter teardown.

    Why: DDP keeps its process group, and with it the Gloo (or NCCL) worker threads, alive past
    destroy_process_group(). When such a thread drops the last reference to a tensor of a
    finished collective while the interpreter is being torn down, it takes the GIL, Python (up
    to 3.13) ends the thread, and the C++ unwind aborts the process ("terminate called without
    an active exception", SIGABRT; SIGSEGV too with torch 2.15) after training succeeded:
    torchrun then reports the rank as failed and the other agents wait out their exit barrier.
    Without this call it hit 8 of 80 two-node CPU runs of train_ddp.py here; upstream:
    https://github.com/pytorch/pytorch/issues/190489. Nothing runs after this, so everything
    that must reach the disk (checkpoints, the model) is written before.
    """
    for stream in (sys.stdout, sys.stderr):
        # A closed stream or a reader gone must not turn the finished run into a failure.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(0)
