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
    root: Path
    current_host: str
    hosts: list[str]
    network_interface: str | None
    instance_type: str | None
    hyperparameters: dict[str, Any]
    channels: list[Channel] = field(default_factory=list)
    resource_config: dict[str, Any] = field(default_factory=dict)
    input_data_config: dict[str, Any] = field(default_factory=dict)

    @property
    def leader(self) -> str:
        return self.hosts[0]

    @property
    def is_leader(self) -> bool:
        return self.current_host == self.leader

    def path(self, relative: str) -> Path:
        return self.root / relative


def ml_root(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(C.ML_ROOT_ENV) or C.DEFAULT_ML_ROOT)


def natural_key(name: str) -> list[Any]:
    """algo-2 before algo-10: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _load_json(path: Path, required: bool) -> Any:
    if not path.exists():
        if required:
            raise ConfigError(f"{path} is missing: SageMaker writes it for every job")
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from exc


def decode_hyperparameter(value: Any) -> Any:
    """The SDK JSON-encodes every value ('"train.py"', '3'); fall back to the raw string."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, ValueError):
        return value


def read_resource_config(path: Path) -> dict[str, Any]:
    data = _load_json(path, required=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object, not {type(data).__name__}")
    hosts = data.get("hosts")
    current = data.get("current_host")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise ConfigError(f'{path}: "hosts" must be a non-empty list of host names, got {hosts!r}')
    if not isinstance(current, str) or current not in hosts:
        raise ConfigError(f'{path}: "current_host" {current!r} is not one of "hosts" {hosts!r}')
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f'{path}: "hosts" lists a host twice: {hosts!r}')
    return data


def read_hyperparameters(path: Path) -> dict[str, Any]:
    data = _load_json(path, required=False)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of name to value")
    return {str(k): decode_hyperparameter(v) for k, v in data.items()}


def read_input_data_config(path: Path) -> tuple[dict[str, Any], list[Channel]]:
    data = _load_json(path, required=False)
    if data is None:
        return {}, []
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of channel name to its settings")
    channels = []
    for name in sorted(data):
        spec = data[name]
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: channel {name!r} must be an object, not {spec!r}")
        mode = spec.get("TrainingInputMode", "File")
        if mode not in ("File", "Pipe", "FastFile"):
            raise ConfigError(f"{path}: channel {name!r} has unknown TrainingInputMode {mode!r}")
        channels.append(
            Channel(
                name=name,
                mode=mode,
                distribution=spec.get("S3DistributionType"),
                record_wrapper=spec.get("RecordWrapperType"),
                content_type=spec.get("ContentType"),
            )
        )
    return data, channels


def load(root: Path | None = None) -> JobConfig:
    root = ml_root() if root is None else Path(root)
    resource = read_resource_config(root / C.RESOURCE_CONFIG)
    hyperparameters = read_hyperparameters(root / C.HYPERPARAMETERS)
    input_data, channels = read_input_data_config(root / C.INPUT_DATA_CONFIG)
    return JobConfig(
        root=root,
        current_host=resource["current_host"],
        hosts=sorted(resource["hosts"], key=natural_key),
        network_interface=resource.get("network_interface_name") or None,
        instance_type=resource.get("current_instance_type") or None,
        hyperparameters=hyperparameters,
        channels=channels,
        resource_config=resource,
        input_data_config=input_data,
    )
