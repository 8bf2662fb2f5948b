"""Allreduce bus bandwidth per message size, run as every rank of a job:

    horovodrun -np 2 -H a:1,b:1 --gloo python -m byoc.bench.allreduce --lib horovod \
        --compression fp16 --sizes 64K,1M,64M --out hvd.json
    torchrun ... -m byoc.bench.allreduce --lib torch --backend gloo --sizes 64K,1M --out t.json

Per size: --warmup calls (the first pay for buffers and connections; the last one's time sets
how many calls make one repeat of about --min-seconds, rank 0 decides and broadcasts it so every
rank makes the same number of calls), then --repeats timed repeats, each after a barrier.
Rank 0 writes --out (JSON, see document()) and prints one line per size; other ranks write
nothing. Bandwidth is nccl-tests' bus bandwidth (byoc.bench.stats.busbw), in GB/s.

--lib horovod: the controller (gloo or mpi) is whatever horovodrun chose (--gloo / --mpi);
--backend nccl puts the tensors on this rank's GPU (Horovod's NCCL operations), else they stay
on the CPU and go through the controller's own operations. --compression fp16 is Horovod's
(the tensor travels as float16). Horovod reduces in place (`hvd.allreduce_`, compressed
first), as hvd.DistributedOptimizer reduces gradients. --lib torch: torch.distributed with
--backend gloo or nccl, from the env:// variables torchrun sets.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from byoc.bench import stats

LIBS = ("horovod", "torch")
BACKENDS = ("gloo", "nccl")
COMPRESSIONS = ("none", "fp16")


class BenchError(RuntimeError):
    """This rank cannot run the benchmark as asked; says why."""


# --- pure parts --------------------------------------------------------------------------------


def iters_for(seconds_per_call: float, min_seconds: float, max_iters: int) -> int:
    """Calls per repeat so that a repeat takes about min_seconds, from 1 to max_iters. A call
    that took no measurable time (or a nonsense one) gets the most calls."""
    if not math.isfinite(seconds_per_call) or seconds_per_call <= 0:
        return max_iters
    return max(1, min(max_iters, math.ceil(min_seconds / seconds_per_call)))


def label(doc: dict) -> str:
    """A line's name: "Horovod gloo fp32", "Horovod mpi fp16", "Horovod nccl fp32 (gloo)"
    (GPU tensors over NCCL, gloo coordinating), "torch gloo", "torch nccl"."""
    if doc.get("lib") == "horovod":
        dtype = "fp16" if doc.get("compression") == "fp16" else "fp32"
        controller = doc.get("controller") or "?"
        if doc.get("backend") == "nccl":
            return f"Horovod nccl {dtype} ({controller})"
        return f"Horovod {controller} {dtype}"
    return f"torch {doc.get('backend') or '?'}"


def _tag(doc: dict) -> str:
    """The progress lines' short name: horovod/gloo fp32, horovod/mpi nccl fp16, torch/gloo."""
    if doc["lib"] == "horovod":
        dtype = "fp16" if doc["compression"] == "fp16" else "fp32"
        nccl = " nccl" if doc["backend"] == "nccl" else ""
        return f"horovod/{doc['controller']}{nccl} {dtype}"
    return f"torch/{doc['backend']}"


