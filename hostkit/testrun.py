"""`make test`: the test command's stages, in three lanes that run side by side (docs/tests.md).

    python3 -m hostkit.testrun [--lanes 1|2|3] [--make MAKE] [--cache auto|cold|warm]

lane images: build-cpu (the cpu image from this checkout; cached: seconds) -> test-container ->
             smoke
lane checks: build-gpu-standin (beside build-cpu) -> test-gpu-flavor -> test-horovod (on both
             images, once build-cpu is done) -> test-container-tail
lane units:  lint -> test-unit (beside the builds) -> test-container-side (once build-cpu is done)

On a cold build cache the two builds run side by side, with the unit tests, then the other
tests. test-container, test-container-side and test-container-tail share the container tests'
modules (tests/sharing.py): the first two take them from the front, the last, once the checks
lane has done its own work, from the back; each module runs once, in whichever claims it first.

Why three lanes: the tests spend much of their time waiting (clusters starting, elastic
timeouts, a stall's bound, a coordinator's), and two streams of them leave part of two cores
idle; a third fills it. The container tests' timing bounds hold on a loaded machine (they must
anyway: a user's host is busy, and make test-container-soak proves them beside two busy
containers), so they hold beside the other lanes. --lanes 2 puts lint and the unit tests in the
checks lane after the gpu build and runs the container tests twice; --lanes 1 runs the stages
one after the other (TEST_LANES=1 make test).

Every stage is a make target run as its own make; each output line is prefixed with its stage.
A stage that fails stops its lane; the other lane goes on, so one run reports every failure; the
run then fails. At the end: each stage's seconds, its budget and result, and the wall time. The
budgets are docs/tests.md's table ("The stages and their budgets"), one for a cold build cache
and one for a warm one: the run is warm when the images it builds were there when it began
(--cache). A stage over its budget is marked, and so is the run; that alone fails nothing (a
loaded machine is slower), but a maintainer sees where the time went.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hostkit import HostError, Teller, run
from hostkit.docker import Docker

ROOT = Path(__file__).resolve().parents[1]

say = Teller("testrun")
# The container tests' share (tests/sharing.py reads them): the claims' directory, and which
# end of the module list a run takes from.
SHARE_DIR_ENV = "BYOC_TEST_SHARE"
SHARE_FROM_ENV = "BYOC_TEST_SHARE_FROM"
INTERRUPT_GRACE = 60  # seconds a stage has to clean up (pytest's finalizers) after an interrupt
BUDGETS_PAGE = ROOT / "docs" / "tests.md"
BUDGETS_HEADING = "## The stages and their budgets"
WALL = "make test"  # the budget row of the whole run (wall time)
CACHES = ("cold", "warm")


@dataclass
class Stage:
    name: str
    args: tuple[str, ...]  # make's arguments
    after: str = ""  # a stage of the other lane that must have passed first
    env: dict[str, str] = field(default_factory=dict)  # added to make's environment
    makes: str = ""  # the image tag a build stage makes (of $IMAGE): its cache says cold/warm
    lane: str = ""
    seconds: float = 0.0
    result: str = "not run"  # ok | failed (exit N) | not run: why
    done: threading.Event = field(default_factory=threading.Event)


def stages(share: str) -> dict[str, list[Stage]]:
    """The lanes, in order; share is the container tests' claims directory (tests/sharing.py).
    `-o T` keeps make from remaking T, which an earlier stage made."""

    def shared(end: str) -> dict[str, str]:
        return {SHARE_DIR_ENV: share, SHARE_FROM_ENV: end}

    return {
        "images": [
            Stage("build-cpu", ("build", "FLAVOR=cpu", "TAG=cpu"), makes="cpu"),
            Stage("test-container", ("test-container",), env=shared("front")),
            Stage("smoke", ("smoke",)),
        ],
        "checks": [
            # Beside the cpu image's build, which it shares stages with (BuildKit runs each
            # once), rather than beside the tests: a build takes every core it is given, and the
            # tests' waiting ranks burn more the longer they wait (local-base.sh makes the
            # Debian base once for both).
            Stage("build-gpu-standin", ("build-gpu-standin",), makes="gpu-standin"),
            Stage(
                "test-gpu-flavor", ("-o", "build-gpu-standin", "-o", "standin", "test-gpu-flavor")
            ),
            Stage("test-horovod", ("test-horovod",), after="build-cpu"),
            Stage(
                "test-container-tail",
                ("test-container",),
                after="build-cpu",
                env=shared("back"),
            ),
        ],
        "units": [
            Stage("lint", ("lint",)),
            # Mostly waits (a coordinator's bound, a subprocess's timeout): beside the builds,
            # which take the CPU meanwhile.
            Stage("test-unit", ("test-unit",)),
            # The container tests wait too (clusters starting, elastic timeouts, a stall's
            # bound): a third run of them beside the other two lanes fills those waits.
            Stage(
                "test-container-side",
                ("test-container",),
                after="build-cpu",
                env=shared("front"),
            ),
        ],
    }


def arrange(lanes: dict[str, list[Stage]], count: str) -> dict[str, list[Stage]]:
    """The lanes for --lanes: 3 as stages() gives them; 2, the units lane's lint and unit tests
    in the checks lane after the gpu build (one fewer run of the container tests); 1, one lane
    in the order the lanes' dependencies allow."""
    if count == "3":
        return lanes
    lint, unit, _side = lanes["units"]
    gpu_build, *rest = lanes["checks"]
    checks = [lint, gpu_build, unit, *rest]
    if count == "2":
        return {"images": lanes["images"], "checks": checks}
    return {"one": [*lanes["images"], *checks]}


