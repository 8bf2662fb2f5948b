"""The launch tool against moto in server mode, and its request against botocore's model."""

from __future__ import annotations

import io
import json
import re
import tarfile
import time

import boto3
import botocore.exceptions
import botocore.session
import pytest
from byoc import code
from byoc import config as entry_config

from hostkit import local_train
from hostkit.aws import common, launch
from tests.aws_fake import ACCOUNT, no_credentials

ROLE = f"arn:aws:iam::{ACCOUNT}:role/SageMakerTraining"
IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/pytorch-horovod:gpu-torch2.15.0"
BUCKET = f"sagemaker-us-east-1-{ACCOUNT}"


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "train.py").write_text("print('hi')\n")
    (src / "lib" / "util.py").write_text("X = 1\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    return src


@pytest.fixture
def sent(monkeypatch):
    """The CreateTrainingJob parameters exactly as boto3 sends them."""
    captured = {}
    real = launch.connect

    def connect(*a, **kw):
        aws = real(*a, **kw)

        def keep(params, **_):
            captured.update(json.loads(json.dumps(params)))

        aws.session.events.register("provide-client-params.sagemaker.CreateTrainingJob", keep)
        return aws

    monkeypatch.setattr(launch, "connect", connect)
    return captured


def full_args(source, job="byoc-test-job"):
    return [
        "--image-uri",
        IMAGE,
        "--role",
        ROLE,
        "--instance-type",
        "ml.p4d.24xlarge",
        "--instance-count",
        "2",
        "--processes-per-host",
        "8",
        "--volume-size",
        "200",
        "--max-run",
        "7200",
        "--job-name",
        job,
        "--source-dir",
        str(source),
        "--entry-point",
        "train.py",
        "--hp",
        "epochs=3",
        "--hp",
        "lr=0.01",
        "--hp",
        "model=resnet",
        "--hp",
        "amp=true",
        "--hp",
        "layers=[1,2]",
        "--channel",
        "train=s3://data-bucket/train/,mode=Pipe,distribution=ShardedByS3Key",
        "--channel",
        "eval=s3://data-bucket/eval/,mode=FastFile",
        "--output-path",
        "s3://out-bucket/jobs",
        "--checkpoint-s3-uri",
        "s3://out-bucket/ckpt/",
        "--spot",
        "--max-wait",
        "10800",
        "--env",
        "NCCL_DEBUG=INFO",
        "--subnet",
        "subnet-0abc",
        "--security-group",
        "sg-0abc",
    ]


# --- a schema check of every field the tool sets, against botocore's service model ----------
# The model's patterns are Java regexes; these are the classes it uses, all inside [...].
JAVA_CLASSES = {
    r"\p{Alnum}": "a-zA-Z0-9",
    r"\p{L}": "a-zA-Z\u00c0-\uffff",
    r"\p{N}": "0-9",
    r"\p{Z}": " \u00a0\u2000-\u200a\u2028\u2029\u3000",
}


def java_regex(pattern: str) -> str:
    for java, python in JAVA_CLASSES.items():
        pattern = pattern.replace(java, python)
    return pattern


def check_shape(value, shape, path="CreateTrainingJobRequest"):
    kind = shape.type_name
    meta = shape.metadata
    if kind == "structure":
        assert isinstance(value, dict), path
        for key, member in value.items():
            assert key in shape.members, f"{path}.{key} is not in the model"
            check_shape(member, shape.members[key], f"{path}.{key}")
        for required in shape.required_members:
            assert required in value, f"{path}.{required} is required"
    elif kind == "list":
        assert isinstance(value, list), path
        assert meta.get("min", 0) <= len(value) <= meta.get("max", 10**9), path
        for i, item in enumerate(value):
            check_shape(item, shape.member, f"{path}[{i}]")
    elif kind == "map":
        assert isinstance(value, dict), path
        assert len(value) <= meta.get("max", 10**9), path
        for k, v in value.items():
            check_shape(k, shape.key, f"{path} key {k!r}")
            check_shape(v, shape.value, f"{path}[{k!r}]")
    elif kind == "string":
        assert isinstance(value, str), path
        if shape.enum:
            assert value in shape.enum, f"{path}={value!r} not in {shape.enum[:5]}..."
        assert meta.get("min", 0) <= len(value) <= meta.get("max", 10**9), f"{path} length"
        if "pattern" in meta:
            pattern = java_regex(meta["pattern"])
            assert re.fullmatch(pattern, value), f"{path}={value!r} !~ {meta['pattern']}"
    elif kind in ("integer", "long"):
        assert isinstance(value, int) and not isinstance(value, bool), path
        assert meta.get("min", -(10**18)) <= value <= meta.get("max", 10**18), path
    elif kind == "boolean":
        assert isinstance(value, bool), path
    else:
        raise AssertionError(f"{path}: unchecked shape type {kind}")


def test_the_request_fits_botocores_model_field_by_field(aws_env, source, sent, capsys):
    assert launch.main(full_args(source)) == 0
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.operation_model("CreateTrainingJob").input_shape
    check_shape(sent, shape)
    # The fields users set, where they belong.
    assert sent["ResourceConfig"] == {
        "InstanceType": "ml.p4d.24xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 200,
    }
    assert sent["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 10800}
    assert sent["EnableManagedSpotTraining"] is True
    assert sent["CheckpointConfig"] == {
        "S3Uri": "s3://out-bucket/ckpt/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert sent["VpcConfig"] == {"Subnets": ["subnet-0abc"], "SecurityGroupIds": ["sg-0abc"]}
    assert sent["OutputDataConfig"] == {"S3OutputPath": "s3://out-bucket/jobs/"}
    train, evaluate = sent["InputDataConfig"]
    assert train["InputMode"] == "Pipe"
    assert train["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert evaluate["InputMode"] == "FastFile"
    assert sent["Environment"]["NCCL_DEBUG"] == "INFO"
    # What the platform stored (moto echoes these).
    job = boto3.client("sagemaker").describe_training_job(TrainingJobName="byoc-test-job")
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert job["RoleArn"] == ROLE
    assert capsys.readouterr().out.strip().endswith("training-job/byoc-test-job")


def test_hyperparameters_are_encoded_as_the_sdk_does_and_decode_back(aws_env, source, sent):
    assert launch.main(full_args(source)) == 0
    hps = sent["HyperParameters"]
    submit = f"s3://{BUCKET}/byoc-test-job/source/sourcedir.tar.gz"
    # PyTorch(..., hyperparameters={...}) sends json.dumps of every value.
    assert hps == {
        "epochs": "3",
        "lr": "0.01",
        "model": '"resnet"',
        "amp": "true",
        "layers": "[1, 2]",
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": f'"{submit}"',
        "sagemaker_region": '"us-east-1"',
        "sagemaker_job_name": '"byoc-test-job"',
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "8",
        "sagemaker_mpi_custom_mpi_options": '""',
    }
    # ... which the image's entrypoint decodes to the values given.
    decoded = {k: entry_config.decode_hyperparameter(v) for k, v in hps.items()}
    assert decoded["epochs"] == 3 and decoded["model"] == "resnet" and decoded["amp"] is True
    assert decoded["layers"] == [1, 2]


def test_source_tarball_in_s3_has_the_sdk_layout(aws_env, source, sent):
    assert launch.main(full_args(source)) == 0
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="byoc-test-job/source/sourcedir.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(body["Body"].read()), mode="r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
        assert names == ["lib/util.py", "train.py"]  # at the root; no __pycache__
        assert tar.extractfile("train.py").read() == b"print('hi')\n"


def test_symlinks_inside_the_source_dir_are_packed_as_relative_ones(
    aws_env, source, tmp_path, capsys
):
    """The job's code directory is the tree local-train mounts: a symlinked entry point that
    resolves inside --source-dir runs; a symlink leading outside is left out, with a note."""
    (source / "run.py").symlink_to(source / "train.py")  # absolute, inside
    (source / "pkg").symlink_to("lib")
    outside = source.parent / "secret.py"
    outside.write_text("SECRET = 1\n")
    (source / "secret.py").symlink_to(outside)
    args = without(full_args(source), "--entry-point") + ["--entry-point", "run.py"]
    assert launch.main(args) == 0
    assert "1 symlink(s) leading outside it" in capsys.readouterr().err
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="byoc-test-job/source/sourcedir.tar.gz")
    archive = tmp_path / "sourcedir.tar.gz"
    archive.write_bytes(body["Body"].read())
    with tarfile.open(archive) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {"run.py": "train.py", "pkg": "lib"}
    code.stage(str(archive), tmp_path / "code")  # as the image unpacks it
    assert (tmp_path / "code" / "run.py").read_text() == "print('hi')\n"
    assert (tmp_path / "code" / "pkg" / "util.py").read_text() == "X = 1\n"
    hps = boto3.client("sagemaker").describe_training_job(TrainingJobName="byoc-test-job")
    assert hps["HyperParameters"]["sagemaker_program"] == '"run.py"'


def without(args, *flags):
    """args less each flag and its value."""
    out = list(args)
    for flag in flags:
        i = out.index(flag)
        del out[i : i + 2]
    return out


# What sagemaker.pytorch.PyTorch(image_uri=..., distribution=...) adds to the hyperparameters
# (SDK v2.257.7: estimator.py Framework._distribution_configuration, pytorch/estimator.py
# PyTorch._pytorch_distribution_configuration), JSON-encoded as PyTorch.hyperparameters() does.
SDK_DISTRIBUTION_HPS = {
    # {"mpi": {"enabled": True, "processes_per_host": 8}}
    ("mpi", "8", None): {
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "8",
        "sagemaker_mpi_custom_mpi_options": '""',
    },
    # {"mpi": {"enabled": True}}
    ("mpi", None, None): {
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_custom_mpi_options": '""',
    },
    # {"mpi": {"enabled": True, "processes_per_host": 4, "custom_mpi_options": "-x A=1"}}
    ("mpi", "4", "-x A=1"): {
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "4",
        "sagemaker_mpi_custom_mpi_options": '"-x A=1"',
    },
    # {"torch_distributed": {"enabled": True}}
    ("torch_distributed", None, None): {
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.p4d.24xlarge"',
    },
    # distribution=None
    ("none", None, None): {},
}
NOT_DISTRIBUTION = {
    "sagemaker_program": '"train.py"',
    "sagemaker_submit_directory": f'"s3://{BUCKET}/byoc-test-job/source/sourcedir.tar.gz"',
    "sagemaker_region": '"us-east-1"',
    "sagemaker_job_name": '"byoc-test-job"',
}


def distribution_args(source, distribution, processes, mpi_options):
    args = without(full_args(source), "--processes-per-host", *(["--hp"] * 5))
    if distribution is not None:
        args += ["--distribution", distribution]
    if processes is not None:
        args += ["--processes-per-host", processes]
    if mpi_options is not None:
        args.append(f"--custom-mpi-options={mpi_options}")
    return args


@pytest.mark.parametrize(("distribution", "processes", "mpi_options"), list(SDK_DISTRIBUTION_HPS))
def test_each_distribution_sends_the_sdks_hyperparameters(
    aws_env, source, sent, capsys, distribution, processes, mpi_options
):
    expected = {**NOT_DISTRIBUTION, **SDK_DISTRIBUTION_HPS[distribution, processes, mpi_options]}
    args = distribution_args(source, distribution, processes, mpi_options)
    assert launch.main([*args, "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["HyperParameters"] == expected
    assert launch.main(args) == 0
    assert sent["HyperParameters"] == expected
    job = boto3.client("sagemaker").describe_training_job(TrainingJobName="byoc-test-job")
    assert job["HyperParameters"] == expected


def test_mpi_is_the_default_distribution(aws_env, source, capsys):
    args = distribution_args(source, None, None, None)
    assert "--distribution" not in args
    assert launch.main([*args, "--dry-run"]) == 0
    hps = json.loads(capsys.readouterr().out)["HyperParameters"]
    assert hps == {**NOT_DISTRIBUTION, **SDK_DISTRIBUTION_HPS["mpi", None, None]}


def test_an_unknown_distribution_is_refused(aws_env, source, capsys):
    with pytest.raises(SystemExit) as exc:
        launch.main([*full_args(source), "--distribution", "horovod", "--dry-run"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--distribution: invalid choice: 'horovod'" in err
    assert "mpi" in err and "torch_distributed" in err and "none" in err


def test_no_ssh_key_in_the_environment_by_default(aws_env, source, sent, capsys):
    assert launch.main(full_args(source)) == 0  # two instances
    assert sent["Environment"] == {"NCCL_DEBUG": "INFO"}
    job = boto3.client("sagemaker").describe_training_job(TrainingJobName="byoc-test-job")
    assert launch.SSH_KEY_ENV not in job.get("Environment", {})
    sent.clear()
    assert launch.main(without(full_args(source, "job-b"), "--env")) == 0
    assert "Environment" not in sent  # nothing else asked for one
    # The flag that used to turn the key off is still accepted.
    sent.clear()
    assert launch.main([*full_args(source, "job-c"), "--no-job-key"]) == 0
    assert launch.SSH_KEY_ENV not in sent["Environment"]
    assert "PRIVATE KEY" not in capsys.readouterr().err


def test_ssh_key_in_environment_is_an_opt_in_with_a_warning(aws_env, source, sent, capsys):
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    assert launch.main([*full_args(source, "job-a"), "--ssh-key-in-environment"]) == 0
    first = sent["Environment"][launch.SSH_KEY_ENV]
    load_ssh_private_key(first.encode(), password=None)  # a usable, unencrypted key
    assert sent["Environment"]["NCCL_DEBUG"] == "INFO"
    assert "DescribeTrainingJob" in capsys.readouterr().err
    assert launch.main([*full_args(source, "job-b"), "--ssh-key-in-environment"]) == 0
    assert sent["Environment"][launch.SSH_KEY_ENV] != first  # a new key for each job


def test_ssh_key_in_environment_takes_a_given_key(aws_env, source, sent, tmp_path, capsys):
    key = tmp_path / "id_ed25519"
    key.write_text(launch.new_job_key())
    assert launch.main([*full_args(source), "--ssh-key-in-environment", str(key)]) == 0
    assert sent["Environment"][launch.SSH_KEY_ENV] == key.read_text()
    (tmp_path / "not_a_key").write_text("hello\n")
    args = [*full_args(source, "job-b"), "--ssh-key-in-environment", str(tmp_path / "not_a_key")]
    assert common.run(launch.main, args) == 2
    assert "not an unencrypted private key" in capsys.readouterr().err


def test_ssh_key_options_do_not_go_together(aws_env, source, capsys):
    with pytest.raises(SystemExit) as exc:
        launch.main([*full_args(source), "--ssh-key-in-environment", "--no-job-key"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_dry_run_prints_the_request_and_creates_nothing(aws_env, source, capsys):
    assert launch.main([*full_args(source), "--dry-run"]) == 0
    out = capsys.readouterr().out
    request = json.loads(out)
    assert request["TrainingJobName"] == "byoc-test-job"
    assert launch.SSH_KEY_ENV not in request["Environment"]
    assert request["HyperParameters"]["sagemaker_mpi_enabled"] == "true"
    assert boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert boto3.client("s3").list_buckets()["Buckets"] == []
    # An opted-in key is not printed.
    assert launch.main([*full_args(source), "--dry-run", "--ssh-key-in-environment"]) == 0
    out = capsys.readouterr().out
    assert "not shown" in json.loads(out)["Environment"][launch.SSH_KEY_ENV]
    assert "PRIVATE KEY" not in out


def test_wait_follows_status_and_logs_to_the_jobs_result(aws_env, source, capsys):
    logs = boto3.client("logs")
    logs.create_log_group(logGroupName=launch.LOG_GROUP)
    stream = "byoc-test-job/algo-1-1700000000"
    logs.create_log_stream(logGroupName=launch.LOG_GROUP, logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=launch.LOG_GROUP,
        logStreamName=stream,
        # CloudWatch (and moto) drop events older than 14 days: stamp them now.
        logEvents=[{"timestamp": now + i, "message": f"epoch {i}"} for i in range(3)],
    )
    assert launch.main([*full_args(source), "--wait", "--poll", "1"]) == 0
    captured = capsys.readouterr()
    assert "[algo-1-1700000000] epoch 2" in captured.out
    assert "byoc-test-job: Completed" in captured.err


def test_a_failed_create_leaves_no_tarball(aws_env, source, monkeypatch):
    real = launch.connect

    def connect(*a, **kw):
        aws = real(*a, **kw)

        def refuse(**_):
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "ResourceLimitExceeded", "Message": "no p4d for you"}},
                "CreateTrainingJob",
            )

        aws.session.events.register("before-call.sagemaker.CreateTrainingJob", refuse)
        return aws

    monkeypatch.setattr(launch, "connect", connect)
    assert common.run(launch.main, full_args(source)) == 1
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", [])
    assert objects == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--role": "SageMakerTraining"}, "is not an IAM role ARN"),
        ({"--instance-type": "ml.p4d.48xlarge"}, "not a SageMaker training instance type"),
        ({"--source-dir": "/nonexistent/src"}, "--source-dir /nonexistent/src: does not exist"),
        ({"--entry-point": "missing.py"}, "--entry-point missing.py: no regular file"),
        ({"--processes-per-host": "0"}, "--processes-per-host must be 1-256"),
        ({"--job-name": "bad_name!"}, "--job-name"),
        ({"--max-wait": "60"}, "at least --max-run"),
        ({"--channel": "train=http://x/y"}, "is not an s3://bucket/prefix URI"),
        ({"--output-path": "out/"}, "is not an s3://bucket/prefix URI"),
    ],
)
def test_bad_input_is_refused_before_anything_is_made(aws_env, source, capsys, change, message):
    args = full_args(source)
    for flag, value in change.items():
        args[args.index(flag) + 1] = value
    assert common.run(launch.main, args) == 2
    assert message in capsys.readouterr().err
    assert boto3.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] == []
    assert boto3.client("s3").list_buckets()["Buckets"] == []


def test_no_credentials_is_a_clear_error(aws_env, source, capsys, monkeypatch):
    no_credentials(monkeypatch)
    assert common.run(launch.main, full_args(source)) == 2
    assert "no AWS credentials found" in capsys.readouterr().err
    # A dry run still works: it shows placeholders for the account.
    assert common.run(launch.main, [*full_args(source), "--dry-run"]) == 0
    assert "sagemaker-us-east-1-<account>" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("launcher", "slots", "key"),
    [
        ("horovod", "8", ("mpi", "8", None)),
        ("horovod", None, ("mpi", None, None)),
        ("horovod", "4", ("mpi", "4", "-x A=1")),
        ("torchrun", None, ("torch_distributed", None, None)),
    ],
)
def test_local_train_writes_what_launch_sends(aws_env, source, tmp_path, launcher, slots, key):
    """make local-train and make launch render one job description (hostkit.job.Job): for the
    same distribution, the same hyperparameters as the SageMaker SDK sends them."""
    argv = ["--launcher", launcher, "--out", str(tmp_path / "out"), "--source-dir", str(source)]
    argv += ["--entry-point", "train.py", "--instance-type", "ml.p4d.24xlarge"]
    if slots is not None:
        argv += ["--slots", slots]
    if key[2] is not None:
        argv.append(f"--custom-mpi-options={key[2]}")
    assert local_train.parse_args(argv).hps == {
        **SDK_DISTRIBUTION_HPS[key],
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"/opt/ml/code"',
    }


# What sagemaker.pytorch.PyTorch(instance_groups=[data, train], distribution={...,
# "instance_groups": [train]}) adds, as SDK v2.257.7's own hyperparameters() returned it,
# called offline (data = InstanceGroup("data", "ml.c5.xlarge", 1), train = ("train",
# "ml.g5.xlarge", 2)): estimator.py:4110-4112 puts the names first; fw_utils.py:881-936 takes
# the only group when none is named and refuses several; pytorch/estimator.py:684-696 sends none
# for torch_distributed, and no sagemaker_instance_type, the estimator having no one type.
SDK_GROUP_HPS = {
    # {"mpi": {"enabled": True, "processes_per_host": 4}, "instance_groups": [train]}
    ("mpi", "4"): {
        "sagemaker_distribution_instance_groups": '["train"]',
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "4",
        "sagemaker_mpi_custom_mpi_options": '""',
    },
    # {"torch_distributed": {"enabled": True}, "instance_groups": [train]}: the SDK sends only
    # sagemaker_torch_distributed_enabled; launch adds the groups (hostkit.job says why).
    ("torch_distributed", None): {
        "sagemaker_distribution_instance_groups": '["train"]',
        "sagemaker_torch_distributed_enabled": "true",
    },
    # distribution=None
    ("none", None): {},
}
GROUPS = [
    {"InstanceGroupName": "data", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
    {"InstanceGroupName": "train", "InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
]


def group_args(source, distribution, processes):
    args = distribution_args(source, distribution, processes, None)
    args = without(args, "--instance-type", "--instance-count")
    args += ["--instance-groups", "data:1:ml.c5.xlarge,train:2", "--instance-type", "ml.g5.xlarge"]
    if distribution != "none":
        args += ["--distribution-groups", "train"]
    return args


@pytest.mark.parametrize(("distribution", "processes"), list(SDK_GROUP_HPS))
def test_instance_groups_are_sent_as_the_sdk_sends_them(
    aws_env, source, sent, distribution, processes
):
    assert launch.main(group_args(source, distribution, processes)) == 0
    model = botocore.session.get_session().get_service_model("sagemaker")
    check_shape(sent, model.operation_model("CreateTrainingJob").input_shape)
    assert sent["ResourceConfig"] == {"InstanceGroups": GROUPS, "VolumeSizeInGB": 200}
    expected = {**NOT_DISTRIBUTION, **SDK_GROUP_HPS[distribution, processes]}
    assert sent["HyperParameters"] == expected
    job = boto3.client("sagemaker").describe_training_job(TrainingJobName="byoc-test-job")
    assert job["ResourceConfig"]["InstanceGroups"] == GROUPS
    decoded = entry_config.decode_hyperparameter(
        expected.get("sagemaker_distribution_instance_groups", "[]")
    )
    assert decoded == ([] if distribution == "none" else ["train"])


@pytest.mark.parametrize(
    ("launcher", "key"), [("horovod", ("mpi", "4")), ("torchrun", ("torch_distributed", None))]
)
def test_local_train_writes_the_groups_launch_sends(aws_env, source, tmp_path, launcher, key):
    argv = ["--launcher", launcher, "--out", str(tmp_path / "out"), "--source-dir", str(source)]
    argv += ["--entry-point", "train.py", "--instance-groups", "data:1:ml.c5.xlarge,train:2"]
    argv += ["--instance-type", "ml.g5.xlarge", "--distribution-groups", "train"]
    if key[1] is not None:
        argv += ["--slots", key[1]]
    assert local_train.parse_args(argv).hps == {
        **SDK_GROUP_HPS[key],
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"/opt/ml/code"',
    }


def test_warm_pool_training_plan_and_remote_debug_fit_botocores_model(aws_env, source, sent):
    plan = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-plan/byoc-plan"
    args = without(full_args(source), "--max-wait")
    args.remove("--spot")
    args += ["--keep-alive-seconds", "1800", "--training-plan-arn", plan, "--remote-debug"]
    assert launch.main(args) == 0
    model = botocore.session.get_session().get_service_model("sagemaker")
    check_shape(sent, model.operation_model("CreateTrainingJob").input_shape)
    assert sent["ResourceConfig"] == {
        "InstanceType": "ml.p4d.24xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 200,
        "KeepAlivePeriodInSeconds": 1800,
        "TrainingPlanArn": plan,
    }
    assert sent["RemoteDebugConfig"] == {"EnableRemoteDebug": True}
    sent.clear()
    assert launch.main(full_args(source, "job-b")) == 0  # none asked for: none sent
    assert (
        "RemoteDebugConfig" not in sent and "KeepAlivePeriodInSeconds" not in sent["ResourceConfig"]
    )
