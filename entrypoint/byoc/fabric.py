"""NCCL's network, decided at container start from what the container sees: EFA or sockets.

byoc-init applies the decision to the environment everything it starts inherits (`train`, dev
mode, a command, and through horovodrun/torchrun every rank), so Horovod's and torch's NCCL (one
library) get the same settings. Nothing is guessed from a name: the plugin is named only where
EFA devices are in the container.

- EFA devices (/sys/class/infiniband/* bound to the efa driver) and their verbs nodes
  (/dev/infiniband/uverbs*) present, and the image has the aws-ofi-nccl plugin ->
  NCCL_NET_PLUGIN=ofi, FI_PROVIDER=efa, FI_EFA_FORK_SAFE=1 and RDMAV_FORK_SAFE=1 (DataLoader
  workers fork), FI_EFA_USE_DEVICE_RDMA=1 on the instance types that have RDMA (byoc.instances).
- Otherwise no plugin is named: NCCL uses its socket transport, and one line says why.
- NCCL_SOCKET_IFNAME: the job's network_interface_name where the container has it, else the
  interface byoc.netif falls back to (said in one line), else every interface but lo and docker0.
A variable the user set keeps its value; where it contradicts what the container shows (the
plugin named on a host without EFA: "NET/OFI Only EFA provider is supported", then a hang) one
line says so, and `doctor` fails on it.

BYOC_EFA: auto (the above), on (no usable EFA stops the container: exit 2, so a job that must
run on EFA never crawls on TCP), off (never name the plugin).
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from byoc import config, instances, netif, settings
from byoc import constants as C

EFA_ENV = "BYOC_EFA"
EFA_MODES = ("auto", "on", "off")
INSTANCE_TYPE_ENV = "BYOC_INSTANCE_TYPE"  # outside SageMaker: say what the host is
PLUGIN = "opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
PLUGIN_NOT_BUILT = "opt/amazon/ofi-nccl/NOT-BUILT"
EXCLUDE_IFNAMES = "^lo,docker0"
SET_ENV = "BYOC_FABRIC_SET"  # the names byoc-init set, so `doctor` can tell them from the user's


class FabricError(ValueError):
    """BYOC_EFA cannot be honoured (exit 2)."""


@dataclass(frozen=True)
class Facts:
    """What the container shows; read by look(), used by decide() and doctor."""

    efa_devices: tuple[str, ...] = ()  # /sys/class/infiniband names bound to the efa driver
    uverbs: tuple[str, ...] = ()  # /dev/infiniband/uverbs* nodes
    plugin: bool = False  # the image has libnccl-net-ofi.so
    plugin_missing: str = ""  # why not (the build's NOT-BUILT note)
    instance_type: str | None = None
    requested_interface: str | None = None  # resourceconfig's network_interface_name
    interface: str | None = None  # that one where the container has it, else a fallback
    interface_note: str | None = None


@dataclass
class Decision:
    transport: str  # "efa" or "socket"
    set: dict[str, str] = field(default_factory=dict)  # what byoc-init adds to the environment
    kept: dict[str, str] = field(default_factory=dict)  # the user's values it leaves alone
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        ours = " ".join(f"{k}={v}" for k, v in self.set.items())
        theirs = " ".join(f"{k}={v}" for k, v in self.kept.items())
        line = f"fabric: {self.transport} ({self.reason})"
        if ours:
            line += f"; set {ours}"
        if theirs:
            line += f"; yours kept: {theirs}"
        return [line, *self.notes, *self.warnings]


def efa_devices(root: Path) -> tuple[str, ...]:
    """Names under /sys/class/infiniband whose device is bound to the efa driver."""
    base = root / "sys/class/infiniband"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return ()
    found = []
    for entry in entries:
        try:
            driver = os.path.basename(os.path.realpath(entry / "device" / "driver"))
        except OSError:
            continue
        if driver == "efa":
            found.append(entry.name)
    return tuple(found)


def uverbs(root: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(p.name for p in (root / "dev/infiniband").glob("uverbs[0-9]*")))
    except OSError:
        return ()


def resource_config(env: dict[str, str]) -> dict:
    """resourceconfig.json read leniently: `train` reports a broken one; here it only informs."""
    path = config.ml_root(env) / C.RESOURCE_CONFIG
    try:
        if path.stat().st_size > config.MAX_CONFIG_BYTES:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def look(env: dict[str, str], root: Path = Path("/")) -> Facts:
    resource = resource_config(env)
    instance_type = _text(resource.get("current_instance_type")) or _text(
        env.get(INSTANCE_TYPE_ENV)
    )
    requested = _text(resource.get("network_interface_name"))
    interface, note = netif.choose(
        requested, sys_net=root / "sys/class/net", route_file=root / "proc/net/route"
    )
    not_built = root / PLUGIN_NOT_BUILT
    try:
        missing = not_built.read_text(errors="replace").strip()[:300] if not_built.exists() else ""
    except OSError:
        missing = "unreadable NOT-BUILT note"
    plugin = (root / PLUGIN).is_file()
    if not plugin and not missing:
        missing = "this image has no aws-ofi-nccl plugin"
    return Facts(
        efa_devices=efa_devices(root),
        uverbs=uverbs(root),
        plugin=plugin,
        plugin_missing=missing,
        instance_type=instances.normalize(instance_type),
        requested_interface=requested,
        interface=interface,
        interface_note=note,
    )


def mode(env: dict[str, str]) -> str:
    try:
        return settings.choice(env, EFA_ENV, EFA_MODES, "auto")
    except settings.SettingsError as exc:
        raise FabricError(str(exc)) from None


def efa_forced(env: dict[str, str]) -> list[str]:
    """The user's settings that make NCCL use EFA whether or not the container has it."""
    named = []
    if "ofi" in env.get("NCCL_NET_PLUGIN", "").lower():
        named.append(f"NCCL_NET_PLUGIN={env['NCCL_NET_PLUGIN']}")
    if env.get("FI_PROVIDER", "").strip().lower() == "efa":
        named.append(f"FI_PROVIDER={env['FI_PROVIDER']}")
    return named


