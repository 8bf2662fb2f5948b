"""Get the user's code into /opt/ml/code and decide how to run its entry point."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from byoc import constants as C

S3_CONNECT_TIMEOUT = 10  # s
S3_READ_TIMEOUT = 30  # s without a byte, per attempt


class CodeError(Exception):
    """The user's code cannot be fetched or run; the message says why."""


@dataclass(frozen=True)
class Program:
    entry_point: str  # as given: train.py, run.sh, a module name, an executable
    code_dir: Path
    command: list[str]  # without the user's arguments


def _check_member(member: tarfile.TarInfo, dest: str) -> None:
    """Refuse what could land outside dest or is no plain file, link or directory: as tarfile's
    "data" filter does (which not every Python of our bases has), checked against what is on
    disk at this point, so a symlink an earlier member made is followed too."""
    name = member.name
    if os.path.isabs(name) or ".." in Path(name).parts or "\0" in name:
        raise CodeError(f"{name!r} is an absolute path or goes up ('..')")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise CodeError(f"{name!r} is a device, a FIFO or another special file")
    target = os.path.realpath(os.path.join(dest, name))
    if os.path.commonpath([dest, target]) != dest:
        raise CodeError(f"{name!r} lands outside the code directory (through a link?)")
    if member.issym() or member.islnk():
        base = dest if member.islnk() else os.path.dirname(os.path.join(dest, name))
        link = os.path.realpath(os.path.join(base, member.linkname))
        if os.path.isabs(member.linkname) or os.path.commonpath([dest, link]) != dest:
            raise CodeError(f"{name!r} links outside the code directory ({member.linkname!r})")


def _extract(archive: Path, dest: Path) -> None:
    """Unpack a (gzip'd) tarball into dest member by member, each checked first (_check_member),
    then read to the end so gzip's CRC is checked too."""
    root = os.path.realpath(dest)
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                try:
                    _check_member(member, root)
                except CodeError as exc:
                    raise CodeError(f"{archive} is unsafe: {exc}") from None
                member.mode = (member.mode | 0o600) & 0o777 if member.isfile() else member.mode
                member.uid = member.gid = 0
                tar.extract(member, root, set_attrs=not member.issym())
            while tar.fileobj.read(1 << 20):  # type: ignore[union-attr]
                pass
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as exc:
        raise CodeError(f"{archive} is corrupt or unreadable: {exc}") from exc


def _download_s3(uri: str, dest: Path) -> None:
    import boto3  # noqa: PLC0415 - only jobs with s3 code need it
    from botocore.config import Config  # noqa: PLC0415

    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or not key:
        raise CodeError(f"{uri} is not an s3://bucket/key URI")
    # Bounded: an endpoint that accepts and never answers fails in about a minute, not three.
    s3 = boto3.client(
        "s3",
        config=Config(
            connect_timeout=S3_CONNECT_TIMEOUT,
            read_timeout=S3_READ_TIMEOUT,
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    )
    print(f"byoc: downloading {uri}", flush=True)
    try:
        size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
        progress = _Progress(uri, size)
        s3.download_file(bucket, key, str(dest), Callback=progress)
    except Exception as exc:  # botocore's errors do not share a base class with OSError
        raise CodeError(f"cannot download {uri}: {exc}") from exc
    progress.done()


class _Progress:
    """A line every 10 % of a download (boto3 calls it from its transfer threads)."""

    def __init__(self, uri: str, size: int):
        self.uri, self.size, self.seen, self.shown = uri, max(size, 1), 0, 0
        self.lock = threading.Lock()

    def __call__(self, chunk: int) -> None:
        with self.lock:
            self.seen += chunk
            tenth = min(10, self.seen * 10 // self.size)
            if tenth > self.shown:
                self.shown = tenth
                print(f"byoc: {self.uri}: {tenth * 10} % of {self.size} bytes", flush=True)

    def done(self) -> None:
        if self.shown < 10:
            print(f"byoc: {self.uri}: {self.seen} bytes", flush=True)


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
        here, there = path.resolve(), code_dir.resolve()
        if there.is_relative_to(here) and here != there:
            raise CodeError(
                f"sagemaker_submit_directory {submit_directory!r} holds {code_dir} itself: "
                "name the directory of your code"
            )
        if here != there:  # local mode mounts the code there itself
            shutil.copytree(path, code_dir, dirs_exist_ok=True)
    elif path.is_file():
        _extract(path, code_dir)
    else:
        raise CodeError(
            f"sagemaker_submit_directory {submit_directory!r} is neither an s3:// URI nor an "
            "existing directory or tarball"
        )


def install_requirements(code_dir: Path, pip_cache: Path | None = None) -> None:
    """pip install -r requirements.txt, through pip_cache where given (the warm pool's: a cache
    that fails, full or spoiled, gets one more try without it)."""
    req = code_dir / "requirements.txt"
    if not req.is_file():
        return
    print(
        f"byoc: installing {req}" + (f" (pip cache {pip_cache})" if pip_cache else ""), flush=True
    )
    start = time.monotonic()
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    caches = (
        [["--cache-dir", str(pip_cache)], ["--no-cache-dir"]] if pip_cache else [["--no-cache-dir"]]
    )
    for cache in caches:
        # From the code directory, as the toolkit does: relative paths in the file mean files there.
        result = subprocess.run([*pip, *cache, "-r", str(req)], cwd=code_dir, check=False)
        if result.returncode == 0:
            print(f"byoc: installed {req} in {time.monotonic() - start:.1f} s", flush=True)
            return
        if cache[0] == "--cache-dir":
            print(f"byoc: pip failed with the cache {pip_cache}: once more without it", flush=True)
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
    # An absolute entry point (a script in the image, e.g. /opt/byoc/examples/train_elastic.py)
    # runs in its own directory: the job may have no code channel, so no code_dir.
    cwd = path.parent if os.path.isabs(entry_point) else code_dir
    if entry_point.endswith(".py"):
        if not path.is_file():
            raise CodeError(f"entry point {entry_point} not found in {cwd}")
        return Program(entry_point, cwd, [sys.executable, str(path)])
    if entry_point.endswith(".sh"):
        if not path.is_file():
            raise CodeError(f"entry point {entry_point} not found in {cwd}")
        return Program(entry_point, cwd, ["/bin/bash", str(path)])
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
