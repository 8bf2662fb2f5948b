"""Stalls: when a job stops advancing, end it within a bound and say who and where.

What counts as a stall (docs/contract.md, "When a job stalls"):
  horovod   Horovod's own stall inspector: some ranks wait on tensors that others never submit.
            It names the missing ranks on rank 0's output every HOROVOD_STALL_CHECK_TIME_SECONDS
            and ends the job after HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (plan.stall_env sets both
            from BYOC_STALL_TIMEOUT); the leader collects every rank's stack just before that.
  silent    what no library sees: for BYOC_STALL_TIMEOUT s, no output line and no CPU time on
            the leader's host's ranks (their main threads and the processes they started). A
            rank that waits in a collective uses none; a slow first step (torch.compile, a first
            read of a big dataset) uses plenty. The leader collects the stacks and ends the job.
Stacks: every armed rank of every host (byoc.stacks), the leader's own at once, the others' through
the coordinator; each host writes its full dumps to output/data/stacks-<host>.txt (uploaded), the
failure file carries the summary (summary()).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from byoc import constants as C
from byoc import procs, stacks
from byoc.report import OutputWatcher

POLL = 2.0  # s between looks at the ranks
CPU_SHARE = 0.05  # of one core: less than this, over a POLL, is no progress
MAX_FRAMES = 20  # frames of each rank's main thread sent to the leader
HEAD_LIMIT = 1000  # characters of the summary that fit SageMaker's FailureReason (1024)
# A rank whose main thread is in one of these is waiting for the others, not stalled.
_COLLECTIVE = re.compile(r"/(torch/distributed|horovod)/")
_TICK = os.sysconf("SC_CLK_TCK")


def dump_host(folder: Path, out_dir: Path, host: str) -> list[dict]:
    """Every armed rank's stacks on this host, written to out_dir/stacks-<host>.txt; each rank's
    main-thread frames (innermost first) for the leader."""
    texts = stacks.dump(stacks.armed_ranks(folder))
    lines = [f"# every rank's Python stack on {host}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"]
    answer = []
    for armed, text in texts.items():
        lines += ["", f"== rank {armed.rank} (pid {armed.pid}) ==", text.rstrip() or "(no stack)"]
        frames = stacks.main_thread(text, armed.main)[:MAX_FRAMES]
        answer.append({"rank": armed.rank, "pid": armed.pid, "frames": frames})
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"stacks-{host}.txt").write_text("\n".join(lines) + "\n")
    except OSError as exc:
        print(f"byoc: cannot write this host's stacks to {out_dir}: {exc}", flush=True)
    return answer


@dataclass
class Found:
    how: str  # "horovod" (its stall inspector) or "silent"
    seconds: float  # how long nothing advanced when it was found
    missing: dict[int, list[str]]  # horovod: rank -> the tensors the others waited for
    stacks: dict[str, list[dict]]  # host -> its ranks' answers (dump_host)
    at: float = field(default_factory=time.time)


def _number(env: dict[str, str], name: str, default: int) -> int:
    """A Horovod variable as Horovod reads it (a bad one: its default)."""
    try:
        return int(env.get(name, "").strip())
    except ValueError:
        return default


class Watch:
    """The leader's guard for procs.run_watched: finds a stall (Found, in .found), gathers the
    stacks (gather: {host: answer}) and, for a silent job, ends it."""

    def __init__(
        self,
        watcher: OutputWatcher,
        env: dict[str, str],
        bound: float,
        gather: Callable[[], dict[str, list[dict]]],
    ):
        self.watcher, self.bound, self.gather = watcher, bound, gather
        self.folder = Path(env.get(C.STACKS_DIR_ENV, "/nonexistent"))
        self.check = _number(env, C.HOROVOD_STALL_CHECK_ENV, C.HOROVOD_STALL_CHECK)
        shutdown = _number(env, C.HOROVOD_STALL_SHUTDOWN_ENV, 0)
        # Horovod ends a stalled job only with a shutdown time of at least its check period.
        self.shutdown = shutdown if shutdown >= self.check > 0 else 0
        # Under Horovod's inspector, silence lasts two of its periods longer, so that a stall
        # it sees (a rank that never submits) is reported by it, with the ranks it names.
        self.silent_after = bound + (2 * self.check if self.shutdown else 0)
        self.found: Found | None = None

    def __call__(self, proc: subprocess.Popen) -> None:
        progress = Progress(self.folder)
        episode = reported = 0.0  # when the current Horovod stall, and its latest report, came
        gap = 2 * self.check + POLL  # no report for this long: that stall is over
        while proc.poll() is None:
            time.sleep(POLL)
            now = time.monotonic()
            latest = progress.latest(now, self.watcher.last_line)
            if self.watcher.stall_reported != reported:
                if not episode or self.watcher.stall_reported - reported > gap:
                    episode = self.watcher.stall_reported
                reported = self.watcher.stall_reported
            if episode and now - reported > gap:
                episode = 0.0
            # The first report comes check to 2*check s into a stall, the shutdown at most
            # check s after shutdown: collect a little before.
            if episode and self.shutdown and now - episode >= self.shutdown - 2 * self.check - 5:
                missing = dict(self.watcher.missing)
                print(
                    f"byoc: Horovod reports ranks {sorted(missing)} stalled: collecting every "
                    "rank's stack before its shutdown",
                    flush=True,
                )
                self.found = Found("horovod", now - episode + self.check, missing, self.gather())
                return  # Horovod's own shutdown ends the job
            if self.bound and now - latest >= self.silent_after:
                print(
                    f"byoc: no rank printed or used the CPU for {now - latest:.0f} s "
                    f"({C.STALL_TIMEOUT_ENV}): collecting every rank's stack, then ending the job",
                    flush=True,
                )
                self.found = Found("silent", now - latest, {}, self.gather())
                procs.end(proc)
                return


class Progress:
    """When this host's armed ranks last did something: a new rank, or CPU time used."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ticks: dict[int, int] = {}
        self.at = time.monotonic()

    def latest(self, now: float, last_line: float) -> float:
        pids = [armed.pid for armed in stacks.armed_ranks(self.folder)]
        ticks = busy_ticks(pids)
        enough = CPU_SHARE * POLL * _TICK
        if set(ticks) - set(self.ticks) or any(
            ticks[p] - self.ticks.get(p, 0) >= enough for p in ticks
        ):
            self.at = now
        self.ticks = ticks
        return max(self.at, last_line)


