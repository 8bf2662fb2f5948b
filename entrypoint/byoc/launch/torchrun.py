"""torchrun on every host; the hosts meet at the leader first, and report their results to it.

leader: coordinator up -> every worker has joined (bounded; names the missing) -> "running" ->
        its own torchrun -> collects the workers' results (bounded) -> the job's result and the
        root cause among every host's failures
worker: join at the leader (bounded) -> wait for "running" -> its own torchrun -> report the
        result to the leader -> exit with its own code
No SSH: torchrun's rendezvous runs on the leader (--master-addr, BYOC_TORCHRUN_PORT).

A host whose ranks failed does not always bring the others down (a rank that dies after the last
collective; torchrun's agents wait up to 300 s for each other at exit; NCCL notices a lost peer
only at its timeout): while torchrun runs, the leader watches the workers' reports and a worker
watches the leader's state, and END_GRACE s after another host failed, this host's torchrun is
ended, so the job fails within seconds, with the first failure as its cause.
"""

from __future__ import annotations

import subprocess

from byoc import constants as C
from byoc import coordinator, peers, plan, procs, report, session
from byoc.errors import JobError
from byoc.launch import Job

END_GRACE = 20.0  # s this host's ranks get to notice another host's failure themselves


def _end_after_grace(proc, why: str) -> None:
    """Give proc END_GRACE s to end by itself (its ranks' own errors are the better report),
    then end it, saying why."""
    try:
        proc.wait(timeout=END_GRACE)
    except subprocess.TimeoutExpired:
        print(
            f"byoc: {why}; this host's ranks still run {END_GRACE:.0f} s later: ending them",
            flush=True,
        )
        procs.end(proc)


def run(job: Job) -> tuple[int, list[report.RankFailure]]:
    """This host's exit code and the failures to explain it with."""
    if job.plan.role == "single":
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher)
        return code, job.watcher.failures
    if job.plan.role == "worker":
        return _worker(job)
    return _leader(job)


def _mine(job: Job) -> list[report.RankFailure]:
    for failure in job.watcher.failures:
        failure.host = job.cfg.current_host
    return job.watcher.failures


def _leader(job: Job) -> tuple[int, list[report.RankFailure]]:
    cfg, settings = job.cfg, job.settings
    workers = cfg.hosts[1:]
    lead = session.Leading(cfg, settings, job.shutdown.requested)
    state = lead.state
    code = 1
    started = False
    try:
        lead.meet(peers.own_keys(cfg.current_host, None))
        lead.running()
        started = True
        print(f"byoc: launching {plan.describe(job.plan.command)}", flush=True)
        guard = _watch_workers(state)
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
        job.shutdown.result_known = True
        lead.result(code)  # this host's result; workers still running learn of a failure
        late = lead.wait_for(state.missing_reports(workers), C.REPORT_TIMEOUT)
        if late and code == 0:
            # torchrun's agents can end well with a host gone (it only logs its exit barrier):
            # a host that says nothing has not succeeded.
            raise JobError(
                f"Training failed: no result from {', '.join(sorted(late))} within "
                f"{C.REPORT_TIMEOUT:.0f} s of this host's end (its container stopped?)"
            )
        if late:
            print(f"byoc: no result from {sorted(late)}", flush=True)
        failures = _mine(job)
        for host, result in sorted(state.reported().items()):
            theirs = report.RankFailure.from_dict(result.get("failure"))
            if theirs:
                theirs.host = host
                failures.append(theirs)
            worst = result.get("exit_code")
            if code == 0 and isinstance(worst, int) and worst != 0:
                print(f"byoc: {host} failed ({report.describe_exit(worst)})", flush=True)
                code = worst
        return code, failures
    finally:
        # Workers still waiting to start learn the result, then leave; the others reported.
        lead.end(code, wait_seen=not started)


def _watch_workers(state: coordinator.JobState):
    """The leader's guard: end this host's torchrun once a worker has reported a failure."""

    def guard(proc) -> None:
        failed = state.wait_for_failure(lambda: proc.poll() is not None)
        if proc.poll() is None:
            _end_after_grace(proc, f"{', '.join(failed)} failed")

    return guard


def _watch_leader(job: Job, follow: session.Following):
    """A worker's guard: end this host's torchrun once the leader has failed or is gone."""
    leader = job.cfg.leader

    def guard(proc) -> None:
        def over(status: dict) -> bool:
            return proc.poll() is not None or bool(
                status.get("state") == "done" and status.get("exit_code")
            )

        try:
            status = follow.status(over)
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            if proc.poll() is None:
                _end_after_grace(proc, f"the leader {leader} is gone ({exc})")
            return
        if proc.poll() is None:
            code = int(status.get("exit_code") or 1)
            _end_after_grace(proc, f"the leader {leader} failed ({report.describe_exit(code)})")

    return guard


def _worker(job: Job) -> tuple[int, list[report.RankFailure]]:
    cfg, settings = job.cfg, job.settings
    me, leader = cfg.current_host, cfg.leader
    follow = session.Following(cfg, settings)
    follow.meet(peers.own_keys(me, None))
    try:
        status = follow.status(lambda s: s.get("state") in ("running", "done"))
    except (coordinator.LeaderLost, coordinator.Refused) as exc:
        raise JobError(f"Worker {me}: {exc}; the job cannot start") from exc
    if status.get("state") == "done":
        code = int(status.get("exit_code") or 1)
        raise JobError(
            f"The job failed on the leader {leader} before it started "
            f"({report.describe_exit(code)}); its failure file names the cause",
            code,
        )
    guard = _watch_leader(job, follow)
    code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
    job.shutdown.result_known = True
    failures = _mine(job)
    cause = report.root_cause(failures)
    result = {"host": me, "exit_code": code, "failure": cause.to_dict() if cause else None}
    try:
        follow.report(result)
    except (coordinator.LeaderLost, coordinator.Refused) as exc:
        print(f"byoc: could not report this host's result to {leader}: {exc}", flush=True)
    return code, failures
