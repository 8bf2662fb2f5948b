"""byoc-exec: byoc-init's start-time decisions, then the command in this process's place (what
srun/pyxis start without the image's ENTRYPOINT: docs/slurm.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from byoc import wrapper

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("BYOC_", "SLURM_", "OMPI_"))}
ENV["PYTHONPATH"] = str(ROOT / "entrypoint")


def run(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "byoc.wrapper", *argv],
        env={**ENV, "BYOC_FLAVOR": "cpu", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_replaces_it_with_the_decisions_in_its_environment():
    proc = subprocess.Popen(
        [sys.executable, "-m", "byoc.wrapper", "sh", "-c", 'echo "$$ $BYOC_INIT"; exit 7'],
        env={**ENV, "BYOC_FLAVOR": "cpu"},
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    # The same process: a launcher's signals reach the command itself, its status is the job's.
    assert out.split() == [str(proc.pid), "1"]
    assert proc.returncode == 7


@pytest.mark.parametrize(
    "argv, code, message",
    [
        ((), 2, "usage: byoc-exec COMMAND"),
        (("--help",), 0, "usage: byoc-exec COMMAND"),
        (("/nonexistent/program",), 127, "byoc-exec: cannot run '/nonexistent/program'"),
    ],
)
def test_usage_and_a_command_that_cannot_run(argv, code, message):
    done = run(*argv)
    assert done.returncode == code
    assert message in done.stderr, done.stderr


def test_a_setting_it_cannot_act_on_exits_2_on_every_task():
    for local in ("0", "3"):
        done = run("true", BYOC_CUDA_COMPAT="sometimes", SLURM_LOCALID=local)
        assert done.returncode == 2
        assert "byoc-exec: " in done.stderr and "BYOC_CUDA_COMPAT" in done.stderr, done.stderr


def test_only_a_nodes_first_task_reports():
    assert wrapper.first_on_node({})
    assert wrapper.first_on_node({"SLURM_LOCALID": "0", "LOCAL_RANK": "5"})
    assert not wrapper.first_on_node({"SLURM_LOCALID": "1"})
    assert not wrapper.first_on_node({"OMPI_COMM_WORLD_LOCAL_RANK": "2"})
