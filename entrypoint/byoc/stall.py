"""Stalls: when a job stops advancing, end it within a bound and say who and where.

What counts as a stall (docs/contract.md, "When a job stalls"):
  horovod   Horovod's own stall inspector: some ranks wait on tensors that others never submit.
            It names the missing ranks on rank 0's output every HOROVOD_STALL_CHECK_TIME_SECONDS
            and ends the job after HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (plan.stall_env sets both
            from BYOC_STALL_TIMEOUT, leaving COLLECT_ROOM); the leader collects every rank's stack
            at least COLLECT_ROOM s before the earliest that shutdown can come (Watch).
  silent    what no library sees: for BYOC_STALL_TIMEOUT s, no output line and no CPU time on
            the leader's host's ranks (their main threads and the processes they started). A
            rank that waits in a collective uses none; a slow first step (torch.compile, a first
            read of a big dataset) uses plenty. The leader collects the stacks and ends the job.
Stacks: every armed rank of every host (byoc.stacks), the leader's own and, at the same time, the
others' through the coordinator; each host writes its full dumps to output/data/stacks-<host>.txt
(uploaded), the failure file carries the summary (summary()). Bounds, on a loaded host too: each
host's dumps stacks.DUMP_WAIT; the leader's wait for the others' answers GATHER_WAIT from its ask.
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
# Another host sees the leader's ask in its next status poll (every 0.25 s), dumps, and posts its
# answer: the poll and the post, on a loaded host, get ANSWER_SLACK s beside the dump's bound.
ANSWER_SLACK = 5.0
GATHER_WAIT = stacks.DUMP_WAIT + ANSWER_SLACK  # s the leader waits for the answers, from its ask
# s between the leader's start of a collection under Horovod and the inspector's earliest
# shutdown: the gather, begun up to a POLL after the report it follows, and slack for its end.
COLLECT_ROOM = GATHER_WAIT + POLL + 3.0
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
        empty = f"(no stack within {stacks.DUMP_WAIT:.0f} s)"
        lines += ["", f"== rank {armed.rank} (pid {armed.pid}) ==", text.rstrip() or empty]
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
    # rank -> the tensors the others waited for: Horovod's report (silent: its latest, if that
    # was the last thing the job did)
    missing: dict[int, list[str]]
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
        # Its first report comes check to 2*check s into a stall, its shutdown at the first check
        # after shutdown s: at least `earliest` s after that report. Collect COLLECT_ROOM before.
        earliest = max(self.check, self.shutdown - 2 * self.check)
        self.collect_after = max(0.0, earliest - COLLECT_ROOM)  # s after the first report
        if self.shutdown and earliest < COLLECT_ROOM:  # the user's own Horovod settings
            print(
                f"byoc: {C.HOROVOD_STALL_SHUTDOWN_ENV}={self.shutdown} with "
                f"{C.HOROVOD_STALL_CHECK_ENV}={self.check} may end a stalled job {earliest} s "
                f"after Horovod reports it, and collecting every rank's stack may take "
                f"{COLLECT_ROOM:.0f} s: some may be missing",
                flush=True,
            )
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
                if self.found and self.found.how == "horovod":  # it passed: its stacks are old
                    self.found = None
            if episode and self.shutdown and not self.found and now - episode >= self.collect_after:
                missing = dict(self.watcher.missing)
                print(
                    f"byoc: Horovod reports ranks {sorted(missing)} stalled: collecting every "
                    "rank's stack before its shutdown",
                    flush=True,
                )
                self.found = Found("horovod", now - episode + self.check, missing, self.gather())
            # The stall began at least `check` s before Horovod's first report of it: once it has
            # lasted the bound, the job is ended with the stacks in hand, not left idle (and
            # billed) until Horovod's own shutdown, which stays as the backstop.
            if self.found and self.found.how == "horovod":
                lasted = time.monotonic() - episode + self.check
                if self.bound and lasted >= self.bound:
                    print(
                        f"byoc: stalled for {lasted:.0f} s ({C.STALL_TIMEOUT_ENV}), every rank's "
                        "stack collected: ending the job",
                        flush=True,
                    )
                    procs.end(proc)
                    return
                continue
            if self.bound and now - latest >= self.silent_after:
                print(
                    f"byoc: no rank printed or used the CPU for {now - latest:.0f} s "
                    f"({C.STALL_TIMEOUT_ENV}): collecting every rank's stack, then ending the job",
                    flush=True,
                )
                # Horovod's latest report is this stall's if nothing happened after it (within
                # two looks: its lines come in pieces, CPU time is seen a POLL late).
                told = self.watcher.stall_reported
                missing = dict(self.watcher.missing) if told and latest - told <= 2 * POLL else {}
                self.found = Found("silent", now - latest, missing, self.gather())
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


def _spans(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _frames(found: Found) -> dict[int, tuple[str, list[str]]]:
    """{rank: (host, its main thread's frames)} of every answer shaped like one (the other
    hosts' come over the wire)."""
    ranks = {}
    for host, answer in found.stacks.items():
        for a in answer if isinstance(answer, list) else []:
            rank = a.get("rank") if isinstance(a, dict) else None
            frames = a.get("frames") if isinstance(a, dict) else None
            if type(rank) is int and isinstance(frames, list):
                ranks[rank] = (str(host), [str(f) for f in frames[:MAX_FRAMES]])
    return ranks


def summary(found: Found, host_of: Callable[[int], str], world: int = 0) -> str:
    """The failure file's text: who and where in its first HEAD_LIMIT characters. world: the
    job's ranks, 0 to world - 1, placed by host_of: those of a host that sent no answer gave no
    stack (0: the answers' ranks only).

    Each rank is outside any collective, waiting in one, or without a stack (none within the
    dump's bound). Horovod's report names the stalled ranks; else those outside are the
    suspects where another rank waits or gave no stack, and those without a stack where the
    others all wait."""
    answers = _frames(found)
    frames = {rank: answer[1] for rank, answer in answers.items()}
    for rank in range(world):
        if host_of(rank) not in found.stacks:
            frames.setdefault(rank, [])

    def host(rank: int) -> str:
        return answers[rank][0] if rank in answers else host_of(rank)

    def who(ranks: list[int]) -> str:
        """The ranks by host: "rank 1 on algo-2, ranks 0, 2-7 on algo-1"."""
        hosts: dict[str, list[int]] = {}
        for rank in sorted(ranks):
            hosts.setdefault(host(rank), []).append(rank)
        return ", ".join(
            f"rank {rs[0]} on {h}" if len(rs) == 1 else f"ranks {_spans(rs)} on {h}"
            for h, rs in hosts.items()
        )

    blank = sorted(r for r, f in frames.items() if not f)
    waiting = sorted(r for r, f in frames.items() if f and _waiting(f))
    outside = sorted(r for r, f in frames.items() if f and not _waiting(f))
    silent = f"no rank printed or used the CPU for {found.seconds:.0f} s ({C.STALL_TIMEOUT_ENV})"
    no_stack = f"gave no stack within {stacks.DUMP_WAIT:.0f} s"
    if found.missing:
        stalled = sorted(found.missing)
        waited = sorted({t for tensors in found.missing.values() for t in tensors})
        others = sorted(set(frames) - set(stalled))
        by = (
            f"Horovod's stall inspector, after {found.seconds:.0f} s"
            if found.how == "horovod"
            else f"Horovod's stall inspector; then {silent}"
        )
        head = (
            f"Training stalled: {who(stalled)} did not submit {', '.join(waited) or 'a tensor'}, "
            f"which {who(others) or 'the other ranks'} waited for ({by})."
        )
    elif outside and (waiting or blank):
        stalled = outside
        head = f"Training stalled: {who(outside)} made no progress outside any collective"
        head += f", while {who(waiting)} waited in one" if waiting else ""
        head += f"; {who(blank)} {no_stack}" if blank else ""
        head += f"; {silent}."
    elif blank and waiting:
        stalled = blank
        head = (
            f"Training stalled: {who(blank)} {no_stack}, while {who(waiting)} waited in a "
            f"collective; {silent}."
        )
    else:
        stalled = []
        head = f"Training stalled: {silent}"
        if waiting:
            head = f"Training stalled: every rank waits in a collective; {silent}"
        elif blank:  # and no one outside: every rank without a stack
            head += f"; no rank gave a stack within {stacks.DUMP_WAIT:.0f} s"
        head += "."
    if len(head) > HEAD_LIMIT // 2:  # hundreds of hosts: the suspects come first, then frames
        head = head[: HEAD_LIMIT // 2 - 3] + "..."
    # The stalled ranks' frames; where they have none, the waiting ones' too; with no one
    # stalled, every rank's.
    listed = list(stalled) or sorted(frames)
    if stalled and not any(frames.get(r) for r in stalled):
        listed += [r for r in sorted(frames) if r not in stalled]
    lines = [head]
    for rank in listed:
        lines.append(f"Rank {rank} on {host(rank)}, innermost first:")
        lines += [f"  {frame}" for frame in frames.get(rank, [])] or ["  (no stack)"]
    text = ""
    for line in lines:
        if len(text) + len(line) + 1 > HEAD_LIMIT:
            break
        text += line + "\n"
    files = ", ".join(f"stacks-{h}.txt" for h in sorted(found.stacks)) or "none"
    return f"{text}\nEvery rank's stack, in {C.OUTPUT_DATA_DIR} of each host: {files}."
