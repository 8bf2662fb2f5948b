"""Create a SageMaker training job for the image, from the command line.

    python -m hostkit.aws.launch \\
        --image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-horovod:gpu-... \\
        --role arn:aws:iam::123456789012:role/SageMakerTraining \\
        --instance-type ml.p4d.24xlarge --instance-count 2 \\
        --distribution mpi --processes-per-host 8 \\
        --source-dir src/ --entry-point train.py --hp epochs=10 --hp lr=0.01 \\
        --channel train=s3://bucket/train/,mode=Pipe,distribution=ShardedByS3Key \\
        --output-path s3://bucket/output/ --checkpoint-s3-uri s3://bucket/ckpt/ --spot --wait

The source directory is packed as sourcedir.tar.gz (files at the archive's root, symlinks that
stay inside it as relative ones) and uploaded to S3 as the SageMaker Python SDK does;
hyperparameters are JSON-encoded as the SDK's framework estimators encode them. The job is one
hostkit.job.Job, checked as make local-train checks it. --distribution adds the
hyperparameters that the SDK's PyTorch(image_uri=..., distribution=...) adds: mpi (the default;
Horovod over MPI) is {"mpi": {"enabled": True, ...}}, torch_distributed (torchrun) is
{"torch_distributed": {"enabled": True}}, none is no distribution. No SSH key goes into the
job's Environment: the hosts make their SSH trust themselves at start, per job
(docs/security.md, "SSH trust"). --ssh-key-in-environment puts one there, where
DescribeTrainingJob and the console show it to anyone who may read the job. --dry-run prints
the request and creates nothing; --wait follows the job's status and logs and exits with its
result. --instance-groups makes a heterogeneous cluster, --keep-alive-seconds a warm pool,
--training-plan-arn runs on a training plan's capacity and --remote-debug lets you in through
AWS Systems Manager (docs/sagemaker.md).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import re
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path

import botocore
import botocore.exceptions

from hostkit import HostError, job
from hostkit.aws import limits
from hostkit.aws.common import Aws, aws_error, check_region, connect, run, say

ROLE_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+$")
S3_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?$")
SSH_KEY_ENV = "BYOC_SSH_PRIVATE_KEY"  # entrypoint/byoc/constants.py SSH_KEY_ENV
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
SKIP_IN_SOURCE = {"__pycache__", ".git", ".ipynb_checkpoints"}
# Bounds of the numeric options: SageMaker's own (botocore's model, limits.py) where it has them.
MAX_VOLUME_GB = 16384  # the largest EBS volume, 16 TiB
POLL_S = (1.0, 3600.0)  # s between status checks: not a busy loop, not a --wait that seems hung
MAX_SOURCE_BYTES = 1 << 30  # the tarball is made in memory; data belongs in a channel, not code
# How the options spell a job (hostkit.job), and what launch adds: the platform's
# hyperparameters, an opted-in SSH key.
TOOL = job.Tool(
    instance_count="--instance-count",
    processes_per_host="--processes-per-host",
    distribution="--distribution",
    distributions={name: name for name in job.DISTRIBUTIONS},
    submit_directory="--source-dir/--code-location",
    platform={"sagemaker_region": "--region", "sagemaker_job_name": "--job-name"},
    environment={
        SSH_KEY_ENV: "--ssh-key-in-environment",
        job.WARM_POOL_CACHE_ENV: "--keep-alive-seconds",
    },
    warm_pool="--keep-alive-seconds",
)
# The request fields of the newer options: an older botocore's model may lack them.
NEWER_FIELDS = {
    "instance_groups": ("ResourceConfig.InstanceGroups", job.INSTANCE_GROUPS),
    "keep_alive_seconds": ("ResourceConfig.KeepAlivePeriodInSeconds", "--keep-alive-seconds"),
    "training_plan_arn": ("ResourceConfig.TrainingPlanArn", "--training-plan-arn"),
    "remote_debug": ("RemoteDebugConfig", "--remote-debug"),
}


def sagemaker_model():
    return limits.service_model()


def training_instance_types() -> list[str]:
    return list(sagemaker_model().shape_for("TrainingInstanceType").enum)


def check_training_type(flag: str, value: str, types: list[str]) -> None:
    if value not in types:
        close = [t for t in types if t.startswith(value.rsplit(".", 1)[0])][:6]
        raise HostError(
            f"{flag} {value!r} is not a SageMaker training instance type"
            + (f" (similar: {', '.join(close)})" if close else " (e.g. ml.g5.12xlarge)")
        )


def check_model_field(path: str, flag: str) -> None:
    """Refuses flag where this botocore's CreateTrainingJob has no field at path (A.B)."""
    shape = sagemaker_model().operation_model("CreateTrainingJob").input_shape
    for name in path.split("."):
        if name not in shape.members:
            raise HostError(
                f"{flag}: this botocore ({botocore.__version__}) has no CreateTrainingJob "
                f"{path}: upgrade boto3 and botocore in the dev venv"
            )
        shape = shape.members[name]


