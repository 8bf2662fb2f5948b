"""DOCKER may be several words (DOCKER='sudo docker'): every way the host tools call Docker (the
Makefile, scripts/*.sh through scripts/lib.sh, hostkit.docker) runs the whole command. A fake
`runas` (a sudo that records and runs its arguments) and a fake docker record every call; no
engine is needed and none is touched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hostkit import HostError
from hostkit import docker as hostdocker
from tests.unit.fakes import tool_env

ROOT = Path(__file__).resolve().parents[2]

# As sudo does, the environment is reset: only PATH (and the log's name) get through.
RUNAS = r"""#!/bin/sh
printf 'runas %s\n' "$*" >> "${FAKE_DOCKER_LOG:?}"
exec env -i PATH="$PATH" FAKE_DOCKER_LOG="$FAKE_DOCKER_LOG" "$@"
"""
# An engine that answers: a client older than 23 (BuildKit built in), nothing running.
FAKE_DOCKER = r"""#!/bin/sh
printf 'docker %s\n' "$*" >> "${FAKE_DOCKER_LOG:?}"
case "$1 $2" in
"version --format") echo 20.10.24 ;;
"compose version") echo "Docker Compose version v2" ;;
"image inspect") echo '[{}]' ;;
esac
case "$1" in build) printf 'buildkit=%s\n' "${DOCKER_BUILDKIT:-unset}" >> "$FAKE_DOCKER_LOG" ;; esac
exit 0
"""


@pytest.fixture
def fake(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("runas", RUNAS), ("fakedocker", FAKE_DOCKER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = tool_env(tmp_path, bin_dir, DOCKER="runas fakedocker", FAKE_DOCKER_LOG=str(log))

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return env, calls


def run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def through_runas(calls: list[str], *words: str) -> bool:
    """runas ran `fakedocker WORDS...` (and fakedocker then ran)."""
    wanted = " ".join(words)
    return any(c.startswith(f"runas fakedocker {wanted}") for c in calls) and any(
        c.startswith(f"docker {wanted}") for c in calls
    )


def test_docker_sh_keeps_a_two_word_client_whole(fake):
    env, calls = fake
    done = run(["scripts/docker.sh", "client"], env)
    assert done.returncode == 0 and done.stdout.strip() == "runas fakedocker", done.stderr
    done = run(["scripts/docker.sh", "engine"], env)
    assert done.returncode == 0, done.stderr
    assert through_runas(calls(), "info")


@pytest.mark.parametrize(
    "target, words",
    [
        ("engine", ("info",)),
        ("slurm-down", ("ps", "-aq", "--filter", "label=byoc.slurm=")),
        ("cluster-down", ("compose", "-p", "pytorch-horovod")),
    ],
)
def test_make_targets_run_a_two_word_docker_whole(fake, target, words):
    env, calls = fake
    done = run(["make", "--no-print-directory", target, "DOCKER=runas fakedocker"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert through_runas(calls(), *words), calls()


def test_hostkit_docker_runs_every_word(fake, monkeypatch):
    env, calls = fake
    for key in ("PATH", "DOCKER", "FAKE_DOCKER_LOG"):
        monkeypatch.setenv(key, env[key])
    docker = hostdocker.Docker()
    assert docker.cmd == ["runas", "fakedocker"]
    assert docker.exists("some/image:tag")
    docker("ps", "-aq")
    assert through_runas(calls(), "image", "inspect", "some/image:tag")
    assert through_runas(calls(), "ps", "-aq")


@pytest.mark.parametrize(
    "value, code, message",
    [
        ("/nonexistent/docker", 127, "does not exist"),
        ("no-such-docker-cli", 127, "is not on PATH"),
        ("{tmp}/not-executable", 126, "not an executable file"),
    ],
)
def test_hostkit_docker_refuses_a_docker_it_cannot_run(monkeypatch, tmp_path, value, code, message):
    (tmp_path / "not-executable").write_text("#!/bin/sh\n")
    monkeypatch.setenv("DOCKER", value.replace("{tmp}", str(tmp_path)))
    with pytest.raises(HostError, match=message) as exc:
        hostdocker.Docker()
    assert exc.value.code == code


def test_a_docker_past_its_timeout_is_a_timed_out_error(fake, monkeypatch, tmp_path):
    slow = tmp_path / "bin" / "slowdocker"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", fake[0]["PATH"])
    monkeypatch.setenv("DOCKER", "slowdocker")
    with pytest.raises(HostError, match="took more than 0.5 s") as exc:
        hostdocker.Docker()("wait", "x", check=False, timeout=0.5)
    assert exc.value.code == hostdocker.TIMED_OUT


def test_a_build_gets_buildkit_through_a_wrapper_that_resets_the_environment(fake, monkeypatch):
    """Docker < 23 builds with BuildKit only when DOCKER_BUILDKIT=1 reaches it; sudo drops the
    variable, so it goes on the command line, right before the docker program."""
    env, calls = fake
    done = run(["bash", "-c", ". scripts/lib.sh && docker_init && dk_build -t x ."], env)
    assert done.returncode == 0, done.stderr
    for key in ("PATH", "DOCKER", "FAKE_DOCKER_LOG"):
        monkeypatch.setenv(key, env[key])
    hostdocker.Docker().build("-t", "y", ".")
    log = calls()
    for tag in ("x", "y"):
        at = log.index(f"docker build -t {tag} .")
        assert log[at - 1] == f"runas env DOCKER_BUILDKIT=1 fakedocker build -t {tag} ."
        assert log[at + 1] == "buildkit=1"