def _sizes(text: str) -> list[int]:
    try:
        return stats.parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, checked (exit 2 with a message) before torch is imported."""
    p = argparse.ArgumentParser(
        prog="python -m byoc.bench.allreduce", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--lib", required=True, choices=LIBS)
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="torch: the process group's backend (default gloo); horovod: nccl for GPU tensors, "
        "else CPU tensors through the controller",
    )
    p.add_argument("--compression", choices=COMPRESSIONS, default="none", help="horovod only")
    p.add_argument(
        "--sizes",
        required=True,
        type=_sizes,
        help="message sizes, e.g. 64K,1M,256M (K/M/G: KiB/MiB/GiB; multiples of 4 bytes, "
        "at most 1 GiB each, 32 sizes)",
    )
    p.add_argument("--repeats", type=stats.bounded(int, 1, 100), default=5)
    p.add_argument("--min-seconds", type=stats.bounded(float, 0.001, 60), default=0.2)
    p.add_argument("--max-iters", type=stats.bounded(int, 1, 100000), default=1000)
    p.add_argument("--warmup", type=stats.bounded(int, 1, 100), default=2)
    p.add_argument("--out", required=True, type=Path, help="the JSON document (rank 0 writes it)")
    args = p.parse_args(argv)
    if args.lib == "torch" and args.compression != "none":
        p.error("--compression fp16 is Horovod's: torch.distributed's all_reduce has none")
    return args


# --- the measurement ---------------------------------------------------------------------------


def measure(
    comm,
    sizes: list[int],
    repeats: int,
    min_seconds: float,
    max_iters: int,
    warmup: int,
    say: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[dict]:
    """One result per size (see document()); `comm` is a HorovodComm or a TorchComm (or any
    object with their methods). Every rank runs this; say() gets rank 0's progress lines."""
    results = []
    for nbytes in sizes:
        t = comm.tensor(nbytes)
        per_call = 0.0
        for _ in range(warmup):
            t0 = clock()
            comm.allreduce(t)
            comm.sync()
            per_call = clock() - t0  # the last warmup call: connections and buffers are set up
        # Every rank must make the same number of calls, else the job hangs: rank 0's count.
        iters = comm.broadcast_int(iters_for(per_call, min_seconds, max_iters))
        busbw, seconds = [], []
        for _ in range(repeats):
            comm.barrier()  # all ranks start together: no rank's time includes waiting for one
            t0 = clock()
            for _ in range(iters):
                comm.allreduce(t)
            comm.sync()  # NCCL returns before the GPU is done
            dt = max((clock() - t0) / iters, 1e-12)
            seconds.append(dt)
            busbw.append(stats.busbw(nbytes, dt, comm.size))
        del t
        result = {
            "bytes": nbytes,
            "iters": iters,
            "busbw_gbps": busbw,
            "seconds": seconds,
            "summary": stats.summary(busbw),
        }
        results.append(result)
        if comm.rank == 0 and say is not None:
            s = result["summary"]
            say(
                f"{stats.human(nbytes)}: median {s['median']:.2f} GB/s "
                f"(min {s['min']:.2f}, max {s['max']:.2f})"
            )
    return results


def document(comm, compression: str, hosts: list[str], results: list[dict]) -> dict:
    """What rank 0 writes:

    {"lib": "horovod"|"torch", "controller": "gloo"|"mpi"|null (torch), "backend":
    "gloo"|"nccl"|null (Horovod on CPU tensors: the controller's own operations), "compression":
    "none"|"fp16", "world_size": N, "hosts": [distinct host names, sorted], "results":
    [{"bytes", "iters", "busbw_gbps": [per repeat], "seconds": [per call, per repeat],
    "summary": {min, median, max, n} of busbw_gbps}], and for Horovod "horovod": {"version",
    "gloo_built", "mpi_built", "nccl_built", "gloo_enabled", "mpi_enabled"}}
    """
    doc = {
        "lib": comm.lib,
        "controller": comm.controller,
        "backend": comm.backend,
        "compression": compression,
        "world_size": comm.size,
        "hosts": hosts,
        "results": results,
    }
    doc.update(comm.extra)
    return doc


