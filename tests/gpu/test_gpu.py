"""GPU checks of the gpu image (make test-gpu on a host with NVIDIA GPUs and the NVIDIA
container toolkit). Skipped, with the reason, where no GPU is visible."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import hostkit.docker
from hostkit import horovod_suites

pytestmark = pytest.mark.gpu
IMAGE = os.environ.get("BYOC_IMAGE", "pytorch-horovod:gpu")


def _gpus() -> int:
    if not shutil.which("nvidia-smi"):
        return 0
    result = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return len([line for line in result.stdout.splitlines() if line.startswith("GPU ")])


@pytest.fixture(scope="module")
def gpus():
    n = _gpus()
    if n == 0:
        pytest.skip(
            "no NVIDIA GPU visible on this host (nvidia-smi -L lists none): run "
            "`make test-gpu` on a GPU host with the NVIDIA container toolkit"
        )
    return n


def docker_run(
    *command: str, timeout: float = 600, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *hostkit.docker.command(),
            "run",
            "--rm",
            "--gpus",
            "all",
            "--shm-size=8g",
            "--ulimit",
            "memlock=-1",
            *flags,
            IMAGE,
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_nccl_tests_all_reduce_on_every_gpu(gpus):
    result = docker_run(
        "bash",
        "-c",
        "if [ -e /opt/nccl-tests/NOT-BUILT ]; then cat /opt/nccl-tests/NOT-BUILT; exit 3; fi; "
        f"exec all_reduce_perf -b 8 -e 128M -f 2 -c 1 -g {gpus}",
    )
    out = result.stdout + result.stderr
    if result.returncode == 3:
        pytest.skip(f"the image has no nccl-tests: {out.strip()}")
    assert result.returncode == 0, out
    assert re.search(r"Out of bounds values\s*:\s*0 OK", out), out


def test_horovod_allreduce_of_cuda_tensors_on_every_gpu(gpus):
    script = (
        "import torch, horovod.torch as hvd; hvd.init(); torch.cuda.set_device(hvd.local_rank());"
        "t = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1), device='cuda'), op=hvd.Sum);"
        "n = hvd.size(); assert torch.equal(t.cpu(), torch.full((4,), n * (n + 1) / 2)), t;"
        "print('CUDA_ALLREDUCE_OK', n)"
    )
    result = docker_run(
        "horovodrun", "-np", str(gpus), "-H", f"localhost:{gpus}", "python", "-c", script
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA_ALLREDUCE_OK" in result.stdout


# One short epoch of an example with AMP, its files in the container's /tmp.
SHORT_AMP_RUN = [
    "--epochs",
    "1",
    "--amp",
    "true",
    "--samples",
    "4096",
    "--model-dir",
    "/tmp/model",
    "--checkpoint-dir",
    "/tmp/ckpt",
]


def test_example_training_step_on_gpu_with_amp(gpus):
    result = docker_run(
        "horovodrun",
        "-np",
        str(gpus),
        "-H",
        f"localhost:{gpus}",
        "python",
        "/opt/byoc/examples/train_synthetic.py",
        *SHORT_AMP_RUN,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "device cuda" in out and '"epoch": 0' in out, out


def test_ddp_example_under_torchrun_on_every_gpu_with_amp(gpus):
    """The torchrun launcher's program: NCCL process group, one GPU per rank, AMP."""
    result = docker_run(
        "torchrun",
        "--standalone",
        f"--nproc-per-node={gpus}",
        "/opt/byoc/examples/train_ddp.py",
        *SHORT_AMP_RUN,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"rank 0/{gpus}" in out and "device cuda:0" in out and '"epoch": 0' in out, out


def test_torch_compile_runs_triton_kernels_and_the_examples_compile_on_gpu(gpus):
    """torch.compile on a GPU: Triton builds its launcher with the runtime's gcc and Python.h
    the first time a kernel runs; then the Horovod and DDP examples with --compile true."""
    script = (
        "import torch; m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda(); "
        "x = torch.randn(8, 64, device='cuda'); c = torch.compile(m); "
        "torch.testing.assert_close(c(x), m(x), rtol=1e-3, atol=1e-3); print('TRITON-OK')"
    )
    result = docker_run("python", "-c", script)
    assert result.returncode == 0 and "TRITON-OK" in result.stdout, result.stdout + result.stderr
    for launcher in (
        ["horovodrun", "-np", str(gpus), "-H", f"localhost:{gpus}", "python"],
        ["torchrun", "--standalone", f"--nproc-per-node={gpus}"],
    ):
        program = "train_synthetic.py" if launcher[0] == "horovodrun" else "train_ddp.py"
        result = docker_run(
            *launcher, f"/opt/byoc/examples/{program}", *SHORT_AMP_RUN, "--compile", "true"
        )
        out = result.stdout + result.stderr
        assert result.returncode == 0, out
        assert "compiling the model" in out and '"epoch": 0' in out, out


def test_horovod_and_torch_report_the_same_nccl(gpus):
    script = (
        "import torch, horovod.torch as hvd; hvd.init(); v = torch.cuda.nccl.version();"
        "t = v[0] * 10000 + v[1] * 100 + v[2] if isinstance(v, tuple) else v;"
        "print('NCCL', t, hvd.nccl_built()); assert t == hvd.nccl_built()"
    )
    result = docker_run("python", "-c", script)
    assert result.returncode == 0, result.stdout + result.stderr


def test_doctor_is_ready_on_a_gpu_host(gpus):
    result = docker_run("doctor", "--json", "--no-network")
    out = result.stdout + result.stderr
    report = json.loads(out[out.index("{") : out.rindex("}") + 1])
    checks = {c["check"]: c for c in report["checks"]}
    assert result.returncode == 0 and report["ok"], out
    assert checks["gpus"]["status"] == "ok" and f"{gpus} GPU(s)" in checks["gpus"]["detail"], out
    assert checks["driver"]["status"] == "ok", out
    assert checks["nccl"]["status"] == "ok", out


def _host_efa_devices() -> list[str]:
    base = "/sys/class/infiniband"
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    return [
        n for n in names if os.path.basename(os.path.realpath(f"{base}/{n}/device/driver")) == "efa"
    ]


def test_nccl_uses_efa_where_the_host_has_it(gpus):
    if not _host_efa_devices():
        pytest.skip(
            "this host has no EFA device (/sys/class/infiniband/* bound to efa): run `make "
            "test-gpu` on an EFA instance (p4d, p5, ...) to see NCCL pick aws-ofi-nccl"
        )
    devices = sorted(f"--device={d}" for d in glob.glob("/dev/infiniband/uverbs*"))
    script = (
        "import os, torch, torch.distributed as dist;"
        "dist.init_process_group('nccl', init_method='tcp://127.0.0.1:29511', rank=0,"
        " world_size=1); t = torch.ones(1, device='cuda'); dist.all_reduce(t);"
        "print('SUM', t.item()); dist.destroy_process_group()"
    )
    result = docker_run(
        "python", "-c", script, flags=(*devices, "-e", "NCCL_DEBUG=INFO"), timeout=300
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "fabric: efa" in out, out  # byoc-init's decision
    assert "NET/OFI" in out and re.search(r"Using network (AWS )?Libfabric", out), out


def test_horovods_own_suites_with_nccl_one_rank_per_gpu(gpus):
    """Upstream's GPU tests (HOROVOD_TEST_GPU=1), which skip on the stand-ins: test_torch.py and
    the other parallel suites on CUDA tensors through NCCL, both controllers, one rank per GPU.
    Needs the tag archive as make test-horovod does (mirror, HOROVOD_SRC_TARBALL or GitHub)."""
    if gpus < 2:
        pytest.skip(f"{gpus} GPU: Horovod's parallel suites need 2 ranks, and NCCL one GPU each")
    cmd = [
        "python3",
        "-m",
        "hostkit.horovod_suites",
        "--require-source",
        "--image",
        IMAGE,
        "--gpus",
        str(gpus),
        *[f"--suite={s.name}" for s in horovod_suites.SUITES if s.kind == "parallel"],
    ]
    if os.environ.get("HOROVOD_SRC_TARBALL"):
        cmd += ["--source", os.environ["HOROVOD_SRC_TARBALL"]]
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        cmd, cwd=root, capture_output=True, text=True, timeout=3600, check=False
    )
    assert result.returncode == 0, result.stderr[-6000:]