class Runner:
    def __init__(self, make: str, width: int):
        self.make = make
        self.width = width
        self.lock = threading.Lock()
        self.children: set[subprocess.Popen] = set()
        self.stopping = 0  # the signal that stops the run, once one came
        self.quiet = False  # stdout is gone (`make test | head`): the stages still run out

    def emit(self, stage: str, line: str) -> None:
        with self.lock:
            if self.quiet:
                return
            try:
                sys.stdout.write(f"{stage:<{self.width}} | {line.rstrip(chr(10))}\n")
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                self.quiet = True

    def tell(self, message: str) -> None:
        """say(), one whole line at a time: the lanes' threads share stderr."""
        with self.lock:
            say(message)

    def start(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen | None:
        """The stage's make, in a group of its own (an interrupt reaches all of it); None once
        the run is stopping. Checked and registered under the lock that interrupt() holds, so
        no stage starts unseen by an interrupt."""
        with self.lock:
            if self.stopping:
                return None
            try:
                child = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    start_new_session=True,
                    env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
                )
            except OSError as exc:
                raise HostError(f"cannot run {cmd[0]}: {exc.strerror}", 127) from None
            self.children.add(child)
            return child

    def run_stage(self, stage: Stage, by_name: dict[str, Stage]) -> bool:
        if stage.after:
            before = by_name[stage.after]
            before.done.wait()
            if before.result != "ok":
                stage.result = f"not run: {stage.after} did not pass"
                return False
        cmd = [*self.make.split(), "--no-print-directory", *stage.args]
        start = time.monotonic()
        child = self.start(cmd, stage.env)
        if child is None:
            stage.result = "not run: interrupted"
            return False
        self.tell(f"{stage.name}: started ({' '.join(cmd)})")
        try:
            assert child.stdout is not None
            for line in child.stdout:
                self.emit(stage.name, line)
            code = child.wait()
        finally:
            if child.poll() is None:  # this thread failed: the stage must not outlive it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            with self.lock:
                self.children.discard(child)
        stage.seconds = time.monotonic() - start
        stage.result = "ok" if code == 0 else f"failed (exit {code})"
        self.tell(f"{stage.name}: {stage.result} in {stage.seconds:.0f} s")
        return code == 0

    def run_lane(self, lane: list[Stage], by_name: dict[str, Stage]) -> None:
        """The lane's stages in order; every stage ends with its done event set and a result,
        whatever happens (a later stage of the other lane may wait on it)."""
        failed = ""
        for stage in lane:
            try:
                if failed:
                    stage.result = f"not run: {failed} failed"
                elif not self.run_stage(stage, by_name):
                    failed = stage.name
            except Exception as exc:  # reported as the stage's result, not a traceback
                stage.result = f"failed ({exc})"
                failed = stage.name
            finally:
                stage.done.set()

    def interrupt(self, signum: int) -> None:
        """Ctrl-C or a TERM: every stage's group gets SIGINT (pytest then runs its finalizers,
        which remove the tests' containers), SIGKILL after INTERRUPT_GRACE seconds."""
        with self.lock:
            self.stopping = self.stopping or signum
            children = list(self.children)
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT)
        deadline = time.monotonic() + INTERRUPT_GRACE
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.0, deadline - time.monotonic()))
            # What is left of the stage's group (a background child that ignores SIGINT, as
            # non-interactive shells make them) would hold its output open, and the run with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Budget:
    cold: int  # seconds, a cold build cache (a fresh machine: the builds compile everything)
    warm: int  # seconds, the images there when the run began (builds from the cache)


_BUDGET_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|.*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*$")


def budgets(text: str) -> dict[str, Budget]:
    """{stage: Budget} from the table under BUDGETS_HEADING: rows `| `stage` | ... | cold | warm |`;
    WALL's row is the whole run's."""
    found: dict[str, Budget] = {}
    section = text.split(BUDGETS_HEADING, 1)[1] if BUDGETS_HEADING in text else ""
    for line in section.split("\n## ", 1)[0].splitlines():
        row = _BUDGET_ROW.match(line.strip())
        if row:
            found[row[1]] = Budget(int(row[2]), int(row[3]))
    return found


