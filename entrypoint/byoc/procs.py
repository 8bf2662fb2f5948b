"""Processes of the job: run one with its output watched, and end all of them on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from byoc.deadline import Deadline
from byoc.report import OutputWatcher


class CommandFailed(Exception):
    """A helper command (ssh-keygen, useradd, ...) failed; the message has its own words."""


def check_output(cmd: list[str]) -> str:
    """Run a short helper command; its stdout, or CommandFailed naming it and its stderr."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise CommandFailed(f"cannot run {cmd[0]}: {exc}") from exc
    if result.returncode != 0:
        raise CommandFailed(f"{cmd[0]} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


OUTPUT_DRAIN = 5.0  # s the output of a program that has ended is still read
_STARTED: list[subprocess.Popen] = []  # what run_watched started, for terminate_all


def run_watched(
    cmd: list[str],
    env: dict[str, str],
    cwd: Path,
    watcher: OutputWatcher,
    guard: Callable[[subprocess.Popen], None] | None = None,
) -> int:
    """Run cmd, copy its output (stdout and stderr merged) to ours, feed the watcher. guard, if
    given, runs beside it in a thread with the process (it may end it: end())."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=str(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
    )
    _STARTED.append(proc)
    if guard is not None:
        threading.Thread(target=guard, args=(proc,), daemon=True, name="guard").start()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            watcher.feed(line)

    reader = threading.Thread(target=pump, daemon=True, name="output")
    reader.start()
    code = proc.wait()
    # Orphans of the program (a rank torchrun left behind, `tensorboard &`) may hold its output
    # open: their last lines are shown for a while, then the job goes on without them.
    reader.join(OUTPUT_DRAIN)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as shells say


def guards(*each: Callable[[subprocess.Popen], None] | None) -> Callable:
    """One guard for run_watched that runs each given one beside the others."""

    def watch(proc: subprocess.Popen) -> None:
        for guard in filter(None, each):
            threading.Thread(target=guard, args=(proc,), daemon=True, name="guard").start()

    return watch


def end(proc: subprocess.Popen, grace: float = 40.0) -> None:
    """SIGTERM to proc (a launcher ends its ranks on it), SIGKILL if it lives on past grace
    (torchrun itself gives its ranks 30 s after a SIGTERM)."""
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def end_after_grace(proc: subprocess.Popen, why: str, grace: float) -> None:
    """Give proc grace s to end by itself (its ranks' own errors are the better report), then
    end it, saying why."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        print(
            f"byoc: {why}; this host's ranks still run {grace:.0f} s later: ending them", flush=True
        )
        end(proc)


def _others() -> list[int]:
    """Every process in this PID namespace but PID 1 and this one."""
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in (1, me):
            pids.append(int(entry.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state != "Z"


def in_our_container() -> bool:
    """PID 1 is byoc-init: we are in the image's container, not on somebody's host."""
    try:
        return b"byoc-init" in Path("/proc/1/cmdline").read_bytes()
    except OSError:
        return False


def terminate_all(grace: float, keep: Iterable[int] = ()) -> None:
    """SIGTERM to every other process of the container but keep (ranks under sshd's sessions
    too, which PID 1's group signal misses), or outside our container to what we started
    ourselves; SIGKILL what is left after grace seconds. Also between two attempts of the job
    (byoc.restarts), for what is left of the failed one (a rank its launcher did not end, one
    blocked under an SSH session, a program's own children), keeping the sshd that the next
    attempt logs in through."""
    if in_our_container():
        kept = set(keep)
        targets = [pid for pid in _others() if pid not in kept]
    else:
        targets = [p.pid for p in _STARTED if p.poll() is None]
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = Deadline(grace, "the grace after SIGTERM")
    while not deadline.expired() and any(_alive(p) for p in targets):
        time.sleep(0.2)
    for pid in targets:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
