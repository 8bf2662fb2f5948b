"""Hostile input to the host tools: hostkit/local_train.py, hostkit.aws.launch and hostkit.aws.push.

Every case checks the exit code (2 for bad input), that the message names the option, that no
traceback came instead, and that nothing was written or deleted outside its place: tmp_path is
listed before and after (files' contents included); for local_train a fake docker CLI records
its calls and must have seen no `run` (no container started); for launch and push nothing may be
made in moto (tests/aws_fake.py). No Docker engine is used: local_train is taken up to the point
where containers would start, push to the point where the Docker SDK would be asked. The job
both local_train and launch render (hostkit.job) has its hostile cases once, in
test_job_description.py; here, that each tool's command line reaches them, and what only one
tool refuses.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import types
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from hostkit import local_train
from hostkit.aws import common, launch, limits, push
from tests.aws_fake import ACCOUNT
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[3]
LOCAL_TRAIN = ["-m", "hostkit.local_train"]  # with ROOT on PYTHONPATH
JOB = "hostile-job"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerTraining"
IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/pytorch-horovod:gpu"
BUCKET = f"sagemaker-us-east-1-{ACCOUNT}"

# Records every call in $FAKE_DOCKER_LOG; answers as an engine would, as the test asks.
FAKE_DOCKER = r"""#!/bin/sh
printf '%s\n' "$*" >> "${FAKE_DOCKER_LOG:?}"
case "$1" in
image)
    if [ -n "$FAKE_DOCKER_NO_IMAGE" ]; then echo "Error: No such image: $3" >&2; exit 1; fi
    echo '[{}]' ;;
network)
    if [ "$2" = create ] && [ -n "$FAKE_DOCKER_NETWORK_TAKEN" ]; then
        echo "Error response from daemon: network with name $6 already exists" >&2; exit 1
    fi ;;
run)
    if [ "$4" = "$FAKE_DOCKER_NAME_TAKEN" ]; then
        echo "docker: Conflict. The container name \"/$4\" is already in use" >&2
        exit 125
    fi
    echo "cid-$4" ;;
wait)
    echo "${FAKE_DOCKER_WAIT-0}" ;;
