"""Pipe-mode FIFOs: wait (bounded) for <channel>_<epoch>, read its records. No torch here.

Every wait is bounded: the FIFO must appear, and its first byte come, within fifo_timeout; after
that each read must get a byte (or the end) within stall_timeout, else StallError names the
channel, epoch and byte offset (a writer that stopped without closing never blocks forever).
The fan-out reader process imports only this, byoc.data.framing and byoc.data.limits.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from byoc.data import framing as fr
from byoc.data import limits
from byoc.data.limits import Deadline


class ChannelError(Exception):
    """The channel cannot be read as configured; says which channel and what to change."""


class _FifoStream(io.RawIOBase):
    """The FIFO's bytes; a read that gets nothing for stall_timeout seconds is a StallError."""

    def __init__(self, fd: int, where: str, stall_timeout: float):
        super().__init__()
        self._fd = fd
        self.where = where
        self.stall_timeout = stall_timeout
        self.received = 0

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def readinto(self, buffer) -> int:
        # Read first, wait only when the pipe is empty: a wait (a poll object and a syscall)
        # per read cost a quarter of the speed at 1 MiB records (make bench, "pipe").
        deadline = None
        while True:
            try:
                n = os.readv(self._fd, [buffer])
            except BlockingIOError:  # empty (or another reader took the data): wait, bounded
                deadline = deadline or Deadline(self.stall_timeout)
                if not deadline.readable(self._fd):
                    raise fr.StallError(
                        self.where,
                        self.received,
                        f"the writer sent nothing for {self.stall_timeout:g} s and kept the FIFO "
                        f"open (stall_timeout= or ${limits.STALL_TIMEOUT_ENV} sets how long to "
                        "wait)",
                    ) from None
                continue
            self.received += n
            return n

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def open_fifo(
    path: Path, timeout: float, where: str, stall_timeout: float = limits.DEFAULT_STALL_TIMEOUT
) -> io.BufferedReader:
    """Wait (bounded) for the epoch's FIFO and its first byte; a buffered binary stream whose
    reads each fail after stall_timeout seconds without data."""
    timeout = limits.timeout("fifo_timeout", timeout)
    stall_timeout = limits.timeout("stall_timeout", stall_timeout)
    deadline = Deadline(timeout)
    # is_symlink too: a symlink loop or a dangling link "does not exist" yet is there to report.
    if not deadline.until(lambda: path.exists() or path.is_symlink()):
        raise ChannelError(
            f"{where}: {path} did not appear within {timeout:g} s. SageMaker makes "
            "<channel>_<epoch> once the previous epoch was read to its end; is the channel in "
            "Pipe mode, and did every epoch before it run to the end?"
        )
    # Non-blocking open: a FIFO with no writer yet would block open() without a bound.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ChannelError(f"{where}: cannot open {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
            kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
            raise ChannelError(f"{where}: {path} is {kind}, not a Pipe-mode FIFO")
        if not deadline.readable(fd):
            raise ChannelError(f"{where}: {path} exists but no data came within {timeout:g} s")
        # The pipe's own size (64 KiB): a buffer that stays in the CPU's cache; 1 MiB was slower.
        return io.BufferedReader(_FifoStream(fd, where, stall_timeout), 1 << 16)
    except BaseException:
        os.close(fd)
        raise


def pipe_records(
    fifo: Path,
    framing: str,
    where: str,
    timeout: float,
    host_rank: int = 0,
    host_count: int = 1,
    check_crc: bool = True,
    *,
    stall_timeout: float = limits.DEFAULT_STALL_TIMEOUT,
    max_record_bytes: int | None = None,
) -> Iterator[bytes]:
    """The epoch's records; with host_count > 1 only this host's every host_count-th one."""
    with open_fifo(fifo, timeout, where, stall_timeout) as stream:
        records = fr.read(stream, framing, where, check_crc, max_record_bytes)
        for i, record in enumerate(records):
            if i % host_count == host_rank:
                yield record
