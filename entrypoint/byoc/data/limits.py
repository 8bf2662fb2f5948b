"""Bounds for byoc.data: checked timeouts, the one deadline helper every wait goes through, and
the record-size cap. Standard library only: the fan-out reader process imports it.

- Timeouts (fifo_timeout, stall_timeout, ...) are seconds, more than 0 and at most MAX_TIMEOUT;
  nan, inf, 0, negative numbers and non-numbers are refused with the parameter named.
- BYOC_MAX_RECORD_BYTES / max_record_bytes=: the largest record a reader accepts (and the shard
  writer writes); a length field above it is a RecordError before anything is allocated.
- BYOC_PIPE_STALL_TIMEOUT / stall_timeout=: how long a Pipe-mode read may get no byte from a
  writer that keeps the FIFO open before it fails (StallError) instead of blocking forever.
"""

from __future__ import annotations

import math
import numbers
import os
import select
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from byoc import deadline, settings

T = TypeVar("T")

MAX_RECORD_ENV = "BYOC_MAX_RECORD_BYTES"
STALL_TIMEOUT_ENV = "BYOC_PIPE_STALL_TIMEOUT"

# 256 MiB: far above any real training example (a 4K RGB frame is 25 MB, a TFRecord of a
# high-resolution image a few MB), yet small enough that a corrupt or hostile length field costs
# at most that much memory, a few times over (the fan-out reader's copy, the consumer's, a
# shuffle buffer), instead of a MemoryError, an OverflowError or the OOM killer on a 2^62 length.
DEFAULT_MAX_RECORD = 256 << 20
MAX_RECORD_LIMIT = 1 << 31  # 2 GiB: the largest cap that can be asked for

# 10 minutes: SageMaker's Pipe mode streams from S3 at tens of MB/s; a writer silent this long
# with the FIFO still open has stopped (the network went, the agent hung), yet a slow start of
# an S3 object or a throttled stretch is well inside it.
DEFAULT_STALL_TIMEOUT = 600.0
MAX_TIMEOUT = 7 * 24 * 3600.0  # a week; more is a typo (milliseconds?) and overflows poll()


def whole(value: object) -> bool:
    """Whether value is a whole number (an int, numpy's too; not a bool, not 2.0)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def timeout(name: str, value: object) -> float:
    """value as a timeout in seconds; ValueError naming the parameter when it is none."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r}: a timeout must be a number of seconds")
    seconds = float(value)
    if not 0 < seconds <= MAX_TIMEOUT:  # nan fails both comparisons
        raise ValueError(
            f"{name}={value!r}: a timeout must be more than 0 and at most {MAX_TIMEOUT:.0f} s "
            "(7 days); nan, inf, 0 and negative values are refused"
        )
    return seconds


def stall_timeout(value: float | None = None, env: Mapping[str, str] | None = None) -> float:
    """The stall timeout: value (stall_timeout=), else $BYOC_PIPE_STALL_TIMEOUT, else 600 s."""
    if value is not None:
        return timeout("stall_timeout", value)
    environ = dict(os.environ if env is None else env)
    return settings.seconds(environ, STALL_TIMEOUT_ENV, DEFAULT_STALL_TIMEOUT, MAX_TIMEOUT)


def record_cap(value: int | None = None, env: Mapping[str, str] | None = None) -> int:
    """The record cap in bytes: value (max_record_bytes=), else $BYOC_MAX_RECORD_BYTES, else
    256 MiB; 1 to 2^31."""
    if value is None:
        environ = dict(os.environ if env is None else env)
        return settings.integer(environ, MAX_RECORD_ENV, DEFAULT_MAX_RECORD, 1, MAX_RECORD_LIMIT)
    if not (whole(value) and 1 <= int(value) <= MAX_RECORD_LIMIT):
        raise ValueError(
            f"max_record_bytes={value!r}: must be a whole number of bytes from 1 to "
            f"{MAX_RECORD_LIMIT} (2 GiB; default {DEFAULT_MAX_RECORD}, 256 MiB)"
        )
    return int(value)


class Deadline(deadline.Deadline):
    """The project's deadline (byoc.deadline), with the two ways byoc.data waits on it."""

    def readable(self, fd: int) -> bool:
        """Wait, without spinning, until fd has data or an end (EOF, hang-up, error) to read, or
        the deadline passes: whether it is ready."""
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)  # POLLHUP and POLLERR always count
        while True:
            if poller.poll(math.ceil(self.left() * 1000)):
                return True
            if self.expired():
                return False

    def until(self, ready: Callable[[], T], interval: float = 0.05) -> T | None:
        """ready()'s first true value, checked every `interval` s; None once the deadline passed
        (for what no file descriptor signals: a path that appears, a process that exits)."""
        while True:
            value = ready()
            if value:
                return value
            left = self.left()
            if left <= 0:
                return None
            time.sleep(min(interval, left))