esac
exit 0
"""
FAKE_DOCKER_ENV = (
    "FAKE_DOCKER_NO_IMAGE",
    "FAKE_DOCKER_NETWORK_TAKEN",
    "FAKE_DOCKER_NAME_TAKEN",
    "FAKE_DOCKER_WAIT",
)


def listing(root: Path) -> dict[str, tuple]:
    """Every path under root but bin/ (the fake docker's), with its type and content or target."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):  # symlinks are not followed
        here = Path(dirpath)
        if here.relative_to(root).parts[:1] == ("bin",):
            continue
        for name in dirnames + filenames:
            path = here / name
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                content = path.read_bytes()
            elif stat.S_ISLNK(mode):
                content = os.readlink(path)
            else:
                content = None
            found[str(path.relative_to(root))] = (stat.S_IFMT(mode), content)
    return found


@pytest.fixture
def place(tmp_path, monkeypatch):
    """tmp_path/work (the current directory: data/, src/, out/ to come), outside/ (not to be
    touched) and bin/docker, the fake docker CLI ($DOCKER)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    work = tmp_path / "work"
    (work / "data" / "sub").mkdir(parents=True)
    (work / "data" / "a.txt").write_text("a")
    (work / "data" / "sub" / "b.txt").write_text("b")
    (work / "src").mkdir()
    (work / "src" / "train.py").write_text("print('hi')\n")
    (work / "src" / "run.sh").write_text("echo hi\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("SECRET = 1\n")
    (work / "src" / "link.py").symlink_to(outside / "secret.py")
    for name in FAKE_DOCKER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER", str(docker))
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(bin_dir / "docker.log"))
    monkeypatch.chdir(work)
    return types.SimpleNamespace(
        root=tmp_path, work=work, out=work / "out", outside=outside, log=bin_dir / "docker.log"
    )


def docker_calls(place) -> list[str]:
    return place.log.read_text().splitlines() if place.log.exists() else []


def expand(argv, place) -> list[str]:
    return [
        a.replace("{work}", str(place.work)).replace("{outside}", str(place.outside)) for a in argv
    ]


def local(place, capsys, argv, cli=False, env=None) -> tuple[int, str]:
    """local_train with --out and --job-name in place: in this process, or as a command."""
    args = ["--out", str(place.out), "--job-name", JOB, *expand(argv, place)]
    if not cli:
        try:
            code = local_train.main(args)
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        return code, captured.out + captured.err
    full = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, *LOCAL_TRAIN, *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )
    assert time.monotonic() - start < 60, "local_train took a minute to refuse"
    return result.returncode, result.stdout + result.stderr


def refused_locally(place, capsys, argv, code, words, cli=False, env=None) -> str:
    before = listing(place.root)
    got, text = local(place, capsys, argv, cli=cli, env=env)
    assert got == code, text
    for word in words:
        assert word in text, text
    assert "Traceback" not in text
    assert listing(place.root) == before
    assert not [c for c in docker_calls(place) if c.startswith("run ")]
    return text


def setup_fs(place, name: str) -> None:
    """Hostile file system states, made by name (parametrize ids stay readable)."""
    data, work = place.work / "data", place.work
    if name == "fifo":
        os.mkfifo(data / "pipe")
    elif name == "loop":
        (data / "sub" / "loop").symlink_to(data)
    elif name == "device":
        (data / "zero").symlink_to("/dev/null")  # /dev/zero would fill the disk, unrefused
    elif name == "dangling":
        (data / "gone").symlink_to(work / "nowhere")
    elif name == "colon":
        (work / "co:de").mkdir()
        (work / "co:de" / "train.py").write_text("print('hi')\n")


SRC = ["--source-dir", "{work}/src", "--entry-point", "train.py"]


# The configuration the hostile cases vary: accepted, and started as SageMaker would.
def test_good_input_reaches_docker_run(place, capsys):
    (place.work / "data" / "linked.txt").symlink_to(place.outside / "secret.py")
    argv = [*SRC, "--hp", "epochs=3", "--env", "NCCL_DEBUG=INFO", "--channel", "train={work}/data"]
    code, text = local(place, capsys, argv)
    assert code == 0, text
    runs = [c for c in docker_calls(place) if c.startswith("run ")]
    assert len(runs) == 2 and f"--name {JOB}-algo-1" in runs[0]
    copied = place.out / JOB / "algo-2" / "input" / "data" / "train"
    assert (copied / "sub" / "b.txt").read_text() == "b"
    assert (copied / "linked.txt").read_text() == "SECRET = 1\n"  # a symlinked file: its content
    assert not (copied / "linked.txt").is_symlink()


def test_local_train_renders_the_job_as_opt_ml_trees(place, capsys):
    """The job description (hostkit.job.Job) as SageMaker writes /opt/ml on each host, and the
    containers' environment; an entry point symlinked inside --source-dir is taken."""
    (place.work / "src" / "main.py").symlink_to("train.py")
    argv = ["--launcher", "torchrun", "--slots", "3", "--instance-type", "ml.p4d.24xlarge"]
    argv += ["--source-dir", "{work}/src", "--entry-point", "main.py", "--hp", "epochs=3"]
    argv += ["--env", "NCCL_DEBUG=INFO", "--channel", "train={work}/data"]
    code, text = local(place, capsys, argv)
    assert code == 0, text
    config = place.out / JOB / "algo-2" / "input" / "config"
    resource = json.loads((config / "resourceconfig.json").read_text())
    assert resource["current_host"] == "algo-2" and resource["hosts"] == ["algo-1", "algo-2"]
    assert resource["current_instance_type"] == "ml.p4d.24xlarge"
    assert json.loads((config / "hyperparameters.json").read_text()) == {
        "epochs": "3",
        "sagemaker_program": '"main.py"',
        "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.p4d.24xlarge"',
    }
    assert json.loads((config / "inputdataconfig.json").read_text()) == {
        "train": {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
    }
    run = next(c for c in docker_calls(place) if c.startswith("run "))
    for part in (
        f"-v {place.work / 'src'}:/opt/ml/code:ro",
        f"-e TRAINING_JOB_NAME={JOB}",
        "-e BYOC_CPU_SLOTS_PER_HOST=3",
        "-e NCCL_DEBUG=INFO",
    ):
        assert part in run, run


def resource(place, host: str) -> str:
    return (place.out / JOB / host / "input" / "config" / "resourceconfig.json").read_text()


def test_a_job_without_groups_is_written_as_before(place, capsys):
    code, text = local(place, capsys, ["--hosts", "2"])
    assert code == 0, text
    hosts = '["algo-1", "algo-2"]'
    assert resource(place, "algo-2") == (
        '{"current_host": "algo-2", "current_instance_type": "ml.local", "current_group_name": '
        f'"homogeneousCluster", "hosts": {hosts}, "instance_groups": [{{"instance_group_name": '
        f'"homogeneousCluster", "instance_type": "ml.local", "hosts": {hosts}}}], '
        '"network_interface_name": "eth0"}'
    )


def test_local_train_renders_instance_groups_on_every_host(place, capsys):
    """Hosts algo-1 ... algo-N in the groups' order, each in exactly one group, its own type
    and group in resourceconfig.json; the distributed groups as the SDK sends them."""
    argv = ["--instance-groups", "data:1:ml.c5.xlarge,train:2", "--instance-type", "ml.g5.xlarge"]
    argv += ["--distribution-groups", "train", "--hosts", "3", *SRC]
    code, text = local(place, capsys, argv)
    assert code == 0, text
    groups = [
        {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
        {
            "instance_group_name": "train",
            "instance_type": "ml.g5.xlarge",
            "hosts": ["algo-2", "algo-3"],
        },
    ]
    for group in groups:
        for host in group["hosts"]:
            assert json.loads(resource(place, host)) == {
                "current_host": host,
                "current_instance_type": group["instance_type"],
                "current_group_name": group["instance_group_name"],
                "hosts": ["algo-1", "algo-2", "algo-3"],
                "instance_groups": groups,
                "network_interface_name": "eth0",
            }
    config = place.out / JOB / "algo-3" / "input" / "config"
    hps = json.loads((config / "hyperparameters.json").read_text())
    assert hps["sagemaker_distribution_instance_groups"] == '["train"]'
    runs = [c for c in docker_calls(place) if c.startswith("run ")]
    assert [r.split("--network-alias ")[1].split()[0] for r in runs] == [
        "algo-1",
        "algo-2",
        "algo-3",
    ]


def test_local_train_mounts_a_warm_pool_cache_that_outlives_the_job(place, capsys):
    cache = place.root / "cache"
    for name in ("first", "second"):  # the second job finds the first one's directory
        argv = ["--job-name", name, "--warm-pool-cache", str(cache)]
        code, text = local(place, capsys, argv)
        assert code == 0, text
        assert (
            cache.is_dir()
            and (place.out / name / "algo-2" / "sagemaker" / "warmpoolcache").is_dir()
        )
    runs = [c for c in docker_calls(place) if c.startswith("run ")]
    assert len(runs) == 4
    for run in runs:
        assert f"-v {cache}:/opt/ml/sagemaker/warmpoolcache" in run, run
        assert (
            "-e SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY=/opt/ml/sagemaker/warmpoolcache" in run
        )


def test_local_train_warm_pool_cache_may_start_with_a_tilde(place, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(place.root))
    code, text = local(place, capsys, ["--warm-pool-cache", "~/cache"])
    assert code == 0, text
    assert (place.root / "cache").is_dir()


def refusal(case_id: str, words: list[str], *argv: str):
    return pytest.param(list(argv), words, id=case_id)


CACHE = "--warm-pool-cache"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        refusal("relative", ["--warm-pool-cache cache", "absolute"], CACHE, "cache"),
        refusal("file", ["not a directory"], CACHE, "{work}/data/a.txt"),
        refusal("link", ["leads elsewhere", "outside"], CACHE, "{work}/link"),
        refusal("through-link", ["leads elsewhere"], CACHE, "{work}/link/sub"),
        refusal("volume-spec", ["--warm-pool-cache", "':'"], CACHE, "{work}/c:d"),
        refusal("holds-the-jobs", ["overlaps --out"], CACHE, "{work}"),
        refusal("root", ["overlaps --out"], CACHE, "/"),
        refusal("in-source", ["overlaps --source-dir"], CACHE, "{work}/src/cache", *SRC),
        refusal(
            "groups",
            ["--warm-pool-cache is not for --instance-groups"],
            *(CACHE, "{work}/c", "--instance-groups", "a:2"),
        ),
        refusal(
            "hosts-disagree",
            ["--hosts 2 disagrees with --instance-groups (3 hosts)"],
            *("--instance-groups", "a:1,b:2", "--distribution-groups", "b", "--hosts", "2"),
        ),
        refusal(
            "unnamed", ["--distribution-groups: which of a, b"], "--instance-groups", "a:1,b:2"
        ),
        refusal(
            "unknown",
            ["--distribution-groups 'x'"],
            *("--instance-groups", "a:1", "--distribution-groups", "x"),
        ),
        refusal(
            "unused-type",
            ["--instance-type ml.y: every group"],
            *("--instance-groups", "a:1:ml.x", "--instance-type", "ml.y"),
        ),
        refusal("empty", ["--instance-groups ''"], "--instance-groups", ""),
    ],
)
def test_local_train_groups_and_warm_pool_cache(place, capsys, argv, words):
    (place.work / "link").symlink_to(place.outside)
    refused_locally(place, capsys, argv, 2, words)


def test_the_fallback_limits_are_botocores():
    """local_train.py runs under any python3: without botocore it uses limits.FALLBACK."""
    model = limits.service_model()
    for name, expected in limits.FALLBACK.items():
        meta = model.shape_for(name).metadata
        assert {k: meta[k] for k in ("min", "max", "pattern") if k in meta} == expected, name
    doc = model.shape_for("StoppingCondition").members["MaxRuntimeInSeconds"].documentation
    assert "The maximum value is 28 days" in doc
    assert limits.MAX_RUNTIME_S == 28 * 24 * 3600


# ============================================================================================
# injection: input that would become an option, a volume spec, a second line or a shell word
# ============================================================================================
@pytest.mark.parametrize(
    ("argv", "fs", "words"),
    [
        pytest.param(["--image=--privileged"], None, ["--image '--privileged'"], id="image-option"),
        pytest.param(["--image", "alpine;reboot"], None, ["--image"], id="image-shell"),
        pytest.param(["--image", "alpine\n"], None, ["--image"], id="image-newline"),
        pytest.param(
            ["--source-dir", "{work}/co:de", "--entry-point", "train.py"],
            "colon",
            ["--source-dir", "':'"],
            id="source-dir-volume-spec",
        ),
        pytest.param(["--out", "{work}/o:/etc"], None, ["--out", "':'"], id="out-volume-spec"),
        pytest.param(["--shm-size=--privileged"], None, ["--shm-size"], id="shm-size-option"),
    ],
)
def test_local_train_injection(place, capsys, argv, fs, words):
    if fs:
        setup_fs(place, fs)
    refused_locally(place, capsys, argv, 2, words)


def launch_args(tmp_path: Path) -> list[str]:
    src = tmp_path / "src"
    if not src.exists():
        src.mkdir()
        (src / "train.py").write_text("print('hi')\n")
        (tmp_path / "outside").mkdir()
        (tmp_path / "outside" / "secret.py").write_text("SECRET = 1\n")
        (src / "link.py").symlink_to(tmp_path / "outside" / "secret.py")
    return [
        "--image-uri",
        IMAGE,
        "--role",
        ROLE,
        "--instance-type",
        "ml.m5.xlarge",
        "--job-name",
        JOB,
        "--source-dir",
        str(src),
        "--entry-point",
        "train.py",
    ]


def nothing_in_aws() -> None:
    assert boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert boto3.client("s3").list_buckets()["Buckets"] == []
    assert boto3.client("ecr").describe_repositories()["repositories"] == []


def tool(main, argv) -> int:
    try:
        return common.run(main, argv)
    except SystemExit as exc:  # argparse's own refusals
        return exc.code


def refused_by_launch(tmp_path, capsys, argv, words, code=2) -> str:
    args = [*launch_args(tmp_path), *(a.replace("{tmp}", str(tmp_path)) for a in argv)]
    before = listing(tmp_path)
    got = tool(launch.main, args)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert got == code, text
    for word in words:
        assert word in text, text
    assert listing(tmp_path) == before
    nothing_in_aws()
    return text


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--image-uri", "img name"], ["--image-uri"], id="image-uri-space"),
        pytest.param(["--image-uri", IMAGE + "\n"], ["--image-uri"], id="image-uri-newline"),
        pytest.param(["--role", ROLE + "\n"], ["--role"], id="role-newline"),
        pytest.param(["--channel", "train=s3://bucket/x\n"], ["--channel train"], id="uri-newline"),
        pytest.param(
            ["--subnet", "subnet-1 x", "--security-group", "sg-1"], ["--subnet"], id="subnet"
        ),
        pytest.param(["--output-path", "s3://bucket/o\n"], ["--output-path"], id="output-path"),
        pytest.param(["--region", "us-east-1/../x"], ["--region"], id="region-path"),
    ],
)
def test_launch_injection(aws_env, tmp_path, capsys, argv, words):
    refused_by_launch(tmp_path, capsys, argv, words)


