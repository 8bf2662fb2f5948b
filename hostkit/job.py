"""One description of a SageMaker training job (Job), checked once against one set of rules, for
every tool that makes a job: `make local-train` (hostkit.local_train renders it as /opt/ml trees
on N containers) and `make launch` (hostkit.aws.launch renders it as a CreateTrainingJob
request), so the two cannot disagree. A Tool says how a command line spells the job's fields,
so every refusal (HostError, exit 2) names the flag; what only one rendering cannot do (a path
docker run -v cannot mount, a channel that is not an S3 prefix) its tool refuses itself. The
flags both tools spell alike are declared once (add_job_arguments) and read once (job_fields).

The hyperparameters are what the SageMaker Python SDK puts in a job's for the image, checked
against SageMaker's limits and JSON-encoded as the SDK does (hostkit.aws.limits). Standard
library only: local_train runs under any python3.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field, replace
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
# --channel's options that take one of a few values -> those values
CHANNEL_VALUES = {"mode": INPUT_MODES, "distribution": S3_DISTRIBUTIONS, "wrap": RECORD_WRAPPERS}
MAX_PROCESSES_PER_HOST = 256  # entrypoint/byoc/constants.py MAX_SLOTS_PER_HOST: the image's most
CPU_SLOTS_ENV = "BYOC_CPU_SLOTS_PER_HOST"  # entrypoint/byoc/constants.py CPU_SLOTS_ENV
INSTANCE_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
NAME_RULE = "letters, digits and -, at most 63"
# A heterogeneous cluster, spelled alike by both tools.
INSTANCE_GROUPS = "--instance-groups"
DISTRIBUTION_GROUPS = "--distribution-groups"
DISTRIBUTION_GROUPS_HP = "sagemaker_distribution_instance_groups"
# What SageMaker gives a warm-pool job: a directory kept from job to job, and its variable.
WARM_POOL_CACHE_ENV = "SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY"
WARM_POOL_CACHE_DIR = "/opt/ml/sagemaker/warmpoolcache"


def distribution_hyperparameters(
    distribution: str,
    *,
    processes_per_host: int | None = None,
    custom_mpi_options: str | None = None,
    instance_type: str | None = None,
    instance_groups: list[str] | None = None,
) -> dict[str, object]:
    """What sagemaker.pytorch.PyTorch(image_uri=..., distribution=...) adds (SDK v2.257.7).

    mpi: distribution={"mpi": {"enabled": True[, "processes_per_host": N]
    [, "custom_mpi_options": S][, "instance_groups": [group, ...]]}}:
    Framework._distribution_configuration (estimator.py) sets
    sagemaker_distribution_instance_groups (the groups' names) first when the job has groups,
    sagemaker_mpi_enabled, sagemaker_mpi_num_of_processes_per_host only when processes_per_host
    is given, and sagemaker_mpi_custom_mpi_options always ("" when not given).
    torch_distributed: distribution={"torch_distributed": {"enabled": True}}:
    PyTorch._pytorch_distribution_configuration (pytorch/estimator.py) sets
    sagemaker_torch_distributed_enabled, and sagemaker_instance_type where the job has one
    instance type (not with groups). With groups the SDK checks the distributed group but sends
    nothing of it; we send sagemaker_distribution_instance_groups as for mpi, so that the
    image keeps the other groups out of torchrun's world.
    none: distribution=None: nothing (the SDK refuses distributed groups without one).
    """
    groups = {DISTRIBUTION_GROUPS_HP: instance_groups} if instance_groups else {}
    if distribution == "mpi":
        hps: dict[str, object] = {**groups, "sagemaker_mpi_enabled": True}
        if processes_per_host is not None:
            hps["sagemaker_mpi_num_of_processes_per_host"] = processes_per_host
        hps["sagemaker_mpi_custom_mpi_options"] = custom_mpi_options or ""
        return hps
    if distribution == "torch_distributed":
        hps = {**groups, "sagemaker_torch_distributed_enabled": True}
        if instance_type is not None:
            hps["sagemaker_instance_type"] = instance_type
        return hps
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


def check_instance_type(flag: str, value: str) -> None:
    if not INSTANCE_TYPE.fullmatch(value):
        raise HostError(
            f"{flag} {value!r}: letters, digits, . _ -, at most 64 (e.g. ml.g5.12xlarge)"
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
    warm_pool: str = ""  # the flag that asks for a warm pool (Job.warm_pool)
    channel_options: bool = True  # --channel NAME=SOURCE[,OPTION=VALUE...]; False: all is SOURCE


@dataclass(frozen=True)
class InstanceGroup:
    """One group of a heterogeneous cluster (ResourceConfig.InstanceGroups). instance_type
    None: the job's --instance-type (a checked Job has filled it in)."""

    name: str
    count: int
    instance_type: str | None = None


def parse_instance_groups(text: str) -> list[InstanceGroup]:
    """--instance-groups NAME:COUNT[:TYPE],... (e.g. data:1,train:2:ml.g5.xlarge)."""
    groups = []
    for item in text.split(","):
        name, *rest = item.split(":")
        if len(rest) not in (1, 2):
            raise HostError(f"{INSTANCE_GROUPS} {item!r}: NAME:COUNT[:TYPE], e.g. train:2")
        try:
            count = int(rest[0])
        except ValueError:
            raise HostError(
                f"{INSTANCE_GROUPS} {item!r}: the count {rest[0]!r} is not a whole number"
            ) from None
        groups.append(InstanceGroup(name, count, rest[1] if len(rest) == 2 else None))
    return groups


def group_fields(args: argparse.Namespace) -> dict:
    """The Job's instance_groups and distribution_groups from add_group_arguments' options."""
    given = args.instance_groups, args.distribution_groups
    return {
        "instance_groups": parse_instance_groups(given[0]) if given[0] is not None else [],
        "distribution_groups": given[1].split(",") if given[1] is not None else None,
    }


def add_group_arguments(parser: argparse._ActionsContainer, count_flag: str) -> None:
    """The heterogeneous-cluster options, spelled alike by both tools (add_job_arguments)."""
    parser.add_argument(
        INSTANCE_GROUPS,
        metavar="NAME:COUNT[:TYPE],...",
        help="a heterogeneous cluster: instance groups, their hosts algo-1 ... algo-N in this "
        "order (ResourceConfig.InstanceGroups); TYPE defaults to --instance-type; not with "
        f"{count_flag}",
    )
    parser.add_argument(
        DISTRIBUTION_GROUPS,
        metavar="NAME,...",
        help=f"the groups the distribution runs on ({DISTRIBUTION_GROUPS_HP}); the others "
        "run the program on their own (default: the only group; required with several)",
    )


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


JOB_ARGUMENTS = "the job (these options are spelled alike by make local-train and make launch)"


def add_job_arguments(
    parser: argparse.ArgumentParser,
    tool: Tool,
    *,
    instance_type: str,
    job_name: str,
    source_dir: str,
    channel_source: str,
    channel: str,
    source_dir_type: type = str,
) -> None:
    """The job's flags that both tools spell alike, declared once (name, metavar, action,
    default, help), in a group of the help of their own; job_fields reads them. Each tool says,
    in words, what only it does: instance_type, its --instance-type's default or check;
    job_name, its --job-name's default; source_dir, where --source-dir's code goes;
    channel_source, the metavar of a channel's SOURCE (DIR, S3URI), and channel, what that is.
    source_dir_type: str keeps --source-dir '' as no code (local-train); Path reads it as '.'
    (launch). The flags the tools spell each their own way (Tool.instance_count,
    processes_per_host, distribution, warm_pool) stay with the tools."""
    group = parser.add_argument_group(JOB_ARGUMENTS)
    group.add_argument(
        "--instance-type",
        metavar="TYPE",
        help=f"the instances' type, e.g. ml.g5.12xlarge ({instance_type}); with "
        f"{INSTANCE_GROUPS}, the type of the groups that name none",
    )
    add_group_arguments(group, tool.instance_count)
    group.add_argument(
        "--job-name",
        metavar="NAME",
        help=f"the TrainingJobName, SageMaker's rule: {NAME_RULE} (default: {job_name})",
    )
    group.add_argument(
        "--source-dir",
        type=source_dir_type,
        metavar="DIR",
        help=f"your code, {source_dir} (sagemaker_submit_directory); needs --entry-point",
    )
    group.add_argument(
        "--entry-point",
        metavar="FILE",
        help="the script that runs, a path in --source-dir relative to it (sagemaker_program)",
    )
    group.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter (repeatable); encoded as the SageMaker SDK does",
    )
    group.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable of the job's containers (repeatable)",
    )
    options = ""
    if tool.channel_options:
        options = "; opts: " + ", ".join(
            f"{option}={'|'.join(CHANNEL_VALUES.get(option, ('TYPE',)))}"
            for option in CHANNEL_OPTIONS
        )
    group.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar=f"NAME={channel_source}" + ("[,opts]" if tool.channel_options else ""),
        help=f"an input channel (repeatable): {channel}{options}",
    )
    group.add_argument(
        "--custom-mpi-options",
        metavar="OPTIONS",
        help="the SDK's custom_mpi_options, passed to horovodrun --mpi-args "
        f"({tool.distribution} {tool.distributions['mpi']} only); write "
        "--custom-mpi-options='-x NCCL_DEBUG=INFO' when it starts with -",
    )


