"""Plan the launch: which launcher, slots per host, this host's command. Pure functions only.

Launchers (docs/contract.md, "Which client, which distribution, what runs"):
  horovod   horovodrun on the first host, over SSH to the others (sagemaker_mpi_enabled, and
            the default when nothing is asked for)
  torchrun  torchrun on every host, rendezvous on the first (sagemaker_torch_distributed_enabled)
  none      the program once on every host, no launcher
BYOC_LAUNCHER overrides what the hyperparameters ask for.
With instance groups, the launcher runs across the distribution groups' hosts only (the world,
JobConfig.hosts); a host outside them is an "outsider": it runs the program alone, as the
DLC's toolkit does, and meets, ends and fails with the job (byoc.launch.outsider).
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from byoc import constants as C
from byoc import stall
from byoc.config import ConfigError, JobConfig
from byoc.settings import Settings

HPS = C.HYPERPARAMETERS.rsplit("/", 1)[-1]  # the file errors name


@dataclass(frozen=True)
class Plan:
    role: str  # "single", "leader", "worker" or "outsider"
    launcher: str  # one of C.LAUNCHERS
    slots: int
    world_size: int
    command: list[str]  # what this host runs (horovod: only the leader or a single host)
    env: dict[str, str] = field(default_factory=dict)  # added to the program's environment


def count_gpus(dev: Path = Path("/dev"), proc: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    """GPUs the container sees: the NVIDIA driver's list, else /dev/nvidiaN device nodes."""
    if proc.is_dir():
        return len([p for p in proc.iterdir() if p.is_dir()])
    return len([p for p in dev.glob("nvidia[0-9]*") if p.name[6:].isdigit()])


def _flag(hps: dict[str, Any], name: str) -> bool:
    """A boolean hyperparameter as the SDKs send it (true, "true", "True", 1, ...)."""
    value = hps.get(name)
    if value in (None, "", False, 0):
        return False
    if value is True or value == 1 or str(value).strip().lower() in ("true", "1", "yes"):
        return True
    if str(value).strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{HPS}: {name}: must be true or false, got {value!r}")


def choose_launcher(hps: dict[str, Any], forced: str | None) -> tuple[str, str]:
    """(launcher, why) from BYOC_LAUNCHER, else the distribution the SDK sent."""
    if forced:
        return forced, f"{C.LAUNCHER_ENV}={forced}"
    for name in C.HP_SMDISTRIBUTED:
        if _flag(hps, name):
            raise ConfigError(
                f"{HPS}: {name}: asks for SageMaker's smdistributed launcher, which this image "
                "does not have. Use distribution={'torch_distributed': {'enabled': True}} "
                "(torchrun, PyTorch DDP) or {'mpi': {'enabled': True}} (Horovod) instead."
            )
    mpi = _flag(hps, C.HP_MPI_ENABLED)
    torch_distributed = _flag(hps, C.HP_TORCH_DISTRIBUTED_ENABLED)
    if mpi and torch_distributed:
        raise ConfigError(
            f"{HPS}: {C.HP_MPI_ENABLED}, {C.HP_TORCH_DISTRIBUTED_ENABLED}: both true: choose "
            "one distribution"
        )
    if torch_distributed:
        return "torchrun", C.HP_TORCH_DISTRIBUTED_ENABLED
    if mpi:
        return "horovod", C.HP_MPI_ENABLED
    return "horovod", f"the default (no distribution given; {C.LAUNCHER_ENV} chooses another)"


