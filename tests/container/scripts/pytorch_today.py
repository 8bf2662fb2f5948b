"""What a PyTorch user writes on day one, each case on the CPU, in the image under test.

`python pytorch_today.py [CASE...]` runs the named cases (all by default), each isolated: one
line `CASE <name> ok <detail>` or `CASE <name> FAIL <error>` (then its traceback), exit 0 either
way; the container tests read the lines. Cases that start processes of their own (horovodrun,
torchrun) run this script again with `--worker CASE`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

HERE = Path(__file__).resolve()


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4), torch.nn.LogSoftmax(-1)
    )


def case_compile() -> str:
    """torch.compile on the CPU: inductor's C++ backend (g++, Python.h), forward and backward,
    the same numbers as eager."""
    x = torch.randn(8, 16)
    eager_model, model = small_model(), small_model()
    eager = eager_model(x)
    eager.sum().backward()
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    out = compiled(x)
    out.sum().backward()
    took = time.perf_counter() - t0
    torch.testing.assert_close(out, eager, rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    return f"first call (compile) {took:.1f} s"


def case_cpp_extension() -> str:
    """torch.utils.cpp_extension.load_inline: ninja drives g++ against torch's headers."""
    from torch.utils.cpp_extension import load_inline

    source = "torch::Tensor twice_plus_one(torch::Tensor x) { return x * 2 + 1; }"
    with tempfile.TemporaryDirectory() as build:
        ext = load_inline(
            name="byoc_day_one_ext",
            cpp_sources=[source],
            functions=["twice_plus_one"],
            build_directory=build,
            verbose=False,
        )
        result = ext.twice_plus_one(torch.arange(4.0))
    torch.testing.assert_close(result, torch.tensor([1.0, 3.0, 5.0, 7.0]))
    return "built and ran"


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i * i), float(os.getpid())])


def case_dataloader_workers() -> str:
    """A DataLoader with 2 worker processes (shared memory between them and the trainer)."""
    loader = torch.utils.data.DataLoader(Squares(), batch_size=8, num_workers=2)
    batches = list(loader)
    values = torch.cat([b[:, 0] for b in batches])
    assert sorted(values.tolist()) == [float(i * i) for i in range(64)]
    pids = {int(p) for b in batches for p in b[:, 1].tolist()}
    assert len(pids) == 2 and os.getpid() not in pids, pids
    return "64 items from 2 workers"


def case_bf16_autocast() -> str:
    """bf16 autocast on the CPU."""
    model, x = small_model(), torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model[0](x)
    assert hidden.dtype == torch.bfloat16, hidden.dtype
    return "Linear ran in bfloat16"


def case_torchvision() -> str:
    """torchvision: JPEG encode/decode (io), transforms v2, a model from torchvision.models."""
    import torchvision
    from torchvision.io import decode_jpeg, encode_jpeg
    from torchvision.transforms import v2

    image = torch.randint(0, 256, (3, 64, 48), dtype=torch.uint8)
    decoded = decode_jpeg(encode_jpeg(image, quality=95))
    assert decoded.shape == image.shape
    transform = v2.Compose(
        [v2.RandomResizedCrop(32, antialias=True), v2.ToDtype(torch.float32, scale=True)]
    )
    batch = torch.stack([transform(decoded) for _ in range(2)])
    logits = torchvision.models.resnet18(weights=None, num_classes=10).eval()(batch)
    assert logits.shape == (2, 10)
    return f"torchvision {torchvision.__version__}"


def case_dcp() -> str:
    """torch.distributed.checkpoint: save and load a model's and optimizer's state (one process)."""
    import torch.distributed.checkpoint as dcp

    def trained(steps: int):
        model = small_model()
        optimizer = torch.optim.AdamW(model.parameters())
        for _ in range(steps):
            model(torch.randn(4, 16)).sum().backward()
            optimizer.step()
        return model, optimizer

    model, optimizer = trained(2)
    with tempfile.TemporaryDirectory() as where:
        dcp.save(
            {"model": model.state_dict(), "optim": optimizer.state_dict()}, checkpoint_id=where
        )
        fresh, fresh_optimizer = trained(1)  # other weights, other optimizer state
        state = {"model": fresh.state_dict(), "optim": fresh_optimizer.state_dict()}
        dcp.load(state, checkpoint_id=where)
        fresh.load_state_dict(state["model"])
        fresh_optimizer.load_state_dict(state["optim"])
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    saved, loaded = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys()
    for key in saved:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(saved[key][name], loaded[key][name])
    return "model and optimizer round trip equal"