def read_budgets(page: Path = BUDGETS_PAGE) -> dict[str, Budget]:
    """budgets() of docs/tests.md; none (said) where it cannot be read."""
    try:
        return budgets(page.read_text())
    except OSError as exc:
        say(f"no stage budgets: cannot read {page}: {exc.strerror}")
        return {}


def cache_state(lanes: dict[str, list[Stage]], docker: Docker | None = None) -> str:
    """warm when every image the build stages make is in the engine before they run, else
    cold (also where no engine answers)."""
    image = os.environ.get("IMAGE") or "pytorch-horovod"
    tags = [s.makes for lane in lanes.values() for s in lane if s.makes]
    try:
        docker = docker or Docker()
        return "warm" if tags and all(docker.exists(f"{image}:{t}") for t in tags) else "cold"
    except HostError:
        return "cold"


def summary(
    lanes: dict[str, list[Stage]],
    wall: float,
    limits: dict[str, Budget] | None = None,
    cache: str = "cold",
) -> tuple[str, bool]:
    """The closing table: each stage's seconds, its budget for this cache and result, a stage
    over its budget marked; then the wall time against the run's budget."""
    limits = limits or {}

    def budget(name: str) -> int | None:
        return getattr(limits[name], cache) if name in limits else None

    rows = [(s.name, name, s.seconds, s.result) for name, lane in lanes.items() for s in lane]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'stage':<{width}}  {'lane':<6}  {'seconds':>7}  {'budget':>6}  result"]
    over = []
    for stage, lane, seconds, result in rows:
        ran = result == "ok" or result.startswith("failed")
        shown = f"{seconds:7.0f}" if ran else f"{'-':>7}"
        limit = budget(stage)
        mark = ""
        if ran and limit is not None and seconds > limit:
            over.append(stage)
            mark = f", OVER its {cache} budget by {seconds - limit:.0f} s"
        limit_shown = f"{limit:6d}" if limit is not None else f"{'-':>6}"
        lines.append(f"{stage:<{width}}  {lane:<6}  {shown}  {limit_shown}  {result}{mark}")
    passed = all(r[3] == "ok" for r in rows)
    total = budget(WALL)
    said = f"wall time {wall:.0f} s"
    if total is not None:
        said += f" of a {total} s budget ({cache} cache)"
        if wall > total:
            over.append(WALL)
            said += f", OVER by {wall - total:.0f} s"
    said += f": {'passed' if passed else 'FAILED'}"
    if over:
        said += f"; over budget: {', '.join(over)} (docs/tests.md, {BUDGETS_HEADING[3:]})"
    lines.append(said)
    return "\n".join(lines), passed


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m hostkit.testrun", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--lanes", default=os.environ.get("TEST_LANES", "3"), help="1, 2 or 3 (TEST_LANES)"
    )
    p.add_argument("--make", default=os.environ.get("MAKE", "make"), help="the make to run ($MAKE)")
    p.add_argument(
        "--cache",
        choices=("auto", *CACHES),
        default="auto",
        help="which budgets apply: auto (warm when the images the run builds are there)",
    )
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    a = build_parser().parse_args(argv)
    if a.lanes not in ("1", "2", "3"):
        raise HostError(f"--lanes (TEST_LANES) must be 1, 2 or 3, not {a.lanes!r}")
    if not a.make.strip():
        raise HostError("--make (MAKE) is empty")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="byoc-test-share-") as share:
        return run_lanes(a, stages(share))


def run_lanes(a: argparse.Namespace, lanes: dict[str, list[Stage]]) -> int:
    for name, lane in lanes.items():
        for stage in lane:
            stage.lane = name
    lanes = arrange(lanes, a.lanes)
    if a.lanes == "2":  # one lane alone keeps the names of the lanes its stages come from
        for name, lane in lanes.items():
            for stage in lane:
                stage.lane = name
    by_name = {s.name: s for lane in lanes.values() for s in lane}
    cache = a.cache if a.cache in CACHES else cache_state(lanes)
    limits = read_budgets()
    say(f"{cache} build cache: the {cache} budgets apply (docs/tests.md)")
    runner = Runner(a.make, max(len(n) for n in by_name))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: runner.interrupt(signum))
    start = time.monotonic()
    threads = [
        threading.Thread(target=runner.run_lane, args=(lane, by_name), name=name, daemon=True)
        for name, lane in lanes.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(1)  # short joins: the main thread stays free for the signal handlers
    text, passed = summary(lanes, time.monotonic() - start, limits, cache)
    for line in text.splitlines():
        say(line)
    if runner.stopping:
        return 128 + runner.stopping  # 130 for Ctrl-C, 143 for a TERM
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(run("testrun", main))
