"""GPU checks of the gpu image (make test-gpu on a host with NVIDIA GPUs and the NVIDIA
container toolkit). Skipped, with the reason, where no GPU is visible."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytestmark = pytest.mark.gpu


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


def test_horovod_allreduce_of_cuda_tensors_on_every_gpu(gpus):
    import os

    image = os.environ.get("BYOC_IMAGE", "pytorch-horovod:gpu")
    script = (
        "import torch, horovod.torch as hvd; hvd.init(); torch.cuda.set_device(hvd.local_rank());"
        "t = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1), device='cuda'), op=hvd.Sum);"
        "n = hvd.size(); assert torch.equal(t.cpu(), torch.full((4,), n * (n + 1) / 2)), t;"
        "print('CUDA_ALLREDUCE_OK', n)"
    )
    result = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--gpus",
            "all",
            "--shm-size=2g",
            image,
            "horovodrun",
            "-np",
            str(gpus),
            "-H",
            f"localhost:{gpus}",
            "python",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA_ALLREDUCE_OK" in result.stdout