@pytest.fixture
def docker_asked(tmp_path_factory, monkeypatch):
    """A docker CLI ($DOCKER) that records being asked anything: bad input must not get that
    far. Returns what it was asked."""
    where = tmp_path_factory.mktemp("docker-cli")
    log = where / "asked.log"
    cli = where / "docker"
    cli.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log}\nexit 1\n")
    cli.chmod(0o755)
    monkeypatch.setenv("DOCKER", str(cli))
    return lambda: log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--registry", "https://evil.example/x"], ["--registry"], id="scheme-path"),
        pytest.param(["--registry", "user@host.example"], ["--registry"], id="registry-user"),
        pytest.param(["--registry", "host.example:99999"], ["--registry"], id="registry-port"),
        pytest.param(["--registry", "host\n.example"], ["--registry"], id="registry-newline"),
        pytest.param(["--tag", "v1\n"], ["--tag"], id="tag-newline"),
        pytest.param(["--image=--all"], ["--image '--all'"], id="image-option"),
        pytest.param(["--region", "us-east-1 x"], ["--region"], id="region-space"),
    ],
)
def test_push_injection(aws_env, tmp_path, capsys, docker_asked, argv, words):
    before = listing(tmp_path)
    assert tool(push.main, argv) == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err
    assert docker_asked() == []
    assert listing(tmp_path) == before
    nothing_in_aws()


