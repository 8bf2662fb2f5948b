"""The one lifecycle of a multi-host job, shared by every launcher (horovod, torchrun, and the
set-up for the SageMaker SDK's drivers): how the leader leads and a worker follows.

leader: Leading(...) serves the coordinator -> meet(keys) until every worker has joined
        (bounded, names the missing) -> the launcher's own set-up -> running() -> the work ->
        end(code): "done" with the job's result; gone once each worker has seen it (bounded,
        so a dead worker cannot hold the leader)
worker: Following(...) -> meet(keys): join at the leader, the complete list of members (bounded
        by BYOC_LEADER_TIMEOUT, then BYOC_LEADER_LOST_AFTER of silence) -> the launcher's own
        set-up -> status(until) -> [report(result)] -> leave with its result
What each launcher does in between (SSH trust and horovodrun, torchrun on every host, a
platform's driver) stays in byoc.launch.<launcher>; the wire is byoc.coordinator's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from byoc import coordinator, peers, ssh
from byoc.config import JobConfig
from byoc.settings import Settings

DONE_SEEN_WAIT = 15.0  # s the leader waits for its workers to collect the result


class Leading:
    """The leader's side: its coordinator serves from construction until end()."""

    def __init__(self, cfg: JobConfig, settings: Settings, stop: threading.Event | None = None):
        self.cfg, self.settings, self.stop = cfg, settings, stop
        self.workers = cfg.hosts[1:]
        self.state = coordinator.JobState(cfg.hosts)
        self.server = coordinator.serve(self.state, settings.coordinator_port)

    def meet(self, keys: dict) -> list[ssh.Member]:
        """Join with keys and wait (bounded) until every worker has; the job's members."""
        return peers.lead(self.state, self.cfg, keys, self.settings, self.stop)

    def running(self) -> None:
        self.state.set("running")

    def result(self, code: int) -> None:
        """Tell the workers this host's result now, while the job still ends (torchrun)."""
        self.state.set("done", code)

    def wait_for(self, what: Callable[[], set[str]], timeout: float) -> set[str]:
        """What is still missing of what() (a JobState.missing_*) after timeout, or once the
        leader is stopped."""
        return self.state.wait_for(what, timeout, self.stop)

    def end(self, code: int, wait_seen: bool = True) -> set[str]:
        """ "done" with code; with wait_seen, wait (bounded) until every worker has seen it;
        the coordinator stops. The workers that did not collect the result."""
        self.state.set("done", code)
        late = set()
        if wait_seen:
            late = self.wait_for(self.state.missing_done_seen(self.workers), DONE_SEEN_WAIT)
        self.server.shutdown()
        return late


class Following:
    """A worker's side: everything it asks the leader goes through one client."""

    def __init__(self, cfg: JobConfig, settings: Settings):
        self.cfg, self.settings = cfg, settings
        self.leader = peers.client(cfg, settings)

    def meet(self, keys: dict) -> list[ssh.Member]:
        """Join at the leader with keys, then the job's complete list of members."""
        return peers.follow(self.cfg, keys, self.settings, self.leader)

    def status(self, until: Callable[[dict], bool]) -> dict:
        return self.leader.status(until)

    def report(self, result: dict) -> dict:
        return self.leader.report(result)
