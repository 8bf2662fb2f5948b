"""A changed hash stops the build: the wheel step (the py-wheels stage), given a
docker/requirements.txt in which one package's hashes are not the files' (what a tampered index or
mirror would serve), fails naming it. The build is the real one (scripts/build.sh, the cpu flavor,
--target py-wheels) from a copy of the build context; the layers before the wheel step come from
the cache of the image under test, so this costs that one step."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess

import pytest

from hostkit.docker import Docker
from tests.container.support import ROOT, RUN_ID

CONTEXT = ["Dockerfile", ".dockerignore", "docker", "entrypoint", "hostkit"]
SCRIPTS = ["build.sh", "docker.sh", "lib.sh", "local-base.sh"]
VICTIM = "six"  # small, pure Python, and a dependency of the image (python-dateutil's)
WRONG = hashlib.sha256(b"not the real file").hexdigest()


def tamper(text: str, name: str) -> str:
    """name's hashes (its line and the indented --hash lines after it) replaced by WRONG."""
    lines, inside, changed = text.splitlines(keepends=True), False, 0
    for i, line in enumerate(lines):
        if line.startswith(f"{name}=="):
            inside = True
        elif not line.startswith(" "):
            inside = False
        if inside and "sha256:" in line:
            lines[i] = re.sub(r"sha256:[0-9a-f]{64}", f"sha256:{WRONG}", line)
            changed += 1
    assert changed, f"no hash of {name} in docker/requirements.txt"
    return "".join(lines)


@pytest.fixture
def context(tmp_path):
    ctx = tmp_path / "context"
    ctx.mkdir()
    for entry in CONTEXT:
        src = ROOT / entry
        if src.is_dir():
            shutil.copytree(src, ctx / entry, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, ctx / entry)
    (ctx / "scripts").mkdir()
    for script in SCRIPTS:
        shutil.copy2(ROOT / "scripts" / script, ctx / "scripts" / script)
    # As in the checkout (a README each): RUN steps bind-mount them, so their content is part
    # of those steps' cache keys.
    for inputs in (".wheelhouse", ".sources"):
        shutil.copytree(ROOT / inputs, ctx / inputs)
    return ctx


def test_a_changed_hash_in_the_lock_stops_the_build(client, image, context):
    lock = context / "docker" / "requirements.txt"
    lock.write_text(tamper(lock.read_text(), VICTIM))
    tag = f"locktest-{RUN_ID}"
    env = dict(
        os.environ,
        FLAVOR="cpu",
        IMAGE="pytorch-horovod-locktest",
        TAG=tag,
        BUILD_ARGS="--target py-wheels",
    )
    try:
        run = subprocess.run(
            ["bash", "scripts/build.sh"],
            cwd=context,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
    finally:
        Docker(env.get("DOCKER"))("rmi", "-f", f"pytorch-horovod-locktest:{tag}", check=False)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert "DO NOT MATCH THE HASHES" in out, out[-3000:]
    # pip names the package and the hash it was told to expect: the one written above.
    assert re.search(rf"\b{VICTIM}==[\d.]+ from ", out), out[-3000:]
    assert f"Expected sha256 {WRONG}" in out, out[-3000:]
