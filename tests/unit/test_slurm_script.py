"""scripts/slurm.sh and scripts/cluster.sh refuse bad input before they touch Docker or the disk:
a message naming the argument or variable, a non-zero exit, nothing made."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    state = tmp_path / "state"
    environ = {
        **os.environ,
        "SLURM_STATE": str(state),
        "CLUSTER_STATE": str(state),
        "DOCKER": "/nonexistent/docker",  # any Docker call would fail loudly, not run
        **env,
    }
    done = subprocess.run(
        [str(ROOT / "scripts" / script), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert not state.exists(), f"{script} {args} made {state}"
    return done


@pytest.mark.parametrize(
    "args, env, message",
    [
        (("up", "0"), {}, "up needs 1 to 8 nodes, not '0'"),
        (("up", "9"), {}, "up needs 1 to 8 nodes, not '9'"),
        (("up", "2;rm"), {}, "up needs 1 to 8 nodes"),
        (("kill", "node8"), {}, "kill needs a node name"),
        (("kill", "../x"), {}, "kill needs a node name"),
        (("ps",), {"SLURM_PROJECT": "Bad Name"}, "SLURM_PROJECT='Bad Name'"),
        (("ps",), {"SLURM_CPUS_PER_NODE": "0"}, "SLURM_CPUS_PER_NODE must be a whole number"),
        (("exec",), {}, "exec needs a command"),
    ],
)
def test_slurm_sh_refuses_bad_input(tmp_path, args, env, message):
    done = run("slurm.sh", *args, tmp_path=tmp_path, **env)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_slurm_sh_without_a_command_prints_its_usage(tmp_path):
    done = run("slurm.sh", tmp_path=tmp_path)
    assert done.returncode == 2 and "slurm.sh up [N]" in done.stderr


@pytest.mark.parametrize("node", ["", "node9", "node1;true", "master"])
def test_cluster_sh_on_refuses_what_is_not_a_node(tmp_path, node):
    done = run("cluster.sh", "on", node, "true", tmp_path=tmp_path)
    assert done.returncode != 0
    assert "on needs a node name, node0..node7" in done.stderr, done.stderr


@pytest.mark.parametrize("nodes", ["0", "9", "two", "2;true"])
def test_cluster_sh_up_refuses_a_bad_node_count(tmp_path, nodes):
    """Refused before any Docker call ($DOCKER does not exist) and before anything is made."""
    done = run("cluster.sh", "up", nodes, tmp_path=tmp_path)
    assert done.returncode != 0
    assert "NODES must be a number from 1 to 8" in done.stderr, done.stderr
