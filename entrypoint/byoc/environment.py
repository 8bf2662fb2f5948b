"""The SM_* variables users' scripts expect, and the user's command-line arguments."""

from __future__ import annotations

import json
import os
from typing import Any

from byoc import constants as C
from byoc.config import JobConfig, env_key


def user_hyperparameters(hps: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter but the launcher's own (sagemaker_*)."""
    return {k: v for k, v in hps.items() if not k.startswith(C.HP_PREFIX)}


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def to_cmd_args(hps: dict[str, Any]) -> list[str]:
    """As the SageMaker toolkit: sorted, `--key value` (`-k value`), True/False, dicts k=v,..."""
    args: list[str] = []
    for key in sorted(hps):
        name = _text(key)
        args.append(f"-{name}" if len(name) == 1 else f"--{name}")
        value = hps[key]
        if isinstance(value, dict):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append(_text(value))
    return args


def _env_value(value: Any) -> str:
    """Strings as they are, everything else compact JSON (the toolkit's convention)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# sagemaker_* hyperparameters the toolkit consumes itself; the others are "framework parameters".
TOOLKIT_HYPERPARAMETERS = (
    "sagemaker_program",
    "sagemaker_submit_directory",
    "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region",
    "sagemaker_container_log_level",
    "sagemaker_job_name",
    "sagemaker_default_module_name",
    "sagemaker_tuning_objective_metric",
    "sagemaker_s3_output",
)
# What asks the toolkit for its distribution instance groups (environment.py of 5.x).
_DISTRIBUTED = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)


def _instance_groups(cfg: JobConfig) -> dict[str, Any]:
    """The toolkit's heterogeneous-cluster variables (one group, homogeneousCluster, usually)."""
    resource = cfg.resource_config
    current = cfg.current_group or resource.get("current_group_name") or "homogeneousCluster"
    groups = [
        g
        for g in resource.get("instance_groups") or []
        if isinstance(g.get("instance_group_name"), str)
    ]
    framework = {
        k: v
        for k, v in cfg.hyperparameters.items()
        if k.startswith(C.HP_PREFIX) and k not in TOOLKIT_HYPERPARAMETERS
    }
    distribution = framework.get(C.HP_DISTRIBUTION_GROUPS)
    if distribution is None:
        distribution = [current] if any(framework.get(k) for k in _DISTRIBUTED) else []
    return {
        "SM_CURRENT_INSTANCE_GROUP": current,
        "SM_CURRENT_INSTANCE_GROUP_HOSTS": next(
            (g.get("hosts", []) for g in groups if g["instance_group_name"] == current), []
        ),
        "SM_INSTANCE_GROUPS": [g["instance_group_name"] for g in groups],
        "SM_INSTANCE_GROUPS_DICT": {g["instance_group_name"]: g for g in groups},
        "SM_DISTRIBUTION_INSTANCE_GROUPS": distribution,
        "SM_IS_HETERO": len(groups) > 1,
        "SM_FRAMEWORK_PARAMS": framework,
    }


def host_facts(cfg: JobConfig, *, num_gpus: int, num_cpus: int) -> dict[str, Any]:
    """SM_TRAINING_ENV's fields that differ between hosts, for this host."""
    return {
        "current_host": cfg.current_host,
        "current_instance_type": cfg.instance_type or "local",
        "network_interface_name": cfg.network_interface or "eth0",  # the toolkit's default
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "resource_config": cfg.resource_config,
    }


def host_variables(cfg: JobConfig, *, num_gpus: int, num_cpus: int) -> dict[str, str]:
    """The SM_* variables that differ between hosts, for this host: a rank started on another
    host by the leader's launcher gets them from that host's own contract (byoc.rank)."""
    facts = host_facts(cfg, num_gpus=num_gpus, num_cpus=num_cpus)
    env = {
        C.SM_CURRENT_HOST: cfg.current_host,
        C.SM_CURRENT_HOST_RANK: str(cfg.everyone.index(cfg.current_host)),
        C.SM_CURRENT_INSTANCE_TYPE: facts["current_instance_type"],
        C.SM_NETWORK_INTERFACE_NAME: facts["network_interface_name"],
        C.SM_NUM_GPUS: str(num_gpus),
        C.SM_NUM_CPUS: str(num_cpus),
        C.SM_RESOURCE_CONFIG: _env_value(cfg.resource_config),
    }
    env.update({k: _env_value(v) for k, v in _instance_groups(cfg).items()})
    return env


def for_this_host(
    env: dict[str, str], cfg: JobConfig, *, num_gpus: int, num_cpus: int
) -> dict[str, str]:
    """env (what the leader's launcher forwarded to a rank here) with this host's own per-host
    variables, and SM_TRAINING_ENV's per-host fields, in place of the leader's."""
    out = {**env, **host_variables(cfg, num_gpus=num_gpus, num_cpus=num_cpus)}
    try:
        training_env = json.loads(env.get(C.SM_TRAINING_ENV) or "")
    except ValueError:
        return out
    if isinstance(training_env, dict):
        training_env.update(host_facts(cfg, num_gpus=num_gpus, num_cpus=num_cpus))
        out[C.SM_TRAINING_ENV] = _env_value(training_env)
    return out


def sm_variables(
    cfg: JobConfig,
    *,
    entry_point: str,
    module_dir: str,
    num_gpus: int,
    num_cpus: int,
    user_args: list[str],
) -> dict[str, str]:
    """The SM_* variables of this host, computed from the contract files."""
    root = cfg.root
    hps = user_hyperparameters(cfg.hyperparameters)
    channel_dirs = {ch.name: str(root / C.DATA_DIR / ch.name) for ch in cfg.channels}
    module_name = os.path.splitext(os.path.basename(entry_point))[0]
    training_env: dict[str, Any] = {
        "channel_input_dirs": channel_dirs,
        "hosts": cfg.everyone,
        "hyperparameters": hps,
        "input_config_dir": str(root / "input" / "config"),
        "input_data_config": cfg.input_data_config,
        "input_dir": str(root / "input"),
        "job_name": os.environ.get(C.TRAINING_JOB_NAME),
        "log_level": 20,
        "model_dir": str(root / C.MODEL_DIR),
        "module_dir": module_dir,
        "module_name": module_name,
        "output_data_dir": str(root / C.OUTPUT_DATA_DIR),
        "output_dir": str(root / C.OUTPUT_DIR),
        "user_entry_point": os.path.basename(entry_point),
        **host_facts(cfg, num_gpus=num_gpus, num_cpus=num_cpus),
    }
    env = {
        C.SM_MODEL_DIR: str(root / C.MODEL_DIR),
        C.SM_OUTPUT_DIR: str(root / C.OUTPUT_DIR),
        C.SM_OUTPUT_DATA_DIR: str(root / C.OUTPUT_DATA_DIR),
        "SM_OUTPUT_INTERMEDIATE_DIR": str(root / C.OUTPUT_DIR / "intermediate"),
        C.SM_INPUT_DIR: str(root / "input"),
        C.SM_INPUT_CONFIG_DIR: str(root / "input" / "config"),
        C.SM_CHECKPOINT_DIR: str(root / C.CHECKPOINT_DIR),
        C.SM_CHANNELS: _env_value(sorted(channel_dirs)),
        C.SM_HPS: _env_value(hps),
        C.SM_HOSTS: _env_value(cfg.everyone),
        C.SM_HOST_COUNT: str(len(cfg.everyone)),
        C.SM_MASTER_ADDR: cfg.leader,  # the world's first host
        "SM_NUM_NEURONS": "0",  # no Neuron SDK in this image
        C.SM_USER_ARGS: _env_value(user_args),
        C.SM_USER_ENTRY_POINT: os.path.basename(entry_point),
        C.SM_MODULE_DIR: module_dir,
        C.SM_MODULE_NAME: module_name,
        C.SM_INPUT_DATA_CONFIG: _env_value(cfg.input_data_config),
        C.SM_LOG_LEVEL: "20",
        C.SM_FRAMEWORK_MODULE: "",
        C.SM_TRAINING_ENV: _env_value(training_env),
    }
    env.update(host_variables(cfg, num_gpus=num_gpus, num_cpus=num_cpus))
    for name, path in channel_dirs.items():
        env[C.SM_CHANNEL_PREFIX + env_key(name)] = path
    for key, value in hps.items():
        env[C.SM_HP_PREFIX + env_key(key)] = _env_value(value)
    return env


def merged_environment(base: dict[str, str], computed: dict[str, str]) -> dict[str, str]:
    """base (the container's environment) plus computed, where SM_* already set in base win."""
    env = dict(base)
    for key, value in computed.items():
        env.setdefault(key, value)
    return env
