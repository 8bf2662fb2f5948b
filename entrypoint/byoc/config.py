"""Read the SageMaker contract from /opt/ml: resource, hyperparameter and input data configs."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from byoc import constants as C


class ConfigError(Exception):
    """A contract file is missing or malformed; the message says which and how."""


@dataclass(frozen=True)
class Channel:
    name: str
    mode: str  # File, Pipe or FastFile
    distribution: str | None = None
    record_wrapper: str | None = None
    content_type: str | None = None


@dataclass(frozen=True)
class JobConfig:
    """hosts: the world, the hosts the launcher runs across (with instance groups: those of the
    distribution groups; else every host), its first the leader. job_hosts: every host of the
    job (empty: the same as hosts). A host of the job outside the world runs the program alone
    (an outsider) but meets, ends and fails with the job."""

    root: Path
    current_host: str
    hosts: list[str]
    network_interface: str | None
    instance_type: str | None
    hyperparameters: dict[str, Any]
    channels: list[Channel] = field(default_factory=list)
    resource_config: dict[str, Any] = field(default_factory=dict)
    input_data_config: dict[str, Any] = field(default_factory=dict)
    job_hosts: list[str] = field(default_factory=list)
    current_group: str | None = None
    groups: dict[str, list[str]] = field(default_factory=dict)  # instance group -> its hosts

    @property
    def leader(self) -> str:
        return self.hosts[0]

    @property
    def is_leader(self) -> bool:
        return self.current_host == self.leader

    @property
    def everyone(self) -> list[str]:
        """Every host of the job, the world's and the outsiders."""
        return self.job_hosts or self.hosts

    @property
    def others(self) -> list[str]:
        """Every host of the job but the leader: those the leader meets and ends with."""
        return [h for h in self.everyone if h != self.leader]

    @property
    def outsiders(self) -> list[str]:
        return [h for h in self.everyone if h not in self.hosts]

    @property
    def in_world(self) -> bool:
        return self.current_host in self.hosts

    def path(self, relative: str) -> Path:
        return self.root / relative


def ml_root(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(C.ML_ROOT_ENV) or C.DEFAULT_ML_ROOT)


