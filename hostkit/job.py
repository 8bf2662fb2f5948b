"""One description of a SageMaker training job (Job), checked once against one set of rules, for
every tool that makes a job: `make local-train` (hostkit.local_train renders it as /opt/ml trees
on N containers) and `make launch` (hostkit.aws.launch renders it as a CreateTrainingJob
request), so the two cannot disagree. A Tool says how a command line spells the job's fields,
so every refusal (HostError, exit 2) names the flag; what only one rendering cannot do (a path
docker run -v cannot mount, a channel that is not an S3 prefix) its tool refuses itself.

The hyperparameters are what the SageMaker Python SDK puts in a job's for the image, checked
against SageMaker's limits and JSON-encoded as the SDK does (hostkit.aws.limits). Standard
library only: local_train runs under any python3.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from hostkit import HostError
from hostkit.aws import limits

DISTRIBUTIONS = ("mpi", "torch_distributed", "none")
INPUT_MODES = ("File", "FastFile", "Pipe")
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")  # of a channel's S3 data
RECORD_WRAPPERS = ("None", "RecordIO")
CHANNEL_OPTIONS = {  # --channel's option -> Channel's field
    "mode": "mode",
    "distribution": "distribution",
    "wrap": "wrap",
    "content-type": "content_type",
}
MAX_PROCESSES_PER_HOST = 256  # entrypoint/byoc/constants.py MAX_SLOTS_PER_HOST: the image's most
CPU_SLOTS_ENV = "BYOC_CPU_SLOTS_PER_HOST"  # entrypoint/byoc/constants.py CPU_SLOTS_ENV
INSTANCE_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = "letters, digits and -, at most 63"


def distribution_hyperparameters(
    distribution: str,
    *,
    processes_per_host: int | None = None,
    custom_mpi_options: str | None = None,
    instance_type: str | None = None,
) -> dict[str, object]:
    """What sagemaker.pytorch.PyTorch(image_uri=..., distribution=...) adds (SDK v2.257.7).

    mpi: distribution={"mpi": {"enabled": True[, "processes_per_host": N]
    [, "custom_mpi_options": S]}}: Framework._distribution_configuration (estimator.py) sets
    sagemaker_mpi_enabled, sagemaker_mpi_num_of_processes_per_host only when processes_per_host
    is given, and sagemaker_mpi_custom_mpi_options always ("" when not given).
    torch_distributed: distribution={"torch_distributed": {"enabled": True}}:
    PyTorch._pytorch_distribution_configuration (pytorch/estimator.py) sets
    sagemaker_torch_distributed_enabled and sagemaker_instance_type.
    none: distribution=None: nothing.
    """
    if distribution == "mpi":
        hps: dict[str, object] = {"sagemaker_mpi_enabled": True}
        if processes_per_host is not None:
            hps["sagemaker_mpi_num_of_processes_per_host"] = processes_per_host
        hps["sagemaker_mpi_custom_mpi_options"] = custom_mpi_options or ""
        return hps
    if distribution == "torch_distributed":
        return {
            "sagemaker_torch_distributed_enabled": True,
            "sagemaker_instance_type": instance_type,
        }
    if distribution == "none":
        return {}
    raise ValueError(f"distribution {distribution!r}: one of {', '.join(DISTRIBUTIONS)}")


def code_hyperparameters(program: str, submit_directory: str) -> dict[str, object]:
    """The user's code: the entry point, and where the SDK put the source directory (an S3
    tarball on SageMaker; /opt/ml/code, mounted, in local mode)."""
    return {"sagemaker_program": program, "sagemaker_submit_directory": submit_directory}


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def in_range(flag: str, value, low, high, unit: str = "", why: str = "") -> None:
    """HostError "FLAG must be LOW-HIGH[UNIT] [(WHY)], not VALUE" unless low <= value <= high."""
    if (isinstance(value, float) and not math.isfinite(value)) or not low <= value <= high:
        why = f" ({why})" if why else ""
        raise HostError(
            f"{flag} must be {_number(low)}-{_number(high)}{unit}{why}, not {_number(value)}"
        )


def check_name(name: str, what: str = "--job-name") -> None:
    """SageMaker's TrainingJobName rule; what: how the message names where it came from."""
    problem = limits.text_problem(name, "TrainingJobName", controls=True)
    if problem:
        raise HostError(f"{what} {name!r} {problem}: {NAME_RULE}")


