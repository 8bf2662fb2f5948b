"""Launchers: each runs a Plan on this host and returns the exit code and the ranks' failures.

horovod  horovodrun from the leader over SSH (byoc.launch.horovod)
torchrun torchrun on every host (byoc.launch.torchrun)
none     the program on every host, no launcher
sdk      not a launcher of ours: byoc-init's set-up for a platform driver (byoc.launch.sdk)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from byoc import constants as C
from byoc import plan, report, session, stall
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
    watch: stall.Watch | None = None  # the leader's stall watch, once started

    def stall_watch(self, lead: session.Leading | None = None) -> stall.Watch:
        """The guard that ends a stalled job, with every world host's stacks (lead: the
        other hosts' through the coordinator)."""
        me = self.cfg.current_host

        def gather() -> dict[str, list[dict]]:
            folder, out = self.cfg.path(C.STACKS_DIR), self.cfg.path(C.OUTPUT_DATA_DIR)
            mine = stall.dump_host(folder, out, me)
            return lead.gather_stacks(mine) if lead else {me: mine}

        self.watch = stall.Watch(self.watcher, self.env, self.settings.stall_timeout, gather)
        return self.watch


def failure_message(
    failures: list[report.RankFailure], exit_code: int, job: Job, tail: list[str]
) -> str:
    cause = report.root_cause(failures)
    found = job.watch.found if job.watch else None
    # A rank that failed before the stall was found is the cause; its peers' echoes are not.
    if found and not (cause and not report.collateral(cause) and cause.at < found.at):
        text = stall.summary(found, lambda rank: plan.rank_host(rank, job.cfg, job.plan.slots))
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
