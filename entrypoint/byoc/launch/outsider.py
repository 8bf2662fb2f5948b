"""A host outside the world (with instance groups, one in no distribution group): it runs the
program alone, as AWS's PyTorch container runs the entry point on such hosts, with the same
arguments, channels and SM_* variables (its own host's), and takes part in the job's lifecycle:

join at the leader (bounded) -> wait for "running" -> the program, alone -> report the result to
the leader -> exit with it
The leader's failure ends the program (after BYOC_END_GRACE s), and the host fails with the job. The
world's success ends a program still running after BYOC_END_GRACE s (a data server, say), and the
host succeeds. This host's failure ends the world: the leader's guard (byoc.session).
With restarts (byoc.restarts), the program is ended at the leader's "restarting" as at its
failure, and runs again with the world's next attempt.
"""

from __future__ import annotations

from byoc import coordinator, peers, procs, report, session
from byoc.errors import JobError, Terminated
from byoc.launch import Job


def run(job: Job) -> tuple[int, list[report.RankFailure]]:
    cfg = job.cfg
    me, leader = cfg.current_host, cfg.leader
    follow = session.Following(cfg, job.settings, job.shutdown.requested)
    follow.meet(peers.own_keys(me, None))
    attempt = job.begin_attempt(follow.started())
    print(f"byoc: {me} is outside the world ({cfg.hosts}): running the program alone", flush=True)
    while True:
        guard = follow.guard(end_on_success=True, attempt=attempt)
        code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
        job.shutdown.result_known = True
        failures = job.watcher.failures
        for failure in failures:
            failure.host = me
        if follow.ended_by == "success":
            print(f"byoc: {me}: the program was ended because the job's world is done", flush=True)
            code, failures = 0, []
        follow.finish(code, failures, attempt)
        if code:
            job.failed(code, failures)
        if follow.ended_by == "success" or not job.attempts.left():
            break
        status = follow.next_attempt(attempt)  # another attempt, or the job's end
        if status is None:  # stopped (SIGTERM) between attempts: the job is stopped, not done
            raise Terminated()
        if status.get("state") == "done":
            follow.job_code = int(status.get("exit_code") or 0)
            break
        attempt = job.begin_attempt(session.attempt_of(status))
    if code == 0 or follow.ended_by:
        # Done with its part, or ended by the job: the job's result is the world's.
        job_code = _job_result(follow)
        if job_code:
            raise JobError(
                f"The job failed on the leader {leader} ({report.describe_exit(job_code)}); its "
                "failure file names the cause",
                job_code,
            )
        return 0, []
    return code, failures


def _job_result(follow: session.Following) -> int:
    """The leader's exit code once it is done (1 if the leader is gone)."""
    if follow.ended_by == "lost":
        return 1
    if follow.job_code is not None:  # seen by the guard, or after this host's last attempt
        return follow.job_code
    try:
        status = follow.status(lambda s: s.get("state") == "done")
    except (coordinator.LeaderLost, coordinator.Refused) as exc:
        print(f"byoc: {follow.cfg.current_host}: {exc}; the job's result is not known", flush=True)
        return 1
    return int(status.get("exit_code") or 0)