@dataclass(frozen=True)
class Tool:
    """A tool that renders jobs: how its command line spells a job's fields (for the messages)
    and what its rendering adds to the rules."""

    instance_count: str  # the flags of Job.instance_count, processes_per_host, distribution
    processes_per_host: str
    distribution: str
    distributions: dict[str, str]  # each Job.distribution it renders -> its flag's value for it
    submit_directory: str = "--source-dir"  # the flags that decide sagemaker_submit_directory
    max_instances: int | None = None  # fewer than SageMaker's InstanceCount allows
    cpu_slots: bool = False  # hosts without GPUs: processes per host without mpi -> CPU_SLOTS_ENV
    platform: dict[str, str] = field(default_factory=dict)  # hyperparameters it adds -> flag
    environment: dict[str, str] = field(default_factory=dict)  # variables it sets -> flag


@dataclass
class Channel:
    """An input channel: its data (a local directory for local-train, an S3 prefix for launch)
    and how the job reads it."""

    name: str
    source: str
    mode: str | None = None  # None: the job's input_mode
    distribution: str = "FullyReplicated"
    wrap: str | None = None  # None: not said (SageMaker's default, None)
    content_type: str | None = None


def parse_channel(text: str, options: bool = True) -> Channel:
    """--channel NAME=SOURCE[,mode=File|FastFile|Pipe][,distribution=FullyReplicated|
    ShardedByS3Key][,wrap=RecordIO|None][,content-type=TYPE]; without options, everything after
    the '=' is the source."""
    name, source = limits.split_pair(text, "--channel")
    if not options:
        return Channel(name, source)
    source, *given = source.split(",")
    values = {}
    for option in given:
        key, _, value = option.partition("=")
        if key not in CHANNEL_OPTIONS:
            raise HostError(f"--channel {name}: unknown option {key!r}")
        values[CHANNEL_OPTIONS[key]] = value
    return Channel(name, source, **values)


