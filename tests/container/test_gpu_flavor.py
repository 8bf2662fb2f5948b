"""The gpu flavor, checked without a GPU: `make test-gpu-flavor` (marker gpu_flavor).

The image is the gpu flavor built by the unchanged Dockerfile on the nvidia/cuda stand-ins
(tests/standin/), or on the real bases where they can be pulled: BYOC_GPU_IMAGE names it.
What needs a GPU (NCCL collectives, CUDA tensors, AMP) is in tests/gpu (make test-gpu).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from hostkit import dockerfile
from tests.container.support import ROOT, base_images, image_output

pytestmark = pytest.mark.gpu_flavor


def without_init_lines(out: str) -> str:
    """The command's own output: byoc-init's start lines (the fabric decision) removed."""
    return "".join(line for line in out.splitlines(True) if not line.startswith("byoc-init: "))


def python(gpu, code: str) -> str:
    status, out = gpu.run(["python", "-c", code], timeout=180)
    assert status == 0, out
    return out


def test_check_build_lists_nccl(gpu):
    status, out = gpu.run(["horovodrun", "--check-build"], timeout=120)
    assert status == 0, out
    ops = out.split("Available Tensor Operations:", 1)[1]
    assert re.search(r"\[X\] NCCL", ops), out
    assert re.search(r"\[X\] PyTorch", out), out


def test_horovod_maps_the_very_nccl_torch_loads(gpu):
    code = """
import os, re, torch, horovod.torch as hvd
import nvidia.nccl, pathlib
maps = open('/proc/self/maps').read()
mapped = sorted({os.path.realpath(p) for p in re.findall(r'(/\\S*libnccl\\.so[.\\d]*)', maps)})
wheel = os.path.realpath(next(pathlib.Path(nvidia.nccl.__path__[0]).glob('lib/libnccl.so.2')))
print('MAPPED', mapped)
print('WHEEL', wheel)
"""
    out = python(gpu, code)
    mapped = re.search(r"MAPPED \[(.*)\]", out).group(1)
    wheel = re.search(r"WHEEL (\S+)", out).group(1)
    assert mapped == repr(wheel), out  # one NCCL in the process: torch's


def test_horovod_library_and_linker_cache_resolve_to_torchs_nccl(gpu):
    script = r"""
set -e
hvd=$(python -c 'import horovod.torch, os; print(os.path.dirname(horovod.torch.__file__))')
lib=$(ls "$hvd"/mpi_lib_v2*.so)
resolved=$(ldd "$lib" | awk '/libnccl.so/ {print $3}')
echo "HOROVOD $(readlink -f "$resolved")"
echo "CACHE $(readlink -f "$(ldconfig -p | awk '/libnccl.so.2 / {print $NF; exit}')")"
wheel=$(python -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])')
echo "WHEEL $(readlink -f "$wheel/lib/libnccl.so.2")"
"""
    status, out = gpu.run(["bash", "-c", script], timeout=120)
    assert status == 0, out
    found = dict(line.split(" ", 1) for line in out.strip().splitlines() if " " in line)
    assert found["HOROVOD"] == found["WHEEL"] == found["CACHE"], out


def test_hvd_init_works_without_a_gpu_and_versions_agree(gpu):
    code = """
import torch, horovod.torch as hvd
hvd.init()
v = torch.cuda.nccl.version()
print('TORCH_NCCL', v[0] * 10000 + v[1] * 100 + v[2] if isinstance(v, tuple) else v)
print('HVD_NCCL', hvd.nccl_built())
print('SIZE', hvd.size(), 'CUDA', torch.cuda.is_available(), torch.version.cuda)
"""
    out = python(gpu, code)
    torch_nccl = int(re.search(r"TORCH_NCCL (\d+)", out).group(1))
    assert f"HVD_NCCL {torch_nccl}" in out, out
    assert "SIZE 1 CUDA False" in out, out
    cuda = re.search(r"CUDA False (\S+)", out).group(1)
    # The torch wheels' CUDA is the base image's CUDA (major.minor).
    assert dockerfile.arg("CUDA_VERSION").startswith(cuda + "."), (cuda, out)


def test_no_cuda_driver_or_stub_where_the_linker_looks(gpu):
    script = (
        "ldconfig -p | grep -E 'libcuda\\.so|libnvidia-ml' || true; "
        "for d in $(echo \"$LD_LIBRARY_PATH\" | tr : ' ') /usr/lib/x86_64-linux-gnu "
        "/usr/local/cuda/lib64; "
        "do ls $d/libcuda.so* 2>/dev/null; done; echo END"
    )
    status, out = gpu.run(["bash", "-c", script], timeout=60)
    assert (status, without_init_lines(out).strip()) == (0, "END"), out


def test_nccl_tests_exist_link_and_print_usage(gpu):
    status, note = gpu.run(["bash", "-c", "cat /opt/nccl-tests/NOT-BUILT 2>/dev/null"], timeout=60)
    if status == 0 and note.strip():
        pytest.skip(
            f"{note.strip()} -- the image was built without the nccl-tests source (GitHub cannot "
            "be reached here): build it with NCCL_TESTS_TARBALL=<nccl-tests-VERSION.tar.gz, "
            "GitHub's release tarball> NCCL_TESTS=on to run this check"
        )
    script = r"""