def run_workers(command: list[str], what: str) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise RuntimeError(f"{what} exited {out.returncode}:\n{text[-4000:]}")
    return text


def case_horovod_compile() -> str:
    """torch.compile on a model trained by Horovod's DistributedOptimizer, horovodrun -np 2."""
    text = run_workers(
        ["horovodrun", "-np", "2", "-H", "localhost:2", sys.executable, str(HERE), "--worker",
         "horovod_compile"],
        "horovodrun",
    )  # fmt: skip
    # Ranks' lines can interleave in the output: find the values, not the lines.
    weights = dict(re.findall(r"WORKER horovod_compile rank (\d) weights (-?[\d.]+)", text))
    assert sorted(weights) == ["0", "1"], text[-4000:]
    assert len(set(weights.values())) == 1, weights  # equal on both ranks
    return "2 ranks, equal weights after 3 compiled steps"


def worker_horovod_compile() -> None:
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    model = small_model()
    net = torch.compile(model)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(hvd.rank())  # different data on each rank: the allreduce matters
    for _ in range(3):
        optimizer.zero_grad()
        net(torch.randn(8, 16)).sum().backward()
        optimizer.step()
    total = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"WORKER horovod_compile rank {hvd.rank()} weights {total:.10f}", flush=True)


def case_fsdp2() -> str:
    """FSDP2 (fully_shard) on 2 processes with torchrun and Gloo: each rank holds half of each
    parameter, and the gathered weights after 2 AdamW steps equal one process's training on both
    ranks' data with their gradients averaged (what FSDP's reduce-scatter computes)."""
    text = run_workers(
        ["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "byoc.clean_exit", str(HERE),
         "--worker", "fsdp2"],
        "torchrun",
    )  # fmt: skip
    ok = re.findall(r"WORKER fsdp2 rank (\d) matches the reference", text)
    assert sorted(ok) == ["0", "1"], text[-4000:]
    return "2 ranks, each holding half of each parameter, weights as a reference run's"


def fsdp2_batches(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(8, 16, generator=generator) for _ in range(2)]


def worker_fsdp2() -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, size = dist.get_rank(), dist.get_world_size()
    model = small_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    local = model[0].weight.to_local()
    assert local.shape[0] == 32 // size, local.shape
    optimizer = torch.optim.AdamW(model.parameters())
    for x in fsdp2_batches(rank):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))

    reference = small_model()  # the same initial weights (seeded), every rank's data
    ref_optimizer = torch.optim.AdamW(reference.parameters())
    for step in range(2):
        ref_optimizer.zero_grad()
        loss = sum(reference(fsdp2_batches(r)[step]).sum() for r in range(size)) / size
        loss.backward()
        ref_optimizer.step()
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(full[name], tensor, rtol=1e-4, atol=1e-5)
    print(f"WORKER fsdp2 rank {rank} matches the reference", flush=True)
    dist.destroy_process_group()


CASES = {name.removeprefix("case_"): f for name, f in globals().items() if name.startswith("case_")}
WORKERS = {"horovod_compile": worker_horovod_compile, "fsdp2": worker_fsdp2}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        WORKERS[argv[1]]()
        return 0
    torch.set_num_threads(2)
    for name in argv or list(CASES):
        try:
            print(f"CASE {name} ok {CASES[name]()}", flush=True)
        except Exception as exc:  # noqa: BLE001 - each case reports, the others still run
            first = (str(exc).splitlines() or [""])[0]
            print(f"CASE {name} FAIL {type(exc).__name__}: {first}", flush=True)
            traceback.print_exc(file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
