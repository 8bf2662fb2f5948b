"""Pipe-mode FIFOs: wait (bounded) for <channel>_<epoch>, read its records. No torch here.

The fan-out reader process imports only this and byoc.data.framing, so it starts fast.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

from byoc.data import framing as fr


class ChannelError(Exception):
    """The channel cannot be read as configured; says which channel and what to change."""


def open_fifo(path: Path, timeout: float, where: str):
    """Wait (bounded) for the epoch's FIFO and for its writer; a buffered binary stream."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() >= deadline:
            raise ChannelError(
                f"{where}: {path} did not appear within {timeout:.0f} s. SageMaker makes "
                "<channel>_<epoch> once the previous epoch was read to its end; is the channel in "
                "Pipe mode, and did every epoch before it run to the end?"
            )
        time.sleep(0.05)
    # Non-blocking open: a FIFO with no writer yet would block open() without a bound.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        left = max(0.0, deadline - time.monotonic())
        if not poller.poll(left * 1000):
            raise ChannelError(f"{where}: {path} exists but no data came within {timeout:.0f} s")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=1 << 20)
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
) -> Iterator[bytes]:
    """The epoch's records; with host_count > 1 only this host's every host_count-th one."""
    with open_fifo(fifo, timeout, where) as stream:
        for i, record in enumerate(fr.read(stream, framing, where, check_crc)):
            if i % host_count == host_rank:
                yield record
