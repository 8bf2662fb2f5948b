"""`make test-container-soak`: container tests run many times on a loaded machine, with counts.

    python3 -m hostkit.soak [--runs N] [--load K] [--image IMAGE] [--out DIR] [-- PYTEST_ARGS]

A test that depends on timing (a time bound, a race between two detectors, ranks' interleaved
output: marker `timing`) must pass on a user's busy host, so it is proven here beside K busy
containers (one core each, of the image under test), N times over. Each run is one pytest of
tests/container with the given arguments (default: `-m timing`; `-k pipe_mode`, a test id ...);
each run's log and JUnit report go to DIR/<stamp>/. At the end: per test, how many runs it
passed, failed and skipped, and the seconds of the slowest; exit 1 if any run failed a test or
ended in error. The busy containers are removed however the soak ends.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hostkit import HostError, Teller, junit, run
from hostkit.docker import Docker

ROOT = Path(__file__).resolve().parents[1]
LABEL = "byoc-container-soak"
MAX_RUNS = 200
MAX_LOAD = 16
RUN_TIMEOUT = 4 * 3600  # s: one pytest run past this is stopped and counted as an error

say = Teller("soak")


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    slowest: float = 0.0
    messages: list[str] = field(default_factory=list)  # each failure's first line, by run


def read_junit(path: Path) -> dict[str, tuple[str, float, str]]:
    """{test id: (passed|failed|skipped, seconds, a failure's first line)} of one report."""
    return {
        f"{case.classname}::{case.name}": (
            case.outcome,
            case.seconds,
            case.message.splitlines()[0][:300] if case.outcome == "failed" and case.message else "",
        )
        for case in junit.cases(path)
    }


def tally(reports: list[dict[str, tuple[str, float, str]]]) -> dict[str, Tally]:
    counts: dict[str, Tally] = {}
    for n, report in enumerate(reports, 1):
        for test, (outcome, seconds, message) in report.items():
            t = counts.setdefault(test, Tally())
            setattr(t, outcome, getattr(t, outcome) + 1)
            t.slowest = max(t.slowest, seconds)
            if outcome == "failed":
                t.messages.append(f"run {n}: {message}")
    return counts


def table(counts: dict[str, Tally], runs: int, errors: list[str]) -> tuple[str, bool]:
    """The closing counts, and whether every run passed every test it ran."""
    lines = [f"{'passed':>6} {'failed':>6} {'skipped':>7} {'slowest':>8}  test"]
    for test, t in sorted(counts.items()):
        lines.append(f"{t.passed:6d} {t.failed:6d} {t.skipped:7d} {t.slowest:7.0f}s  {test}")
        lines += [f"{'':30}{m}" for m in t.messages]
    lines += [f"error: {e}" for e in errors]
    ok = not errors and all(t.failed == 0 for t in counts.values())
    ran = sum(t.passed + t.failed for t in counts.values())
    lines.append(
        f"{runs} run(s), {len(counts)} test(s), {ran} test run(s): "
        + ("every one passed" if ok else "FAILURES above")
    )
    return "\n".join(lines), ok


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m hostkit.soak", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=10, help=f"pytest runs, 1-{MAX_RUNS} (10)")
    p.add_argument("--load", type=int, default=2, help=f"busy containers beside, 0-{MAX_LOAD} (2)")
    p.add_argument("--image", default="pytorch-horovod:cpu", help="the image under test")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "soak", help="where runs go")
    p.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (-m timing)")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if not 1 <= a.runs <= MAX_RUNS:
        raise HostError(f"--runs must be 1 to {MAX_RUNS}, not {a.runs}")
    if not 0 <= a.load <= MAX_LOAD:
        raise HostError(f"--load must be 0 to {MAX_LOAD}, not {a.load}")
    if not a.image.strip():
        raise HostError("--image is empty")
    a.pytest_args = a.pytest_args or ["-m", "timing"]
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = a.out / stamp
    try:
        out.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise HostError(f"--out: cannot make {out}: {exc.strerror}") from None
    docker = Docker() if a.load else None
    label = f"{LABEL}={os.getpid()}"
    reports, errors = [], []
    t0 = time.monotonic()
    try:
        if docker:
            if not docker.exists(a.image):
                raise HostError(f"image {a.image} not found: make build FLAVOR=cpu")
            docker.busy(a.image, a.load, label)
            say(f"{a.load} busy container(s) of {a.image} run beside the tests")
        for n in range(1, a.runs + 1):
            report = out / f"run-{n:03d}.xml"
            cmd = [sys.executable, "-m", "pytest", "tests/container", "-p", "no:cacheprovider"]
            cmd += [f"--junitxml={report}", *a.pytest_args]
            say(f"run {n}/{a.runs}: {' '.join(cmd[3:])} ({time.monotonic() - t0:.0f} s so far)")
            with (out / f"run-{n:03d}.log").open("w") as log:
                try:
                    done = subprocess.run(
                        cmd,
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env={**os.environ, "BYOC_IMAGE": a.image},
                        timeout=RUN_TIMEOUT,
                        check=False,
                    )
                    code = done.returncode
                except subprocess.TimeoutExpired:
                    code = None
            if code == 5:  # pytest: no tests collected
                raise HostError(f"no container test matches {' '.join(a.pytest_args)}")
            if code not in (0, 1):  # 1: tests failed (the report says which)
                errors.append(
                    f"run {n}: pytest {'timed out' if code is None else f'exited {code}'}"
                )
            try:
                reports.append(read_junit(report))
            except ValueError as exc:
                errors.append(f"run {n}: {exc}")
                continue
            failed = [t for t, (o, _, _) in reports[-1].items() if o == "failed"]
            say(f"run {n}/{a.runs}: " + (f"FAILED {', '.join(failed)}" if failed else "passed"))
    finally:
        if docker:
            docker.remove_labelled(label)
    text, ok = table(tally(reports), a.runs, errors)
    for line in text.splitlines():
        say(line)
    say(f"logs and reports: {out} ({time.monotonic() - t0:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run("soak", main))