def natural_key(name: str) -> list[Any]:
    """algo-2 before algo-10: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


# Limits of the platform's own API (botocore's SageMaker model), so a job SageMaker would refuse
# is refused here too, with the field named, instead of failing later in a stranger way.
MAX_CONFIG_BYTES = 4 << 20  # a config file larger than this is not SageMaker's
MAX_HOSTS = 1000
MAX_HYPERPARAMETERS = 100
MAX_HP_KEY = 256
MAX_HP_VALUE = 2500
MAX_CHANNELS = 20
MAX_CHANNEL_NAME = 64
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")  # RFC 1123 host names
CHANNEL_NAME = re.compile(r"[A-Za-z0-9.\-_]+")  # SageMaker's ChannelName pattern
GROUP_NAME = re.compile(r".{1,64}", re.S)  # SageMaker's InstanceGroupName: 1 to 64 characters
INPUT_MODES = ("File", "Pipe", "FastFile")
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
RECORD_WRAPPERS = ("None", "RecordIO")


def env_key(name: str) -> str:
    """The toolkit's SM_HP_<KEY> / SM_CHANNEL_<NAME> spelling of a name."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def _load_json(path: Path, required: bool) -> Any:
    if not path.exists():
        if required:
            raise ConfigError(f"{path} is missing: SageMaker writes it for every job")
        return None
    try:
        if not path.is_file():
            raise ConfigError(f"{path} is not a file")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES >> 20} MiB")
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except RecursionError:
        raise ConfigError(f"{path} is not valid JSON: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from exc


def decode_hyperparameter(value: Any) -> Any:
    """The SDK JSON-encodes every value ('"train.py"', '3'); fall back to the raw string."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, ValueError, RecursionError):
        return value


def _optional_str(path: Path, data: dict, field: str) -> str | None:
    value = data.get(field)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{path}: {field}: must be a string, not {type(value).__name__}")
    return value or None


def _host(path: Path, field: str, name: Any) -> str:
    if not isinstance(name, str) or len(name) > 253 or not HOST_NAME.fullmatch(name):
        raise ConfigError(
            f"{path}: {field}: {name!r} is not a host name (RFC 1123: letters, digits and "
            "hyphens in dot-separated labels, no leading hyphen, at most 253 characters)"
        )
    return name


def read_resource_config(path: Path) -> dict[str, Any]:
    data = _load_json(path, required=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(data).__name__}")
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not 1 <= len(hosts) <= MAX_HOSTS:
        raise ConfigError(f"{path}: hosts: must be a list of 1 to {MAX_HOSTS} host names")
    for host in hosts:
        _host(path, "hosts", host)
    current = _host(path, "current_host", data.get("current_host"))
    if current not in hosts:
        raise ConfigError(f"{path}: current_host: {current!r} is not one of hosts {hosts!r}")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{path}: hosts: a host is listed twice: {hosts!r}")
    for name in ("network_interface_name", "current_instance_type", "current_group_name"):
        _optional_str(path, data, name)
    return data  # instance_groups: read_instance_groups, which load() calls


def read_instance_groups(path: Path, data: dict[str, Any]) -> dict[str, list[str]]:
    """resourceconfig.json's instance_groups as {group: its hosts}, checked against hosts and
    current_host ({} where there are none)."""
    groups = data.get("instance_groups")
    if groups is None:
        return {}
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise ConfigError(f"{path}: instance_groups: must be a list of objects")
    found: dict[str, list[str]] = {}
    owner: dict[str, str] = {}
    for i, group in enumerate(groups):
        name = group.get("instance_group_name")
        where = f"{path}: instance_groups[{i}].instance_group_name"
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise ConfigError(f"{where}: {name!r} is not a group name (1 to 64 characters)")
        if name in found:
            raise ConfigError(f"{where}: {name!r}: a group listed twice")
        members = group.get("hosts")
        if not isinstance(members, list) or not members:
            raise ConfigError(f"{path}: instance_groups[{i}].hosts: group {name!r} has no hosts")
        for host in members:
            _host(path, f"instance_groups[{i}].hosts", host)
            if host not in data["hosts"]:
                raise ConfigError(
                    f"{path}: instance_groups[{i}].hosts: {host!r} of group {name!r} is not "
                    "one of hosts"
                )
            if host in owner:
                raise ConfigError(
                    f"{path}: instance_groups: {host!r} is in two groups, {owner[host]!r} and "
                    f"{name!r}"
                )
            owner[host] = name
        found[name] = sorted(members, key=natural_key)
    if not found:
        return {}
    current = data["current_host"]
    if current not in owner:
        raise ConfigError(f"{path}: instance_groups: the current host {current!r} is in no group")
    named = data.get("current_group_name")
    if named and named != owner[current]:
        raise ConfigError(
            f"{path}: current_group_name: {named!r}, but {current!r} is in group {owner[current]!r}"
        )
    return found


def world_hosts(
    path: Path, hosts: list[str], groups: dict[str, list[str]], distributed: Any
) -> list[str]:
    """The hosts the launcher runs across: those of the distribution groups (the
    hyperparameter the SDK sends with instance groups, path names its file), else every host."""
    if distributed is None:
        return hosts
    hp = C.HP_DISTRIBUTION_GROUPS
    if not isinstance(distributed, list) or not distributed:
        raise ConfigError(f"{path}: {hp}: must be a list of instance group names")
    if not groups:
        raise ConfigError(
            f"{path}: {hp}: names {distributed!r}, but resourceconfig.json has no instance_groups"
        )
    unknown = [g for g in distributed if not isinstance(g, str) or g not in groups]
    if unknown:
        raise ConfigError(
            f"{path}: {hp}: {unknown!r} not among the instance groups {sorted(groups)!r}"
        )
    if len(set(distributed)) != len(distributed):
        raise ConfigError(f"{path}: {hp}: a group named twice: {distributed!r}")
    return sorted((h for g in distributed for h in groups[g]), key=natural_key)


def _check_text(path: Path, what: str, text: str, limit: int) -> None:
    if not 1 <= len(text) <= limit:
        raise ConfigError(f"{path}: {what}: must be 1 to {limit} characters, not {len(text)}")
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text):
        raise ConfigError(f"{path}: {what}: holds a control character (a NUL byte?)")


def read_hyperparameters(path: Path) -> dict[str, Any]:
    data = _load_json(path, required=False)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of name to value")
    if len(data) > MAX_HYPERPARAMETERS:
        raise ConfigError(f"{path}: at most {MAX_HYPERPARAMETERS} hyperparameters, not {len(data)}")
    seen: dict[str, str] = {}
    decoded: dict[str, Any] = {}
    for key, value in data.items():
        _check_text(path, "a hyperparameter name", key, MAX_HP_KEY)
        # SageMaker sends strings; a local tool may write plain JSON values, which count as
        # the text they would be sent as.
        text = value if isinstance(value, str) else json.dumps(value)
        if text:
            _check_text(path, key, text, MAX_HP_VALUE)
        decoded[key] = plain = decode_hyperparameter(value)
        # The SDK's JSON-in-JSON ('"a\\u0000b"') shows its control characters only decoded; a
        # decoded string goes to the script's argv and SM_HP_* as is (other values as JSON).
        if isinstance(plain, str) and plain and plain != text:
            _check_text(path, key, plain, MAX_HP_VALUE)
        other = seen.setdefault(env_key(key), key)
        if other != key:
            raise ConfigError(
                f"{path}: {key}: collides with {other!r} (both are SM_HP_{env_key(key)})"
            )
    return decoded


def read_input_data_config(path: Path) -> tuple[dict[str, Any], list[Channel]]:
    data = _load_json(path, required=False)
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of channel name to its settings")
    if len(data) > MAX_CHANNELS:
        raise ConfigError(f"{path}: at most {MAX_CHANNELS} channels, not {len(data)}")
    channels = []
    seen: dict[str, str] = {}
    for name in sorted(data):
        if len(name) > MAX_CHANNEL_NAME or not CHANNEL_NAME.fullmatch(name) or name in (".", ".."):
            raise ConfigError(
                f"{path}: {name!r}: not a channel name (letters, digits, '.', '-' and '_', "
                f"at most {MAX_CHANNEL_NAME}, not '.' or '..')"
            )
        other = seen.setdefault(env_key(name), name)
        if other != name:
            raise ConfigError(
                f"{path}: {name}: collides with channel {other!r} (both are "
                f"SM_CHANNEL_{env_key(name)})"
            )
        spec = data[name]
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: {name}: must be an object, not {type(spec).__name__}")
        mode = spec.get("TrainingInputMode", "File")
        if mode not in INPUT_MODES:
            raise ConfigError(
                f"{path}: {name}.TrainingInputMode: {mode!r} is not one of {', '.join(INPUT_MODES)}"
            )
        for setting, allowed in (
            ("S3DistributionType", S3_DISTRIBUTIONS),
            ("RecordWrapperType", RECORD_WRAPPERS),
        ):
            if spec.get(setting) is not None and spec[setting] not in allowed:
                raise ConfigError(
                    f"{path}: {name}.{setting}: {spec[setting]!r} is not one of "
                    f"{', '.join(allowed)}"
                )
        content_type = _optional_str(path, spec, "ContentType")
        channels.append(
            Channel(
                name=name,
                mode=mode,
                distribution=spec.get("S3DistributionType"),
                record_wrapper=spec.get("RecordWrapperType"),
                content_type=content_type,
            )
        )
    return data, channels


def load(root: Path | None = None) -> JobConfig:
    root = ml_root() if root is None else Path(root)
    resource = read_resource_config(root / C.RESOURCE_CONFIG)
    hyperparameters = read_hyperparameters(root / C.HYPERPARAMETERS)
    input_data, channels = read_input_data_config(root / C.INPUT_DATA_CONFIG)
    everyone = sorted(resource["hosts"], key=natural_key)
    groups = read_instance_groups(root / C.RESOURCE_CONFIG, resource)
    world = world_hosts(
        root / C.HYPERPARAMETERS,
        everyone,
        groups,
        hyperparameters.get(C.HP_DISTRIBUTION_GROUPS),
    )
    current = resource["current_host"]
    return JobConfig(
        root=root,
        current_host=current,
        hosts=world,
        job_hosts=everyone,
        current_group=next((g for g, hs in groups.items() if current in hs), None),
        groups=groups,
        network_interface=resource.get("network_interface_name") or None,
        instance_type=resource.get("current_instance_type") or None,
        hyperparameters=hyperparameters,
        channels=channels,
        resource_config=resource,
        input_data_config=input_data,
    )
