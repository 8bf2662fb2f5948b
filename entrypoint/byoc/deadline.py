"""One clock for every bounded wait: a deadline refuses a bound that would never expire."""

from __future__ import annotations

import math
import time


class Deadline:
    """`seconds` from now. A bound that is not a finite number >= 0 (nan, inf, -1) is refused,
    so no wait can turn into a hang through its own setting."""

    def __init__(self, seconds: float, what: str = "a timeout"):
        if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{what}: {seconds!r} is not a finite number of seconds >= 0")
        self.seconds = float(seconds)
        self.end = time.monotonic() + self.seconds

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end