# ============================================================================================
# data loss: a user's existing data (an earlier job's trees, another job's containers or
# source in S3) never overwritten, mixed or removed
# ============================================================================================
def test_an_existing_job_directory_is_refused_not_reused(place, capsys):
    model = place.out / JOB / "algo-1" / "model"
    model.mkdir(parents=True)
    (model / "model.pt").write_bytes(b"weeks of training")
    refused_locally(place, capsys, [], 2, ["--out", "already exists"])
    assert docker_calls(place) == []


def test_an_existing_job_directory_that_is_a_symlink_is_refused(place, capsys):
    place.out.mkdir()
    (place.out / JOB).symlink_to(place.outside)
    refused_locally(place, capsys, [], 2, ["--out", "already exists"])


def test_an_out_that_is_a_file_is_refused_and_kept(place, capsys):
    (place.work / "results.csv").write_text("precious\n")
    refused_locally(place, capsys, ["--out", "{work}/results.csv"], 2, ["--out", "results.csv"])


def test_a_container_name_taken_by_another_job_is_not_removed(place, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NAME_TAKEN", f"{JOB}-algo-2")
    before = listing(place.root)
    code, text = local(place, capsys, [])
    assert code == 1 and "already in use" in text and "Traceback" not in text
    calls = docker_calls(place)
    assert f"rm -f {JOB}-algo-1" in calls  # ours, started
    assert f"rm -f {JOB}-algo-2" not in calls  # the other job's: left alone
    after = listing(place.root)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing changed or gone
    assert all(k.startswith(f"work/out/{JOB}") or k == "work/out" for k in after.keys() - before)


def test_a_network_name_taken_by_another_job_is_not_removed(place, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NETWORK_TAKEN", "1")
    place.out.mkdir()
    before = listing(place.root)
    code, text = local(place, capsys, [])
    assert code == 1 and "network create" in text and "Traceback" not in text
    calls = docker_calls(place)
    assert not [c for c in calls if c.startswith(("run ", "rm ", "network rm"))]
    assert listing(place.root) == before  # the job directory it had made is gone again


def test_relaunching_a_job_name_keeps_the_first_jobs_source(aws_env, tmp_path, capsys):
    args = launch_args(tmp_path)
    assert tool(launch.main, args) == 0
    key = f"{JOB}/source/sourcedir.tar.gz"
    first = boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    (tmp_path / "src" / "train.py").write_text("print('changed')\n")
    before = listing(tmp_path)
    assert tool(launch.main, args) == 2
    assert "--job-name hostile-job: a training job of this name exists" in capsys.readouterr().err
    assert boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read() == first
    assert len(boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]) == 1
    assert listing(tmp_path) == before


# ============================================================================================
# the one job description (hostkit.job, its hostile cases in test_job_description.py): each
# tool's command line reaches its checks, which name the tool's own flags
# ============================================================================================
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--hosts", "0"], ["--hosts must be 1-64, not 0"], id="hosts"),
        pytest.param(["--slots", "257"], ["--slots must be 1-256"], id="slots"),
        pytest.param(
            ["--launcher", "torchrun", "--custom-mpi-options=-x A=1"],
            ["--custom-mpi-options is for --launcher horovod, not torchrun"],
            id="mpi-options-torchrun",
        ),
        pytest.param(
            ["--launcher", "torchrun", *SRC[:2], "--entry-point", "run.sh"],
            ["--launcher torchrun runs python programs"],
            id="torchrun-shell-script",
        ),
        pytest.param(
            [*SRC[:2], "--entry-point", "link.py"],
            ["--entry-point link.py", "outside"],
            id="entry-point-symlink-out",
        ),
        pytest.param(["--channel", "../x={work}/data"], ["--channel '../x'"], id="channel-up"),
        pytest.param(["--hp", "a=1", "--hp", "a=2"], ["--hp a: given twice"], id="hp-twice"),
        pytest.param(
            ["--hp", "sagemaker_mpi_enabled=false"], ["set by --launcher"], id="hp-launcher"
        ),
        pytest.param(["--env", "TRAINING_JOB_NAME=x"], ["set by --job-name"], id="env-job-name"),
        pytest.param(["--job-name", ""], ["--job-name ''"], id="job-name-empty"),
        pytest.param(["--instance-type", "ml.x\nY"], ["--instance-type"], id="type-newline"),
    ],
)
def test_local_train_reaches_the_job_description(place, capsys, argv, words):
    refused_locally(place, capsys, argv, 2, words)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--instance-count", "0"], ["--instance-count must be 1-"], id="count"),
        pytest.param(
            ["--processes-per-host", "257"], ["--processes-per-host must be 1-256"], id="pph"
        ),
        pytest.param(
            ["--distribution", "none", "--custom-mpi-options=-x A=1"],
            ["--custom-mpi-options is for --distribution mpi, not none"],
            id="mpi-options-none",
        ),
        pytest.param(["--entry-point", "link.py"], ["--entry-point link.py"], id="entry-symlink"),
        pytest.param(["--channel", "..=s3://bucket/x"], ["--channel '..'"], id="channel-dotdot"),
        pytest.param(["--channel", "t=s3://bucket/x,mode=pipe"], ["mode must be"], id="mode"),
        pytest.param(["--hp", "sagemaker_program=x.py"], ["set by --entry-point"], id="hp-program"),
        pytest.param(
            ["--env", "BYOC_SSH_PRIVATE_KEY=x"],
            ["--env BYOC_SSH_PRIVATE_KEY", "--ssh-key-in-environment"],
            id="ssh-key-without-the-opt-in",
        ),
        pytest.param(["--job-name", "a" * 64], ["--job-name", "63"], id="job-name-long"),
    ],
)
def test_launch_reaches_the_job_description(aws_env, tmp_path, capsys, argv, words):
    refused_by_launch(tmp_path, capsys, argv, words)


