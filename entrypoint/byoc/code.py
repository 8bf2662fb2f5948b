"""Get the user's code into /opt/ml/code and decide how to run its entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from byoc import constants as C


class CodeError(Exception):
    """The user's code cannot be fetched or run; the message says why."""


@dataclass(frozen=True)
class Program:
    entry_point: str  # as given: train.py, run.sh, a module name, an executable
    code_dir: Path
    command: list[str]  # without the user's arguments


def _extract(archive: Path, dest: Path) -> None:
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")  # refuses absolute paths, .., devices
            else:  # pragma: no cover - Pythons without the extraction filters
                for member in tar.getmembers():
                    target = (dest / member.name).resolve()
                    if not str(target).startswith(str(dest.resolve())) or member.isdev():
                        raise CodeError(f"{archive}: unsafe member {member.name!r}")
                tar.extractall(dest)  # noqa: S202 - checked above
    except (tarfile.TarError, OSError) as exc:
        raise CodeError(f"cannot extract {archive}: {exc}") from exc


def _download_s3(uri: str, dest: Path) -> None:
    import boto3  # noqa: PLC0415 - only jobs with s3 code need it

    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or not key:
        raise CodeError(f"{uri} is not an s3://bucket/key URI")
    try:
        boto3.client("s3").download_file(bucket, key, str(dest))
    except Exception as exc:  # botocore's errors do not share a base class with OSError
        raise CodeError(f"cannot download {uri}: {exc}") from exc


def stage(submit_directory: str | None, code_dir: Path) -> None:
    """Place the submitted code in code_dir (s3:// tarball, local tarball or local directory)."""
    if not submit_directory:
        return
    source = submit_directory.removeprefix("file://")
    code_dir.mkdir(parents=True, exist_ok=True)
    if source.startswith("s3://"):
        with tempfile.TemporaryDirectory() as tmp:
            archive = Path(tmp) / "sourcedir.tar.gz"
            _download_s3(source, archive)
            _extract(archive, code_dir)
        return
    path = Path(source)
    if path.is_dir():
        if path.resolve() != code_dir.resolve():  # local mode mounts the code there itself
            shutil.copytree(path, code_dir, dirs_exist_ok=True)
    elif path.is_file():
        _extract(path, code_dir)
    else:
        raise CodeError(
            f"sagemaker_submit_directory {submit_directory!r} is neither an s3:// URI nor an "
            "existing directory or tarball"
        )


def install_requirements(code_dir: Path) -> None:
    req = code_dir / "requirements.txt"
    if not req.is_file():
        return
    print(f"byoc: installing {req}", flush=True)
    # From the code directory, as the toolkit does: relative paths in the file mean files there.
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-cache-dir", "-r", str(req)],
        cwd=code_dir,
        check=False,
    )
    if result.returncode != 0:
        raise CodeError(f"pip install -r {req} failed with exit code {result.returncode}")


def resolve(
    entry_point: str | None, code_dir: Path, default_program: str = C.DEFAULT_PROGRAM
) -> Program:
    """How to run the entry point: .py, .sh, an installable package, or an executable; the
    image's example (default_program) when the job names none."""
    if not entry_point:
        default = Path(default_program)
        return Program(str(default), default.parent, [sys.executable, str(default)])
    path = Path(entry_point) if os.path.isabs(entry_point) else code_dir / entry_point
    if entry_point.endswith(".py"):
        if not path.is_file():
            raise CodeError(f"entry point {entry_point} not found in {code_dir}")
        return Program(entry_point, code_dir, [sys.executable, str(path)])
    if entry_point.endswith(".sh"):
        if not path.is_file():
            raise CodeError(f"entry point {entry_point} not found in {code_dir}")
        return Program(entry_point, code_dir, ["/bin/bash", str(path)])
    if (code_dir / "setup.py").is_file() or (code_dir / "pyproject.toml").is_file():
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-cache-dir", str(code_dir)], check=False
        )
        if result.returncode != 0:
            raise CodeError(f"pip install {code_dir} failed with exit code {result.returncode}")
        return Program(entry_point, code_dir, [sys.executable, "-m", entry_point])
    if path.is_file() and os.access(path, os.X_OK):
        return Program(entry_point, code_dir, [str(path)])
    raise CodeError(
        f"entry point {entry_point!r}: not a .py or .sh file in {code_dir}, no setup.py or "
        "pyproject.toml there to install it as a package, and not an executable file"
    )


def program_name(hyperparameters: dict[str, Any], env: dict[str, str]) -> str | None:
    value = hyperparameters.get(C.HP_PROGRAM) or env.get(C.SAGEMAKER_PROGRAM)
    return str(value) if value else None


def submit_directory(hyperparameters: dict[str, Any], env: dict[str, str]) -> str | None:
    value = hyperparameters.get(C.HP_SUBMIT_DIRECTORY) or env.get(C.SAGEMAKER_SUBMIT_DIRECTORY)
    return str(value) if value else None