def job_fields(args: argparse.Namespace, tool: Tool) -> dict:
    """The Job's fields from add_job_arguments' flags, read alike for both tools; what a tool
    decides itself (the name, the instance type and count, the distribution) it gives beside
    them. --source-dir '' (a str) is no code."""
    return {
        **group_fields(args),
        "source_dir": Path(args.source_dir) if args.source_dir else None,
        "entry_point": args.entry_point,
        "hyperparameters": args.hp,
        "environment": args.env,
        "channels": [parse_channel(item, tool.channel_options) for item in args.channel],
        "custom_mpi_options": args.custom_mpi_options,
    }


@dataclass
class Job:
    """A training job as the SageMaker SDK would describe it; checked when made (HostError
    naming the tool's flag), so every Job a tool renders is valid."""

    tool: Tool
    name: str  # TrainingJobName
    instance_type: str | None = None  # with groups: the type of those that name none
    instance_count: int | None = None  # 1 unless given; none with groups
    distribution: str = "mpi"
    processes_per_host: int | None = None
    custom_mpi_options: str | None = None
    source_dir: Path | None = None  # resolved once checked
    entry_point: str | None = None  # relative to source_dir
    hyperparameters: list[str] = field(default_factory=list)  # the user's KEY=VALUE, as given
    environment: list[str] = field(default_factory=list)  # the user's NAME=VALUE, as given
    channels: list[Channel] = field(default_factory=list)
    input_mode: str = "File"  # of the channels that name none
    instance_groups: list[InstanceGroup] = field(default_factory=list)
    distribution_groups: list[str] | None = None  # None: the SDK's default (the only group)
    warm_pool: bool = False  # instances (and their cache directory) kept for the next job

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.instance_groups:
            self._check_groups()
        else:
            self._check_instances()
        self._check_distribution()
        self._check_distribution_groups()
        self._check_code()
        self._check_channels()
        self.encoded_hyperparameters("", dict.fromkeys(self.tool.platform, ""))
        self.job_environment({})

    @property
    def host_count(self) -> int:
        return sum(g.count for g in self.instance_groups) or self.instance_count

    def _check_instances(self) -> None:
        if self.instance_type is None:
            raise HostError(f"--instance-type is required (or {INSTANCE_GROUPS})")
        check_instance_type("--instance-type", self.instance_type)
        if self.instance_count is None:
            self.instance_count = 1
        low, high = limits.int_range("TrainingInstanceCount", low=1, high=self.tool.max_instances)
        in_range(self.tool.instance_count, self.instance_count, low, high)

    def _check_groups(self) -> None:
        """Named, distinct groups of 1 or more hosts each, each with an instance type; the
        job's count is theirs (SageMaker takes InstanceCount/InstanceType or InstanceGroups)."""
        tool, groups = self.tool, self.instance_groups
        if self.instance_count is not None:
            raise HostError(
                f"{tool.instance_count} is not for {INSTANCE_GROUPS}: each group's count says "
                "how many (SageMaker takes InstanceCount or InstanceGroups)"
            )
        if self.warm_pool:
            raise HostError(
                f"{tool.warm_pool} is not for {INSTANCE_GROUPS}: SageMaker's warm pools do not "
                "take heterogeneous clusters"
            )
        limit = limits.count_limit("InstanceGroups")
        if len(groups) > limit:
            raise HostError(f"{INSTANCE_GROUPS}: {len(groups)} groups; SageMaker takes {limit}")
        low, high = limits.int_range("TrainingInstanceCount", low=1, high=tool.max_instances)
        names = [group.name for group in groups]
        for group in groups:
            problem = limits.text_problem(group.name, "InstanceGroupName", controls=True)
            if problem:
                raise HostError(f"{INSTANCE_GROUPS} {group.name!r}: the group name {problem}")
            if names.count(group.name) > 1:
                raise HostError(f"{INSTANCE_GROUPS} {group.name}: given twice")
            in_range(f"{INSTANCE_GROUPS} {group.name}: the count", group.count, low, high)
            if group.instance_type is not None:
                check_instance_type(f"{INSTANCE_GROUPS} {group.name}:", group.instance_type)
            elif self.instance_type is None:
                raise HostError(
                    f"{INSTANCE_GROUPS} {group.name}: no instance type: {group.name}:"
                    f"{group.count}:TYPE, or --instance-type for the groups that name none"
                )
        if self.instance_type is not None:
            if all(group.instance_type for group in groups):
                raise HostError(
                    f"--instance-type {self.instance_type}: every group of {INSTANCE_GROUPS} "
                    "names its type (SageMaker takes InstanceType or InstanceGroups)"
                )
            check_instance_type("--instance-type", self.instance_type)
        in_range(f"{INSTANCE_GROUPS}: the hosts of all groups", self.host_count, low, high)
        self.instance_groups = [
            replace(group, instance_type=group.instance_type or self.instance_type)
            for group in groups
        ]

    def _check_distribution_groups(self) -> None:
        """The distributed groups: some of the job's, as the SDK's distribution["instance_groups"]
        names them; the only group when none is named, as the SDK does."""
        given, names = self.distribution_groups, [group.name for group in self.instance_groups]
        if given is not None and not names:
            raise HostError(f"{DISTRIBUTION_GROUPS} needs {INSTANCE_GROUPS}")
        if not names or self.distribution == "none":
            if given is not None:
                raise HostError(
                    f"{DISTRIBUTION_GROUPS} is for a distributed job, not "
                    f"{self.tool.distribution} none (the SDK refuses it too)"
                )
            return
        if given is None:
            if len(names) > 1:
                raise HostError(
                    f"{DISTRIBUTION_GROUPS}: which of {', '.join(names)} run the distribution? "
                    "With several groups the SDK asks too"
                )
            given = names
        for name in given:
            if name not in names:
                raise HostError(
                    f"{DISTRIBUTION_GROUPS} {name!r}: not a group of {INSTANCE_GROUPS} "
                    f"({', '.join(names)})"
                )
            if given.count(name) > 1:
                raise HostError(f"{DISTRIBUTION_GROUPS} {name}: given twice")
        self.distribution_groups = list(given)

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
            for what, allowed in CHANNEL_VALUES.items():
                value = getattr(channel, CHANNEL_OPTIONS[what])
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
                instance_type=None if self.instance_groups else self.instance_type,
                instance_groups=self.distribution_groups,
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
            DISTRIBUTION_GROUPS_HP: DISTRIBUTION_GROUPS,
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