def _slots_value(value: Any, what: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if not 1 <= number <= C.MAX_SLOTS_PER_HOST:
        raise ConfigError(
            f"{HPS}: {what}: must be a whole number from 1 to {C.MAX_SLOTS_PER_HOST}, got {value!r}"
        )
    return number


def slots_per_host(hps: dict[str, Any], num_gpus: int, settings: Settings) -> int:
    """The hyperparameter, else one process per GPU, else BYOC_CPU_SLOTS_PER_HOST (default 1)."""
    if hps.get(C.HP_PROCESSES_PER_HOST) not in (None, ""):
        return _slots_value(hps[C.HP_PROCESSES_PER_HOST], C.HP_PROCESSES_PER_HOST)
    if num_gpus > 0:
        return num_gpus
    return settings.cpu_slots or C.DEFAULT_CPU_SLOTS


def horovodrun_command(
    cfg: JobConfig,
    slots: int,
    program: list[str],
    *,
    ssh_port: int,
    start_timeout: int,
    interface: str | None,
    custom_mpi_options: str | None = None,
) -> list[str]:
    hosts = cfg.hosts
    cmd = ["horovodrun", "-np", str(slots * len(hosts))]
    cmd += ["-H", ",".join(f"{h}:{slots}" for h in hosts)]
    cmd += ["--start-timeout", str(start_timeout)]
    if len(hosts) > 1:
        cmd += ["-p", str(ssh_port)]  # key and options come from the job's ssh config (byoc.ssh)
        if interface:
            cmd += ["--network-interface", interface]
        # Ranks on other hosts get this host's environment: byoc.rank sets their own host.
        program = [sys.executable, "-m", "byoc.rank", *program]
    if custom_mpi_options:
        cmd += ["--mpi-args", custom_mpi_options]
    return [*cmd, *program]


def torchrun_program(program: list[str]) -> list[str]:
    """The program as torchrun takes it: a script, -m module, or --no-python executable."""
    if len(program) >= 2 and program[0] == sys.executable:
        if program[1] == "-m" and len(program) >= 3:
            return ["-m", *program[2:]]
        return program[1:]
    return ["--no-python", *program]


def wrapped_program(program: list[str], wrapper: str) -> list[str]:
    """A Python program run through byoc.<wrapper>: byoc.clean_exit (its result kept, no
    teardown abort) or byoc.armed (its stacks on demand; clean_exit arms too); any other
    program as it is."""
    if len(program) >= 2 and program[0] == sys.executable:
        return [sys.executable, "-m", f"byoc.{wrapper}", *program[1:]]
    return list(program)


def stall_env(cfg: JobConfig, launcher: str, bound: float, num_gpus: int) -> dict[str, str]:
    """The program's variables for stalls (byoc.stall): where armed ranks keep their stacks and,
    with a bound, the libraries' own ends of a stalled collective. torch has no variable for a
    process group's timeout (init_process_group's argument; Gloo's default is 30 min): under
    torchrun, byoc.stall's watch of a silent job is the bound."""
    env = {C.STACKS_DIR_ENV: str(cfg.path(C.STACKS_DIR))}
    if bound and launcher == "horovod":
        whole = max(1, math.ceil(bound))
        # The inspector reports every `check` s; it ends the job only if shutdown >= check.
        check = min(C.HOROVOD_STALL_CHECK, max(1, whole // 2))
        env[C.HOROVOD_STALL_CHECK_ENV] = str(check)
        # Its shutdown comes at least shutdown - 2 * check s after its first report: room for
        # the leader to collect every rank's stack in between (stall.Watch), on a loaded host.
        shutdown = max(whole, 2 * check + math.ceil(stall.COLLECT_ROOM))
        env[C.HOROVOD_STALL_SHUTDOWN_ENV] = str(shutdown)
    if launcher == "torchrun" and num_gpus:
        # NCCL's watchdog writes its flight recorder where SageMaker uploads it.
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
        trace = cfg.path(C.OUTPUT_DATA_DIR) / "nccl_trace_rank_"
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = str(trace)
    return env


def torchrun_command(
    cfg: JobConfig, slots: int, program: list[str], *, port: int, rendezvous_timeout: float
) -> list[str]:
    cmd = ["torchrun", f"--nproc-per-node={slots}", "--max-restarts=0"]
    if len(cfg.hosts) == 1:
        cmd += ["--standalone", "--nnodes=1"]
    else:
        cmd += [
            f"--nnodes={len(cfg.hosts)}",
            f"--node-rank={cfg.hosts.index(cfg.current_host)}",
            f"--master-addr={cfg.leader}",
            f"--master-port={port}",
            f"--rdzv-conf=timeout={max(1, math.ceil(rendezvous_timeout))}",
        ]
    return [*cmd, *torchrun_program(program)]


def make_plan(
    cfg: JobConfig,
    program: list[str],
    *,
    launcher: str,
    num_gpus: int,
    settings: Settings,
    interface: str | None = None,
) -> Plan:
    hps = cfg.hyperparameters
    slots = slots_per_host(hps, num_gpus, settings)
    multi = len(cfg.hosts) > 1
    role = ("leader" if cfg.is_leader else "worker") if multi else "single"
    if len(cfg.everyone) > 1 and role == "single":
        role = "leader"  # a world of one host, with outsiders to lead
    env: dict[str, str] = {}
    if launcher != "none" and not cfg.in_world:
        command = wrapped_program(program, "clean_exit") if settings.clean_exit else list(program)
        return Plan(role="outsider", launcher=launcher, slots=1, world_size=1, command=command)
    if launcher != "none":
        env = stall_env(cfg, launcher, settings.stall_timeout, num_gpus)
    if launcher == "horovod":
        program = wrapped_program(program, "armed")
        command = horovodrun_command(
            cfg,
            slots,
            program,
            ssh_port=settings.ssh_port,
            start_timeout=settings.start_timeout,
            interface=interface,
            custom_mpi_options=hps.get(C.HP_CUSTOM_MPI_OPTIONS) or None,
        )
        if not multi and slots == 1:
            command = list(program)  # one process needs no launcher
    elif launcher == "torchrun":
        command = torchrun_command(
            cfg,
            slots,
            wrapped_program(program, "clean_exit" if settings.clean_exit else "armed"),
            port=settings.torchrun_port,
            rendezvous_timeout=settings.peer_timeout,
        )
        if multi and interface:
            env |= {"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface}
    else:
        slots, command = 1, list(program)
    world = slots * len(cfg.hosts)
    return Plan(
        role=role, launcher=launcher, slots=slots, world_size=world, command=command, env=env
    )


def rank_host(rank: int, cfg: JobConfig, slots: int) -> str:
    """Both launchers place ranks host by host, `slots` to each, in host order."""
    index = rank // slots
    return cfg.hosts[index] if 0 <= index < len(cfg.hosts) else "?"


def describe(cmd: list[str]) -> str:
    return shlex.join(cmd)


def default_program(launcher: str) -> str:
    return C.DEFAULT_DDP_PROGRAM if launcher == "torchrun" else C.DEFAULT_PROGRAM
