"""The source-build scripts' modes and refusals, run here (no Docker, no compiler work).

docker/build/build-efa.sh: EFA=off/auto leave a NOT-BUILT note with the reason and succeed, EFA=on
fails, anything else is refused. scripts/git-archive.sh: only the Dockerfile's pinned archive
comes out (a tag whose archive hashes differently, or a missing tag, leaves no file).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hostkit import dockerfile

ROOT = Path(__file__).resolve().parents[2]
BUILD_EFA = ROOT / "docker/build/build-efa.sh"
GIT_ARCHIVE = ROOT / "scripts/git-archive.sh"


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **env}, check=False
    )


@pytest.mark.parametrize("component", ["libfabric", "aws-ofi-nccl"])
def test_efa_off_leaves_a_note_and_succeeds(tmp_path, component):
    out = tmp_path / "out"
    result = run(["bash", str(BUILD_EFA), component, str(out)], EFA="off")
    assert result.returncode == 0, result.stderr
    assert (out / "NOT-BUILT").read_text() == f"{component} not built: EFA=off\n"


def test_efa_auto_without_cuda_says_why_and_on_fails(tmp_path):
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
def test_efa_mode_is_validated(tmp_path, mode):
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
