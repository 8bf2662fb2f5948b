"""Fixtures for tests that drive the built image through the Docker SDK; what the tests share
besides fixtures is in support.py.

BYOC_IMAGE names the image (make test-container sets it). Every container a test starts goes
through the `containers` fixture, which removes it whatever the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid

import pytest

from tests import helpers
from tests.container.support import (
    HOSTS,
    RUN_ID,
    SCRIPTS,
    Containers,
    cluster,
    docker,
    have_compose,
    logs,
    processes,
    sdk_encode,
)

# Under `make test` the two lanes share these modules (tests/sharing.py): hooks, found by name.
from tests.sharing import pytest_configure, pytest_runtestloop, pytest_terminal_summary  # noqa: F401


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/container" in str(item.fspath):
            item.add_marker(pytest.mark.container)


@pytest.fixture(scope="session")
def client():
    try:
        c = docker.from_env()
        c.ping()
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("BYOC_REQUIRE_DOCKER"):
            pytest.fail(f"no Docker engine answers ({exc}); BYOC_REQUIRE_DOCKER is set")
        pytest.skip(
            f"no Docker engine answers ({exc}): run `make test-container`, which starts one"
        )
    return c


@pytest.fixture(scope="session")
def image(client):
    name = os.environ.get("BYOC_IMAGE", "pytorch-horovod:cpu")
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        pytest.fail(f"image {name} not found: build it with `make build FLAVOR=cpu`")


@pytest.fixture
def containers(client, image):
    pool = Containers(client, image)
    yield pool
    pool.remove_all()


@pytest.fixture
def scripts_volume():
    """The test scripts, mounted read-only at /tests in a container."""
    return {str(SCRIPTS): {"bind": "/tests", "mode": "ro"}}


@pytest.fixture(scope="session")
def gpu_image(client):
    name = os.environ.get("BYOC_GPU_IMAGE", "pytorch-horovod:gpu-standin")
    try:
        return client.images.get(name)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
        pytest.fail(f"image {name} not found: `make test-gpu-flavor` builds it on the stand-ins")


@pytest.fixture
def gpu(client, gpu_image):
    pool = Containers(client, gpu_image)
    yield pool
    pool.remove_all()


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


@pytest.fixture
def job(client, containers, tmp_path):
    """Start SageMaker-style instances of the image on a private network; removed afterwards."""
    network = client.networks.create(f"byoc-test-{uuid.uuid4().hex[:8]}", internal=True)
    started = {}

    def write(host, hosts, hps, resource=None):
        """host's /opt/ml: resource adds to resourceconfig.json (instance groups, say)."""
        root = tmp_path / host
        cfg = root / "input" / "config"
        cfg.mkdir(parents=True, exist_ok=True)
        config = {"current_host": host, "hosts": hosts, "network_interface_name": "eth0"}
        (cfg / "resourceconfig.json").write_text(json.dumps({**config, **(resource or {})}))
        (cfg / "hyperparameters.json").write_text(json.dumps(hps))
        (cfg / "inputdataconfig.json").write_text("{}")
        return root

    def start(
        host, hosts=HOSTS, hps=None, env=None, write_config=True, launcher="horovod", resource=None
    ):
        """As the SDK v2 sends distribution={"mpi": {"enabled": True, "processes_per_host": 2}}
        or {"torch_distributed": {"enabled": True}} (no count: 2 CPU slots by the setting)."""
        if launcher == "torchrun":
            distribution = {"sagemaker_torch_distributed_enabled": True}
        else:
            distribution = {
                "sagemaker_mpi_enabled": True,
                "sagemaker_mpi_num_of_processes_per_host": 2,
            }
        hps = sdk_encode({**distribution, **(hps or {})})
        root = write(host, hosts, hps, resource) if write_config else tmp_path / host
        c = containers.start(
            ["train"],
            volumes={str(root): {"bind": "/opt/ml", "mode": "rw"}},
            environment={
                "BYOC_LEADER_TIMEOUT": "120",
                "BYOC_LEADER_LOST_AFTER": "20",
                "BYOC_CPU_SLOTS_PER_HOST": "2",
                **(env or {}),
            },
            network=network.name,
            # The alias is the name peers use; the hostname stays the container ID (local mode).
            networking_config={network.name: client.api.create_endpoint_config(aliases=[host])},
        )
        started[host] = c
        return c, root

    def wait_all(timeout):
        """{host: (exit code, seconds since the first start)}; every host must have ended."""
        results = helpers.wait_all(started, timeout)
        running = sorted(set(started) - set(results))
        assert not running, f"{running} still running after {timeout} s:\n" + "\n".join(
            f"--- {h}\n"
            + logs(c)[-6000:]
            + (f"--- {h} processes\n" + processes(c) if h in running else "")
            for h, c in started.items()
        )
        return results

    class Job:
        pass

    j = Job()
    j.start, j.wait_all, j.started, j.write = start, wait_all, started, write
    yield j
    for c in started.values():
        with contextlib.suppress(Exception):  # may be gone already
            c.remove(force=True)
    network.remove()
