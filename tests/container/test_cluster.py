"""The local compose cluster (scripts/cluster.sh, docker/compose.yaml), driven as users drive it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.container.conftest import ROOT, RUN_ID, SCRIPTS

CLUSTER = ROOT / "scripts" / "cluster.sh"


def cluster(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [str(CLUSTER), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"cluster.sh {' '.join(args)} ran past {timeout} s: {exc}") from exc


def have_compose() -> bool:
    if shutil.which("docker-compose"):
        return True
    docker = shutil.which(os.environ.get("DOCKER", "docker"))
    if docker is None:
        return False
    result = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
    return result.returncode == 0


@pytest.fixture
def cluster_env(client, image, tmp_path):
    """A cluster of this test run's own (project, state, workspace), always taken down."""
    if not have_compose():
        pytest.skip("no docker compose: `make test-container` installs docker-compose as root")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(SCRIPTS / "allreduce.py", workspace / "allreduce.py")
    project = f"byoc-test-{RUN_ID}"
    env = dict(
        os.environ,
        CLUSTER_PROJECT=project,
        CLUSTER_STATE=str(tmp_path / "state"),
        CLUSTER_WORKSPACE=str(workspace),
        BYOC_IMAGE=image.tags[0] if image.tags else image.id,
        CLUSTER_SHM_SIZE="1g",
    )
    yield env
    cluster(env, "down", timeout=120)
    label = f"com.docker.compose.project={project}"
    for c in client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters={"label": label}):
        n.remove()


def test_cluster_up_runs_horovodrun_across_two_nodes_and_down_cleans_up(
    client, cluster_env, tmp_path
):
    up = cluster(cluster_env, "up", "2")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "horovodrun -np 4 -H node0:2,node1:2 python train.py" in up.stderr
    key_dir = tmp_path / "state" / "key"
    assert (key_dir / "id_ed25519").stat().st_mode & 0o077 == 0

    run = cluster(
        cluster_env,
        "exec",
        "horovodrun",
        "-np",
        "4",
        "-H",
        "node0:2,node1:2",
        "python",
        "/workspace/allreduce.py",
        timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    results = sorted(
        re.findall(r"RESULT (rank=\d+ size=\d+ sum=[\d.]+ weight=-?[\d.]+ host=node\d)", out)
    )
    assert results == [
        "rank=0 size=4 sum=10.0 weight=-2.5 host=node0",
        "rank=1 size=4 sum=10.0 weight=-2.5 host=node0",
        "rank=2 size=4 sum=10.0 weight=-2.5 host=node1",
        "rank=3 size=4 sum=10.0 weight=-2.5 host=node1",
    ], out

    # The key is the cluster's: not in the image, gone with the cluster.
    project = cluster_env["CLUSTER_PROJECT"]
    assert cluster(cluster_env, "up", "2").returncode != 0  # already up: refused, not doubled
    down = cluster(cluster_env, "down", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    label = f"com.docker.compose.project={project}"
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert client.networks.list(filters={"label": label}) == []
    assert not key_dir.exists()


@pytest.mark.parametrize("nodes", ["0", "9", "two"])
def test_cluster_up_refuses_a_bad_node_count(cluster_env, nodes):
    result = cluster(cluster_env, "up", nodes, timeout=60)
    assert result.returncode != 0
    assert "NODES must be a number from 1 to 8" in result.stderr