def _stat(pid: str, thread: str | None = None) -> list[str]:
    path = f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def busy_ticks(pids: list[int]) -> dict[int, int]:
    """{pid: CPU ticks of its main thread plus those of every process below it}."""
    parent: dict[int, int] = {}
    total: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if len(fields) > 13:  # state, ppid, ..., utime (12), stime (13) after the name
                parent[int(entry.name)] = int(fields[1])
                total[int(entry.name)] = int(fields[11]) + int(fields[12])
    result = {}
    for pid in pids:
        main = _stat(str(pid), str(pid))
        if len(main) <= 13:
            continue
        ticks = int(main[11]) + int(main[12])
        for other, spent in total.items():
            up, seen = parent.get(other), 0
            while up and up != pid and seen < 64:
                up, seen = parent.get(up), seen + 1
            if up == pid:
                ticks += spent
        result[pid] = ticks
    return result


def _waiting(frames: list[str]) -> bool:
    return any(_COLLECTIVE.search(frame) for frame in frames[:8])


def summary(found: Found, host_of: Callable[[int], str]) -> str:
    """The failure file's text: who and where in its first HEAD_LIMIT characters."""
    ranks = {a["rank"]: (host, a) for host, answer in found.stacks.items() for a in answer}

    def where(rank: int) -> str:
        return f"rank {rank} on {ranks[rank][0] if rank in ranks else host_of(rank)}"

    if found.missing:
        stalled = sorted(found.missing)
        waited = sorted({t for tensors in found.missing.values() for t in tensors})
        others = sorted(set(ranks) - set(stalled))
        head = (
            f"Training stalled: {', '.join(where(r) for r in stalled)} did not submit "
            f"{', '.join(waited) or 'a tensor'}, which "
            f"{', '.join(where(r) for r in others) or 'the other ranks'} waited for "
            f"(Horovod's stall inspector, after {found.seconds:.0f} s)."
        )
    else:
        stalled = sorted(r for r, (_, a) in ranks.items() if not _waiting(a["frames"]))
        waiting = sorted(set(ranks) - set(stalled))
        silent = (
            f"no rank printed or used the CPU for {found.seconds:.0f} s ({C.STALL_TIMEOUT_ENV})"
        )
        if stalled and waiting:
            head = (
                f"Training stalled: {', '.join(where(r) for r in stalled)} made no progress "
                f"outside any collective, while {', '.join(where(r) for r in waiting)} waited "
                f"in one; {silent}."
            )
        elif waiting:
            head = f"Training stalled: every rank waits in a collective; {silent}."
        else:
            head = f"Training stalled: {silent}."
    lines = [head]
    for rank in stalled or sorted(ranks):
        frames = ranks[rank][1]["frames"] if rank in ranks else []
        lines.append(f"{where(rank).capitalize()}, innermost first:")
        lines += [f"  {frame}" for frame in frames] or ["  (no stack)"]
    text = ""
    for line in lines:
        if len(text) + len(line) + 1 > HEAD_LIMIT:
            break
        text += line + "\n"
    files = ", ".join(f"stacks-{host}.txt" for host in sorted(found.stacks)) or "none"
    return f"{text}\nEvery rank's stack, in {C.OUTPUT_DATA_DIR} of each host: {files}."