KEEP = "--keep-alive-seconds"
PLAN = "--training-plan-arn"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        refusal(
            "group-empty", ["--instance-groups a: the count must be 1-"], "--instance-groups", "a:0"
        ),
        refusal(
            "count",
            ["--instance-count is not for"],
            "--instance-groups",
            "a:1",
            "--instance-count",
            "1",
        ),
        refusal(
            "group-type",
            ["--instance-groups a: 'ml.p9.huge' is not a SageMaker training"],
            *("--instance-groups", "a:1:ml.p9.huge,b:1", "--distribution-groups", "a"),
        ),
        refusal(
            "unknown",
            ["--distribution-groups 'c'"],
            *("--instance-groups", "a:1,b:1", "--distribution-groups", "c"),
        ),
        refusal("keep-alive", ["--keep-alive-seconds must be 0-21600 s"], KEEP, "21601"),
        refusal("keep-alive-negative", ["--keep-alive-seconds must be 0-21600 s"], KEEP, "-1"),
        refusal("keep-alive-spot", ["warm pools do not take --spot"], KEEP, "600", "--spot"),
        refusal(
            "keep-alive-groups",
            ["--keep-alive-seconds is not for --instance-groups"],
            *(KEEP, "600", "--instance-groups", "a:2"),
        ),
        refusal(
            "plan-newline",
            ["--training-plan-arn", "control"],
            *(PLAN, "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p\n"),
        ),
        refusal(
            "plan-not-a-plan",
            ["does not match SageMaker's TrainingPlanArn pattern"],
            *(PLAN, "arn:aws:iam::123456789012:role/not-a-plan-but-long-enough-to-pass"),
        ),
        refusal("plan-short", ["TrainingPlanArn allows 50-2048"], PLAN, "arn:aws:sagemaker:x"),
    ],
)
def test_launch_groups_warm_pools_and_plans(aws_env, tmp_path, capsys, argv, words):
    refused_by_launch(tmp_path, capsys, argv, words)


