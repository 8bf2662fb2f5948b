"""What a newcomer types works as written: FLAVOR follows the machine (said once), every target
that runs $(IMAGE):$(TAG) builds it when missing, a local cluster keeps the image it was started
with, `make dev` leaves the checkout as it was and runs as the invoking user, and what the make
targets need besides Docker is installed as root on Debian/Ubuntu or named elsewhere. Fakes on
PATH (docker, nvidia-smi, id, make, apt-get, python3) record every call; no engine is touched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.fakes import script, tool_env

ROOT = Path(__file__).resolve().parents[2]

# A docker whose images exist unless FAKE_MISSING is set; compose's `up` marks the cluster up
# (FAKE_UP), after which `ps -aq` lists a container. Each call is logged with the BYOC_IMAGE it saw.
FAKE_DOCKER = r"""#!/bin/sh
printf 'docker %s | BYOC_IMAGE=%s\n' "$*" "${BYOC_IMAGE:-}" >> "${FAKE_LOG:?}"
case "$1 $2" in
"image inspect") [ -z "${FAKE_MISSING:-}" ] || exit 1 ;;
"compose version") echo "Docker Compose version v2" ;;
"ps -aq") [ ! -e "$FAKE_UP" ] || echo c0 ;;
esac
case " $* " in *" up -d "*) : > "$FAKE_UP" ;; esac
exit 0
"""
# A sub-make that only says what it was asked, with the flavor and tag it inherited.
FAKE_MAKE = r"""#!/bin/sh
printf 'submake %s FLAVOR=%s TAG=%s\n' "$*" "$FLAVOR" "$TAG" >> "${FAKE_LOG:?}"
"""
GPU_SMI = "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n"
NO_GPU_SMI = "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n"
# id as FAKE_USER (name:uid:gid) sees itself.
FAKE_ID = r"""#!/bin/sh
IFS=: read -r name uid gid <<EOF
${FAKE_USER:?}
EOF
case "$1" in -un) echo "$name" ;; -u) echo "$uid" ;; -g) echo "$gid" ;; *) exit 1 ;; esac
"""


@pytest.fixture
def host(tmp_path):
    """(env, calls, bin): a machine without GPUs, whose Docker has every image, as root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("fakedocker", FAKE_DOCKER),
        ("fakemake", FAKE_MAKE),
        ("nvidia-smi", NO_GPU_SMI),
        ("id", FAKE_ID),
    ):
        script(bin_dir, name, text)
    log = tmp_path / "calls.log"
    env = tool_env(
        tmp_path,
        bin_dir,
        DOCKER="fakedocker",
        FAKE_LOG=str(log),
        FAKE_UP=str(tmp_path / "up"),
        FAKE_USER="root:0:0",
        CLUSTER_GPUS="0",
    )
    for name in ("FLAVOR", "TAG", "IMAGE", "BYOC_IMAGE"):
        env.pop(name, None)

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return env, calls, bin_dir