@dataclass
class Job:
    """A training job as the SageMaker SDK would describe it; checked when made (HostError
    naming the tool's flag), so every Job a tool renders is valid."""

    tool: Tool
    name: str  # TrainingJobName
    instance_type: str
    instance_count: int = 1
    distribution: str = "mpi"
    processes_per_host: int | None = None
    custom_mpi_options: str | None = None
    source_dir: Path | None = None  # resolved once checked
    entry_point: str | None = None  # relative to source_dir
    hyperparameters: list[str] = field(default_factory=list)  # the user's KEY=VALUE, as given
    environment: list[str] = field(default_factory=list)  # the user's NAME=VALUE, as given
    channels: list[Channel] = field(default_factory=list)
    input_mode: str = "File"  # of the channels that name none

    def __post_init__(self) -> None:
        tool = self.tool
        check_name(self.name)
        low, high = limits.int_range("TrainingInstanceCount", low=1, high=tool.max_instances)
        in_range(tool.instance_count, self.instance_count, low, high)
        if not INSTANCE_TYPE.fullmatch(self.instance_type):
            raise HostError(
                f"--instance-type {self.instance_type!r}: letters, digits, . _ -, at most 64 "
                "(e.g. ml.g5.12xlarge)"
            )
        self._check_distribution()
        self._check_code()
        self._check_channels()
        self.encoded_hyperparameters("", dict.fromkeys(tool.platform, ""))
        self.job_environment({})

    @property
    def cpu_slots(self) -> bool:
        """Processes per host go in CPU_SLOTS_ENV: no SDK sends a count without mpi."""
        return self.distribution != "mpi" and self.processes_per_host is not None

    def _check_distribution(self) -> None:
        tool = self.tool
        if self.distribution not in tool.distributions:
            raise HostError(f"{tool.distribution}: one of {', '.join(tool.distributions.values())}")
        if self.processes_per_host is not None:
            in_range(
                tool.processes_per_host,
                self.processes_per_host,
                1,
                MAX_PROCESSES_PER_HOST,
                why="the image's most per host",
            )
        if self.distribution == "mpi":
            return
        mpi_only = (
            f"is for {tool.distribution} {tool.distributions['mpi']}, not "
            f"{tool.distributions[self.distribution]}"
        )
        if self.custom_mpi_options is not None:
            raise HostError(f"--custom-mpi-options {mpi_only}")
        if self.processes_per_host is not None and not tool.cpu_slots:
            raise HostError(f"{tool.processes_per_host} {mpi_only}")

    def _check_code(self) -> None:
        """The entry point: a regular file inside --source-dir, named by a relative path
        without '..'; a symlink on the way is fine where it resolves inside --source-dir."""
        if self.entry_point and not self.source_dir:
            raise HostError("--entry-point needs --source-dir")
        if self.source_dir and not self.entry_point:
            raise HostError(
                "--source-dir needs --entry-point: without one the image's example runs and your "
                "code is not used"
            )
        if not self.source_dir:
            return
        if not self.source_dir.is_dir():
            raise HostError(f"--source-dir {self.source_dir}: does not exist or is not a directory")
        root = self.source_dir.resolve()
        entry, rel = self.entry_point, Path(self.entry_point)
        if limits.CONTROL.search(entry) or not entry.strip():
            raise HostError(f"--entry-point {entry!r}: not a file name")
        if rel.is_absolute() or ".." in rel.parts:
            raise HostError(
                f"--entry-point {entry}: a path inside --source-dir, relative to it, without '..'"
            )
        try:
            target = (root / rel).resolve()
        except (OSError, RuntimeError):  # RuntimeError: a loop, before Python 3.13
            raise HostError(f"--entry-point {entry}: a symlink loop") from None
        if not target.is_relative_to(root):
            raise HostError(
                f"--entry-point {entry}: leads outside --source-dir (a symlink to {target})"
            )
        if not target.is_file():
            raise HostError(
                f"--entry-point {entry}: no regular file of that name in --source-dir {root}"
            )
        if self.distribution == "torch_distributed" and not entry.endswith(".py"):
            # as the SDK's fw_utils.validate_torch_distributed_distribution refuses it
            spelled = f"{self.tool.distribution} {self.tool.distributions['torch_distributed']}"
            raise HostError(f"{spelled} runs python programs: --entry-point *.py")
        self.source_dir = root

    def _check_channels(self) -> None:
        if self.input_mode not in INPUT_MODES:
            raise HostError(f"--input-mode must be one of {', '.join(INPUT_MODES)}")
        limits.channel_names([channel.name for channel in self.channels])
        for channel in self.channels:
            for what, value, allowed in (
                ("mode", channel.mode, INPUT_MODES),
                ("distribution", channel.distribution, S3_DISTRIBUTIONS),
                ("wrap", channel.wrap, RECORD_WRAPPERS),
            ):
                if value is not None and value not in allowed:
                    raise HostError(
                        f"--channel {channel.name}: {what} must be one of {', '.join(allowed)}"
                    )
            if channel.content_type is not None:
                problem = limits.text_problem(channel.content_type, "ContentType")
                if problem:
                    raise HostError(
                        f"--channel {channel.name}: content-type {channel.content_type!r} {problem}"
                    )

    def encoded_hyperparameters(
        self, submit_directory: str, platform: dict[str, object]
    ) -> dict[str, str]:
        """What the SDK would send, every value JSON-encoded: the user's, the code's (the
        source directory where the rendering puts it), the distribution's, and platform (the
        tool's own, Tool.platform naming the flag of each)."""
        tool = self.tool
        own: dict[str, object] = {}
        if self.entry_point:
            own.update(code_hyperparameters(self.entry_point, submit_directory))
        own.update(platform)
        own.update(
            distribution_hyperparameters(
                self.distribution,
                processes_per_host=self.processes_per_host,
                custom_mpi_options=self.custom_mpi_options,
                instance_type=self.instance_type,
            )
        )
        owners = {
            "sagemaker_program": "--entry-point",
            "sagemaker_submit_directory": tool.submit_directory,
            "sagemaker_mpi_enabled": tool.distribution,
            "sagemaker_mpi_num_of_processes_per_host": tool.processes_per_host,
            "sagemaker_mpi_custom_mpi_options": "--custom-mpi-options",
            "sagemaker_torch_distributed_enabled": tool.distribution,
            "sagemaker_instance_type": "--instance-type",
            **tool.platform,
        }
        return limits.hyperparameters(self.hyperparameters, own, owners)

    def job_environment(self, own: dict[str, str]) -> dict[str, str]:
        """The job's environment variables: own (what the rendering sets itself), CPU_SLOTS_ENV
        where processes per host go there, and the user's, checked against SageMaker's limits.
        Names the job or its tool sets are refused in the user's, naming the flag that sets each
        (TRAINING_JOB_NAME: SageMaker sets it, as local-train does)."""
        own = dict(own)
        owners = {"TRAINING_JOB_NAME": "--job-name", **self.tool.environment}
        if self.cpu_slots:
            own[CPU_SLOTS_ENV] = str(self.processes_per_host)
            owners[CPU_SLOTS_ENV] = self.tool.processes_per_host
        return {**own, **limits.environment(self.environment, owners, extra=len(own))}
