"""The local compose cluster (scripts/cluster.sh, docker/compose.yaml), driven as users drive it."""

from __future__ import annotations

import re

import pytest

from tests.container.support import cluster, rank_text

# Every test here depends on timing (docs/tests.md, "Tests that depend on timing").
pytestmark = pytest.mark.timing


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
    out = rank_text(run.stdout, run.stderr)
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