def s3_problem(uri: str) -> str | None:
    if limits.CONTROL.search(uri) or not S3_RE.fullmatch(uri):
        return "is not an s3://bucket/prefix URI"
    return limits.text_problem(uri, "S3Uri")


def channel_spec(channel: job.Channel) -> dict:
    """The channel as InputDataConfig holds it."""
    spec: dict = {
        "ChannelName": channel.name,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": channel.source,
                "S3DataDistributionType": channel.distribution,
            }
        },
    }
    if channel.mode:
        spec["InputMode"] = channel.mode
    if channel.wrap:
        spec["RecordWrapperType"] = channel.wrap
    if channel.content_type is not None:
        spec["ContentType"] = channel.content_type
    return spec


def source_files(source_dir: Path) -> tuple[list[tuple[Path, str | None]], list[str]]:
    """What sourcedir.tar.gz holds, MAX_SOURCE_BYTES at most: (path, None) for each regular file,
    (path, target) for each symlink that resolves inside source_dir (its target made relative,
    so the job's code directory is the tree local-train mounts); and the symlinks left out
    (leading outside, dangling or looping). source_dir: resolved."""
    members: list[tuple[Path, str | None]] = []
    left_out, size = [], 0
    for path in sorted(source_dir.rglob("*")):
        rel = path.relative_to(source_dir)
        if any(part in SKIP_IN_SOURCE for part in rel.parts):
            continue
        if path.is_symlink():
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):  # RuntimeError: a loop, before Python 3.13
                target = None
            if target is None or not target.is_relative_to(source_dir):
                left_out.append(str(rel))
            else:
                members.append((path, os.path.relpath(target.relative_to(source_dir), rel.parent)))
        elif path.is_file():
            members.append((path, None))
            size += path.stat().st_size
            if size > MAX_SOURCE_BYTES:
                raise HostError(
                    f"--source-dir {source_dir}: more than {MAX_SOURCE_BYTES >> 20} MiB of files "
                    "(the tarball is made in memory): put data in a --channel, not in the code"
                )
    return members, left_out


def pack_source(source_dir: Path) -> bytes:
    """sourcedir.tar.gz as the SDK makes it: the directory's files at the archive's root, its
    symlinks that stay inside as relative ones (source_files). source_dir: the Job's, checked."""
    members, _ = source_files(source_dir)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, target in members:
            arcname = str(path.relative_to(source_dir))
            try:
                if target is None:
                    tar.add(path, arcname=arcname, recursive=False)
                else:
                    info = tar.gettarinfo(path, arcname=arcname)
                    info.linkname = target
                    tar.addfile(info)
            except OSError as exc:
                raise HostError(f"--source-dir: cannot read {path}: {exc.strerror}") from None
    return buf.getvalue()


def new_job_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )


