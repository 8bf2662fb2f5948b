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

from byoc import peers, plan, procs, report, session
from byoc.launch import Job


def run(job: Job) -> tuple[int, list[report.RankFailure]]:
    """This host's exit code and the failures to explain it with."""
    if job.plan.role == "single":
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, job.stall_watch())
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
    lead = session.Leading(cfg, settings, job.shutdown.requested)
    code = 1
    started = False
    try:
        lead.meet(peers.own_keys(cfg.current_host, None))
        lead.running()
        started = True
        print(f"byoc: launching {plan.describe(job.plan.command)}", flush=True)
        guard = procs.guards(lead.guard(), job.stall_watch(lead))
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
        job.shutdown.result_known = True
        # Hosts still running learn this host's result (a failure ends them).
        return lead.collect(code, _mine(job), cfg.others)
    finally:
        # Workers still waiting to start learn the result, then leave; the others reported.
        lead.end(code, wait_seen=not started)


def _worker(job: Job) -> tuple[int, list[report.RankFailure]]:
    cfg = job.cfg
    follow = session.Following(cfg, job.settings)
    follow.meet(peers.own_keys(cfg.current_host, None))
    follow.started()
    code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, follow.guard())
    job.shutdown.result_known = True
    failures = _mine(job)
    follow.finish(code, failures)
    return code, failures
