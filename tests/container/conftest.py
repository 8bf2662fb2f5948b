"""Fixtures for tests that drive the built image through the Docker SDK.

BYOC_IMAGE names the image (make test-container sets it). Every container a test starts goes
through the `containers` fixture, which removes it whatever the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid

import pytest

from hostkit import HostError
from hostkit.docker import Docker
from tests import helpers
from tests.helpers import wait_until

# Under `make test` the two lanes share these modules (tests/sharing.py): hooks, found by name.
from tests.sharing import pytest_configure, pytest_runtestloop, pytest_terminal_summary  # noqa: F401

docker = pytest.importorskip(
    "docker", reason="the Docker SDK is not installed (make test installs it)"
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = pathlib.Path(__file__).resolve().parent / "scripts"
RUN_ID = uuid.uuid4().hex[:8]


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/container" in str(item.fspath):
            item.add_marker(pytest.mark.container)


def logs(container) -> str:
    """A container's output so far, as text."""
    return container.logs().decode(errors="replace")


def processes(container) -> str:
    """What still runs in a container (ps: state, kernel wait channel, age, command), for the
    message of a test that timed out; says why where it cannot be had."""
    try:
        code, out = container.exec_run(["ps", "-eo", "pid,ppid,stat,wchan:24,etime,args"])
    except Exception as exc:  # noqa: BLE001 - a diagnostic only: the test fails anyway
        return f"(no process list: {exc})"
    return out.decode(errors="replace") if code == 0 else f"(ps exited {code})"


def host_port(container, port: str) -> int:
    """The host port the engine published container's port ("8888/tcp") on, once it has."""

    def published():
        container.reload()
        bound = (container.attrs["NetworkSettings"]["Ports"] or {}).get(port)
        return int(bound[0]["HostPort"]) if bound else None

    return wait_until(published, timeout=30, what=f"{port} published")


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


class Containers:
    """Starts containers of the image under test and remembers them for removal."""

    def __init__(self, client, image):
        self.client = client
        self.image = image
        self.started = []

    def start(self, command=None, **kw):
        kw.setdefault("detach", True)
        kw.setdefault("labels", {"byoc-test": RUN_ID})
        kw.setdefault("shm_size", "512m")
        # Created, recorded, then started: a container the engine creates but cannot start (a
        # refused --ulimit, say) is still removed by remove_all.
        c = self.client.containers.create(self.image.id, command, **kw)
        self.started.append(c)
        c.start()
        return c

    def run(self, command, timeout: float = 300, **kw) -> tuple[int, str]:
        """Run command to completion: (exit code, stdout+stderr)."""
        c = self.start(command, **kw)
        try:
            result = c.wait(timeout=timeout)
        except Exception as exc:  # requests' ReadTimeout: the container outlived the bound
            logs = c.logs().decode(errors="replace")
            raise AssertionError(f"{command!r} did not exit within {timeout} s:\n{logs}") from exc
        return result["StatusCode"], c.logs().decode(errors="replace")

    def remove_all(self):
        for c in self.started:
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True, v=True)


def image_output(image, command: list[str], entrypoint: str = "", timeout: float = 300) -> str:
    """command's stdout in a throwaway container of image, through the docker CLI's attached
    stream (the engine's logs of an exited container can come back cut short under load: an SBOM
    read that way once ended at 133 of its 208 kB)."""
    done = Docker()(
        "run", "--rm", "--label", f"byoc-test={RUN_ID}", "--entrypoint", entrypoint,
        image.id, *command, timeout=timeout,
    )  # fmt: skip
    return done.stdout


def base_images(image) -> dict[str, str]:
    """The flavor's bases, as the image's SBOM names them (docker/build/write_sbom.py)."""
    bom = json.loads(image_output(image, ["/opt/byoc/sbom.cdx.json"], entrypoint="cat"))
    return {
        p["value"]: c["name"]
        for c in bom["components"]
        if c["type"] == "container"
        for p in c.get("properties", [])
        if p["name"].endswith(":base-image")
    }


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


# --- the local compose cluster (scripts/cluster.sh), as users drive it ------------------------
CLUSTER = ROOT / "scripts" / "cluster.sh"


def run_command(
    argv: list[str], env: dict[str, str], timeout: float = 300, cwd=None, stdin=None
) -> subprocess.CompletedProcess:
    """A host command with its output captured; past timeout, a failure naming it."""
    try:
        return subprocess.run(
            argv,
            env=env,
            cwd=cwd,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{' '.join(argv)} ran past {timeout} s") from exc


def run_script(
    script: pathlib.Path, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """One of scripts/*.sh with its output captured; past timeout, a failure naming it."""
    return run_command([str(script), *args], env, timeout)


def cluster(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_script(CLUSTER, env, *args, timeout=timeout)


def api_status(port: int, token: str | None) -> int:
    """The HTTP status of a Jupyter server's /api/status on loopback port, with token (None:
    none)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/status")
    if token is not None:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def have_compose() -> bool:
    if shutil.which("docker-compose"):
        return True
    try:
        return Docker()("compose", "version", check=False).returncode == 0
    except HostError:  # no docker CLI
        return False


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


# --- SageMaker-style jobs: one container per host on a private network -----------------------
HOSTS = ["algo-1", "algo-2"]


def sdk_encode(hps: dict) -> dict:
    return {k: json.dumps(v) for k, v in hps.items()}


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