def given_job_key(path: Path) -> str:
    """The unencrypted private key in path (OpenSSH or PEM), as text."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    what = f"--ssh-key-in-environment {path}"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise HostError(f"{what}: cannot be read: {exc}") from None
    for load in (serialization.load_ssh_private_key, serialization.load_pem_private_key):
        try:
            load(text.encode(), password=None)
            break
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
    else:
        raise HostError(f"{what}: not an unencrypted private key (OpenSSH or PEM)")
    limit = sagemaker_model().shape_for("TrainingEnvironmentValue").metadata["max"]
    if len(text) > limit:
        raise HostError(
            f"{what}: {len(text)} characters, more than an Environment value may hold "
            f"({limit}): use an ed25519 key"
        )
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    p.add_argument("--image-uri", required=True)
    p.add_argument("--role", required=True, help="IAM role ARN SageMaker assumes")
    p.add_argument("--instance-count", type=int, help="1 or more (default 1)")
    p.add_argument(
        "--distribution",
        choices=job.DISTRIBUTIONS,
        default="mpi",
        help="the SDK's PyTorch(distribution=...): mpi = {'mpi': {'enabled': True}} (Horovod "
        "over MPI, the default), torch_distributed = {'torch_distributed': {'enabled': True}} "
        "(torchrun), none = no distribution",
    )
    p.add_argument(
        "--processes-per-host",
        type=int,
        help=f"Horovod ranks per instance, 1-{job.MAX_PROCESSES_PER_HOST} (--distribution mpi "
        "only; default: one per GPU)",
    )
    p.add_argument(
        "--volume-size", type=int, default=50, help=f"GB of EBS per instance, 1-{MAX_VOLUME_GB}"
    )
    p.add_argument(
        "--max-run",
        type=int,
        default=24 * 3600,
        help=f"seconds, 1-{limits.MAX_RUNTIME_S} (SageMaker's maximum, 28 days)",
    )
    p.add_argument("--base-job-name", default="pytorch-horovod")
    p.add_argument(
        "--input-mode", choices=job.INPUT_MODES, default="File", help="channels' default mode"
    )
    p.add_argument("--output-path", help="s3:// for model and output (default: SDK's bucket)")
    p.add_argument("--checkpoint-s3-uri", help="s3:// synced with /opt/ml/checkpoints")
    p.add_argument("--spot", action="store_true", help="managed spot training")
    p.add_argument("--max-wait", type=int, help="seconds, >= --max-run (default: --max-run)")
    p.add_argument(
        "--keep-alive-seconds",
        type=int,
        metavar="N",
        help="keep the instances in a warm pool N s for the next matching job "
        "(ResourceConfig.KeepAlivePeriodInSeconds); not with --spot or --instance-groups",
    )
    p.add_argument(
        "--training-plan-arn",
        metavar="ARN",
        help="run on a SageMaker training plan's reserved capacity "
        "(ResourceConfig.TrainingPlanArn)",
    )
    p.add_argument(
        "--remote-debug",
        action="store_true",
        help="let AWS Systems Manager sessions into the job's containers "
        "(RemoteDebugConfig.EnableRemoteDebug; docs/sagemaker.md says what it needs)",
    )
    p.add_argument("--subnet", action="append", default=[])
    p.add_argument("--security-group", action="append", default=[])
    p.add_argument("--code-location", help="s3:// prefix for the source tarball")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument(
        "--ssh-key-in-environment",
        nargs="?",
        const=True,
        type=Path,
        metavar="KEY_FILE",
        help=f"opt in to putting an SSH private key in the job's Environment ({SSH_KEY_ENV}): "
        "a new ed25519 key for this job, or the unencrypted one in KEY_FILE. Not needed: the "
        "hosts make their SSH trust themselves at start, per job. RISK: DescribeTrainingJob "
        "returns Environment to anyone allowed to read the job, and the SageMaker console "
        "shows it, so they can read this key",
    )
    # Before the hosts made their own trust, this turned off a key that was sent by default.
    keys.add_argument("--no-job-key", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--region")
    p.add_argument("--dry-run", action="store_true", help="print the request, create nothing")
    p.add_argument("--wait", action="store_true", help="follow status and logs until the end")
    p.add_argument(
        "--poll",
        type=float,
        default=15.0,
        help=f"seconds between status checks, {POLL_S[0]:g}-{POLL_S[1]:g}",
    )
    job.add_job_arguments(
        p,
        TOOL,
        instance_type="checked against botocore's list",
        job_name="<base-job-name>-<UTC time>",
        source_dir="packed as sourcedir.tar.gz, uploaded to --code-location or the SDK's bucket",
        source_dir_type=Path,
        channel_source="S3URI",
        channel="an S3 prefix",
    )
    return p


def parse_args(argv):
    return build_parser().parse_args(argv)


def check_numbers(args) -> None:
    if args.keep_alive_seconds is not None:
        low, high = limits.int_range("KeepAlivePeriodInSeconds")
        job.in_range(
            "--keep-alive-seconds",
            args.keep_alive_seconds,
            low,
            high,
            " s",
            "SageMaker's KeepAlivePeriodInSeconds",
        )
        if args.keep_alive_seconds and args.spot:
            raise HostError("--keep-alive-seconds: SageMaker's warm pools do not take --spot")
    low, high = limits.int_range("VolumeSizeInGB", high=MAX_VOLUME_GB)
    job.in_range("--volume-size", args.volume_size, low, high, " GB", "the largest EBS volume")
    low, high = limits.int_range("MaxRuntimeInSeconds", high=limits.MAX_RUNTIME_S)
    job.in_range("--max-run", args.max_run, low, high, " s", "SageMaker's MaxRuntimeInSeconds")
    if args.max_wait is not None:
        if not args.spot:
            raise HostError("--max-wait is for managed spot training: add --spot")
        if args.max_wait < args.max_run:
            raise HostError("--max-wait must be at least --max-run")
        low, high = limits.int_range("MaxWaitTimeInSeconds", low=args.max_run)
        job.in_range(
            "--max-wait", args.max_wait, low, high, " s", "SageMaker's MaxWaitTimeInSeconds"
        )
    job.in_range("--poll", args.poll, *POLL_S, " s", "between status checks")


def job_name(args) -> str:
    if args.job_name is not None:
        name, what = args.job_name, "--job-name"
    else:
        stamp = f"{datetime.now(timezone.utc):%Y-%m-%d-%H-%M-%S-%f}"[:-3]
        name, what = f"{args.base_job_name}-{stamp}", f"--base-job-name {args.base_job_name!r}:"
    job.check_name(name, what)
    return name


def validate(args) -> None:
    """Everything that can be checked without AWS, before anything is created."""
    if limits.text_problem(args.role, "RoleArn", controls=True) or not ROLE_RE.fullmatch(args.role):
        raise HostError(
            f"--role {args.role!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)"
        )
    problem = limits.image_problem(args.image_uri) or limits.text_problem(
        args.image_uri, "AlgorithmImage"
    )
    if problem:
        raise HostError(f"--image-uri {args.image_uri!r} {problem}")
    for attribute, (path, flag) in NEWER_FIELDS.items():
        if getattr(args, attribute) not in (None, False):
            check_model_field(path, flag)
    check_numbers(args)
    check_region(args.region)
    if args.training_plan_arn is not None:
        problem = limits.text_problem(args.training_plan_arn, "TrainingPlanArn", controls=True)
        if problem:
            raise HostError(f"--training-plan-arn {args.training_plan_arn!r} {problem}")
    for uri, what in (
        (args.output_path, "--output-path"),
        (args.checkpoint_s3_uri, "--checkpoint-s3-uri"),
        (args.code_location, "--code-location"),
    ):
        problem = uri is not None and s3_problem(uri)
        if problem:
            raise HostError(f"{what} {uri!r} {problem}")
    if bool(args.subnet) != bool(args.security_group):
        raise HostError("a VPC config needs both --subnet and --security-group")
    for values, flag, item, group in (
        (args.subnet, "--subnet", "SubnetId", "Subnets"),
        (args.security_group, "--security-group", "SecurityGroupId", "VpcSecurityGroupIds"),
    ):
        if len(values) > limits.count_limit(group):
            raise HostError(f"{flag}: at most {limits.count_limit(group)} (SageMaker's {group})")
        for value in values:
            problem = limits.text_problem(value, item, controls=True)
            if problem:
                raise HostError(f"{flag} {value!r} {problem}")
    args.job = job.Job(
        TOOL,
        name=job_name(args),
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        **job.job_fields(args, TOOL),
        warm_pool=bool(args.keep_alive_seconds),
        distribution=args.distribution,
        processes_per_host=args.processes_per_host,
        input_mode=args.input_mode,
    )
    types = training_instance_types()
    for group in args.job.instance_groups:
        check_training_type(f"{job.INSTANCE_GROUPS} {group.name}:", group.instance_type, types)
    if args.instance_type is not None:
        check_training_type("--instance-type", args.instance_type, types)
    if args.job.source_dir:
        source_files(args.job.source_dir)  # its size
    for channel in args.job.channels:
        problem = s3_problem(channel.source)
        if problem:
            raise HostError(f"--channel {channel.name}: {channel.source!r} {problem}")
    # The request with placeholders for what AWS tells: refuses what CreateTrainingJob would.
    job_key = "<key>" if args.ssh_key_in_environment is not None else None
    build_request(args, args.region or "us-east-1", "123456789012", job_key)


def build_request(args, region: str, account: str, job_key: str | None) -> dict:
    """args.job (a checked Job) and launch's own settings as a CreateTrainingJob request."""
    spec: job.Job = args.job
    bucket = f"sagemaker-{region}-{account}"
    code_prefix = (args.code_location or f"s3://{bucket}").rstrip("/")
    hyperparameters = spec.encoded_hyperparameters(
        f"{code_prefix}/{spec.name}/source/sourcedir.tar.gz",
        {"sagemaker_region": region, "sagemaker_job_name": spec.name},
    )
    env = spec.job_environment({SSH_KEY_ENV: job_key} if job_key else {})
    output = (args.output_path or f"s3://{bucket}/").rstrip("/") + "/"
    request = {
        "TrainingJobName": spec.name,
        "AlgorithmSpecification": {
            "TrainingImage": args.image_uri,
            "TrainingInputMode": spec.input_mode,
            "EnableSageMakerMetricsTimeSeries": False,
        },
        "RoleArn": args.role,
        "HyperParameters": hyperparameters,
        "OutputDataConfig": {"S3OutputPath": output},
        "ResourceConfig": resource_config(args),
        "StoppingCondition": {"MaxRuntimeInSeconds": args.max_run},
        "EnableManagedSpotTraining": bool(args.spot),
        "Tags": [{"Key": "created-by", "Value": "pytorch-horovod launch"}],
    }
    if spec.channels:
        request["InputDataConfig"] = [channel_spec(channel) for channel in spec.channels]
    if env:
        request["Environment"] = env
    if args.spot:
        request["StoppingCondition"]["MaxWaitTimeInSeconds"] = args.max_wait or args.max_run
    if args.checkpoint_s3_uri:
        request["CheckpointConfig"] = {
            "S3Uri": args.checkpoint_s3_uri,
            "LocalPath": "/opt/ml/checkpoints",
        }
    if args.subnet:
        request["VpcConfig"] = {"Subnets": args.subnet, "SecurityGroupIds": args.security_group}
    if args.remote_debug:
        request["RemoteDebugConfig"] = {"EnableRemoteDebug": True}
    return request


