"""The PyTorch users write today, on day one, works in the image: torch.compile (alone and under
Horovod), C++ extensions built at run time, DataLoader workers, bf16 autocast, torchvision,
torch.distributed.checkpoint and FSDP2. Each case of scripts/pytorch_today.py is a test of its
own; they run in one container per image: the cpu image, every case; the gpu flavor on its
stand-ins, CPU paths (the stand-in has no GPU), the cases where the flavors differ. smdebug's
hook: test_image.py. The GPU paths (Triton, CUDA extensions): tests/gpu."""

from __future__ import annotations

import re

import pytest

from tests.container.support import SCRIPTS, Containers

CASES = [
    "compile",
    "cpp_extension",
    "dataloader_workers",
    "bf16_autocast",
    "torchvision",
    "dcp",
    "horovod_compile",
    "fsdp2",
]
# Both flavors' runtimes carry the same torch venv (the torch-venv stage, made once:
# test_gpu_flavor checks it) and the same compilers; they differ in the CUDA runtime the gpu
# base adds, which cpp_extension's search for a toolkit meets, and in Horovod's build (NCCL).
GPU_FLAVOR_CASES = ["cpp_extension", "horovod_compile"]
LINE = re.compile(r"^CASE (\S+) (ok|FAIL) ?(.*)$", re.M)


def run_cases(client, image, cases: list[str]) -> tuple[dict[str, tuple[str, str]], str]:
    """{case: (ok|FAIL, detail)} and the whole output, from one container of image."""
    pool = Containers(client, image)
    try:
        code, out = pool.run(
            ["python", "/tests/pytorch_today.py", *cases],
            timeout=900,
            volumes={str(SCRIPTS): {"bind": "/tests", "mode": "ro"}},
            shm_size="1g",
        )
    finally:
        pool.remove_all()
    assert code == 0, out[-6000:]
    return {name: (status, detail) for name, status, detail in LINE.findall(out)}, out


def check(results: tuple[dict, str], case: str) -> None:
    found, out = results
    assert case in found, f"case {case} reported nothing:\n{out[-6000:]}"
    status, detail = found[case]
    if status != "ok":
        start = out.find(f"CASE {case} FAIL")
        pytest.fail(f"{case}: {detail}\n{out[start : start + 6000]}")


def test_the_script_lists_every_case():
    text = (SCRIPTS / "pytorch_today.py").read_text()
    assert sorted(re.findall(r"^def case_(\w+)\(", text, re.M)) == sorted(CASES)


@pytest.fixture(scope="module")
def cpu_results(client, image):
    return run_cases(client, image, CASES)


@pytest.mark.parametrize("case", CASES)
def test_day_one_pytorch_on_the_cpu_image(cpu_results, case):
    check(cpu_results, case)


@pytest.fixture(scope="module")
def gpu_flavor_results(client, gpu_image):
    return run_cases(client, gpu_image, GPU_FLAVOR_CASES)


@pytest.mark.gpu_flavor
@pytest.mark.parametrize("case", GPU_FLAVOR_CASES)
def test_day_one_pytorch_on_the_gpu_flavor_cpu_paths(gpu_flavor_results, case):
    check(gpu_flavor_results, case)
