"""What an instance type brings, for the fabric decision and `doctor`: one table, one place.

GPUs, EFA devices and whether EFA does RDMA (GPUDirect) on it, from AWS's EC2 documentation
("Elastic Fabric Adapter": supported instance types, RDMA read/write columns; the instance type
pages for network cards). SageMaker's "ml." prefix is dropped before the lookup. A type missing
here has no expectation: nothing is inferred from a name we do not know.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Instance:
    gpus: int
    efa: int  # EFA devices the instance has (0: none); the container may see fewer
    rdma: bool  # EFA with RDMA read (p4d/p4de) or read and write (p5 and later, g6, g6e)


def _family(family: str, gpus: dict[str, int], efa: dict[str, int], rdma: bool) -> dict:
    """One family's sizes: GPUs per size, EFA devices on the sizes that have EFA."""
    return {
        f"{family}.{size}": Instance(n, efa.get(size, 0), rdma and size in efa)
        for size, n in gpus.items()
    }


_SMALL_GPUS = {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1}
_G5_GPUS = {**_SMALL_GPUS, "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}
_EFA_8XL_UP = {"8xlarge": 1, "12xlarge": 1, "16xlarge": 1, "24xlarge": 1, "48xlarge": 1}

TABLE: dict[str, Instance] = {
    "p3.2xlarge": Instance(1, 0, False),
    "p3.8xlarge": Instance(4, 0, False),
    "p3.16xlarge": Instance(8, 0, False),
    "p3dn.24xlarge": Instance(8, 1, False),
    "p4d.24xlarge": Instance(8, 4, True),
    "p4de.24xlarge": Instance(8, 4, True),
    "p5.4xlarge": Instance(1, 0, False),
    "p5.48xlarge": Instance(8, 32, True),
    "p5e.48xlarge": Instance(8, 32, True),
    "p5en.48xlarge": Instance(8, 16, True),
    "p6-b200.48xlarge": Instance(8, 8, True),
    **_family(
        "g4dn",
        {**_SMALL_GPUS, "12xlarge": 4, "metal": 8},
        {"8xlarge": 1, "12xlarge": 1, "16xlarge": 1, "metal": 1},
        False,
    ),
    **_family("g5", _G5_GPUS, _EFA_8XL_UP, False),
    **_family("g6", _G5_GPUS, _EFA_8XL_UP, True),
    **_family("g6e", _G5_GPUS, {**_EFA_8XL_UP, "24xlarge": 2, "48xlarge": 4}, True),
}


def normalize(instance_type: str | None) -> str | None:
    """'ml.p4d.24xlarge' -> 'p4d.24xlarge'; None or '' -> None."""
    if not instance_type:
        return None
    name = instance_type.strip().lower()
    return name[3:] if name.startswith("ml.") else name


def lookup(instance_type: str | None) -> Instance | None:
    name = normalize(instance_type)
    return TABLE.get(name) if name else None