def resource_config(args) -> dict:
    """ResourceConfig: the job's instances (a type and count, or its groups), the volume, and
    the warm pool and training plan when asked for."""
    spec: job.Job = args.job
    if spec.instance_groups:
        resource: dict = {
            "InstanceGroups": [
                {
                    "InstanceGroupName": group.name,
                    "InstanceType": group.instance_type,
                    "InstanceCount": group.count,
                }
                for group in spec.instance_groups
            ]
        }
    else:
        resource = {"InstanceType": spec.instance_type, "InstanceCount": spec.instance_count}
    resource["VolumeSizeInGB"] = args.volume_size
    if args.keep_alive_seconds is not None:
        resource["KeepAlivePeriodInSeconds"] = args.keep_alive_seconds
    if args.training_plan_arn is not None:
        resource["TrainingPlanArn"] = args.training_plan_arn
    return resource


def redacted(request: dict) -> dict:
    shown = copy.deepcopy(request)
    if SSH_KEY_ENV in shown.get("Environment", {}):
        shown["Environment"][SSH_KEY_ENV] = "<a private key for this job, not shown>"
    return shown


def upload_source(aws: Aws, uri: str, payload: bytes) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    s3 = aws.client("s3")
    if bucket == f"sagemaker-{aws.region}-{aws.account}":
        try:
            s3.head_bucket(Bucket=bucket)
        except botocore.exceptions.ClientError:
            say(f"creating the SDK's default bucket {bucket}")
            kw = {}
            if aws.region != "us-east-1":
                kw["CreateBucketConfiguration"] = {"LocationConstraint": aws.region}
            try:
                s3.create_bucket(Bucket=bucket, **kw)
            except botocore.exceptions.ClientError as exc:
                raise aws_error("s3:CreateBucket", exc) from None
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=payload)
    except botocore.exceptions.ClientError as exc:
        raise aws_error(f"s3:PutObject {uri}", exc) from None
    say(f"uploaded the source ({len(payload) / 1e3:.1f} kB) to {uri}")
    return bucket, key


