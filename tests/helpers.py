"""Helpers shared by the test suites."""

from __future__ import annotations

import time
from collections.abc import Callable
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