def test_launch_refuses_what_this_botocore_cannot_send(aws_env, tmp_path, capsys, monkeypatch):
    """An option whose request field the installed botocore's model lacks is refused, naming
    the field, before anything is made."""
    monkeypatch.setitem(launch.NEWER_FIELDS, "remote_debug", ("NoSuchConfig", "--remote-debug"))
    words = ["--remote-debug: this botocore", "has no CreateTrainingJob NoSuchConfig", "upgrade"]
    refused_by_launch(tmp_path, capsys, ["--remote-debug"], words)
    for path, _ in launch.NEWER_FIELDS.values():
        if path != "NoSuchConfig":
            launch.check_model_field(path, "--x")  # the pinned botocore has them all


def test_push_repository_traversal(aws_env, tmp_path, capsys, docker_asked):
    assert tool(push.main, ["--repository", "../team/x"]) == 2
    assert "--repository '../team/x'" in capsys.readouterr().err
    assert docker_asked() == []
    nothing_in_aws()


# ============================================================================================
# silent acceptance: input that used to be taken, then lost, overridden, merged, or refused
# only later by SageMaker (after the source was uploaded) or inside the containers
# ============================================================================================
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--channel", "c=" + "{work}/nope"], ["not a directory"], id="ch-none"),
        pytest.param(["--channel", "c="], ["--channel c=", "not a directory"], id="ch-empty"),
        pytest.param(["--out", ""], ["--out is empty"], id="out-empty"),
        pytest.param(["--shm-size", "0"], ["--shm-size"], id="shm-size-0"),
    ],
)
def test_local_train_silent_acceptance(place, capsys, argv, words):
    refused_locally(place, capsys, argv, 2, words)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--max-run", "2419201"], ["--max-run must be 1-2419200 s"], id="max-run"),
        pytest.param(["--max-run", "0"], ["--max-run must be 1-2419200 s"], id="max-run-0"),
        pytest.param(["--volume-size", "0"], ["--volume-size must be 1-16384 GB"], id="vol-0"),
        pytest.param(["--volume-size", "16385"], ["--volume-size must be 1-16384"], id="vol"),
        pytest.param(
            ["--spot", "--max-wait", str(2**31)],
            ["--max-wait must be 86400-2147483647 s"],
            id="max-wait-huge",
        ),
        pytest.param(
            ["--subnet", "subnet-1", *[x for i in range(6) for x in ("--security-group", "sg")]],
            ["--security-group: at most 5"],
            id="security-groups",
        ),
        pytest.param(
            ["--base-job-name", "b" * 50, "--job-name", ""], ["--job-name"], id="job-name-empty"
        ),
    ],
)
def test_launch_silent_acceptance(aws_env, tmp_path, capsys, argv, words):
    refused_by_launch(tmp_path, capsys, argv, words)


