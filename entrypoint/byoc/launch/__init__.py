"""Launchers: each runs a Plan on this host and returns the exit code and the ranks' failures.

horovod  horovodrun from the leader over SSH (byoc.launch.horovod)
torchrun torchrun on every host (byoc.launch.torchrun)
none     the program on every host, no launcher
sdk      not a launcher of ours: byoc-init's set-up for a platform driver (byoc.launch.sdk)
Each runs the job's attempts (byoc.restarts): one, and with BYOC_RESTARTS another after each
that failed, while every host is still up.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from byoc import constants as C
from byoc import plan, procs, report, restarts, session, stall
from byoc.config import JobConfig
from byoc.errors import Terminated
from byoc.settings import Settings


class Shutdown:
    """SIGTERM before the job's result is known stops the job; after, it only cuts waits short:
    a job whose result is known keeps it (compose and the platform stop hosts in any order)."""

    def __init__(self) -> None:
        self.result_known = False
        self.requested = threading.Event()

    def on_sigterm(self, signum, frame) -> None:
        """The handler of SIGTERM (and SIGINT, which PID 1 forwards from a terminal): the first
        one stops the job; later ones only repeat the request while it stops."""
        first = not self.requested.is_set()
        self.requested.set()
        if first and not self.result_known:
            raise Terminated()


@dataclass
class Job:
    cfg: JobConfig
    settings: Settings
    plan: plan.Plan
    env: dict[str, str]  # the program's environment
    cwd: Path
    watcher: report.OutputWatcher = field(default_factory=report.OutputWatcher)
    shutdown: Shutdown = field(default_factory=Shutdown)
    watch: stall.Watch | None = None  # the leader's stall watch of this attempt, once started
    attempts: restarts.Attempts = field(init=False)

    def __post_init__(self) -> None:
        self.attempts = restarts.Attempts(self.settings.restarts)

    def stall_watch(self, lead: session.Leading | None = None) -> stall.Watch:
        """The guard that ends a stalled job, with every world host's stacks (lead: the
        other hosts' through the coordinator)."""
        me = self.cfg.current_host

        def mine() -> list[dict]:
            folder, out = self.cfg.path(C.STACKS_DIR), self.cfg.path(C.OUTPUT_DATA_DIR)
            return stall.dump_host(folder, out, me)

        def gather() -> dict[str, list[dict]]:
            return lead.gather_stacks(mine) if lead else {me: mine()}

        self.watch = stall.Watch(self.watcher, self.env, self.settings.stall_timeout, gather)
        return self.watch

    def begin_attempt(self, number: int | None = None) -> int:
        """Attempt `number` (on another host, the leader's; else the one under way) starts on
        this host: after the first, a fresh watch of the output and of stalls, and a stop asked
        for in between stops the job here. Its number goes to the program (BYOC_ATTEMPT)."""
        if number is not None:
            self.attempts.number = number
        if self.attempts.number > 1:
            self._going_on()
            self.watcher, self.watch = report.OutputWatcher(), None
        self.env[C.ATTEMPT_ENV] = str(self.attempts.number)
        return self.attempts.number

    def _going_on(self) -> None:
        """The job goes on past an attempt's result, which is no longer the job's: a SIGTERM from
        now on stops the job, and one that came already stops it here (Terminated)."""
        self.shutdown.result_known = False
        if self.shutdown.requested.is_set():
            raise Terminated()

    def failed(
        self, code: int, failures: list[report.RankFailure], reported: dict | None = None
    ) -> str:
        """The attempt under way failed on this host with code: its cause, for the failure
        file's list of attempts (restarts.Attempts). Where no rank's own error names it (none,
        or only a peer's echo), the exit codes the other hosts reported (reported: the
        leader's) are added: a rank that was killed shows there."""
        message = failure_message(failures, code, self, list(self.watcher.tail))
        cause = report.root_cause(failures)
        codes = [
            f"{host}: {report.describe_exit(result['exit_code']).split(':')[0]}"
            for host, result in sorted((reported or {}).items())
            if isinstance(result.get("exit_code"), int) and result["exit_code"]
        ]
        if codes and (cause is None or report.collateral(cause)):
            return self.attempts.failed(message, f" (reported: {', '.join(codes)})")
        return self.attempts.failed(message)

    def restart(
        self,
        code: int,
        failures: list[report.RankFailure],
        lead: session.Leading | None = None,
        keep: tuple[int, ...] = (),
    ) -> bool:
        """After the attempt under way failed with code (failures: its ranks', every host's):
        whether another runs. It does with restarts left and the job not stopped, once what is
        left of this one is ended on this host (all but keep) and, on the leader (lead, which
        said "restarting" already), every other host has said it is ready: one that does not
        within ready_bound() s is gone, which ends the job."""
        cause = self.failed(code, failures, lead.state.reported() if lead else None)
        if not self.attempts.left():
            return False
        number, limit = self.attempts.number, self.attempts.limit
        self._going_on()
        print(f"byoc: attempt {number} failed ({cause}): ending every rank", flush=True)
        procs.terminate_all(self.settings.term_grace, keep)
        if lead is not None:
            bound = ready_bound(self.settings)
            gone = lead.wait_ready(bound)
            if self.shutdown.requested.is_set():
                raise Terminated()
            if gone:
                self.attempts.stopped = (
                    f"{', '.join(sorted(gone))} did not say it was ready within {bound:.0f} s "
                    "(gone)"
                )
                print(f"byoc: no restart: {self.attempts.stopped}", flush=True)
                self.shutdown.result_known = True
                return False
        print(f"byoc: restart {number} of {limit}: {cause}", flush=True)
        self.attempts.number += 1
        return True


