"""`make bench`'s smoke (hostkit/bench.py --quick): one small size, one repeat, on 2 pinned
nodes of the local cluster. It checks the shape of what a run leaves and that every library,
the link, training, scaling, launch, the Pipe reader and the elastic part (a join and a
recovery) produced a figure; never a timing (the
numbers are the benchmark's business: docs/performance.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.container.support import ROOT, RUN_ID, have_compose


@pytest.fixture
def bench_env(client, image, tmp_path):
    if not have_compose():
        pytest.skip("no docker compose: `make test-container` installs docker-compose as root")
    project = f"byoc-bench-{RUN_ID}"
    env = dict(
        os.environ,
        CLUSTER_PROJECT=project,
        CLUSTER_STATE=str(tmp_path / "state"),
        BYOC_IMAGE=image.tags[0] if image.tags else image.id,
        CLUSTER_SHM_SIZE="1g",
    )
    yield env
    label = f"com.docker.compose.project={project}"
    for c in client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters={"label": label}):
        n.remove()


def test_quick_bench_measures_every_part_and_cleans_up(client, bench_env, tmp_path):
    out = tmp_path / "bench"
    # The bench's own limit, inside pytest's (900 s): a run that hangs stops itself and the
    # failure shows how far it got (once, in a cold CI run, it hung with nothing to show).
    cmd = [sys.executable, "-m", "hostkit.bench", "--quick", "--timeout", "600", "--out", str(out)]
    run = subprocess.run(
        cmd, env=bench_env, capture_output=True, text=True, timeout=840, check=False, cwd=ROOT
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log
    (stamp,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert not list(out.glob(".work-*")), log  # the cluster's scratch workspace is gone
    label = f"com.docker.compose.project={bench_env['CLUSTER_PROJECT']}"
    assert client.containers.list(all=True, filters={"label": label}) == [], log

    results = json.loads((stamp / "results.json").read_text())
    assert "errors" not in results, results.get("errors")
    assert results["hosts"] == ["node0", "node1"]
    spread = {"min", "median", "max", "n"}
    assert set(results["link"]) == {"one_way_gbps", "bidir_per_direction_gbps"}
    assert all(set(v) == spread and v["median"] > 0 for v in results["link"].values())

    seen = {
        (d["lib"], d["controller"], d["compression"]): d for d in results["allreduce"]
    }  # every library and controller the cpu image has, fp32 and Horovod's fp16
    assert set(seen) == {
        ("horovod", "gloo", "none"),
        ("horovod", "gloo", "fp16"),
        ("horovod", "mpi", "none"),
        ("horovod", "mpi", "fp16"),
        ("torch", None, "none"),
    }
    for doc in seen.values():
        assert doc["world_size"] == 2 and doc["hosts"] == ["node0", "node1"], doc
        (row,) = doc["results"]
        assert row["bytes"] == 1 << 20 and len(row["busbw_gbps"]) == 1 and row["busbw_gbps"][0] > 0

    labels = [t["label"] for t in results["throughput"]]
    assert labels == ["Horovod", "DDP"]
    assert all(t["samples_per_s"]["summary"]["median"] > 0 for t in results["throughput"])
    assert results["scaling"]["hosts"] == 2 and results["scaling"]["efficiency"] > 0
    assert results["launch"]["horovodrun_s"]["median"] > 0
    cases = {(c["framing"], c["record_bytes"]) for c in results["pipe"]["results"]}
    assert cases == {
        ("recordio", 1024),
        ("recordio", 1 << 20),
        ("tfrecord", 1024),
        ("tfrecord", 1 << 20),
    }
    assert results["nccl_tests"] == {"skipped": "no GPU on this host"}

    elastic = json.loads((stamp / "elastic.json").read_text())
    assert len(elastic["join_s"]) == 1 and elastic["join_s"][0] > 0, elastic
    assert len(elastic["recovery_s"]) == 1 and elastic["recovery_s"][0] > 0, elastic

    assert (stamp / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "allreduce bus bandwidth, GB/s" in log and "link: one way" in log