def make(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def variables(done: subprocess.CompletedProcess) -> str:
    """make help's line of variables."""
    return next(line for line in done.stdout.splitlines() if line.startswith("Variables:"))


# --- FLAVOR follows the machine -----------------------------------------------------------------


def test_no_gpu_means_cpu_said_once_on_stderr(host):
    env, _, _ = host
    done = make(env, "help")
    assert done.returncode == 0, done.stderr
    assert "FLAVOR=cpu IMAGE=pytorch-horovod TAG=cpu" in variables(done)
    said = [line for line in done.stderr.splitlines() if "FLAVOR=" in line]
    assert said == ["make: FLAVOR=cpu (no NVIDIA GPU visible; FLAVOR=gpu to override)"]


def test_a_visible_gpu_means_gpu(host):
    env, _, bin_dir = host
    script(bin_dir, "nvidia-smi", GPU_SMI)
    done = make(env, "help")
    assert "FLAVOR=gpu IMAGE=pytorch-horovod TAG=gpu" in variables(done)
    assert "make: FLAVOR=gpu (an NVIDIA GPU is visible; FLAVOR=cpu to override)" in done.stderr


def test_a_tag_that_names_a_flavor_picks_it(host):
    env, _, bin_dir = host
    script(bin_dir, "nvidia-smi", GPU_SMI)
    done = make(env, "help", "TAG=cpu")
    assert "FLAVOR=cpu IMAGE=pytorch-horovod TAG=cpu" in variables(done)
    assert "make: FLAVOR=cpu (from TAG=cpu; FLAVOR=gpu to override)" in done.stderr


@pytest.mark.parametrize("given", [["FLAVOR=gpu"], ["FLAVOR=gpu", "TAG=cpu"]])
def test_a_given_flavor_is_kept_and_not_announced(host, given):
    env, _, _ = host
    done = make(env, "help", *given)
    assert "FLAVOR=gpu" in variables(done)
    assert "FLAVOR=" not in done.stderr


def test_a_sub_make_inherits_the_flavor_without_saying_it_again(host):
    env, _, _ = host
    done = make({**env, "FLAVOR": "cpu", "MAKELEVEL": "1"}, "help")
    assert "FLAVOR=" not in done.stderr


# --- every target that runs the image builds it when missing -------------------------------------

RUNS_THE_IMAGE = ["dev", "shell", "cluster-up", "slurm-up", "push", "sbom", "bench", "local-train"]


@pytest.mark.parametrize("target", RUNS_THE_IMAGE)
def test_a_missing_image_is_built_first_with_the_machines_flavor(host, tmp_path, target):
    """The sub-make only says it was asked: the image stays missing, so what runs it next fails
    (or, with the fake docker, runs nothing). A dev venv that is up to date: nothing installed."""
    env, calls, bin_dir = host
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()
    make(
        {**env, "FAKE_MISSING": "1"},
        *(target, f"MAKE={bin_dir}/fakemake", f"VENV={venv}", f"DEV_WORKSPACE={tmp_path}"),
    )
    log = calls()
    checked = log.index("docker image inspect pytorch-horovod:cpu | BYOC_IMAGE=")
    built = log.index("submake --no-print-directory build FLAVOR=cpu TAG=cpu")
    assert checked < built, log


@pytest.mark.parametrize("target", ["dev", "shell"])
def test_an_image_that_exists_is_not_rebuilt(host, tmp_path, target):
    env, calls, bin_dir = host
    done = make(env, target, "TAG=gpu", f"MAKE={bin_dir}/fakemake", f"DEV_WORKSPACE={tmp_path}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "docker image inspect pytorch-horovod:gpu | BYOC_IMAGE=" in calls()
    assert not [c for c in calls() if c.startswith("submake")]


def test_make_n_builds_nothing(host):
    env, calls, bin_dir = host
    done = make({**env, "FAKE_MISSING": "1"}, "-n", "dev", f"MAKE={bin_dir}/fakemake")
    assert done.returncode == 0, done.stderr
    assert calls() == []


def test_nccl_test_without_a_gpu_says_so_before_building_anything(host):
    env, calls, bin_dir = host
    done = make({**env, "FAKE_MISSING": "1"}, "nccl-test", f"MAKE={bin_dir}/fakemake")
    assert done.returncode != 0
    assert "nccl-test: no NVIDIA GPU here" in done.stderr
    assert not [c for c in calls() if c.startswith(("submake", "docker run"))]


def test_shell_builds_then_runs_the_image(host):
    env, calls, bin_dir = host
    done = make({**env, "FAKE_MISSING": "1"}, "shell", f"MAKE={bin_dir}/fakemake")
    assert done.returncode == 0, done.stderr
    log = calls()
    built = log.index("submake --no-print-directory build FLAVOR=cpu TAG=cpu")
    ran = [i for i, c in enumerate(log) if c.startswith("docker run --rm -it")]
    assert ran and ran[0] > built, log


# --- the shell tools name the command that fixes it ----------------------------------------------


@pytest.mark.parametrize(
    "tool, env_extra, command",
    [
        ("cluster.sh", {"TAG": "cpu"}, "'make build FLAVOR=cpu TAG=cpu' builds it"),
        ("cluster.sh", {}, "'make build FLAVOR=cpu TAG=cpu' builds it"),
        ("slurm.sh", {"TAG": "gpu"}, "'make build FLAVOR=gpu TAG=gpu' builds it"),
        ("slurm.sh", {"BYOC_IMAGE": "reg/x:v1"}, "'make build FLAVOR=cpu TAG=v1 IMAGE=reg/x'"),
    ],
)
def test_a_missing_image_names_the_build_for_it(host, tool, env_extra, command):
    env, _, _ = host
    done = subprocess.run(
        [str(ROOT / "scripts" / tool), "up", "2"],
        env={**env, "FAKE_MISSING": "1", **env_extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert command in done.stderr, done.stderr


# --- a cluster keeps its image -------------------------------------------------------------------


def cluster(env: dict, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "scripts" / "cluster.sh"), *args],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def compose_ups(calls: list[str]) -> list[str]:
    return [c for c in calls if " compose " in f" {c} " and " up -d " in c]


def test_scale_starts_new_nodes_from_the_image_the_cluster_was_started_with(host):
    env, calls, _ = host
    done = cluster(env, "up", "2", TAG="cpu")
    assert done.returncode == 0, done.stderr
    assert compose_ups(calls())[-1].endswith("BYOC_IMAGE=pytorch-horovod:cpu")
    done = cluster(env, "scale", "3", TAG="gpu")
    assert done.returncode == 0, done.stderr
    assert compose_ups(calls())[-1].endswith("BYOC_IMAGE=pytorch-horovod:cpu"), calls()
    assert "runs pytorch-horovod:cpu (from its cluster-up), not pytorch-horovod:gpu" in done.stderr


def test_scale_with_the_same_image_says_nothing_of_it(host):
    env, _, _ = host
    assert cluster(env, "up", "1", BYOC_IMAGE="reg/x:v1").returncode == 0
    done = cluster(env, "scale", "2", BYOC_IMAGE="reg/x:v1")
    assert done.returncode == 0, done.stderr
    assert "from its cluster-up" not in done.stderr


def test_a_cluster_env_without_its_image_is_refused(host, tmp_path):
    env, _, _ = host
    assert cluster(env, "up", "1").returncode == 0
    state = tmp_path / "cluster" / "cluster.env"
    state.write_text("".join(f"{x}\n" for x in state.read_text().split() if "IMAGE" not in x))
    done = cluster(env, "scale", "2")
    assert done.returncode != 0
    assert "damaged or from an older cluster.sh: 'make cluster-down' and up again" in done.stderr


# --- make dev -----------------------------------------------------------------------------------


def dev_run(env: dict, calls, *args: str) -> str:
    done = make(env, "dev", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [c for c in calls() if c.startswith("docker run ")]
    assert len(runs) == 1, calls()
    return runs[0]


def test_dev_runs_as_the_invoking_user_with_the_notebooks_outside_the_checkout(host, tmp_path):
    env, calls, _ = host
    dev = tmp_path / "dev"
    run = dev_run(
        {**env, "FAKE_USER": "alice:1234:1235"},
        calls,
        f"DEV_WORKSPACE={dev}",
        "DEV_ARGS=-e JUPYTER_TOKEN=t --memory 8g",
    )
    assert "-e BYOC_USER=alice -e BYOC_UID=1234 -e BYOC_GID=1235" in run
    assert f"-v {dev}:/workspace -v {ROOT}:/workspace/repo -e JUPYTER_TOKEN=t --memory 8g " in run
    assert run.split(" | ")[0].endswith(" pytorch-horovod:cpu")
    assert "--gpus" not in run
    assert (dev / "repo").is_dir()  # made here as the user, not by the engine as root


def test_dev_workspace_is_git_ignored_by_default(host):
    env, _, _ = host
    done = make(env, "-n", "dev")
    assert f'-v "{ROOT}/local/dev":/workspace -v "{ROOT}":/workspace/repo' in done.stdout
    assert "/local/" in (ROOT / ".gitignore").read_text().split()


@pytest.mark.parametrize(
    "user, args, expected",
    [
        ("root:0:0", (), None),  # make as root: the container's root is yours
        ("alice:1234:1234", ("DEV_USER=root",), None),
        ("John.Doe:1234:1234", (), "-e BYOC_USER=dev -e BYOC_UID=1234 -e BYOC_GID=1234"),
        ("root:0:0", ("DEV_USER=bob",), "-e BYOC_USER=bob -v"),  # the image's uid 1000
    ],
)
def test_dev_user(host, tmp_path, user, args, expected):
    env, calls, _ = host
    run = dev_run({**env, "FAKE_USER": user}, calls, f"DEV_WORKSPACE={tmp_path}", *args)
    if expected is None:
        assert "BYOC_USER" not in run
    else:
        assert expected in run


def test_dev_passes_the_gpus_where_one_is_visible(host, tmp_path):
    env, calls, bin_dir = host
    script(bin_dir, "nvidia-smi", GPU_SMI)
    run = dev_run(env, calls, f"DEV_WORKSPACE={tmp_path}")
    assert "--gpus all" in run and run.split(" | ")[0].endswith(" pytorch-horovod:gpu")


# --- prerequisites besides Docker ----------------------------------------------------------------


@pytest.fixture
def bare(tmp_path):
    """(env, apt log, bin): PATH of bash and a few tools only: no shellcheck, a python3 without
    venv, an apt-get that records and installs nothing unless FAKE_APT_MAKES names a tool."""
    bin_dir = tmp_path / "bare"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "basename", "sed", "chmod"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    script(bin_dir, "id", FAKE_ID)
    script(bin_dir, "python3", "#!/bin/sh\nexit 1\n")
    apt = tmp_path / "apt.log"
    script(
        bin_dir,
        "apt-get",
        '#!/bin/sh\necho "$*" >> "$APT_LOG"\n'
        'if [ -n "$FAKE_APT_MAKES" ]; then printf "#!/bin/sh\\n" > "$BIN/$FAKE_APT_MAKES"; '
        'chmod +x "$BIN/$FAKE_APT_MAKES"; fi\n',
    )
    env = {"PATH": str(bin_dir), "APT_LOG": str(apt), "BIN": str(bin_dir), "FAKE_APT_MAKES": ""}
    return env, apt, bin_dir


def prereq(env: dict, what: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(env["BIN"]) / "bash"), str(ROOT / "scripts" / "prereq.sh"), what],
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "what, package, advice",
    [
        ("venv", "python3-venv", "'sudo apt-get install python3-venv'"),
        ("shellcheck", "shellcheck", "'brew install shellcheck'"),
    ],
)
def test_a_missing_prerequisite_is_named_where_nothing_can_be_installed(
    bare, what, package, advice
):
    env, apt, _ = bare
    done = prereq(env, what, FAKE_USER="alice:1000:1000")
    assert done.returncode == 1
    assert advice in done.stderr and package in done.stderr, done.stderr
    assert not apt.exists()


def test_shellcheck_is_installed_as_root_on_debian(bare):
    env, apt, bin_dir = bare
    done = prereq(env, "shellcheck", FAKE_USER="root:0:0", FAKE_APT_MAKES="shellcheck")
    assert done.returncode == 0, done.stderr
    assert "installing shellcheck from the distribution" in done.stderr
    assert apt.read_text().splitlines() == [
        "update -qq",
        "install -y -qq --no-install-recommends shellcheck",
    ]
    assert (bin_dir / "shellcheck").exists()


def test_an_install_that_does_not_help_is_an_error(bare):
    env, apt, _ = bare
    done = prereq(env, "venv", FAKE_USER="root:0:0")
    assert done.returncode == 1
    assert "python3-venv was installed, yet venv still does not work here" in done.stderr
    assert "install -y -qq --no-install-recommends python3-venv" in apt.read_text()


def test_the_targets_ask_for_their_prerequisites():
    makefile = (ROOT / "Makefile").read_text()
    stamp = makefile.split("$(DEV_STAMP): ", 1)[1].split("\n\n", 1)[0]
    lint = makefile.split("\nlint: ", 1)[1].split("\n\n", 1)[0]
    recipe = stamp.splitlines()[1:]
    venv = next(i for i, line in enumerate(recipe) if "-m venv" in line)
    assert any("scripts/prereq.sh venv" in line for line in recipe[:venv])
    assert "scripts/prereq.sh shellcheck" in lint.splitlines()[1]
