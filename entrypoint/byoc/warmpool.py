"""The managed warm pool's cache: with KeepAlivePeriodInSeconds, SageMaker keeps the instances
between jobs and gives each job a directory that outlives it (SAGEMAKER_MANAGED_WARMPOOL_CACHE_
DIRECTORY, /opt/ml/sagemaker/warmpoolcache). When a job has one, pip's cache (requirements.txt
installs: downloads and built wheels) and the torch.compile caches (Inductor's, Triton's) live
in it, so a job on a kept instance reuses what an earlier one fetched, built and compiled.

A directory that is missing, not a directory, not writable or nearly full is not used: the job
runs as without one, and says why. The user's own TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR win.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from byoc import constants as C

SUBDIRS = {"pip": None, "torchinductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}


@dataclass(frozen=True)
class Cache:
    pip: Path | None = None  # pip's --cache-dir, None: no cache
    env: dict[str, str] = field(default_factory=dict)  # for the program's environment
    note: str = ""  # what was decided, for the log


def prepare(given: str) -> Cache:
    """The cache in the directory given (SAGEMAKER_MANAGED_WARMPOOL_CACHE_DIRECTORY), made
    ready, or no cache and why not."""
    if not given:
        return Cache()
    where = f"{C.WARMPOOL_CACHE_ENV}={given}"
    root = Path(given)
    if not root.is_absolute():
        return Cache(note=f"{where} is not an absolute path: no cache")
    if not root.is_dir():
        return Cache(note=f"{where} is not a directory: no cache")
    try:
        free = shutil.disk_usage(root).free
        if free < C.WARMPOOL_MIN_FREE:
            return Cache(note=f"{where} has {free >> 20} MiB free: no cache")
        ours = root / "byoc"
        made = {name: ours / name for name in SUBDIRS}
        for path in made.values():
            path.mkdir(parents=True, exist_ok=True)
            if path.is_symlink() or not path.is_dir() or not os.access(path, os.W_OK | os.X_OK):
                return Cache(note=f"{where}: {path} is not a writable directory: no cache")
    except OSError as exc:
        return Cache(note=f"{where} cannot be used ({exc.strerror or exc}): no cache")
    env = {var: str(made[name]) for name, var in SUBDIRS.items() if var}
    return Cache(pip=made["pip"], env=env, note=f"the warm pool's cache: {ours}")