def test_launch_base_job_name_too_long_is_refused_before_aws(aws_env, tmp_path, capsys):
    args = [a for a in launch_args(tmp_path) if a not in ("--job-name", JOB)]
    before = listing(tmp_path)
    assert tool(launch.main, [*args, "--base-job-name", "b" * 50]) == 2
    assert "--base-job-name 'bbbb" in capsys.readouterr().err
    assert listing(tmp_path) == before
    nothing_in_aws()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--repository", "Team/PyTorch"], ["--repository 'Team/PyTorch'"], id="uc"),
        pytest.param(["--repository", "x"], ["--repository 'x'"], id="short"),
        pytest.param(["--tag", ".hidden"], ["--tag '.hidden'"], id="tag-dot"),
        pytest.param(["--tag", "t" * 129], ["--tag"], id="tag-long"),
    ],
)
def test_push_silent_acceptance(aws_env, tmp_path, capsys, docker_asked, argv, words):
    before = listing(tmp_path)
    assert tool(push.main, argv) == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err
    assert docker_asked() == []
    assert listing(tmp_path) == before
    nothing_in_aws()


# ============================================================================================
# hangs: values and files that would make a tool wait forever, spin, or copy without end
# ============================================================================================
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e300", "2419201"])
def test_local_train_timeout_is_bounded(place, capsys, value):
    refused_locally(place, capsys, [f"--timeout={value}"], 2, ["--timeout must be more than 0"])


@pytest.mark.parametrize(
    ("fs", "words"),
    [
        pytest.param("fifo", ["--channel train", "pipe", "FIFO"], id="fifo"),
        pytest.param("loop", ["--channel train", "symlink loop"], id="symlink-loop"),
        pytest.param("device", ["--channel train", "zero", "device"], id="device"),
        pytest.param("dangling", ["--channel train", "gone", "dangling"], id="dangling"),
    ],
)
def test_local_train_channel_files_that_never_end(place, capsys, fs, words):
    setup_fs(place, fs)
    # As a command: were the copy to block on the FIFO, the test would still end.
    refused_locally(place, capsys, ["--channel", "train={work}/data"], 2, words, cli=True)


def test_local_train_job_tree_inside_a_channel_is_refused(place, capsys):
    argv = ["--channel", "train={work}", "--out", "{work}/out"]
    refused_locally(place, capsys, argv, 2, ["--out", "--channel train", "into itself"], cli=True)


def test_local_train_channels_that_do_not_fit_on_the_disk(place, capsys, monkeypatch):
    monkeypatch.setattr(local_train, "FREE_SPACE_MARGIN", 1 << 62)
    argv = ["--channel", "train={work}/data"]
    refused_locally(place, capsys, argv, 2, ["--channel", "GB are free under --out"])


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "0.001", "1e300", "1e9"])
def test_launch_poll_is_bounded(aws_env, tmp_path, capsys, value):
    refused_by_launch(tmp_path, capsys, ["--wait", f"--poll={value}"], ["--poll must be 1-3600 s"])


def test_launch_huge_source_dir_is_refused(aws_env, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "MAX_SOURCE_BYTES", 1 << 20)
    launch_args(tmp_path)
    (tmp_path / "src" / "weights.bin").write_bytes(b"\0" * (2 << 20))
    refused_by_launch(tmp_path, capsys, [], ["--source-dir", "more than 1 MiB"])


def test_launch_unreachable_endpoint_fails_in_bounded_time(aws_env, tmp_path, capsys, monkeypatch):
    port = free_port()  # a port nobody listens on
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    args = launch_args(tmp_path)
    before = listing(tmp_path)
    start = time.monotonic()
    assert tool(launch.main, args) == 1
    assert time.monotonic() - start < 60
    err = capsys.readouterr().err
    assert "sts:GetCallerIdentity" in err and "Traceback" not in err
    assert listing(tmp_path) == before


# ============================================================================================
# tracebacks instead of messages
# ============================================================================================
def test_local_train_without_a_docker_cli(place, capsys):
    env = {"DOCKER": "/nonexistent/docker"}
    words = ["no docker CLI", "/nonexistent/docker", "DOCKER="]
    refused_locally(place, capsys, [], 127, words, cli=True, env=env)


