"""The source-build scripts' modes and refusals, run here (no Docker, no compiler work).

docker/build/build-efa.sh: EFA=off/auto leave a NOT-BUILT note and the source's record with the
reason and succeed, EFA=on fails, anything else is refused. docker/build/source_record.py: the
record a build script leaves for the SBOM, and its refusals. scripts/git-archive.sh: only the
Dockerfile's pinned archive comes out (a tag whose archive hashes differently, or a missing tag,
leaves no file).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit import dockerfile
from tests.unit.fakes import script, tool_env

ROOT = Path(__file__).resolve().parents[2]
BUILD_EFA = ROOT / "docker/build/build-efa.sh"
GIT_ARCHIVE = ROOT / "scripts/git-archive.sh"


SOURCE_RECORD = ROOT / "docker/build/source_record.py"
# What the Dockerfile's stages give build-efa.sh: the pins, as build arguments.
PINS = {
    f"{var}_{field}": dockerfile.arg(f"{var}_{field}")
    for var in ("LIBFABRIC", "AWS_OFI_NCCL")
    for field in ("VERSION", "URL", "SHA256")
}


@pytest.fixture
def records(tmp_path, monkeypatch):
    """Where source_record.py writes (in the image: /opt/byoc/sources)."""
    where = tmp_path / "records"
    monkeypatch.setenv("SOURCE_RECORDS_DIR", str(where))
    return where


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **PINS, **env},
        check=False,
    )


@pytest.mark.parametrize(
    ("component", "var"), [("libfabric", "LIBFABRIC"), ("aws-ofi-nccl", "AWS_OFI_NCCL")]
)
def test_efa_off_leaves_a_note_and_a_record_and_succeeds(tmp_path, records, component, var):
    out = tmp_path / "out"
    result = run(["bash", str(BUILD_EFA), component, str(out)], EFA="off")
    assert result.returncode == 0, result.stderr
    assert (out / "NOT-BUILT").read_text() == f"{component} not built: EFA=off\n"
    record = json.loads((records / f"{component}.json").read_text())
    assert record == {
        "name": component,
        "version": PINS[f"{var}_VERSION"],
        "url": PINS[f"{var}_URL"],
        "sha256": PINS[f"{var}_SHA256"],
        "kind": "tarball",
        "patches": [],
        "not_built": f"{component} not built: EFA=off",
    }


def test_a_record_names_its_patches_by_sha256(tmp_path, records):
    patch = tmp_path / "horovod-0.28.1-fix.patch"
    patch.write_text("--- a\n+++ b\n")
    cmd = [sys.executable, str(SOURCE_RECORD), "horovod", "--kind", "pypi-sdist", "--version",
           "0.28.1", "--url", "https://pypi.org/project/horovod/0.28.1/#files", "--sha256",
           "a" * 64, "--patch", str(patch)]  # fmt: skip
    assert run(cmd).returncode == 0
    record = json.loads((records / "horovod.json").read_text())
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    assert record["patches"] == [{"file": patch.name, "sha256": digest}]
    assert record["not_built"] is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "../etc"}, "name '../etc'"),
        ({"--sha256": "abc"}, "--sha256 for horovod is not 64 hex digits"),
        ({"--version": ""}, "--version for horovod is empty"),
        ({"--patch": "/nonexistent.patch"}, "--patch /nonexistent.patch is not a file"),
    ],
)
def test_a_record_refuses_bad_input_and_writes_nothing(records, change, message):
    args = {"name": "horovod", "--kind": "pypi-sdist", "--version": "1", "--url": "u",
            "--sha256": "a" * 64, **change}  # fmt: skip
    cmd = [sys.executable, str(SOURCE_RECORD), args.pop("name")]
    for flag, value in args.items():
        cmd += [flag, value]
    result = run(cmd)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not records.exists()


def test_efa_auto_without_cuda_says_why_and_on_fails(tmp_path, records):
    out = tmp_path / "out"
    no_cuda = str(tmp_path / "no-cuda")
    result = run(["bash", str(BUILD_EFA), "libfabric", str(out)], EFA="auto", CUDA_HOME=no_cuda)
    assert result.returncode == 0, result.stderr
    assert "no CUDA toolkit in the builder (cpu flavor)" in (out / "NOT-BUILT").read_text()
    result = run(
        ["bash", str(BUILD_EFA), "libfabric", str(tmp_path / "on")], EFA="on", CUDA_HOME=no_cuda
    )
    assert result.returncode == 1
    assert "build-libfabric: error: no CUDA toolkit" in result.stderr
    assert not (tmp_path / "on" / "NOT-BUILT").exists()


@pytest.mark.parametrize("mode", ["yes", "", "ON;rm"])
def test_efa_mode_is_validated(tmp_path, records, mode):
    result = run(["bash", str(BUILD_EFA), "libfabric", str(tmp_path / "o")], EFA=mode or "bogus")
    assert result.returncode == 1
    assert "EFA must be auto, on or off" in result.stderr


@pytest.mark.parametrize(
    ("pkg", "version_arg", "sha_arg"),
    [
        ("libfabric", "LIBFABRIC_VERSION", "LIBFABRIC_SHA256"),
        # The tag archive of Horovod (its test/ tree) has a pin of its own beside the sdist's.
        ("horovod", "HOROVOD_VERSION", "HOROVOD_SRC_SHA256"),
    ],
)
def test_git_archive_refuses_what_is_not_the_pin(tmp_path, pkg, version_arg, sha_arg):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text(f"not {pkg}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    out = tmp_path / f"{pkg}.tar.gz"
    result = run(["bash", str(GIT_ARCHIVE), pkg, str(repo / ".git"), str(out)])
    assert result.returncode == 1 and "has no tag v" in result.stderr, result.stderr
    version = dockerfile.arg(version_arg)
    subprocess.run([*git, "tag", f"v{version}"], check=True)
    result = run(["bash", str(GIT_ARCHIVE), pkg, str(repo / ".git"), str(out)])
    assert result.returncode == 1, result.stderr
    assert f"does not match the Dockerfile's {sha_arg}" in result.stderr
    assert not out.exists() and list(tmp_path.glob(f"{pkg}.tar.gz*")) == []
    result = run(["bash", str(GIT_ARCHIVE), "nccl", str(repo / ".git"), str(out)])
    assert result.returncode == 1 and "unknown PKG" in result.stderr


OS_ABI = ROOT / "docker/build/os-abi.sh"


@pytest.fixture
def dpkg_openmpi(tmp_path):
    """A dpkg-query that says Open MPI's package version, as Debian writes it (epoch, revision)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir, "dpkg-query", "#!/bin/sh\necho '1:4.1.6-7ubuntu2'\n")
    return tool_env(tmp_path, bin_dir)


