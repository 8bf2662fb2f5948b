"""hostkit.dockerfile, the one reader of the Dockerfile's pins: defaults, expansion of earlier
ARGs, and what it refuses (a name it lacks, a reference to an ARG not declared before)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hostkit import HostError, dockerfile

ROOT = Path(__file__).resolve().parents[2]


def test_the_real_dockerfiles_pins_expand():
    version = dockerfile.arg("HOROVOD_VERSION")
    assert dockerfile.raw("HOROVOD_SRC_URL").endswith("v${HOROVOD_VERSION}.tar.gz")
    assert dockerfile.arg("HOROVOD_SRC_URL").endswith(f"v{version}.tar.gz")


def test_first_declaration_quotes_and_expansion(tmp_path):
    path = tmp_path / "Dockerfile"
    path.write_text(
        'ARG A=1\nARG B="x-${A}"\nFROM scratch\n  ARG A=2\nARG C=$B/$A\nARG LATE=${D}\nARG D=4\n'
    )
    assert dockerfile.arg("A", path) == "1"  # the first declaration is the default
    assert dockerfile.arg("B", path) == "x-1" and dockerfile.raw("B", path) == "x-${A}"
    assert dockerfile.arg("C", path) == "x-1/1"
    with pytest.raises(HostError, match=r"ARG LATE .* uses \$\{D\}, which no ARG declares before"):
        dockerfile.arg("LATE", path)
    with pytest.raises(HostError, match="ARG NOPE is not in"):
        dockerfile.arg("NOPE", path)
    with pytest.raises(HostError, match="cannot read"):
        dockerfile.arg("A", tmp_path / "missing")


def test_the_command_prints_values_or_exits_2_naming_the_missing_one():
    def run(*names):
        return subprocess.run(
            [sys.executable, "-m", "hostkit.dockerfile", *names],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    done = run("TORCH_VERSION", "HOROVOD_VERSION")
    assert done.returncode == 0
    assert done.stdout.split() == [
        dockerfile.arg("TORCH_VERSION"),
        dockerfile.arg("HOROVOD_VERSION"),
    ]
    for names in (("TORCH_VERSION", "NO_SUCH_ARG"), ()):
        done = run(*names)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.startswith("dockerfile: error: "), done.stderr
