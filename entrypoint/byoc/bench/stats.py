"""Small pure helpers of the benchmarks: summaries, bus bandwidth, message sizes. No torch."""

from __future__ import annotations

import argparse
import re
import statistics

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB}
_SIZE = re.compile(r"(\d{1,15})([KMG]?)", re.IGNORECASE)  # 15 digits: no giant ints to parse


def summary(values: list[float]) -> dict:
    """min, median, max and n of the values (the repeats of one measurement)."""
    if not values:
        raise ValueError("summary of no values")
    return {
        "min": float(min(values)),
        "median": float(statistics.median(values)),
        "max": float(max(values)),
        "n": len(values),
    }


def busbw(nbytes: int, seconds: float, ranks: int) -> float:
    """Allreduce bus bandwidth in GB/s (1e9 bytes), as nccl-tests defines it: the algorithm
    bandwidth (bytes / time) times 2(n-1)/n, what each rank's link carries in a ring, so the
    number compares with the link's speed whatever the world size."""
    if seconds <= 0:
        raise ValueError(f"seconds must be above 0, not {seconds!r}")
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, not {ranks!r}")
    algbw = nbytes / seconds / 1e9
    if ranks == 1:
        return algbw
    return algbw * 2 * (ranks - 1) / ranks


def human(nbytes: int | float) -> str:
    """64 KiB, 1 MiB, 1.5 MiB, 100 B."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{nbytes:g} B"


def parse_sizes(
    text: str, *, multiple: int = 4, limit: int = GIB, most: int = 32, what: str = "size"
) -> list[int]:
    """Sizes in bytes from "64K,1M,256M" or "65536" (K, M, G: KiB, MiB, GiB), in the order
    given. Each must be positive, at most `limit` and a multiple of `multiple` (4: whole
    float32 elements); at most `most` of them, none twice. ValueError names the bad item."""
    items = text.split(",")
    if len(items) > most:
        raise ValueError(f"at most {most} {what}s, not {len(items)}")
    sizes: list[int] = []
    for raw in items:
        item = raw.strip()
        if not item:
            raise ValueError(f"an empty {what} in {text!r}")
        match = _SIZE.fullmatch(item)
        if not match:
            raise ValueError(f"{item!r} is not a {what} (bytes, or a number with K, M or G)")
        n = int(match[1]) * _UNITS[match[2].upper()]
        if n <= 0:
            raise ValueError(f"{item!r}: a {what} must be above 0 bytes")
        if n > limit:
            raise ValueError(f"{item!r}: a {what} must be at most {human(limit)}")
        if n % multiple:
            raise ValueError(f"{item!r}: a {what} must be a multiple of {multiple} bytes")
        if n in sizes:
            raise ValueError(f"{item!r}: the {what} {human(n)} is given twice")
        sizes.append(n)
    return sizes


def bounded(kind: type, low: float, high: float, above_low: bool = False):
    """An argparse type: a number of `kind` from low (or above it) to high; nan is refused."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "whole number" if kind is int else "number"
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}") from None
        ok = (low < value if above_low else low <= value) and value <= high  # False for nan
        if not ok:
            start = f"above {low:g}" if above_low else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {start} and at most {high:g}")
        return value

    return parse