def follow(aws: Aws, job_name: str, poll: float) -> int:
    """Print status changes and CloudWatch log lines until the job ends; its exit code."""
    sm, logs = aws.client("sagemaker"), aws.client("logs")
    tokens: dict[str, str | None] = {}
    last = None

    def drain() -> None:
        try:
            streams = logs.describe_log_streams(
                logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job_name}/"
            )["logStreams"]
        except botocore.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                return  # no logs yet
            raise aws_error("logs:DescribeLogStreams", exc) from None
        for stream in streams:
            name = stream["logStreamName"]
            while True:
                kw = {"nextToken": tokens[name]} if tokens.get(name) else {"startFromHead": True}
                try:
                    page = logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=name, **kw)
                except botocore.exceptions.ClientError as exc:
                    raise aws_error(f"logs:GetLogEvents {name}", exc) from None
                for event in page["events"]:
                    print(f"[{name.split('/', 1)[-1]}] {event['message']}", flush=True)
                if page.get("nextForwardToken") in (None, tokens.get(name)):
                    break
                tokens[name] = page["nextForwardToken"]

    while True:
        try:
            described = sm.describe_training_job(TrainingJobName=job_name)
        except botocore.exceptions.ClientError as exc:
            raise aws_error("sagemaker:DescribeTrainingJob", exc) from None
        status = (described["TrainingJobStatus"], described.get("SecondaryStatus"))
        if status != last:
            say(f"{datetime.now(timezone.utc):%H:%M:%S} {job_name}: {status[0]} ({status[1]})")
            last = status
        drain()
        if status[0] in ("Completed", "Failed", "Stopped"):
            if status[0] == "Failed":
                say(f"failure reason: {described.get('FailureReason', '?')}")
            if described.get("ModelArtifacts", {}).get("S3ModelArtifacts"):
                say(f"model: {described['ModelArtifacts']['S3ModelArtifacts']}")
            return 0 if status[0] == "Completed" else 1
        time.sleep(poll)