def test_os_abi_names_the_release_python_and_open_mpi(dpkg_openmpi):
    done = subprocess.run([OS_ABI], env=dpkg_openmpi, capture_output=True, text=True, check=True)
    release = dict(
        line.split("=", 1)
        for line in Path("/etc/os-release").read_text().splitlines()
        if "=" in line
    )
    version_id = release.get("VERSION_ID", "unknown").strip('"')
    python = subprocess.check_output(  # the python3 on PATH, as in the image
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], text=True
    ).strip()
    assert done.stdout.strip() == f"{release['ID']}-{version_id} python{python} openmpi4.1.6"


def test_the_runtime_refuses_wheels_built_for_another_os(dpkg_openmpi, tmp_path):
    own = subprocess.run([OS_ABI], env=dpkg_openmpi, capture_output=True, text=True, check=True)
    built = tmp_path / "wheels-abi"
    built.write_text(own.stdout)
    ok = subprocess.run(
        [OS_ABI, "--check", built], env=dpkg_openmpi, capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0, ok.stderr
    built.write_text("ubuntu-22.04 python3.10 openmpi4.1.2\n")
    bad = subprocess.run(
        [OS_ABI, "--check", built], env=dpkg_openmpi, capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1
    assert "ubuntu-22.04 python3.10 openmpi4.1.2" in bad.stderr and "CPU_BASE_IMAGE" in bad.stderr


# A docker with the nvidia/cuda images but no registry: `pull` fails, so does inspecting any
# image other than those two.
NO_REGISTRY_DOCKER = r"""#!/bin/sh
case "$1 $2" in
"version --format") echo 27.5.1; exit 0 ;;
"image inspect") case "$3" in cuda:devel|cuda:base) echo '[{}]'; exit 0 ;; esac; exit 1 ;;
esac
case "$1" in pull|build) exit 1 ;; esac
exit 0
"""


def test_a_gpu_build_without_its_plain_os_base_says_which_image_before_building(tmp_path):
    """The gpu flavor builds the runtime's other wheels on CPU_BASE_IMAGE (the nvidia/cuda images'
    OS): without it, build.sh stops naming it, and never falls back to another OS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir, "docker", NO_REGISTRY_DOCKER)
    env = tool_env(tmp_path, bin_dir, DOCKER="docker", FLAVOR="gpu",
                   BUILDER_IMAGE="cuda:devel", RUNTIME_IMAGE="cuda:base")  # fmt: skip
    env.pop("BASE_IMAGE", None)
    done = subprocess.run(
        [ROOT / "scripts/build.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    base = dockerfile.arg("CPU_BASE_IMAGE")
    assert (
        f"{base} cannot be pulled: the gpu flavor builds its runtime's wheels on it" in done.stderr
    )
    assert "BASE_IMAGE=" in done.stderr and "pytorch-horovod-base" not in done.stderr


def _stages() -> dict[str, str]:
    """The Dockerfile's stages: name -> what it starts FROM."""
    stages = {}
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == "FROM" and words[2].upper() == "AS":
            stages[words[3]] = words[1]
    return stages


def _chain(stages: dict[str, str], name: str) -> list[str]:
    chain = [name]
    while chain[-1] in stages:
        chain.append(stages[chain[-1]])
    return chain


def test_what_needs_no_cuda_is_made_on_the_plain_os_base_in_both_flavors():
    """torch's venv and the runtime's other wheels start from the plain OS base whatever FLAVOR
    is, so a machine that builds both flavors (CI) installs torch and compiles mpi4py once; the
    runtime copies the venv and checks the OS it was made on (os-abi.sh)."""
    stages = _stages()
    for name in ("torch-venv", "py-wheels"):
        chain = _chain(stages, name)
        assert "builder-base-cpu" in chain, chain
        assert not any("FLAVOR" in s for s in chain), chain
    assert stages["runtime-files"] == "runtime-os"
    text = (ROOT / "Dockerfile").read_text()
    runtime_files = text[text.index("AS runtime-files") :]
    assert "COPY --from=torch-venv /opt/venv /opt/venv" in runtime_files
    copied = runtime_files.index("COPY --from=torch-venv")
    check = runtime_files.index("os-abi.sh --check")
    assert copied < check < runtime_files.index("pip install")


# A docker whose store holds an image once `import` made it (a file stands for it), and an
# mmdebstrap that counts its runs and takes a second: two callers at once overlap.
BASE_DOCKER = r"""#!/bin/sh
case "$1 $2" in
"version --format") echo 27.5.1; exit 0 ;;
"image inspect") [ -f "$STORE/made" ]; exit $? ;;
esac
if [ "$1" = import ]; then cat > /dev/null; echo x >> "$STORE/made"; echo sha256:1; exit 0; fi
exit 0
"""
BASE_MMDEBSTRAP = r"""#!/bin/sh
echo run >> "$STORE/mmdebstrap"
sleep 1
: > "$4"
"""


def test_the_local_base_is_made_once_for_builds_that_need_it_at_once(tmp_path):
    """make test builds both flavors side by side, each making the local Debian base where it
    is missing (--if-missing): one makes it, the other waits and keeps it; make local-base (no
    flag) makes it anew."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script(bin_dir, "docker", BASE_DOCKER)
    script(bin_dir, "mmdebstrap", BASE_MMDEBSTRAP)
    store = tmp_path / "store"
    store.mkdir()
    env = tool_env(tmp_path, bin_dir, DOCKER="docker", STORE=str(store), TMPDIR=str(tmp_path))
    cmd = [str(ROOT / "scripts/local-base.sh"), "--if-missing", "base:test"]
    both = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0].decode() for p in both]
    assert [p.returncode for p in both] == [0, 0], outs
    assert (store / "mmdebstrap").read_text().count("run") == 1, outs
    assert (store / "made").read_text().count("x") == 1
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=60, check=False)
    assert again.returncode == 0 and (store / "mmdebstrap").read_text().count("run") == 1
    anew = subprocess.run(
        cmd[:1] + cmd[2:], cwd=ROOT, env=env, capture_output=True, timeout=60, check=False
    )
    assert anew.returncode == 0, anew.stderr
    assert (store / "mmdebstrap").read_text().count("run") == 2
