"""Helpers shared by the test suites."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Poll predicate until it returns something truthy; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - kept for the failure message
            last_exc = exc
        else:
            if value:
                return value
        time.sleep(interval)
    raise TimeoutError(
        f"{what} not met within {timeout} s" + (f": {last_exc!r}" if last_exc else "")
    )


def ended(pid: int) -> bool:
    """pid has exited: gone, or a zombie its parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def wait_all(started: dict, timeout: float) -> dict:
    """Wait for every container of {name: container} to exit, each bounded by timeout:
    {name: (exit code, seconds since the wait began)}; a container still running is left out."""
    t0 = time.monotonic()
    results = {}

    def waiter(name, container):
        code = container.wait(timeout=timeout)["StatusCode"]
        results[name] = (code, time.monotonic() - t0)

    threads = [threading.Thread(target=waiter, args=item) for item in started.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return results


def elastic_coverage(text: str) -> list[tuple[int, int, int, int]]:
    """(epoch, missing, extra, padding) of rank 0's COVERAGE lines (train_elastic.py
    --check-coverage): every sample trained once per epoch means missing 0, extra == padding."""
    return [
        (int(e), int(m), int(x), int(p))
        for e, m, x, p in re.findall(
            r"COVERAGE epoch=(\d+) samples=\d+ missing=(\d+) extra=(-?\d+) padding=(\d+) "
            r"size=\d+ rank=0\b",
            text,
        )
    ]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on (at the moment of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