def refuse_existing_job(aws: Aws, job_name: str) -> None:
    """A job of that name has its source at the same S3 key: never overwrite, then delete it."""
    try:
        aws.client("sagemaker").describe_training_job(TrainingJobName=job_name)
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] in ("ValidationException", "ResourceNotFound"):
            return  # no such job: the name is free
        raise aws_error("sagemaker:DescribeTrainingJob", exc) from None
    raise HostError(
        f"--job-name {job_name}: a training job of this name exists; its source and output "
        "are left alone: choose another name"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    validate(args)
    aws = None
    try:
        aws = connect(args.region)
        region, account = aws.region, aws.account or "<account>"
    except HostError:
        if not args.dry_run:
            raise
        # A dry run needs no credentials: it shows a placeholder for the account.
        try:
            region = connect(args.region, need_account=False).region
        except HostError:
            region = args.region or "<region>"
        account = "<account>"
    job_name = args.job.name
    job_key = None  # by default the hosts make their own SSH trust; a key is opt-in
    if args.ssh_key_in_environment is True:
        job_key = new_job_key()
    elif args.ssh_key_in_environment is not None:
        job_key = given_job_key(args.ssh_key_in_environment)
    if job_key:
        say(
            f"warning: {SSH_KEY_ENV} goes in the job's Environment, which DescribeTrainingJob "
            "and the console show to anyone who may read the job"
        )
    request = build_request(args, region, account, job_key)
    payload = None
    if args.job.source_dir:
        payload = pack_source(args.job.source_dir)
        _, left_out = source_files(args.job.source_dir)
        if left_out:
            shown = ", ".join(left_out[:5]) + (", ..." if len(left_out) > 5 else "")
            say(
                f"note: --source-dir: {len(left_out)} symlink(s) leading outside it, dangling or "
                f"looping, not packed: {shown}"
            )
    if args.dry_run:
        print(json.dumps(redacted(request), indent=2))
        if payload is not None:
            say(
                f"would upload {len(payload) / 1e3:.1f} kB of source to "
                f"{json.loads(request['HyperParameters']['sagemaker_submit_directory'])}"
            )
        return 0
    refuse_existing_job(aws, job_name)
    uploaded = None
    if payload is not None:
        uri = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
        uploaded = upload_source(aws, uri, payload)
    sm = aws.client("sagemaker")
    try:
        arn = sm.create_training_job(**request)["TrainingJobArn"]
    except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
        if uploaded:  # nothing half-created: the tarball goes with the failed request
            try:
                aws.client("s3").delete_object(Bucket=uploaded[0], Key=uploaded[1])
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as err:
                say(f"note: the uploaded source s3://{'/'.join(uploaded)} stays: {err}")
        raise aws_error("sagemaker:CreateTrainingJob", exc) from None
    say(f"created training job {job_name}")
    print(arn)
    say(
        f"console: https://{aws.region}.console.aws.amazon.com/sagemaker/home?region="
        f"{aws.region}#/jobs/{job_name}"
    )
    if args.wait:
        try:
            return follow(aws, job_name, args.poll)
        except KeyboardInterrupt:
            say(
                f"stopped following; the job goes on. To stop it: aws sagemaker "
                f"stop-training-job --training-job-name {job_name}"
            )
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(run(main, tool="launch"))