class HorovodComm:
    lib = "horovod"

    def __init__(self, backend: str | None, compression: str):
        import horovod
        import horovod.torch as hvd
        import torch

        hvd.init()
        self.hvd, self.torch = hvd, torch
        self.rank, self.size = hvd.rank(), hvd.size()
        # horovodrun --gloo sets the rendezvous address for every rank; under --mpi it is unset.
        gloo = bool(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")) or hvd.gloo_enabled()
        self.controller = "gloo" if gloo else "mpi"
        self.backend = None
        self.device = torch.device("cpu")
        self.cuda = False
        if backend == "nccl":
            if not torch.cuda.is_available():
                raise BenchError("--backend nccl: torch sees no CUDA device on this host")
            if not hvd.nccl_built():
                raise BenchError("--backend nccl: this Horovod was built without NCCL")
            torch.cuda.set_device(hvd.local_rank())
            self.device = torch.device("cuda", hvd.local_rank())
            self.backend, self.cuda = "nccl", True
        self.compression = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
        self.extra = {
            "horovod": {
                "version": getattr(horovod, "__version__", None),
                "gloo_built": bool(hvd.gloo_built()),
                "mpi_built": bool(hvd.mpi_built()),
                "nccl_built": bool(hvd.nccl_built()),
                "gloo_enabled": bool(hvd.gloo_enabled()),
                "mpi_enabled": bool(hvd.mpi_enabled()),
            }
        }
        self._one = torch.zeros(1, device=self.device)

    def tensor(self, nbytes: int):
        # Zeros: a sum of zeros stays zero, so no repeat runs into inf (fp16 overflows at 65504).
        return self.torch.zeros(nbytes // 4, dtype=self.torch.float32, device=self.device)

    def allreduce(self, t) -> None:
        # In place, compressed first, as hvd.DistributedOptimizer reduces gradients (and as
        # torch's all_reduce works). hvd.allreduce (out of place) returns a fresh tensor each
        # call, and at 64 MiB the page faults of that new buffer cost a third of the speed
        # (0.68 vs 1.07 GB/s here): that is the allocator, not the wire. allreduce_ (not
        # _async) returns when the operation is done: each call is timed whole.
        wire, ctx = self.compression.compress(t)
        self.hvd.allreduce_(wire, op=self.hvd.Sum)
        if wire is not t:  # fp16: the optimizer points the gradient at the result (set_)
            t.set_(self.compression.decompress(wire, ctx))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def barrier(self) -> None:
        self.hvd.allreduce(self._one, op=self.hvd.Sum)

    def broadcast_int(self, value: int) -> int:
        t = self.torch.tensor([value], dtype=self.torch.int64)
        return int(self.hvd.broadcast(t, root_rank=0).item())

    def hostnames(self) -> list[str]:
        return list(self.hvd.allgather_object(socket.gethostname()))

    def close(self) -> None:
        self.hvd.shutdown()


class TorchComm:
    lib = "torch"
    controller = None
    extra: dict = {}

    def __init__(self, backend: str | None):
        import datetime

        import torch
        import torch.distributed as dist

        missing = [
            v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
        ]
        if missing:
            raise BenchError(f"--lib torch runs under torchrun: {', '.join(missing)} not set")
        self.torch, self.dist = torch, dist
        self.backend = backend or "gloo"
        self.device = torch.device("cpu")
        self.cuda = self.backend == "nccl"
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.cuda:
            if not torch.cuda.is_available():
                raise BenchError("--backend nccl: torch sees no CUDA device on this host")
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        # A bound on each collective: a lost peer fails the run instead of hanging it.
        dist.init_process_group(self.backend, timeout=datetime.timedelta(minutes=5))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def tensor(self, nbytes: int):
        # Zeros: all_reduce sums in place, and a sum of zeros never grows into inf.
        return self.torch.zeros(nbytes // 4, dtype=self.torch.float32, device=self.device)

    def allreduce(self, t) -> None:
        self.dist.all_reduce(t)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def barrier(self) -> None:
        if self.cuda:
            self.dist.barrier(device_ids=[self.local_rank])
        else:
            self.dist.barrier()

    def broadcast_int(self, value: int) -> int:
        t = self.torch.tensor([value], dtype=self.torch.int64, device=self.device)
        self.dist.broadcast(t, src=0)
        return int(t.item())

    def hostnames(self) -> list[str]:
        out: list = [None] * self.size
        self.dist.all_gather_object(out, socket.gethostname())
        return out

    def close(self) -> None:
        self.dist.destroy_process_group()


def write_json(path: Path, doc: dict) -> None:
    """Whole or not at all: a reader never sees half a document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # before any torch import: bad options fail in a blink, exit 2
    try:
        if args.lib == "horovod":
            comm = HorovodComm(args.backend, args.compression)
        else:
            comm = TorchComm(args.backend)
    except BenchError as exc:
        print(f"byoc.bench.allreduce: {exc}", file=sys.stderr, flush=True)
        return 1
    hosts = sorted(set(comm.hostnames()))
    head = document(comm, args.compression, hosts, [])
    prefix = f"allreduce {_tag(head)}"
    results = measure(
        comm,
        args.sizes,
        args.repeats,
        args.min_seconds,
        args.max_iters,
        args.warmup,
        say=lambda line: print(f"{prefix} {line}", flush=True),
    )
    if comm.rank == 0:
        write_json(args.out, document(comm, args.compression, hosts, results))
    comm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
