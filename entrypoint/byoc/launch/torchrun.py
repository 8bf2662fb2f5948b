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
watches the leader's state, and BYOC_END_GRACE s after another host failed, this host's torchrun is
ended, so the job fails within seconds, with the first failure as its cause.

With restarts (byoc.restarts), a failed attempt is followed by another: the leader says
"restarting" instead of its result, every host ends its torchrun as above, reports, ends what is
left of it and says it is ready, and every host starts its torchrun again on the leader's next
"running". torchrun's own --max-restarts stays 0: it restarts one host's workers, and with the
static rendezvous used here (--master-addr) the other hosts' agents never hear of it (it takes
the c10d rendezvous, which decides on its own, without the stall watch or a cause per attempt).
A worker that failed after the leader had succeeded fails the job without a restart: the others
have seen the job's end already.
"""

from __future__ import annotations

from byoc import peers, plan, procs, report, session
from byoc.errors import JobError, Terminated
from byoc.launch import Job, run_local


def run(job: Job) -> tuple[int, list[report.RankFailure]]:
    """This host's exit code and the failures to explain it with."""
    if job.plan.role == "single":
        return run_local(job)
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
        while True:
            lead.running(job.begin_attempt())
            started = True
            print(f"byoc: launching {plan.describe(job.plan.command)}", flush=True)
            guard = procs.guards(lead.guard(), job.stall_watch(lead))
            code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
            job.shutdown.result_known = True
            if code == 0 or not job.attempts.left():
                # Hosts still running learn this host's result (a failure ends them).
                return lead.collect(code, _mine(job), cfg.others)
            lead.restarting(code)  # the others end theirs and report, then say ready
            code, failures = lead.collect(code, _mine(job), cfg.others, announce=False)
            if not job.restart(code, failures, lead):
                return code, failures
    finally:
        # Workers still waiting to start learn the result, then leave; the others reported
        # (and, with restarts left, wait for the leader's word: they leave once they saw it).
        lead.end(code, wait_seen=not started or job.attempts.left())


def _worker(job: Job) -> tuple[int, list[report.RankFailure]]:
    cfg = job.cfg
    follow = session.Following(cfg, job.settings, job.shutdown.requested)
    follow.meet(peers.own_keys(cfg.current_host, None))
    attempt = job.begin_attempt(follow.started())
    while True:
        guard = follow.guard(attempt=attempt)
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
        job.shutdown.result_known = True
        failures = _mine(job)
        follow.finish(code, failures, attempt)
        if code:
            job.failed(code, failures)
        if not job.attempts.left():
            return code, failures
        # The leader's word: another attempt, or the job's end (this host's result stands).
        status = follow.next_attempt(attempt)
        if status is None:  # stopped (SIGTERM) between attempts: the job is stopped, not done
            raise Terminated()
        if status.get("state") == "done":
            if session.attempt_of(status) > attempt:
                raise JobError(
                    f"{cfg.current_host}: the job ended in attempt {session.attempt_of(status)}, "
                    "which this host did not see start",
                    int(status.get("exit_code") or 1),
                )
            return code, failures
        attempt = job.begin_attempt(session.attempt_of(status))
