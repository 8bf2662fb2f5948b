"""Hostile input to the one description of a SageMaker job (hostkit.job.Job), which both
`make local-train` and `make launch` render: every bad field is refused here once, for both
tools, with HostError's exit code 2 and a message naming the flag as the tool spells it (local
spelling: --hosts, --slots, --launcher horovod|torchrun; launch: --instance-count,
--processes-per-host, --distribution), before anything is written. What only one rendering
refuses (paths docker run -v cannot mount, channels that are not directories or not S3
prefixes, ...) is in test_host_tools.py, with a test per tool that its command line reaches
these checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
from pathlib import Path

import pytest

from hostkit import HostError, job, local_train
from hostkit.aws import launch
from hostkit.local_train import TOOL as LOCAL

LAUNCH = launch.TOOL
TOOLS = {"local": LOCAL, "launch": LAUNCH}


@pytest.fixture
def src(tmp_path, monkeypatch) -> Path:
    """tmp_path/src (train.py, run.sh, lib/, links inside and out) and tmp_path/outside."""
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "run.sh").write_text("echo hi\n")
    (src / "lib" / "main.py").write_text("print('lib')\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("SECRET = 1\n")
    (src / "link.py").symlink_to(outside / "secret.py")
    (src / "inside.py").symlink_to("train.py")
    (src / "pkg").symlink_to("lib")
    (src / "up").symlink_to(outside)
    (src / "loop.py").symlink_to("loop.py")
    os.mkfifo(src / "fifo.py")
    monkeypatch.chdir(tmp_path)
    return src


def make(src: Path, tool: str = "launch", **fields) -> job.Job:
    """A Job with the fields given, else a valid one: src/train.py on one ml.m5.xlarge.
    "{src}" and "{outside}" in a text field stand for those places; channel_flags are --channel
    values, parsed as launch does (as local-train does with channel_options=False)."""
    places = {"{src}": str(src), "{outside}": str(src.parent / "outside")}
    for key, value in fields.items():
        if isinstance(value, str):
            for mark, place in places.items():
                fields[key] = fields[key].replace(mark, place)
    options = fields.pop("channel_options", True)
    texts = fields.pop("channel_flags", [])
    fields["channels"] = [job.parse_channel(text, options) for text in texts]
    fields.setdefault("source_dir", src)
    fields.setdefault("entry_point", "train.py")
    fields.setdefault("instance_type", "ml.m5.xlarge")
    fields.setdefault("name", "hostile-job")
    if isinstance(fields["source_dir"], str):
        fields["source_dir"] = Path(fields["source_dir"])
    return job.Job(TOOLS[tool], **fields)


def listing(root: Path) -> list[tuple[str, bool]]:
    return sorted((str(p.relative_to(root)), p.is_symlink()) for p in root.rglob("*"))


def refused(src: Path, words: list[str], tool: str = "launch", **fields) -> str:
    before = listing(src.parent)
    with pytest.raises(HostError) as caught:
        make(src, tool, **fields)
    text = str(caught.value)
    assert caught.value.code == 2, text
    for word in words:
        assert word in text, text
    assert listing(src.parent) == before
    return text


def hps(*items: str) -> dict:
    return {"hyperparameters": list(items)}


def env(*items: str) -> dict:
    return {"environment": list(items)}


def channels(*texts: str, options: bool = True) -> dict:
    return {"channel_flags": list(texts), "channel_options": options}


def case(case_id: str, words: list[str], tool: str = "launch", **fields):
    return pytest.param(tool, fields, words, id=case_id)


def test_a_good_description_is_taken_by_both_tools(src):
    for tool in TOOLS:
        described = make(
            src,
            tool,
            processes_per_host=2,
            **hps("epochs=3", "model=resnet"),
            **env("NCCL_DEBUG=INFO"),
            **channels("train=s3://bucket/train/", options=False),
        )
        assert described.source_dir == src.resolve()
        assert described.encoded_hyperparameters("/opt/ml/code", {})["epochs"] == "3"


# ============================================================================================
# the entry point: one rule for both tools. A regular file inside --source-dir, named by a
# relative path without '..'; a symlink on the way is fine where it resolves inside.
# ============================================================================================
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("entry", ["inside.py", "pkg/main.py", "lib/main.py"])
def test_entry_points_that_resolve_inside_the_source_dir_are_taken(src, tool, entry):
    assert make(src, tool, entry_point=entry).entry_point == entry


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(
    ("fields", "words"),
    [
        pytest.param({"entry_point": "../outside/secret.py"}, ["--entry-point", "'..'"], id="up"),
        pytest.param(
            {"entry_point": "{outside}/secret.py"}, ["--entry-point", "relative"], id="abs"
        ),
        pytest.param(
            {"entry_point": "link.py"}, ["--entry-point link.py", "outside"], id="symlink-out"
        ),
        pytest.param(
            {"entry_point": "up/secret.py"}, ["--entry-point up/secret.py", "outside"], id="dir-out"
        ),
        pytest.param({"entry_point": "loop.py"}, ["--entry-point loop.py", "loop"], id="loop"),
        pytest.param(
            {"entry_point": "nope.py"}, ["--entry-point nope.py", "no regular file"], id="none"
        ),
        pytest.param({"entry_point": "lib"}, ["--entry-point lib", "no regular file"], id="dir"),
        pytest.param(
            {"entry_point": "fifo.py"}, ["--entry-point fifo.py", "no regular file"], id="fifo"
        ),
        pytest.param({"entry_point": "a\nb.py"}, ["--entry-point", "not a file name"], id="nl"),
        pytest.param({"entry_point": " "}, ["--entry-point", "not a file name"], id="blank"),
        pytest.param({"source_dir": None}, ["--entry-point needs --source-dir"], id="entry"),
        pytest.param(
            {"entry_point": None}, ["--source-dir needs --entry-point", "example"], id="code"
        ),
        pytest.param(
            {"source_dir": "{src}/nope"}, ["--source-dir", "does not exist"], id="no-source-dir"
        ),
        pytest.param(
            {"source_dir": "{src}/train.py"}, ["--source-dir", "not a directory"], id="source-file"
        ),
    ],
)
def test_entry_point_and_source_dir(src, tool, fields, words):
    refused(src, words, tool, **fields)


@pytest.mark.parametrize(
    ("tool", "words"),
    [
        ("local", ["--launcher torchrun runs python programs: --entry-point *.py"]),
        ("launch", ["--distribution torch_distributed runs python programs: --entry-point *.py"]),
    ],
)
def test_torch_distributed_runs_python_entry_points_as_the_sdk_requires(src, tool, words):
    refused(src, words, tool, distribution="torch_distributed", entry_point="run.sh")


# ============================================================================================
# instances and distribution, each message in the tool's own spelling
# ============================================================================================
@pytest.mark.parametrize(
    ("tool", "fields", "words"),
    [
        case("hosts-0", ["--hosts must be 1-64, not 0"], "local", instance_count=0),
        case("hosts-65", ["--hosts must be 1-64"], "local", instance_count=65),
        case("count-0", ["--instance-count must be 1-"], instance_count=0),
        case("count", ["--instance-count must be 1-2147483647"], instance_count=2**31),
        case("slots-0", ["--slots must be 1-256"], "local", processes_per_host=0),
        case("slots-257", ["--slots must be 1-256"], "local", processes_per_host=257),
        case("pph-0", ["--processes-per-host must be 1-256"], processes_per_host=0),
        case("pph", ["--processes-per-host must be 1-256", "image"], processes_per_host=257),
        case(
            "mpi-options-torchrun",
            ["--custom-mpi-options is for --launcher horovod, not torchrun"],
            "local",
            distribution="torch_distributed",
            custom_mpi_options="-x A=1",
        ),
        case(
            "mpi-options-torch_distributed",
            ["--custom-mpi-options is for --distribution mpi, not torch_distributed"],
            distribution="torch_distributed",
            custom_mpi_options="-x A=1",
        ),
        case(
            "mpi-options-none",
            ["--custom-mpi-options is for --distribution mpi, not none"],
            distribution="none",
            custom_mpi_options="-x A=1",
        ),
        case(
            "pph-torch_distributed",
            ["--processes-per-host is for --distribution mpi, not torch_distributed"],
            distribution="torch_distributed",
            processes_per_host=8,
        ),
        case(
            "pph-none",
            ["--processes-per-host is for --distribution mpi, not none"],
            distribution="none",
            processes_per_host=8,
        ),
        case(
            "launcher-none", ["--launcher: one of horovod, torchrun"], "local", distribution="none"
        ),
        case("distribution", ["--distribution: one of mpi"], distribution="horovod"),
        case("type-newline", ["--instance-type"], "local", instance_type="ml.x\nY"),
        case("type-space", ["--instance-type"], instance_type="ml.m5 xlarge"),
        case("type-long", ["--instance-type", "at most 64"], instance_type="m" * 65),
        case(
            "mpi-options-long",
            ["--custom-mpi-options sagemaker_mpi_custom_mpi_options", "2500"],
            custom_mpi_options="-x A=1 " * 400,
        ),
    ],
)
def test_instances_and_distribution(src, tool, fields, words):
    refused(src, words, tool, **fields)


def test_slots_without_mpi_go_in_the_environment_where_hosts_have_no_gpus(src):
    described = make(src, "local", distribution="torch_distributed", processes_per_host=2)
    assert described.job_environment({}) == {job.CPU_SLOTS_ENV: "2"}
    assert "sagemaker_mpi_num_of_processes_per_host" not in described.encoded_hyperparameters(
        "/opt/ml/code", {}
    )


# ============================================================================================
# the job's name
# ============================================================================================
@pytest.mark.parametrize(
    ("name", "words"),
    [
        pytest.param("job\n", ["--job-name", "control"], id="newline"),
        pytest.param("../../escape", ["--job-name"], id="up"),
        pytest.param(".", ["--job-name"], id="dot"),
        pytest.param("", ["--job-name ''"], id="empty"),
        pytest.param("a" * 64, ["--job-name", "63"], id="long"),
        pytest.param("bad_name!", ["--job-name", "letters, digits and -"], id="underscore"),
    ],
)
def test_job_name(src, name, words):
    refused(src, words, name=name)


# ============================================================================================
# hyperparameters: the user's, beside the ones the job sets, checked and encoded as the SDK does
# ============================================================================================
@pytest.mark.parametrize(
    ("tool", "fields", "words"),
    [
        case("hp-key-newline", ["--hp", "control"], **hps("lr\n--evil=1")),
        case("hp-key-nul", ["--hp", "control"], **hps("a\0b=1")),
        case("hp-collision", ["--hp a_b", "SM_HP_A_B"], **hps("a-b=1", "a_b=2")),
        case("hp-twice", ["--hp a: given twice"], **hps("a=1", "a=2")),
        case("hp-empty-key", ["--hp '=1'", "empty"], **hps("=1")),
        case("hp-no-value", ["--hp 'epochs'", "NAME=VALUE"], **hps("epochs")),
        case(
            "hp-program",
            ["--hp sagemaker_program: set by --entry-point"],
            **hps("sagemaker_program=other.py"),
        ),
        case(
            "hp-submit-directory",
            ["set by --source-dir/--code-location"],
            **hps("sagemaker_submit_directory=s3://b/x"),
        ),
        case(
            "hp-local-submit-directory",
            ["set by --source-dir"],
            "local",
            **hps("sagemaker_submit_directory=/x"),
        ),
        case("hp-launcher", ["set by --launcher"], "local", **hps("sagemaker_mpi_enabled=false")),
        case("hp-distribution", ["set by --distribution"], **hps("sagemaker_mpi_enabled=false")),
        case(
            "hp-mpi-options",
            ["set by --custom-mpi-options"],
            **hps("sagemaker_mpi_custom_mpi_options=-x A"),
        ),
        case(
            "hp-slots",
            ["set by --slots"],
            "local",
            **hps("sagemaker_mpi_num_of_processes_per_host=4"),
        ),
        case("hp-region", ["set by --region"], **hps("sagemaker_region=eu-west-1")),
        case("hp-job-name", ["set by --job-name"], **hps("sagemaker_job_name=x")),
        case("hp-value-long", ["--hp x", "2500"], **hps("x=" + "v" * 2600)),
        case("hp-key-long", ["--hp", "256"], **hps("k" * 257 + "=1")),
        case("hp-count", ["100"], **hps(*(f"k{i}=1" for i in range(100)))),
        case("deep-json", ["--hp deep", "nested"], **hps("deep=" + "[" * 3000)),
    ],
)
def test_hyperparameters(src, tool, fields, words):
    refused(src, words, tool, **fields)


# ============================================================================================
# environment: the user's, beside the variables the job sets
# ============================================================================================
@pytest.mark.parametrize(
    ("tool", "fields", "words"),
    [
        case("env-name-space", ["--env 'A B'"], **env("A B=1")),
        case("env-func", ["--env 'BASH_FUNC_x%%'"], **env("BASH_FUNC_x%%=() { id; }")),
        case("env-value-nul", ["--env X", "control"], **env("X=a\0b")),
        case("env-job-name", ["set by --job-name"], "local", **env("TRAINING_JOB_NAME=other")),
        case("env-launch-job-name", ["set by --job-name"], **env("TRAINING_JOB_NAME=other")),
        case(
            "env-slots",
            ["--env BYOC_CPU_SLOTS_PER_HOST: set by --slots"],
            "local",
            distribution="torch_distributed",
            processes_per_host=2,
            **env("BYOC_CPU_SLOTS_PER_HOST=8"),
        ),
        case(
            "ssh-key-without-the-opt-in",
            ["--env BYOC_SSH_PRIVATE_KEY", "--ssh-key-in-environment"],
            **env("BYOC_SSH_PRIVATE_KEY=-----BEGIN OPENSSH PRIVATE KEY-----"),
        ),
        case("env-twice", ["given twice"], **env("A=1", "A=2")),
        case("env-value-long", ["--env X", "512"], **env("X=" + "v" * 600)),
        case("env-name-digit", ["--env '1X'"], **env("1X=1")),
        case("env-n", ["--env", "100"], **env(*(f"E{i}=1" for i in range(101)))),
    ],
)
def test_environment(src, tool, fields, words):
    refused(src, words, tool, **fields)


def test_the_variables_a_rendering_sets_count_against_the_limit(src):
    described = make(src, **env(*(f"E{i}=1" for i in range(100))))
    with pytest.raises(HostError, match="--env: 101 variables"):
        described.job_environment({launch.SSH_KEY_ENV: "<key>"})


# ============================================================================================
# channels: names that would leave the data directory or collide, and their options
# ============================================================================================
@pytest.mark.parametrize(
    ("tool", "fields", "words"),
    [
        case("channel-up", ["--channel '../x'"], **channels("../x=s3://bucket/x")),
        case("channel-dotdot", ["--channel '..'"], **channels("..=s3://bucket/x")),
        case("channel-dot", ["--channel '.'"], **channels(".=s3://bucket/x")),
        case("channel-slash", ["--channel 'a/b'"], "local", **channels("a/b=d", options=False)),
        case("channel-abs", ["--channel '/etc'"], "local", **channels("/etc=d", options=False)),
        case(
            "channel-twice",
            ["--channel a: given twice"],
            **channels("a=s3://bucket/x", "a=s3://bucket/y"),
        ),
        case(
            "channel-collision",
            ["--channel a_b", "SM_CHANNEL_A_B"],
            **channels("a-b=s3://bucket/x", "a_b=s3://bucket/y"),
        ),
        case("channel-count", ["--channel", "20"], **channels(*(f"c{i}=d" for i in range(21)))),
        case("channel-no-name", ["--channel '=d'", "empty"], **channels("=d")),
        case("channel-no-source", ["--channel 'train'", "NAME=VALUE"], **channels("train")),
        case("mode", ["--channel t: mode must be one of"], **channels("t=s3://bucket/x,mode=pipe")),
        case(
            "distribution",
            ["--channel t: distribution must be one of"],
            **channels("t=s3://bucket/x,distribution=Sharded"),
        ),
        case("wrap", ["--channel t: wrap must be"], **channels("t=s3://bucket/x,wrap=TFRecord")),
        case(
            "content-type-newline",
            ["--channel train", "content-type"],
            **channels("train=s3://bucket/x,content-type=a\nb"),
        ),
        case("option", ["--channel t: unknown option 'mod'"], **channels("t=s3://b/x,mod=Pipe")),
        case("input-mode", ["--input-mode"], input_mode="Stream"),
    ],
)
def test_channels(src, tool, fields, words):
    refused(src, words, tool, **fields)


def test_a_local_channel_takes_all_after_the_equals_sign_as_its_directory():
    channel = job.parse_channel("train=/data/a,mode=Pipe", options=False)
    assert (channel.name, channel.source, channel.mode) == ("train", "/data/a,mode=Pipe", None)
    channel = job.parse_channel(
        "train=s3://b/x,mode=Pipe,wrap=RecordIO,distribution=ShardedByS3Key"
    )
    assert (channel.source, channel.mode, channel.wrap) == ("s3://b/x", "Pipe", "RecordIO")
    assert channel.distribution == "ShardedByS3Key"


# ============================================================================================
# heterogeneous clusters: instance groups and the groups the distribution runs on
# ============================================================================================
def groups(text: str, distributed: str | None = None, **fields) -> dict:
    """--instance-groups TEXT [--distribution-groups DISTRIBUTED] as the tools parse them; no
    job-wide type or count unless fields give them."""
    given = types.SimpleNamespace(instance_groups=text, distribution_groups=distributed)
    return {"instance_type": None, **job.group_fields(given), **fields}


def test_groups_are_taken_by_both_tools_with_the_sdks_defaults(src):
    for tool in TOOLS:
        described = make(
            src,
            tool,
            **groups("data:1:ml.c5.xlarge,train:2", "train", instance_type="ml.g5.xlarge"),
        )
        assert described.instance_groups == [
            job.InstanceGroup("data", 1, "ml.c5.xlarge"),
            job.InstanceGroup("train", 2, "ml.g5.xlarge"),
        ]
        assert described.host_count == 3 and described.instance_count is None
        # One group and none named: that group, as the SDK's validate_distribution decides.
        assert make(src, tool, **groups("train:2:ml.g5.xlarge")).distribution_groups == ["train"]
    # Without a distribution nothing is distributed, and nothing need be named.
    assert (
        make(
            src, **groups("a:1:ml.c5.xlarge,b:1:ml.c5.xlarge"), distribution="none"
        ).distribution_groups
        is None
    )


@pytest.mark.parametrize(
    ("tool", "fields", "words"),
    [
        case(
            "group-empty",
            ["--instance-groups data: the count must be 1-64, not 0"],
            "local",
            **groups("data:0,train:2", "train", instance_type="ml.local"),
        ),
        case(
            "group-negative",
            ["--instance-groups data: the count must be 1-"],
            **groups("data:-1:ml.c5.xlarge"),
        ),
        case(
            "group-total",
            ["--instance-groups: the hosts of all groups must be 1-64, not 80"],
            "local",
            **groups("a:40,b:40", "a", instance_type="ml.local"),
        ),
        case(
            "group-twice",
            ["--instance-groups a: given twice"],
            **groups("a:1:ml.c5.xlarge,a:2:ml.c5.xlarge", "a"),
        ),
        case(
            "group-name-empty",
            ["--instance-groups ''", "InstanceGroupName allows 1-64"],
            **groups(":1:ml.c5.xlarge"),
        ),
        case(
            "group-name-long",
            ["--instance-groups 'gggg", "1-64"],
            **groups("g" * 65 + ":1:ml.c5.xlarge"),
        ),
        case(
            "group-name-newline",
            ["--instance-groups 'a\\nb'", "control"],
            **groups("a\nb:1:ml.c5.xlarge"),
        ),
        case(
            "groups-6",
            ["--instance-groups: 6 groups; SageMaker takes 5"],
            **groups(",".join(f"g{i}:1:ml.c5.xlarge" for i in range(6)), "g0"),
        ),
        case(
            "group-type", ["--instance-groups a: 'ml c5'", "letters, digits"], **groups("a:1:ml c5")
        ),
        case(
            "group-no-type",
            ["--instance-groups train: no instance type", "--instance-type"],
            **groups("train:2"),
        ),
        case(
            "count-beside-groups",
            ["--instance-count is not for --instance-groups", "InstanceCount or InstanceGroups"],
            **groups("a:1:ml.c5.xlarge", instance_count=2),
        ),
        case(
            "hosts-beside-groups",
            ["--hosts is not for --instance-groups"],
            "local",
            **groups("a:1", instance_type="ml.local", instance_count=1),
        ),
        case(
            "type-beside-typed-groups",
            ["--instance-type ml.m5.xlarge: every group of --instance-groups names its type"],
            **groups("a:1:ml.c5.xlarge", instance_type="ml.m5.xlarge"),
        ),
        case("no-type", ["--instance-type is required (or --instance-groups)"], instance_type=None),
        case(
            "distributed-unknown",
            ["--distribution-groups 'gpu': not a group of --instance-groups (data, train)"],
            **groups("data:1:ml.c5.xlarge,train:2:ml.g5.xlarge", "gpu"),
        ),
        case(
            "distributed-empty",
            ["--distribution-groups '': not a group"],
            **groups("train:2:ml.g5.xlarge", ""),
        ),
        case(
            "distributed-twice",
            ["--distribution-groups train: given twice"],
            **groups("train:2:ml.g5.xlarge", "train,train"),
        ),
        case(
            "distributed-unnamed",
            ["--distribution-groups: which of data, train run the distribution?"],
            **groups("data:1:ml.c5.xlarge,train:2:ml.g5.xlarge"),
        ),
        case(
            "distributed-without-groups",
            ["--distribution-groups needs --instance-groups"],
            distribution_groups=["train"],
        ),
        case(
            "distributed-without-distribution",
            ["--distribution-groups is for a distributed job, not --distribution none"],
            distribution="none",
            **groups("train:2:ml.g5.xlarge", "train"),
        ),
        case(
            "warm-pool-local",
            ["--warm-pool-cache is not for --instance-groups", "heterogeneous"],
            "local",
            warm_pool=True,
            **groups("train:2", instance_type="ml.local"),
        ),
        case(
            "warm-pool-launch",
            ["--keep-alive-seconds is not for --instance-groups"],
            warm_pool=True,
            **groups("train:2:ml.g5.xlarge"),
        ),
        case(
            "hp-distribution-groups",
            ["--hp sagemaker_distribution_instance_groups: set by --distribution-groups"],
            **hps('sagemaker_distribution_instance_groups=["a"]'),
        ),
        case(
            "env-warm-pool-local",
            ["--env SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY: set by --warm-pool-cache"],
            "local",
            **env("SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY=/x"),
        ),
        case(
            "env-warm-pool-launch",
            ["set by --keep-alive-seconds"],
            **env("SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY=/x"),
        ),
    ],
)
def test_instance_groups(src, tool, fields, words):
    refused(src, words, tool, **fields)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("train", ["--instance-groups 'train': NAME:COUNT[:TYPE]"], id="no-count"),
        pytest.param("a:1:ml.c5.xlarge:x", ["--instance-groups 'a:1:ml.c5.xlarge:x'"], id="extra"),
        pytest.param("train:two", ["the count 'two' is not a whole number"], id="word"),
        pytest.param("a:1,,b:1", ["--instance-groups ''"], id="empty-item"),
        pytest.param("a:" + "9" * 5000, ["is not a whole number"], id="huge"),
    ],
)
def test_instance_groups_spelling(text, words):
    with pytest.raises(HostError) as caught:
        job.parse_instance_groups(text)
    assert caught.value.code == 2
    for word in words:
        assert word in str(caught.value)


# ============================================================================================
# the job's flags: declared once (job.add_job_arguments), read alike (job.job_fields), so the
# two command lines cannot come to spell or mean a job differently
# ============================================================================================
PARSERS = {"local": local_train.build_parser, "launch": launch.build_parser}
LAUNCH_REQUIRED = ["--image-uri", "img:1", "--role", "arn:aws:iam::123456789012:role/R"]
# A shared flag's action is the same in both tools but for words (help, a channel's SOURCE) and
# --source-dir's type (local-train's str takes '' as no code, launch's Path as '.').
SAME = ("option_strings", "dest", "nargs", "const", "default", "choices", "required")
MAY_DIFFER_IN = {"metavar": {"--channel"}, "type": {"--source-dir"}}


def job_actions(tool: str) -> dict[str, argparse.Action]:
    """The tool's actions in the help's group of job options, by flag."""
    (group,) = [g for g in PARSERS[tool]()._action_groups if g.title == job.JOB_ARGUMENTS]
    return {action.option_strings[0]: action for action in group._group_actions}


def test_the_flags_both_tools_have_are_the_jobs_declared_once():
    """A flag both command lines take is declared once, by job.add_job_arguments: not twice,
    once per tool, where the two copies could come to disagree."""
    flags = {
        tool: {s for a in make_parser()._actions for s in a.option_strings}
        for tool, make_parser in PARSERS.items()
    }
    shared = (flags["local"] & flags["launch"]) - {"-h", "--help"}
    local, launch_ = job_actions("local"), job_actions("launch")
    assert set(local) == set(launch_)
    assert shared == set(local), (
        f"{sorted(shared - set(local))}: declared by each tool; declare them in "
        f"job.add_job_arguments. {sorted(set(local) - shared)}: not taken by both tools"
    )
    assert {"--hp", "--env", "--channel", "--source-dir", "--entry-point"} <= shared
    assert {"--custom-mpi-options", "--job-name", "--instance-type", "--instance-groups"} <= shared
    for flag in shared:
        for attribute in (*SAME, *MAY_DIFFER_IN):
            if flag in MAY_DIFFER_IN.get(attribute, ()):
                continue
            mine, theirs = getattr(local[flag], attribute), getattr(launch_[flag], attribute)
            assert mine == theirs, f"{flag} {attribute}: local {mine!r}, launch {theirs!r}"
        assert type(local[flag]) is type(launch_[flag]), flag
        assert local[flag].help and launch_[flag].help, f"{flag}: no help"


JOB_FLAGS = [
    "--instance-type=ml.g5.xlarge",
    "--instance-groups=data:1:ml.c5.xlarge,train:2",
    "--distribution-groups=train",
    "--job-name=flags",
    "--source-dir={src}",
    "--entry-point=train.py",
    "--hp=epochs=3",
    "--hp=layers=[1,2]",
    "--env=NCCL_DEBUG=INFO",
    "--env=A=",
    "--custom-mpi-options=-x A=1",
]
CHANNELS = ["--channel=train=s3://bucket/train/", "--channel=test=s3://bucket/test/"]


@pytest.mark.parametrize("argv", [[], [*JOB_FLAGS, *CHANNELS]], ids=["none", "all"])
def test_the_job_flags_are_read_alike_by_both_parsers(src, argv):
    """The same job flags, parsed by each tool's parser and read by job.job_fields: the same
    fields (a channel's SOURCE without options means the same to both)."""
    argv = [a.replace("{src}", str(src)) for a in argv]
    read = {}
    for tool, make_parser in PARSERS.items():
        args = make_parser().parse_args([*argv, *LAUNCH_REQUIRED] if tool == "launch" else argv)
        read[tool] = (args.instance_type, args.job_name, job.job_fields(args, TOOLS[tool]))
    assert read["local"] == read["launch"]
    if argv:
        assert read["launch"][2]["channels"][0] == job.Channel("train", "s3://bucket/train/")


def test_both_tools_make_the_same_job_of_the_same_job_flags(src):
    """Each tool's own reading (local_train.parse_args, launch.validate) of the same job flags:
    the same Job, its tool aside."""
    argv = [a.replace("{src}", str(src)) for a in JOB_FLAGS]
    local = local_train.parse_args([*argv, "--out", str(src.parent / "jobs")]).job
    args = launch.parse_args([*argv, *LAUNCH_REQUIRED])
    launch.validate(args)
    names = [f.name for f in dataclasses.fields(job.Job) if f.name != "tool"]
    assert {n: getattr(local, n) for n in names} == {n: getattr(args.job, n) for n in names}
    assert local.source_dir == src.resolve() and local.distribution_groups == ["train"]
    assert local.encoded_hyperparameters("", {})["layers"] == "[1, 2]"
