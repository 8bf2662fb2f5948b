"""The one lifecycle of a multi-host job, shared by every launcher (horovod, torchrun, and the
set-up for the SageMaker SDK's drivers): how the leader leads and the other hosts follow.

leader: Leading(...) serves the coordinator -> meet(keys) until every other host has joined
        (bounded, names the missing) -> the launcher's own set-up -> running() -> the work,
        guarded: another host's failure ends it (guard) -> collect(...) the others' results
        (bounded) -> end(code): "done" with the job's result; gone once each host has seen it
        (bounded, so a dead host cannot hold the leader)
        With restarts (byoc.restarts), a failed attempt ends in restarting() instead: the others
        end theirs and say ready (wait_ready, bounded), and running(attempt + 1) starts the next
other:  Following(...) -> meet(keys): join at the leader, the complete list of members (bounded
        by BYOC_LEADER_TIMEOUT, then BYOC_LEADER_LOST_AFTER of silence) -> the launcher's own
        set-up -> started() -> the work, guarded: the leader's failure (or, for an outsider, the
        job's end) ends it -> finish(result) -> leave with its result; with restarts left,
        next_attempt() first: the leader's "restarting" (this host's leftovers ended, ready()
        said) and its next "running", or its "done"
The other hosts are the world's workers and, with instance groups, the outsiders (hosts outside
the distribution groups, which run the program alone: byoc.launch.outsider). What each launcher
does in between (SSH trust and horovodrun, torchrun on every host, a platform's driver) stays in
byoc.launch.<launcher>; the wire is byoc.coordinator's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from byoc import constants as C
from byoc import coordinator, peers, procs, report, ssh, stall
from byoc.config import JobConfig
from byoc.errors import JobError
from byoc.settings import Settings

DONE_SEEN_WAIT = 15.0  # s the leader waits for the other hosts to collect the result


def failure_guard(state: coordinator.JobState, grace: float) -> Callable:
    """Watches proc beside procs.run_watched: ends it grace s (BYOC_END_GRACE) after a host
    reported a failure to state, unless it ends by itself."""

    def watch(proc) -> None:
        failed = state.wait_for_failure(lambda: proc.poll() is not None)
        if proc.poll() is None:
            procs.end_after_grace(proc, f"{', '.join(failed)} failed", grace)

    return watch


class Leading:
    """The leader's side: its coordinator serves from construction until end()."""

    def __init__(self, cfg: JobConfig, settings: Settings, stop: threading.Event | None = None):
        self.cfg, self.settings, self.stop = cfg, settings, stop
        self.workers = cfg.others
        self.state = coordinator.JobState(cfg.everyone)
        self.server = coordinator.serve(self.state, settings.coordinator_port)

    def meet(self, keys: dict) -> list[ssh.Member]:
        """Join with keys and wait (bounded) until every other host has; the job's members."""
        return peers.lead(self.state, self.cfg, keys, self.settings, self.stop)

    def running(self, attempt: int = 1) -> None:
        """Attempt `attempt` (1, then one more after each restart) runs."""
        self.state.begin(attempt)

    def restarting(self, code: int) -> None:
        """The attempt failed with code and another follows: the others end their ranks."""
        self.state.set("restarting", code)

    def wait_ready(self, timeout: float) -> set[str]:
        """Wait (bounded) until every other host has nothing left of the failed attempt; the
        hosts that did not say so."""
        return self.wait_for(self.state.missing_ready(self.workers), timeout)

    def result(self, code: int) -> None:
        """Tell the others this host's result now, while the job still ends."""
        self.state.set("done", code)

    def wait_for(self, what: Callable[[], set[str]], timeout: float) -> set[str]:
        """What is still missing of what() (a JobState.missing_*) after timeout, or once the
        leader is stopped."""
        return self.state.wait_for(what, timeout, self.stop)

    def guard(self) -> Callable:
        """A guard for procs.run_watched: end this host's work once another host has reported
        a failure."""
        return failure_guard(self.state, self.settings.end_grace)

    def gather_stacks(self, dump_mine: Callable[[], list[dict]]) -> dict[str, list[dict]]:
        """Every world host's ranks' stacks ({host: answer}): this host's from dump_mine(), the
        others', dumped meanwhile, through the coordinator (stall.GATHER_WAIT from the ask, the
        bound of their dump and answer; a host that does not answer is left out)."""
        self.state.ask_stacks()
        asked = time.monotonic()
        mine = dump_mine()
        others = [h for h in self.cfg.hosts if h != self.cfg.current_host]
        left = max(0.0, stall.GATHER_WAIT - (time.monotonic() - asked))
        late = self.wait_for(self.state.missing_stacks(others), left)
        if late:
            print(
                f"byoc: no stacks from {sorted(late)} within {stall.GATHER_WAIT:.0f} s", flush=True
            )
        return {self.cfg.current_host: mine, **self.state.answered_stacks()}

    def collect(
        self,
        code: int,
        failures: list[report.RankFailure],
        hosts: list[str],
        announce: bool = True,
    ) -> tuple[int, list[report.RankFailure]]:
        """The job's result once this host's is code: the others are told code (unless not
        announce: restarting() told them already), then hosts' reports are awaited
        (REPORT_TIMEOUT, and BYOC_END_GRACE more where outsiders, still running, first see the
        job's end), their failures added to failures. A host that says nothing has not
        succeeded."""
        if announce:
            self.result(code)
        outsiders = set(hosts) & set(self.cfg.outsiders)
        timeout = C.REPORT_TIMEOUT + (self.settings.end_grace if outsiders else 0)
        late = self.wait_for(self.state.missing_reports(hosts), timeout)
        if late and code == 0:
            raise JobError(
                f"Training failed: no result from {', '.join(sorted(late))} within "
                f"{timeout:.0f} s of this host's end (its container stopped?)"
            )
        if late:
            print(f"byoc: no result from {sorted(late)}", flush=True)
        for host, result in sorted(self.state.reported().items()):
            theirs = report.RankFailure.from_dict(result.get("failure"))
            if theirs:
                theirs.host = host
                failures.append(theirs)
            worst = result.get("exit_code")
            if code == 0 and isinstance(worst, int) and worst != 0:
                print(f"byoc: {host} failed ({report.describe_exit(worst)})", flush=True)
                code = worst
        return code, failures

    def end(self, code: int, wait_seen: bool = True) -> set[str]:
        """ "done" with code; with wait_seen, wait (bounded) until every other host has seen
        it; the coordinator stops. The hosts that did not collect the result."""
        self.state.set("done", code)
        late = set()
        if wait_seen:
            late = self.wait_for(self.state.missing_done_seen(self.workers), DONE_SEEN_WAIT)
        self.server.shutdown()
        return late