def test_local_train_with_docker_not_on_path(place, capsys):
    env = {"DOCKER": "", "PATH": str(place.root / "bin" / "empty")}
    refused_locally(place, capsys, [], 127, ["no docker CLI", "docker is not on PATH"], True, env)


def test_local_train_with_docker_not_executable(place, capsys):
    env = {"DOCKER": str(place.work / "src" / "train.py")}
    refused_locally(place, capsys, [], 126, ["DOCKER=", "not an executable"], True, env)


def test_local_train_with_a_docker_variable_naming_no_program(place, capsys):
    refused_locally(
        place, capsys, [], 127, ["'docker", "is not on PATH"], True, {"DOCKER": "'docker --x"}
    )


def test_local_train_without_botocore_still_refuses(place):
    """python -S: no site-packages, so no botocore; SageMaker's limits come from the copy."""
    before = listing(place.root)
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-B",
            *LOCAL_TRAIN,
            "--out",
            str(place.out),
            "--hp",
            "k" * 257 + "=1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2, result.stderr
    assert "--hp 'kkk" in result.stderr and "HyperParameterKey allows 0-256" in result.stderr
    assert "Traceback" not in result.stderr
    assert listing(place.root) == before and docker_calls(place) == []


def test_local_train_with_a_missing_image(place, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_NO_IMAGE", "1")
    refused_locally(place, capsys, ["--image", "nope:1"], 2, ["--image nope:1", "not found"], True)
    assert docker_calls(place) == ["image inspect nope:1"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--out", "{work}/data/a.txt/sub"], ["--out", "not a directory"], id="out"),
        pytest.param(["--timeout", "abc"], ["--timeout"], id="timeout-word"),
        pytest.param(["--hosts", "1e3"], ["--hosts"], id="hosts-float"),
        pytest.param(["--hosts", "9" * 5000], ["--hosts"], id="hosts-huge-int"),
        pytest.param(["--launcher", "mpi"], ["--launcher"], id="launcher"),
    ],
)
def test_local_train_tracebacks(place, capsys, argv, words):
    refused_locally(place, capsys, argv, 2, words, cli=True)


def test_local_train_when_docker_wait_says_nonsense(place, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_WAIT", "no such container")
    before = listing(place.root)
    code, text = local(place, capsys, [], cli=True)
    assert code == 1 and "docker wait" in text and "Traceback" not in text
    after = listing(place.root)
    assert all(k.startswith("work/out") for k in after.keys() - before)
    assert {k: v for k, v in after.items() if k in before} == before
    assert f"rm -f {JOB}-algo-1" in docker_calls(place)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        pytest.param(["--region", ""], ["--region ''"], id="empty-region"),
        pytest.param(["--instance-count", "1" + "0" * 40], ["--instance-count"], id="int-huge"),
        pytest.param(["--poll", "abc"], ["--poll"], id="poll-word"),
    ],
)
def test_launch_tracebacks(aws_env, tmp_path, capsys, argv, words):
    refused_by_launch(tmp_path, capsys, argv, words)


def _on(aws_event: str, exc: Exception, monkeypatch) -> None:
    real = launch.connect

    def connect(*a, **kw):
        aws = real(*a, **kw)

        def refuse(**_):
            raise exc

        aws.session.events.register(aws_event, refuse)
        return aws

    monkeypatch.setattr(launch, "connect", connect)


def test_launch_wait_when_logs_are_denied(aws_env, tmp_path, capsys, monkeypatch):
    denied = botocore.exceptions.ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "no logs for you"}},
        "DescribeLogStreams",
    )
    _on("before-call.cloudwatch-logs.DescribeLogStreams", denied, monkeypatch)
    args = [*launch_args(tmp_path), "--wait", "--poll", "1"]
    before = listing(tmp_path)
    assert tool(launch.main, args) == 1
    err = capsys.readouterr().err
    assert "logs:DescribeLogStreams failed: AccessDeniedException" in err
    assert listing(tmp_path) == before


def test_launch_connection_lost_at_create_leaves_no_tarball(aws_env, tmp_path, capsys, monkeypatch):
    lost = botocore.exceptions.EndpointConnectionError(endpoint_url="https://sagemaker.example")
    _on("before-call.sagemaker.CreateTrainingJob", lost, monkeypatch)
    args = launch_args(tmp_path)
    before = listing(tmp_path)
    assert tool(launch.main, args) == 1
    err = capsys.readouterr().err
    assert "sagemaker:CreateTrainingJob failed: Could not connect" in err
    assert boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", []) == []
    assert boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert listing(tmp_path) == before


def test_push_with_an_empty_region(aws_env, tmp_path, capsys, docker_asked):
    assert tool(push.main, ["--region", ""]) == 2
    assert "--region ''" in capsys.readouterr().err
    assert docker_asked() == []
    nothing_in_aws()
