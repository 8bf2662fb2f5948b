"""CUDA forward compatibility: the image's user-mode driver where the host's is too old.

The nvidia/cuda bases carry the user-mode driver their CUDA was released with (cuda-compat, in
/usr/local/cuda/compat). SageMaker's guide for GPU containers says to put it first on
LD_LIBRARY_PATH only when the host's kernel driver is older than it; on a newer host it must not
be used (CUDA error 803). Datacenter GPUs (what SageMaker runs) support this; consumer GPUs do not
(error 804), and on those a CUDA 13 image needs a host driver of its own CUDA anyway.

byoc-init applies this to the environment its command inherits; horovodrun hands that
environment to every rank. BYOC_CUDA_COMPAT: auto (decide by version), on (always, if present),
off (never).
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping
from pathlib import Path

from byoc import constants as C
from byoc import settings


class CompatError(ValueError):
    """A setting byoc-init cannot act on (exit 2)."""


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def host_driver(version_file: Path) -> str | None:
    """The kernel module's version, from /proc/driver/nvidia/version (None without a GPU)."""
    try:
        text = version_file.read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def compat_driver(compat_dir: Path) -> str | None:
    """The version of the compat libcuda (libcuda.so.1 -> libcuda.so.580.95.05)."""
    link = compat_dir / "libcuda.so.1"
    if not link.exists():
        return None
    name = os.path.basename(os.path.realpath(link))
    match = re.fullmatch(r"libcuda\.so\.(\d+(?:\.\d+)+)", name)
    return match.group(1) if match else None


def decide(
    env: MutableMapping[str, str],
    compat_dir: Path = Path(C.CUDA_COMPAT_DIR),
    version_file: Path = Path(C.NVIDIA_DRIVER_VERSION_FILE),
) -> str | None:
    """Put compat_dir first on env's LD_LIBRARY_PATH where it is needed; say why, or None."""
    try:
        mode = settings.choice(dict(env), C.CUDA_COMPAT_ENV, C.CUDA_COMPAT_MODES, "auto")
    except settings.SettingsError as exc:
        raise CompatError(str(exc)) from None
    if mode == "off":
        return None
    compat = compat_driver(compat_dir)
    if compat is None:
        return None  # no compat driver in this image (cpu flavor, or a base without it)
    if mode == "auto":
        host = host_driver(version_file)
        if host is None or _key(host) >= _key(compat):
            return None  # no GPU driver visible, or it is new enough: the host's own is right
        why = f"the host's NVIDIA driver {host} is older than CUDA's {compat}"
    else:
        why = f"{C.CUDA_COMPAT_ENV}=on"
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p and p != str(compat_dir)]
    env["LD_LIBRARY_PATH"] = ":".join([str(compat_dir), *paths])
    return (
        f"{why}: using the forward-compatibility driver in {compat_dir} "
        f"({C.CUDA_COMPAT_ENV}=off to stop)"
    )