class Following:
    """Another host's side: everything it asks the leader goes through one client."""

    def __init__(self, cfg: JobConfig, settings: Settings, stop: threading.Event | None = None):
        self.cfg, self.settings, self.stop = cfg, settings, stop
        self.leader = peers.client(cfg, settings)
        # Why the guard ended this host's work: "" (it did not), "success" (the job's world
        # is done), "failure" (the leader failed with job_code), "restart" (the attempt failed
        # and another follows) or "lost" (the leader is gone).
        self.ended_by = ""
        self.job_code: int | None = None
        self.stacks_answered = 0  # the leader's latest ask for stacks this host answered

    def meet(self, keys: dict) -> list[ssh.Member]:
        """Join at the leader with keys, then the job's complete list of members."""
        return peers.follow(self.cfg, keys, self.settings, self.leader)

    def status(self, until: Callable[[dict], bool]) -> dict:
        """The leader's status until until(it); the leader's asks for stacks answered on the
        way (byoc.stall)."""

        def answered(status: dict) -> bool:
            ask = status.get("stacks")
            if isinstance(ask, int) and ask > self.stacks_answered:
                self.stacks_answered = ask
                self._send_stacks(ask)
            return until(status)

        return self.leader.status(answered)

    def _send_stacks(self, ask: int) -> None:
        me = self.cfg.current_host
        folder, out = self.cfg.path(C.STACKS_DIR), self.cfg.path(C.OUTPUT_DATA_DIR)
        answer = {"host": me, "ask": ask, "ranks": stall.dump_host(folder, out, me)}
        try:
            self.leader.stacks(answer)
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            print(f"byoc: no stacks sent to {self.cfg.leader}: {exc}", flush=True)

    def report(self, result: dict) -> dict:
        return self.leader.report(result)

    def started(self) -> int:
        """Wait until the leader has started the job: its attempt; a JobError if it failed
        first."""
        me, leader = self.cfg.current_host, self.cfg.leader
        said: set[int] = set()

        def over(status: dict) -> bool:
            # An attempt that failed before this host saw it start: nothing of it is here.
            if status.get("state") == "restarting" and attempt_of(status) not in said:
                said.add(attempt_of(status))
                self.leader.ready(attempt_of(status))
            return status.get("state") in ("running", "done")

        try:
            status = self.status(over)
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            raise JobError(f"{me}: {exc}; the job cannot start") from exc
        if status.get("state") == "done":
            code = int(status.get("exit_code") or 1)
            raise JobError(
                f"The job failed on the leader {leader} before it started "
                f"({report.describe_exit(code)}); its failure file names the cause",
                code,
            )
        return attempt_of(status)

    def guard(self, end_on_success: bool = False, attempt: int = 1) -> Callable:
        """A guard for procs.run_watched: end this host's work (of attempt `attempt`) once the
        leader has failed or is gone, or restarts the job, and with end_on_success once the
        leader is done at all (ended_by says which)."""
        leader = self.cfg.leader
        self.ended_by, self.job_code = "", None

        def watch(proc) -> None:
            def over(status: dict) -> bool:
                done = status.get("state") == "done"
                restart = status.get("state") == "restarting" and attempt_of(status) == attempt
                return (
                    proc.poll() is not None
                    or restart
                    or (done and (end_on_success or bool(status.get("exit_code"))))
                )

            try:
                status = self.status(over)
            except (coordinator.LeaderLost, coordinator.Refused) as exc:
                if proc.poll() is None:
                    self.ended_by = "lost"
                    procs.end_after_grace(
                        proc, f"the leader {leader} is gone ({exc})", self.settings.end_grace
                    )
                return
            if proc.poll() is not None:
                return
            if status.get("state") == "restarting":
                self.ended_by = "restart"
                why = f"the leader {leader} restarts the job (attempt {attempt} failed)"
                procs.end_after_grace(proc, why, self.settings.end_grace)
                return
            self.job_code = code = int(status.get("exit_code") or 0)
            if code:
                self.ended_by, why = (
                    "failure",
                    f"the leader {leader} failed ({report.describe_exit(code)})",
                )
            else:
                self.ended_by, why = (
                    "success",
                    f"the job's world is done (the leader {leader} succeeded)",
                )
            procs.end_after_grace(proc, why, self.settings.end_grace)

        return watch

    def finish(self, code: int, failures: list[report.RankFailure], attempt: int = 1) -> None:
        """Report this host's result of attempt `attempt` (its code, its first failure) to the
        leader."""
        cause = report.root_cause(failures)
        result = {
            "host": self.cfg.current_host,
            "exit_code": code,
            "failure": cause.to_dict() if cause else None,
            "attempt": attempt,
        }
        try:
            self.report(result)
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            print(
                f"byoc: could not report this host's result to {self.cfg.leader}: {exc}", flush=True
            )

    def ready(self, attempt: int, keep: tuple[int, ...] = ()) -> None:
        """The leader restarts the job after attempt `attempt`: end what is left of it on this
        host (all but keep: byoc.procs.terminate_all), then say so. LeaderLost or Refused."""
        print(
            f"byoc: {self.cfg.current_host}: the leader restarts the job after attempt "
            f"{attempt}: ending what is left of it here",
            flush=True,
        )
        procs.terminate_all(self.settings.term_grace, keep)
        self.leader.ready(attempt)

    def next_attempt(self, attempt: int, keep: tuple[int, ...] = ()) -> dict | None:
        """After this host's part of attempt `attempt`, with restarts left: the leader's word.
        The status of its next attempt ("running") or of the job's end ("done"), this host
        ready() on the way; None once this host is stopped. A lost leader is a JobError."""
        said: list[int] = []

        def over(status: dict) -> bool:
            if self.stop is not None and self.stop.is_set():
                return True
            state, number = status.get("state"), attempt_of(status)
            # number > attempt: an attempt that started and failed between two of this host's
            # polls (this host took no part in it): ready for the latest all the same.
            if state == "restarting" and number >= attempt and number not in said:
                said.append(number)
                self.ready(number, keep)
            return state == "done" or (state == "running" and number > attempt)

        try:
            status = self.status(over)
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            raise JobError(f"{self.cfg.current_host}: {exc}; the job cannot go on") from exc
        return None if self.stop is not None and self.stop.is_set() else status


def attempt_of(status: dict) -> int:
    """The attempt a status of the leader's is about (1 where it names none)."""
    number = status.get("attempt")
    return number if isinstance(number, int) and number >= 1 else 1