def ready_bound(settings: Settings) -> float:
    """How long the leader waits for another host to say it is ready for the next attempt: that
    host's worst case (its launcher's results gathered, BYOC_END_GRACE; its ranks ended, then
    what is left of them, each SIGKILLed after BYOC_TERM_GRACE) and BYOC_LEADER_LOST_AFTER for
    the word to come. A host silent for longer is gone."""
    return settings.end_grace + 2 * settings.term_grace + settings.leader_lost_after


def run_local(job: Job, stall_watch: bool = True) -> tuple[int, list[report.RankFailure]]:
    """The program on this host alone (a single host, or the launcher "none"), run again after
    each failed attempt while restarts are left; the last attempt's code and failures."""
    while True:
        job.begin_attempt()
        guard = job.stall_watch() if stall_watch else None
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
        if code == 0 or not job.restart(code, job.watcher.failures):
            return code, job.watcher.failures


def failure_message(
    failures: list[report.RankFailure], exit_code: int, job: Job, tail: list[str]
) -> str:
    cause = report.root_cause(failures)
    found = job.watch.found if job.watch else None
    # A rank that failed before the stall was found is the cause; its peers' echoes are not.
    if found and not (cause and not report.collateral(cause) and cause.at < found.at):

        def host_of(rank: int) -> str:
            return plan.rank_host(rank, job.cfg, job.plan.slots)

        # A launcher numbers the ranks 0 to world - 1 (with "none", each host runs alone).
        world = job.plan.world_size if job.plan.launcher != "none" else 0
        text = stall.summary(found, host_of, world)
        return f"{text}\n({report.describe_exit(exit_code)})"
    if cause:
        host = cause.host or plan.rank_host(cause.rank, job.cfg, job.plan.slots)
        head = f"rank {cause.rank} on {host} raised {cause.exception}"
        return "\n".join(
            [f"Training failed: {head} ({report.describe_exit(exit_code)})", "", *cause.traceback]
        )
    return f"Training failed with {report.describe_exit(exit_code)}. Last output:\n" + "\n".join(
        tail[-15:]
    )
