"""A newcomer types what the README says, and it works: its commands run in order, as typed, in a
copy of this checkout (the files git tracks and the untracked ones it does not ignore, made a git
repository of one commit) on a machine without a GPU (an `nvidia-smi` that lists none first on
PATH) with a fresh HOME:

- `make dev`: Jupyter answers with the token the log prints; stopped, it leaves the checkout as
  git had it (`git status --porcelain` empty) and what it made is the invoking user's. Once more
  as a user who is not root (`DEV_USER`, docs/development.md "Not root"), run as uid 4242 where
  the tests run as root: what it makes is that uid's, and git ignores it.
- `make cluster-up NODES=2`, `make cluster-scale NODES=3` (the third node runs the image the
  cluster started with), `make cluster-down` (no container or network left).
- `make slurm-up`, `make slurm-down`.

The README's first command, `make local-train FLAVOR=cpu HOSTS=2`, is what `make smoke` runs (with
each launcher, one short epoch) in `make test`: it is not trained again here.

Nothing is built: make's image is the one under test (BYOC_IMAGE). Where that is the README's
`pytorch-horovod:cpu`, make gets no variable at all; otherwise IMAGE= and TAG= name it, as a user
with another image name would. Cluster and Slurm projects get names of this run's own, so that a
cluster of the machine's user is never touched, and every container and network made here is
removed by a fixture's finalizer whatever the outcome.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.container.support import ROOT, RUN_ID, api_status, docker, have_compose, run_command
from tests.helpers import free_port, wait_until

pytestmark = pytest.mark.slow

README_IMAGE = "pytorch-horovod:cpu"
DEV_PORTS = {"JUPYTER_HOST_PORT": 8888, "SSH_HOST_PORT": 2222, "TENSORBOARD_HOST_PORT": 6006}
NOTEBOOK = "local/dev/getting-started.ipynb"
NON_ROOT = 4242  # uid and gid of the user who is not root, where the tests run as root
NO_GPU_SMI = "#!/bin/sh\necho 'NVIDIA-SMI has failed: no NVIDIA driver' >&2\nexit 9\n"
# What make exports to what it runs (so to these tests under `make test-container`) and what the
# test harness sets: a newcomer's shell has none of it.
HARNESS = {
    "FLAVOR",
    "TAG",
    "IMAGE",
    "DOCKER",
    "LOCAL_BASE",
    "NODES",
    "VENV",
    "MAKEFLAGS",
    "MAKELEVEL",
    "MFLAGS",
    "MAKEOVERRIDES",
    "BYOC_IMAGE",
    "BYOC_GPU_IMAGE",
    "PYTEST_ARGS",
    "XDG_STATE_HOME",
}
SETTINGS = ("CLUSTER_", "SLURM_", "DEV_", "JUPYTER_", "SSH_")  # a user's own make settings


def copy_checkout(dest: Path) -> Path:
    """This checkout as a newcomer's clone: git's files, one commit."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        rel = os.fsdecode(raw)
        src = ROOT / rel
        if not os.path.lexists(src) or (src.is_dir() and not src.is_symlink()):
            continue  # deleted in the worktree, or a submodule
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    git = ["git", "-C", str(dest), "-c", "user.name=newcomer", "-c", "user.email=new@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], check=True)
    return dest


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", f"safe.directory={repo}", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def git_status(repo: Path) -> str:
    return git(repo, "status", "--porcelain")


def ignored(repo: Path) -> set[str]:
    """The files git ignores (none of them tracked)."""
    return set(git(repo, "ls-files", "--others", "--ignored", "--exclude-standard").splitlines())


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Newcomer:
    """A shell in the copy: its environment, and make as typed (plus IMAGE=/TAG= where the image
    under test is not the README's)."""

    def __init__(self, repo: Path, home: Path, bin_dir: Path, image_ref: str):
        self.repo = repo
        env = {
            k: v for k, v in os.environ.items() if k not in HARNESS and not k.startswith(SETTINGS)
        }
        # The engine's client plugins (buildx) may live in the real user's ~/.docker.
        if "DOCKER_CONFIG" not in env and (Path.home() / ".docker").is_dir():
            env["DOCKER_CONFIG"] = str(Path.home() / ".docker")
        env.update(
            HOME=str(home),
            PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
            CLUSTER_PROJECT=f"byoc-newcomer-{RUN_ID}",
            SLURM_PROJECT=f"byoc-newcomer-slurm-{RUN_ID}",
        )
        self.env = env
        name, _, tag = image_ref.rpartition(":")
        self.image_args = [] if image_ref == README_IMAGE else [f"IMAGE={name}", f"TAG={tag}"]

    def make(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        cmd = ["make", *args, *self.image_args]
        done = run_command(cmd, self.env, timeout, cwd=self.repo, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (
            f"{' '.join(cmd)}: exit {done.returncode}\n" + (done.stdout + done.stderr)[-6000:]
        )
        return done


class Dev:
    """`make dev` in the foreground on a terminal of its own, as typed (it runs `docker run -it`),
    until stop(): the container stopped with `docker stop`, as a user ends it."""

    def __init__(self, client, newcomer: Newcomer, args: list[str], prefix: list[str], env=None):
        self.client = client
        self.repo = newcomer.repo
        master, slave = pty.openpty()
        self.master = master
        self.chunks: list[bytes] = []
        self.cmd = [*prefix, "make", "dev", *newcomer.image_args, *args]
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=self.repo,
            env=env or newcomer.env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,  # its own process group, ended by that id at cleanup
        )
        os.close(slave)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                return
            if not data:
                return
            self.chunks.append(data)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def containers(self) -> list:
        """The containers that mount this copy (the dev container, while it runs); sparse: as
        listed, since a container removed meanwhile (--rm) cannot be inspected."""
        found = []
        for c in self.client.containers.list(all=True, sparse=True):
            mounts = c.attrs.get("Mounts") or []
            if any(str(m.get("Source", "")).startswith(str(self.repo)) for m in mounts):
                found.append(c)
        return found

    def container(self, timeout: float = 120):
        """The dev container once it runs; fails at once if make ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{' '.join(self.cmd)} ended:\n{self.output[-6000:]}")
            found = [c for c in self.containers() if c.status == "running"]
            if found:
                found[0].reload()
                return found[0]
            time.sleep(0.5)
        raise AssertionError(f"no dev container within {timeout} s:\n{self.output[-6000:]}")

    def stop(self) -> int:
        for c in self.containers():
            with contextlib.suppress(docker.errors.NotFound):
                c.stop(timeout=10)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"make dev still runs 60 s after docker stop:\n{self.output}"
            ) from exc

    def cleanup(self) -> None:
        for c in self.containers():
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        if self.proc.poll() is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
                    break
        self.reader.join(5)
        if self.master >= 0:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = -1


@pytest.fixture(scope="module")
def image_ref(image):
    if not image.tags:
        pytest.skip("the image under test has no tag: make needs IMAGE and TAG to name it")
    return image.tags[0]


def no_gpu_bin(directory: Path) -> Path:
    """A directory for the front of PATH whose nvidia-smi lists no GPU."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nvidia-smi").write_text(NO_GPU_SMI)
    (directory / "nvidia-smi").chmod(0o755)
    return directory


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    """This machine as a newcomer's without a GPU; skips where make is missing."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    return no_gpu_bin(tmp_path_factory.mktemp("no-gpu-bin"))


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory, machine, image_ref):
    base = tmp_path_factory.mktemp("newcomer")
    home = base / "home"
    home.mkdir()
    return Newcomer(copy_checkout(base / "repo"), home, machine, image_ref)


@pytest.fixture
def dev_runs(client):
    runs: list[Dev] = []
    yield runs
    for run in runs:
        run.cleanup()


def dev_port_args() -> list[str]:
    """None where make dev's default host ports are free (as typed); else free ones, so that a
    service of the CI machine on 8888, 2222 or 6006 does not fail the test."""
    if all(port_free(p) for p in DEV_PORTS.values()):
        return []
    return [f"{name}={free_port()}" for name in DEV_PORTS]


def owned_by_others(root: Path, uid: int) -> list[str]:
    wrong = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if st.st_uid != uid:
            wrong.append(f"{path} (uid {st.st_uid})")
    return wrong


def test_the_copy_is_a_clean_clone(newcomer):
    """What every test below starts from: git reports nothing, the README's scripts run."""
    assert git_status(newcomer.repo) == ""
    for script in ("scripts/cluster.sh", "scripts/slurm.sh", "scripts/docker.sh"):
        assert os.access(newcomer.repo / script, os.X_OK), script


def test_make_dev_answers_and_leaves_the_checkout_clean(client, newcomer, dev_runs):
    ports = dev_port_args()
    jupyter = int(ports[0].split("=")[1]) if ports else DEV_PORTS["JUPYTER_HOST_PORT"]
    run = Dev(client, newcomer, ports, prefix=[])
    dev_runs.append(run)
    run.container()
    token = wait_until(
        lambda: (
            (m := re.search(r"getting-started\.ipynb\?token=([0-9a-f]{32,})", run.output))
            and m.group(1)
        ),
        timeout=90,
        what="Jupyter's URL with its token in make dev's output",
    )
    wait_until(lambda: api_status(jupyter, token) == 200, timeout=90, what="Jupyter answers")
    assert (newcomer.repo / NOTEBOOK).is_file(), run.output[-4000:]
    assert run.stop() == 0, run.output[-4000:]
    wait_until(lambda: run.containers() == [], timeout=30, what="the dev container removed (--rm)")
    assert git_status(newcomer.repo) == ""
    assert NOTEBOOK in ignored(newcomer.repo)
    assert owned_by_others(newcomer.repo / "local", os.geteuid()) == []


def non_root_prefix() -> list[str]:
    """How to run make as a user who is not root: nothing to add where the tests run as one; as
    root, uid NON_ROOT through setpriv, with the Docker socket's group so that it reaches the
    engine. Skips where that cannot be arranged."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no way to run make as a user who is not")
    groups = "0"
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        with contextlib.suppress(OSError):
            groups = str(os.stat(host.removeprefix("unix://")).st_gid)
    prefix = [
        "setpriv",
        f"--reuid={NON_ROOT}",
        f"--regid={NON_ROOT}",
        f"--groups={groups}",
        "--inh-caps=-all",
        "--",
    ]
    probe = subprocess.run(
        [*prefix, "docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"uid {NON_ROOT} cannot reach the Docker engine here: {probe.stderr.strip()}")
    return prefix


def test_make_dev_as_a_user_who_is_not_root(client, image_ref, dev_runs):
    prefix = non_root_prefix()
    uid = NON_ROOT if prefix else os.geteuid()
    # A directory that user may enter (pytest's own are root's alone, mode 700).
    base = Path(tempfile.mkdtemp(prefix="byoc-newcomer-"))
    try:
        os.chmod(base, 0o755)
        home = base / "home"
        home.mkdir()
        # Its own PATH directory: pytest's is not that user's to enter.
        me = Newcomer(copy_checkout(base / "repo"), home, no_gpu_bin(base / "bin"), image_ref)
        env = dict(me.env)
        if prefix:
            env.pop("DOCKER_CONFIG", None)  # root's ~/.docker is not this user's to read
            for path in [base, *base.rglob("*")]:
                os.lchown(path, NON_ROOT, NON_ROOT)
        run = Dev(client, me, dev_port_args(), prefix=prefix, env=env)
        dev_runs.append(run)
        given = run.container().attrs["Config"]["Env"]
        assert f"BYOC_UID={uid}" in given, given  # make dev's DEV_USER: this uid, not root
        notebook = me.repo / NOTEBOOK
        wait_until(notebook.is_file, timeout=60, what=f"{NOTEBOOK} copied in")
        assert run.stop() == 0, run.output[-4000:]
        made = owned_by_others(me.repo / "local", -1)  # every path make dev made
        assert owned_by_others(me.repo / "local", uid) == [], made
        # git reports none of it: every file is ignored.
        assert git_status(me.repo) == ""
        assert NOTEBOOK in ignored(me.repo)
    finally:
        for done in dev_runs:  # before its files go (the fixture's finalizer repeats it)
            done.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cluster_label(client, newcomer):
    """The cluster's compose label: whatever happens, `make cluster-down`, then anything of it
    left is removed."""
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen here: scripts/cluster.sh makes the cluster's key with it")
    if not have_compose():
        pytest.skip("no docker compose: `make test-container` installs docker-compose as root")
    project = newcomer.env["CLUSTER_PROJECT"]
    yield f"com.docker.compose.project={project}"
    with contextlib.suppress(Exception):
        newcomer.make("cluster-down", timeout=120)
    label = f"com.docker.compose.project={project}"
    for c in client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True, v=True)
    for n in client.networks.list(filters={"label": label}):
        n.remove()


def test_cluster_up_scale_down(client, image, newcomer, cluster_label):
    def nodes(running_only=True):
        return sorted(
            client.containers.list(all=not running_only, filters={"label": cluster_label}),
            key=lambda c: c.name,
        )

    newcomer.make("cluster-up", "NODES=2", timeout=300)
    assert len(nodes()) == 2
    newcomer.make("cluster-scale", "NODES=3", timeout=300)
    up = nodes()
    assert len(up) == 3, [c.name for c in up]
    assert {c.image.id for c in up} == {image.id}  # the third node runs the cluster's image
    assert git_status(newcomer.repo) == ""
    newcomer.make("cluster-down", timeout=180)
    assert nodes(running_only=False) == []
    assert client.networks.list(filters={"label": cluster_label}) == []


@pytest.fixture
def slurm_project(client, newcomer):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen here: scripts/slurm.sh makes the cluster's key with it")
    project = newcomer.env["SLURM_PROJECT"]
    yield project
    with contextlib.suppress(Exception):
        newcomer.make("slurm-down", timeout=120)
    for c in client.containers.list(all=True, filters={"label": f"byoc.slurm={project}"}):
        c.remove(force=True, v=True)
    for n in client.networks.list(names=[project]):
        if n.name == project:
            n.remove()


def test_slurm_up_down(client, newcomer, slurm_project):
    label = {"label": f"byoc.slurm={slurm_project}"}
    # The test layer (tests/slurm/Dockerfile on the image) comes from the build cache where
    # test_slurm.py or an earlier run made it; cold, Debian's Slurm is installed into it.
    newcomer.make("slurm-up", timeout=600)
    running = client.containers.list(filters=label)
    assert len(running) == 3, [c.name for c in running]  # slurmctld, node0, node1
    assert git_status(newcomer.repo) == ""
    newcomer.make("slurm-down", timeout=180)
    assert client.containers.list(all=True, filters=label) == []
    assert [n for n in client.networks.list(names=[slurm_project]) if n.name == slurm_project] == []
