"""What the container tests share besides fixtures (those are in conftest.py): paths, reading a
container's output, the jobs' rank output joined into whole lines, host commands with a bound.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid

import pytest
from byoc.report import rank_lines

from hostkit import HostError
from hostkit.docker import Docker
from tests.helpers import wait_until

docker = pytest.importorskip(
    "docker", reason="the Docker SDK is not installed (make test installs it)"
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = pathlib.Path(__file__).resolve().parent / "scripts"
CLUSTER = ROOT / "scripts" / "cluster.sh"
RUN_ID = uuid.uuid4().hex[:8]  # labels what this test run started
HOSTS = ["algo-1", "algo-2"]  # a SageMaker-style job's hosts (the job fixture)


def logs(container) -> str:
    """A container's output so far, as text."""
    return container.logs().decode(errors="replace")


def rank_text(*outputs: str) -> str:
    """The ranks' output lines of each of outputs (a container's log, a job's output) whole, as
    `train`'s watcher reads them (byoc.report.RankLines): mpirun tags every chunk a rank writes,
    so a line without its newline yet runs into another rank's tag ("sum=6[1,2]<stdout>:") and
    ends later under its own; torch's "[rankN]: " goes too. Each output is joined on its own."""
    return "\n".join(text for out in outputs for _, text in rank_lines(out))


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

    def run(self, command, timeout: float = 300, stderr: bool = True, **kw) -> tuple[int, str]:
        """Run command to completion: (exit code, stdout+stderr; stdout alone without stderr,
        for output to parse: the engine's log orders the two streams only roughly)."""
        c = self.start(command, **kw)
        try:
            result = c.wait(timeout=timeout)
        except Exception as exc:  # requests' ReadTimeout: the container outlived the bound
            raise AssertionError(
                f"{command!r} did not exit within {timeout} s:\n{logs(c)}"
            ) from exc
        return result["StatusCode"], c.logs(stderr=stderr).decode(errors="replace")

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
    """scripts/cluster.sh (the local compose cluster), as users drive it."""
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


def sdk_encode(hps: dict) -> dict:
    """Hyperparameters as the SageMaker SDK writes them: every value JSON-encoded."""
    return {k: json.dumps(v) for k, v in hps.items()}