def _put(decision: Decision, env: dict[str, str], name: str, value: str) -> None:
    if name in env:
        decision.kept[name] = env[name]
    else:
        decision.set[name] = value


def decide(facts: Facts, env: dict[str, str], efa_mode: str = "auto") -> Decision:
    """Pure: the facts and the user's environment in, what to set and say out."""
    kind = instances.lookup(facts.instance_type)
    if facts.efa_devices and not facts.uverbs:
        why_not = (
            f"{len(facts.efa_devices)} EFA device(s) on the host but no /dev/infiniband/uverbs* "
            "in the container (docker run --device=/dev/infiniband/uverbs0 ..., one per device)"
        )
    elif facts.efa_devices and not facts.plugin:
        why_not = f"EFA devices present but {facts.plugin_missing}"
    elif not facts.efa_devices:
        why_not = "no EFA device in this container"
    else:
        why_not = ""
    if efa_mode == "off":
        why_not = f"{EFA_ENV}=off"
    if efa_mode == "on" and why_not:
        raise FabricError(f"{EFA_ENV}=on but EFA cannot be used: {why_not}")

    if why_not:
        decision = Decision("socket", reason=f"{why_not}; NCCL uses its socket transport")
        if facts.efa_devices and efa_mode != "off":
            decision.warnings.append(
                "fabric: WARNING: this host has EFA but NCCL will not use it; multi-node "
                "training runs on TCP at a fraction of the speed (run `byoc doctor`)"
            )
        named = efa_forced(env)
        if named and efa_mode != "off":
            decision.warnings.append(
                f"fabric: WARNING: {' '.join(named)} set without an EFA device in the "
                "container: NCCL fails ('NET/OFI Only EFA provider is supported') or hangs; "
                "unset them"
            )
    else:
        devices = len(facts.efa_devices)
        reason = f"{devices} EFA device(s): {', '.join(facts.efa_devices[:4])}"
        reason += ", ..." if devices > 4 else ""
        decision = Decision("efa", reason=reason)
        _put(decision, env, "NCCL_NET_PLUGIN", "ofi")
        _put(decision, env, "FI_PROVIDER", "efa")
        _put(decision, env, "FI_EFA_FORK_SAFE", "1")
        _put(decision, env, "RDMAV_FORK_SAFE", "1")
        if kind and kind.rdma:
            _put(decision, env, "FI_EFA_USE_DEVICE_RDMA", "1")
        elif "FI_EFA_USE_DEVICE_RDMA" in env:
            decision.kept["FI_EFA_USE_DEVICE_RDMA"] = env["FI_EFA_USE_DEVICE_RDMA"]
        if kind and kind.efa and devices < kind.efa:
            decision.warnings.append(
                f"fabric: WARNING: {facts.instance_type} has {kind.efa} EFA devices, this "
                f"container sees {devices}: bandwidth is capped at that share"
            )
    _put(decision, env, "NCCL_SOCKET_IFNAME", facts.interface or EXCLUDE_IFNAMES)
    if facts.interface_note and "NCCL_SOCKET_IFNAME" in decision.set:
        decision.notes.append(f"fabric: {facts.interface_note}")
    return decision


def apply(env: MutableMapping[str, str], root: Path = Path("/")) -> list[str]:
    """Decide for this container and add the decision to env; the lines to print once."""
    snapshot = dict(env)
    decision = decide(look(snapshot, root), snapshot, mode(snapshot))
    env.update(decision.set)
    env[SET_ENV] = ",".join(decision.set)
    return decision.lines()