set -e
python -c 'import json; r = json.load(open("/opt/byoc/sources/nccl-tests.json"))
print("SOURCE", r["version"], r["sha256"], r["not_built"])'
n=0
for b in /opt/nccl-tests/bin/*_perf; do
    n=$((n + 1))
    if ldd "$b" | grep -q 'not found'; then echo "UNRESOLVED $b"; ldd "$b"; fi
done
echo "BINARIES $n"
libs=$(ldd /opt/nccl-tests/bin/all_reduce_perf)
echo "NCCL $(readlink -f "$(awk '/libnccl.so/ {print $3}' <<<"$libs")")"
echo "MPI $(awk '/libmpi.so/ {print $1}' <<<"$libs")"
wheel=$(python -c 'import nvidia.nccl; print(nvidia.nccl.__path__[0])')
echo "WHEEL $(readlink -f "$wheel/lib/libnccl.so.2")"
command -v all_reduce_perf
all_reduce_perf -h 2>&1 | head -n 5 || true
"""
    status, out = gpu.run(["bash", "-c", script], timeout=120)
    assert status == 0, out
    version, sha = dockerfile.arg("NCCL_TESTS_VERSION"), dockerfile.arg("NCCL_TESTS_SHA256")
    assert f"SOURCE {version} {sha} None" in out, out  # built from the pinned tarball
    assert "UNRESOLVED" not in out, out
    assert int(re.search(r"BINARIES (\d+)", out).group(1)) >= 10, out
    found = dict(line.split(" ", 1) for line in out.splitlines() if line[:5] in ("NCCL ", "WHEEL"))
    assert found["NCCL"] == found["WHEEL"], out  # the same NCCL as torch and Horovod
    assert re.search(r"^MPI libmpi\.so", out, re.M), out  # built with MPI=1
    assert "/opt/nccl-tests/bin/all_reduce_perf" in out
    assert re.search(r"USAGE|usage", out), out


def test_a_replaced_entrypoint_still_gets_byoc_init_and_mpi4py(gpu):
    """SageMaker SDK v3 starts the container with `bash -c ...`: the BASH_ENV hook puts
    byoc-init back as PID 1; mpi4py (its MPI driver's runner) speaks the image's Open MPI."""
    c = gpu.start(
        [
            "echo; tr '\\0' ' ' </proc/1/cmdline; echo; "
            "python3 -c 'import mpi4py.MPI as M; print(M.Get_library_version().splitlines()[0])'"
        ],
        entrypoint=["/bin/bash", "-c"],
    )
    status = c.wait(timeout=120)["StatusCode"]
    out = c.logs().decode(errors="replace")
    assert status == 0, out
    pid1 = "\n/opt/venv/bin/python3 /opt/venv/bin/byoc-init /bin/bash -c"
    assert without_init_lines(out).startswith(pid1), out
    assert "Open MPI" in out, out


def test_the_runtimes_other_wheels_come_from_the_plain_os_base(gpu_image):
    """py-wheels (mpi4py's compile among them) is built on CPU_BASE_IMAGE in both flavors, so the
    cpu build's serves this one; the SBOM names that base beside the CUDA pair. The runtime's
    OS check (docker/build/os-abi.sh) let the build through, and mpi4py above runs here."""
    bases = base_images(gpu_image)
    assert set(bases) == {"builder", "runtime", "wheels"}, bases
    assert bases["wheels"] not in (bases["builder"], bases["runtime"]), bases


TORCH_RECORD = (
    "import hashlib, importlib.metadata as m, sys; d = m.distribution('torch'); "
    "print(sys.version.split()[0], d.version, "
    "hashlib.sha256(d.read_text('RECORD').encode()).hexdigest())"
)


def test_torch_is_the_very_venv_of_the_cpu_image(image, gpu_image):
    """Both flavors copy torch's venv from one stage (torch-venv, on the plain OS base): the
    same Python, torch and files, every file's hash in torch's RECORD; so the day-one PyTorch
    cases that touch nothing else run on the cpu image alone (test_pytorch_today)."""
    command = ["python", "-c", TORCH_RECORD]
    assert image_output(gpu_image, command) == image_output(image, command)


LDD_CHECK = r"""
import os, subprocess, sys
roots = ["/opt/venv", "/opt/amazon", "/opt/nccl-tests", "/usr/local"]
elves = []
for root in roots:
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    elves.append(p)
missing = set()
for p in elves:
    out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "=> not found" in line:
            missing.add((p, line.split()[0]))
names = {os.path.basename(p) for p in elves}
print("CHECKED", len(elves))
for p, lib in sorted(missing):
    print("MISSING", p, lib, "IN-IMAGE" if lib in names else "ABSENT")
"""

# The driver's libraries, which the NVIDIA Container Toolkit mounts at run time (--gpus): the one
# kind of library an ELF file in the image may need and not find here.
DRIVER_LIBS = re.compile(r"^lib(cuda|nvidia-[a-z-]+)\.so\.\d+$")


def test_every_elf_file_finds_its_libraries_on_the_base(gpu):
    """The runtime is nvidia/cuda's -base (cudart and nothing else of CUDA): every library the
    venv's, Horovod's, nccl-tests', libfabric's and aws-ofi-nccl's ELF files need is in the
    image, except the driver's. ldd resolves almost all; the rest are wheels' extensions that
    their package loads after its own libraries (torchvision's after torch's, triton's plugins
    after libtriton, cuSOLVER's multi-GPU library after cuBLAS): such a library must be in the
    image under that name, not in a base the image no longer has."""
    status, out = gpu.run(["python", "-c", LDD_CHECK], timeout=600)
    assert status == 0, out
    checked = int(re.search(r"CHECKED (\d+)", out).group(1))
    assert checked > 100, out
    missing = [line.split()[1:] for line in out.splitlines() if line.startswith("MISSING ")]
    # A program (nccl-tests' *_perf, libfabric's fi_*) has no process to lean on: all of its
    # libraries must resolve. A library may lean on what its package loaded before it.
    absent = [
        (path, lib)
        for path, lib, where in missing
        if where == "ABSENT" or ".so" not in path.rsplit("/", 1)[-1]
    ]
    unexpected = [(path, lib) for path, lib in absent if not DRIVER_LIBS.match(lib)]
    assert not unexpected, "\n".join(f"{path}: {lib} is nowhere" for path, lib in unexpected)
    in_process = {lib for _, lib, where in missing if where == "IN-IMAGE"}
    print(f"\n{checked} ELF files; {len(in_process)} libraries found in-process only: {in_process}")


def test_the_base_holds_no_cuda_library_but_cudart(gpu):
    """What -base holds of CUDA, and no more: the libraries torch loads come from its wheels."""
    status, out = gpu.run(["bash", "-c", "ls /usr/local/cuda/lib/"], timeout=60)
    assert status == 0, out
    files = without_init_lines(out).split()
    assert files and all(f.startswith("libcudart.so.13") for f in files), out
    status, out = gpu.run(["ldconfig", "-p"], timeout=60)
    assert status == 0, out
    found = re.findall(
        r"(lib(?:cublas|cufft|cusparse|curand|cudnn|npp|nccl\.so)\S*) .*=> (\S+)", out
    )
    # Only torch's NCCL, which the image itself puts in the linker cache.
    assert found and all(p.startswith("/opt/venv/") for _, p in found), found


def recipe(page: str, heading: str) -> str:
    """The first ```sh block after heading in docs/PAGE."""
    text = (ROOT / "docs" / page).read_text()
    after = text[text.index(heading) :]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def test_docs_cuda_toolkit_recipe_builds_a_cuda_extension(gpu, tmp_path):
    """docs/pytorch.md's recipe for CUDA sources, run as written (its pip offline, from wheels
    downloaded here), then load_inline(cuda_sources=...) builds and imports with its nvcc."""
    block = recipe("pytorch.md", "**CUDA sources**")
    wanted = dockerfile.arg("CUDA_TOOLKIT_WHEELS").split("==")[1]
    spec = re.search(r'pip install "(cuda-toolkit\[[^\]]+\]==([\d.]+))"', block)
    assert spec and spec.group(2) == wanted, f"not the Dockerfile's CUDA_TOOLKIT_WHEELS ({wanted})"
    status, out = gpu.run(["python", "-c", "import sys; print(*sys.version_info[:2], sep='.')"])
    assert status == 0, out
    wheels = tmp_path / "wheels"
    download = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d",
                str(wheels), "--python-version", out.strip().splitlines()[-1],
                "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
                spec.group(1)]  # fmt: skip
    result = subprocess.run(download, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        pytest.fail(f"pip download {spec.group(1)} failed (PyPI reachable?): {result.stderr}")
    build = textwrap.dedent(
        """
        import tempfile
        import torch
        from torch.utils.cpp_extension import load_inline
        cuda = '''
        __global__ void twice(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }
        torch::Tensor twice_inplace(torch::Tensor x) {
          twice<<<1, x.numel()>>>(x.data_ptr<float>(), x.numel()); return x; }
        '''
        decl = "torch::Tensor twice_inplace(torch::Tensor x);"
        ext = load_inline("byoc_cuda_ext", cpp_sources=decl, cuda_sources=cuda,
                          functions=["twice_inplace"], build_directory=tempfile.mkdtemp())
        print("CUDA-EXTENSION-BUILT", callable(ext.twice_inplace))
        """
    )
    script = (
        f"set -euo pipefail\n{block}\nnvcc --version | tail -n 2\npython - <<'EOF'\n{build}EOF\n"
    )
    status, out = gpu.run(
        ["bash", "-c", script],
        timeout=900,
        volumes={str(wheels): {"bind": "/wheels", "mode": "ro"}},
        environment={
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": "/wheels",
            "TORCH_CUDA_ARCH_LIST": "9.0",
            "MAX_JOBS": "2",
        },
    )
    assert status == 0, out[-6000:]
    assert "CUDA-EXTENSION-BUILT True" in out, out[-6000:]
