"""Which network interface the job's traffic uses: the platform's, when this container has it.

resourceconfig.json names one (`network_interface_name`); MPI, Gloo and NCCL are pinned to it.
A name the container lacks (the SageMaker SDK's local mode writes "ethwe") would crash mpirun or
hang NCCL, so it is replaced by the interface of the default route, and one line says so.
"""

from __future__ import annotations

import re
from pathlib import Path

# Linux interface names: at most 15 characters, no '/', no whitespace; we allow the usual ones.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")


def exists(name: str, sys_net: Path = Path("/sys/class/net")) -> bool:
    return bool(_NAME.fullmatch(name)) and (sys_net / name).exists()


def default_route_interface(route_file: Path = Path("/proc/net/route")) -> str | None:
    """The interface of the IPv4 default route (destination 00000000), if there is one."""
    try:
        lines = route_file.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000" and _NAME.fullmatch(fields[0]):
            return fields[0]
    return None


def only_interface(sys_net: Path = Path("/sys/class/net")) -> str | None:
    """The one interface besides loopback, where there is exactly one (a network with no route
    out, like Docker's internal networks, has no default route)."""
    try:
        names = [p.name for p in sys_net.iterdir() if p.name != "lo" and _NAME.fullmatch(p.name)]
    except OSError:
        return None
    return names[0] if len(names) == 1 else None


def choose(
    requested: str | None,
    sys_net: Path = Path("/sys/class/net"),
    route_file: Path = Path("/proc/net/route"),
) -> tuple[str | None, str | None]:
    """(the interface to use or None for the libraries' own choice, a line to print or None)."""
    if not requested:
        return None, None
    if exists(requested, sys_net):
        return requested, None
    fallback, why = default_route_interface(route_file), "the interface of the default route"
    if not (fallback and exists(fallback, sys_net)):
        fallback, why = only_interface(sys_net), "its only interface besides loopback"
    if fallback:
        return fallback, (
            f"network_interface_name {requested!r} is not an interface of this container; "
            f"using {fallback}, {why}"
        )
    return None, (
        f"network_interface_name {requested!r} is not an interface of this container, which has "
        "no default route and several interfaces; leaving the choice to MPI, Gloo and NCCL"
    )
