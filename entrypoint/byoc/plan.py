"""Plan the launch: slots per host and the horovodrun command line. Pure functions only."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from byoc import constants as C
from byoc.config import ConfigError, JobConfig


@dataclass(frozen=True)
class Plan:
    role: str  # "single", "leader" or "worker"
    slots: int
    world_size: int
    command: list[str]  # what the leader (or the single host) runs


def count_gpus(dev: Path = Path("/dev"), proc: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """GPUs the container sees: the NVIDIA driver's list, else /dev/nvidiaN device nodes."""
    if proc.is_dir():
        return len([p for p in proc.iterdir() if p.is_dir()])
    return len([p for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit()])


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{what} must be a positive integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    return number


def slots_per_host(hps: dict[str, Any], num_gpus: int, env: dict[str, str]) -> int:
    """The hyperparameter, else one process per GPU, else BYOC_CPU_SLOTS_PER_HOST (default 1)."""
    if hps.get(C.HP_PROCESSES_PER_HOST) not in (None, ""):
        return _positive_int(hps[C.HP_PROCESSES_PER_HOST], C.HP_PROCESSES_PER_HOST)
    if num_gpus > 0:
        return num_gpus
    if env.get(C.CPU_SLOTS_ENV):
        return _positive_int(env[C.CPU_SLOTS_ENV], C.CPU_SLOTS_ENV)
    return C.DEFAULT_CPU_SLOTS


def horovodrun_command(
    cfg: JobConfig,
    slots: int,
    program: list[str],
    *,
    ssh_port: int,
    start_timeout: int,
    custom_mpi_options: str | None = None,
) -> list[str]:
    hosts = cfg.hosts
    cmd = ["horovodrun", "-np", str(slots * len(hosts))]
    cmd += ["-H", ",".join(f"{h}:{slots}" for h in hosts)]
    cmd += ["--start-timeout", str(start_timeout)]
    if len(hosts) > 1:
        cmd += ["-p", str(ssh_port)]  # key and options come from ~/.ssh/config (byoc.ssh)
        if cfg.network_interface:
            cmd += ["--network-interface", cfg.network_interface]
    if custom_mpi_options:
        cmd += ["--mpi-args", custom_mpi_options]
    return [*cmd, *program]


def make_plan(
    cfg: JobConfig,
    program: list[str],
    *,
    num_gpus: int,
    env: dict[str, str] | None = None,
) -> Plan:
    env = dict(os.environ) if env is None else env
    hps = cfg.hyperparameters
    slots = slots_per_host(hps, num_gpus, env)
    ssh_port = _positive_int(env.get(C.SSH_PORT_ENV, C.DEFAULT_SSH_PORT), C.SSH_PORT_ENV)
    start_timeout = _positive_int(
        env.get(C.START_TIMEOUT_ENV, C.DEFAULT_START_TIMEOUT), C.START_TIMEOUT_ENV
    )
    custom = hps.get(C.HP_CUSTOM_MPI_OPTIONS) or None
    launcher = horovodrun_command(
        cfg,
        slots,
        program,
        ssh_port=ssh_port,
        start_timeout=start_timeout,
        custom_mpi_options=custom,
    )
    if len(cfg.hosts) == 1:
        role = "single"
        # One process needs no launcher at all; several on one host need no SSH.
        command = list(program) if slots == 1 else launcher
    else:
        role = "leader" if cfg.is_leader else "worker"
        command = launcher
    return Plan(role=role, slots=slots, world_size=slots * len(cfg.hosts), command=command)


def rank_host(rank: int, cfg: JobConfig, slots: int) -> str:
    """horovodrun places ranks host by host, `slots` to each, in -H order."""
    index = rank // slots
    return cfg.hosts[index] if 0 <= index < len(cfg.hosts) else "?"


def describe(cmd: list[str]) -> str:
    return shlex.join(cmd)
