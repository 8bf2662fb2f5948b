"""The environment variables `train` and byoc-init read: name, type, bounds, default, in one place.

Read once at start; a bad value stops the job before anything runs (exit 2), with a message that
names the variable, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from byoc import constants as C

DAY = 86400.0


class SettingsError(ValueError):
    """A variable holds a value the image cannot use; the message names it."""


def seconds(
    env: dict[str, str], name: str, default: float, high: float = DAY, zero: bool = False
) -> float:
    """A number of seconds above 0 (or 0 itself where `zero`) and at most `high`."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    above_low = value >= 0 if zero else value > 0
    if not (math.isfinite(value) and above_low and value <= high):
        low = "0 or more" if zero else "more than 0"
        raise SettingsError(
            f"{name}={raw!r}: expected a number of seconds, {low} and at most {high:g}"
        )
    return value


def integer(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    """A whole number from low to high, in ASCII digits (int() would also take "1_0" and
    other scripts' digits)."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    value = int(raw) if re.fullmatch(r"[+-]?[0-9]{1,12}", raw) else low - 1
    if not low <= value <= high:
        raise SettingsError(f"{name}={raw!r}: expected a whole number from {low} to {high}")
    return value


def choice(env: dict[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in choices:
        raise SettingsError(f"{name}={env[name]!r}: expected one of {', '.join(choices)}")
    return raw


def directory(env: dict[str, str], name: str) -> str:
    """An absolute path ("" when unset): a relative one would depend on the caller's directory."""
    raw = env.get(name, "").strip()
    if raw and (not os.path.isabs(raw) or "\0" in raw):
        raise SettingsError(f"{name}={raw!r}: expected an absolute path")
    return raw


def port(env: dict[str, str], name: str, default: int) -> int:
    return integer(env, name, default, 1, 65535)


ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def flag(env: dict[str, str], name: str, default: bool) -> bool:
    return choice(env, name, ON + OFF, ON[0] if default else OFF[0]) in ON


@dataclass(frozen=True)
class Settings:
    launcher: str | None  # BYOC_LAUNCHER, None: decided by the hyperparameters
    cpu_slots: int | None  # BYOC_CPU_SLOTS_PER_HOST, None: the default (1)
    ssh_port: int
    coordinator_port: int
    torchrun_port: int
    peer_timeout: float
    leader_timeout: float
    leader_lost_after: float
    start_timeout: int  # HOROVOD_START_TIMEOUT, whole seconds as horovodrun takes them
    term_grace: float
    end_grace: float  # BYOC_END_GRACE
    ssh_trust: str  # BYOC_SSH_TRUST: auto, on, off
    clean_exit: bool = True  # BYOC_CLEAN_EXIT
    # SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY as given ("": none); byoc.warmpool checks it,
    # since a bad one must not stop the job.
    warm_pool_cache: str = ""
    stall_timeout: float = C.DEFAULT_STALL_TIMEOUT  # BYOC_STALL_TIMEOUT; 0: off
    restarts: int = 0  # BYOC_RESTARTS: attempts after the first, at most; 0: none


def load(env: dict[str, str]) -> Settings:
    launcher = choice(env, C.LAUNCHER_ENV, C.LAUNCHERS, "") or None
    slots = integer(env, C.CPU_SLOTS_ENV, 0, 1, C.MAX_SLOTS_PER_HOST) or None
    return Settings(
        launcher=launcher,
        cpu_slots=slots,
        ssh_port=port(env, C.SSH_PORT_ENV, C.DEFAULT_SSH_PORT),
        coordinator_port=port(env, C.COORD_PORT_ENV, C.DEFAULT_COORD_PORT),
        torchrun_port=port(env, C.TORCHRUN_PORT_ENV, C.DEFAULT_TORCHRUN_PORT),
        peer_timeout=seconds(env, C.PEER_TIMEOUT_ENV, C.DEFAULT_PEER_TIMEOUT),
        leader_timeout=seconds(env, C.LEADER_TIMEOUT_ENV, C.DEFAULT_LEADER_TIMEOUT),
        leader_lost_after=seconds(env, C.LEADER_LOST_ENV, C.DEFAULT_LEADER_LOST),
        start_timeout=integer(env, C.START_TIMEOUT_ENV, C.DEFAULT_START_TIMEOUT, 1, int(DAY)),
        term_grace=seconds(env, C.TERM_GRACE_ENV, C.DEFAULT_TERM_GRACE, high=3600),
        end_grace=seconds(env, C.END_GRACE_ENV, C.DEFAULT_END_GRACE, high=3600),
        ssh_trust=choice(env, C.SSH_TRUST_ENV, C.SSH_TRUST_MODES, "auto"),
        clean_exit=flag(env, C.CLEAN_EXIT_ENV, True),
        warm_pool_cache=env.get(C.WARMPOOL_CACHE_ENV, ""),
        stall_timeout=stall_timeout(env),
        restarts=integer(env, C.RESTARTS_ENV, 0, 0, C.MAX_RESTARTS),
    )


def stall_timeout(env: dict[str, str]) -> float:
    """BYOC_STALL_TIMEOUT: 0 (off) or MIN_STALL_TIMEOUT s to a day."""
    value = seconds(env, C.STALL_TIMEOUT_ENV, C.DEFAULT_STALL_TIMEOUT, zero=True)
    if 0 < value < C.MIN_STALL_TIMEOUT:
        raise SettingsError(
            f"{C.STALL_TIMEOUT_ENV}={env[C.STALL_TIMEOUT_ENV]!r}: expected 0 (off) or "
            f"{C.MIN_STALL_TIMEOUT:g} to {DAY:g} seconds"
        )
    return value


@dataclass(frozen=True)
class DiscoverySettings:
    """byoc-discover-hosts' variables; the candidate list itself is parsed by byoc.discover."""

    hosts: str  # BYOC_DISCOVER_HOSTS as given
    file: str  # BYOC_DISCOVER_FILE, "" for none
    command: str  # BYOC_DISCOVER_COMMAND, "" for none
    slots: int | None  # BYOC_DISCOVER_SLOTS, None: GPUs on this host, else 1
    port: int
    timeout: float
    grace: float  # BYOC_DISCOVER_GRACE: s a host that answered before stays listed while silent
    state_dir: str  # BYOC_DISCOVER_STATE_DIR: where that memory and the log are kept


def default_state_dir(env: dict[str, str], uid: int) -> str:
    """This user's directory in the temporary directory ($TMPDIR, else /tmp)."""
    tmp = env.get("TMPDIR", "").strip() or "/tmp"
    return f"{tmp.rstrip('/') or '/'}/byoc-discover-{uid}"


def discover_port(env: dict[str, str]) -> int:
    """The port byoc-discover-hosts probes: BYOC_DISCOVER_PORT; else this container's own sshd
    port, SSH_PORT (development mode's, which every node of a cluster of development containers
    shares; SSH sessions get it too); else 22. A bad value of either names that variable."""
    if env.get(C.DISCOVER_PORT_ENV, "").strip():
        return port(env, C.DISCOVER_PORT_ENV, C.DEFAULT_DISCOVER_PORT)
    try:
        return port(env, C.DEV_SSH_PORT_ENV, C.DEFAULT_DISCOVER_PORT)
    except SettingsError as exc:
        raise SettingsError(
            f"{exc} (byoc-discover-hosts probes the port {C.DEV_SSH_PORT_ENV} names unless "
            f"{C.DISCOVER_PORT_ENV} is set)"
        ) from None


def load_discovery(env: dict[str, str]) -> DiscoverySettings:
    slots = integer(env, C.DISCOVER_SLOTS_ENV, 0, 1, C.MAX_SLOTS_PER_HOST) or None
    return DiscoverySettings(
        hosts=env.get(C.DISCOVER_HOSTS_ENV, "").strip(),
        file=env.get(C.DISCOVER_FILE_ENV, "").strip(),
        command=env.get(C.DISCOVER_COMMAND_ENV, "").strip(),
        slots=slots,
        port=discover_port(env),
        timeout=seconds(env, C.DISCOVER_TIMEOUT_ENV, C.DEFAULT_DISCOVER_TIMEOUT, high=60),
        grace=seconds(
            env, C.DISCOVER_GRACE_ENV, C.DEFAULT_DISCOVER_GRACE, C.MAX_DISCOVER_GRACE, True
        ),
        state_dir=directory(env, C.DISCOVER_STATE_DIR_ENV) or default_state_dir(env, os.geteuid()),
    )
