"""horovodrun on the leader, over SSH to the workers; workers serve SSH until the job is over.

leader: coordinator up -> hosts meet (keys swapped) -> trust written, sshd up -> every worker
        accepts a login -> horovodrun -> "done" with its exit code -> leave once every worker
        has seen it (bounded); with restarts (byoc.restarts), a failed horovodrun is followed
        by another on the same hosts once every worker is ready
worker: meet at the leader (bounded, however late the leader is) -> trust written, sshd up ->
        poll the leader until "done" (at each "restarting", end what is left of the attempt's
        ranks here, sshd kept, and say ready) -> exit with the job's result
Workers accept the leader's key only (logins go one way), from the job's addresses only.
With outsiders (instance groups), the leader also ends horovodrun when one of them reports a
failure, and collects their results once horovodrun is done (byoc.session).
"""

from __future__ import annotations

from byoc import coordinator, peers, plan, procs, session, ssh
from byoc.deadline import Deadline
from byoc.errors import JobError
from byoc.launch import Job, run_local
from byoc.report import RankFailure, describe_exit


def _trust(job: Job, members: list[ssh.Member]) -> None:
    """Write this host's SSH trust and start its sshd; the sshd process."""
    port = job.settings.ssh_port
    try:
        ssh.write_trust(members, [job.cfg.leader], job.cfg.current_host, port, ssh.JOB_KEY)
        config = ssh.write_sshd_config(port, ssh.generate_host_keys())
        return ssh.start_sshd(config)
    except (ssh.SSHError, OSError) as exc:
        raise JobError(f"SSH setup on {job.cfg.current_host}: {exc}") from exc


def _keys(job: Job) -> dict:
    try:
        given = ssh.given_private_key(job.env)
    except ssh.SSHError as exc:
        raise JobError(str(exc), 2) from exc
    return peers.own_keys(job.cfg.current_host, ssh.JOB_KEY, given)


def run(job: Job) -> tuple[int, list[RankFailure]]:
    """This host's exit code and the failures to explain it with (ranks of every host report
    through horovodrun on the leader)."""
    if job.plan.role == "single":
        return run_local(job)
    code = _worker(job) if job.plan.role == "worker" else _leader(job)
    return code, job.watcher.failures


def _leader(job: Job) -> int:
    cfg, settings = job.cfg, job.settings
    workers = cfg.hosts[1:]
    lead = session.Leading(cfg, settings, job.shutdown.requested)
    exit_code = 1
    try:
        members = lead.meet(_keys(job))
        keep = (_trust(job, members).pid,) if workers else ()
        deadline = Deadline(settings.peer_timeout, "BYOC_PEER_TIMEOUT")
        for host in workers:
            try:
                took = ssh.wait_for_login(host, max(1.0, deadline.left()))
            except ssh.SSHError as exc:
                raise JobError(f"{exc} (set BYOC_PEER_TIMEOUT to wait longer)") from exc
            print(f"byoc: {host} accepts SSH ({took:.1f} s)", flush=True)
        while True:
            lead.running(job.begin_attempt())
            print(f"byoc: launching {plan.describe(job.plan.command)}", flush=True)
            guard = procs.guards(job.stall_watch(lead), lead.guard() if cfg.outsiders else None)
            exit_code = procs.run_watched(job.plan.command, job.env, job.cwd, job.watcher, guard)
            job.shutdown.result_known = True
            again = exit_code != 0 and job.attempts.left()
            if again:
                lead.restarting(exit_code)
            if cfg.outsiders:  # their failures join the watcher's, which run() returns
                exit_code, _ = lead.collect(
                    exit_code, job.watcher.failures, cfg.outsiders, announce=not again
                )
            if not (again and job.restart(exit_code, job.watcher.failures, lead, keep)):
                return exit_code
    finally:
        # Leave as soon as every worker knows the result (bounded: a dead worker cannot hold us).
        late = lead.end(exit_code)
        if late:
            print(f"byoc: workers that did not collect the result: {sorted(late)}", flush=True)


def _worker(job: Job) -> int:
    cfg, settings = job.cfg, job.settings
    follow = session.Following(cfg, settings)
    members = follow.meet(_keys(job))
    sshd = _trust(job, members)
    me, leader = cfg.current_host, cfg.leader
    print(f"byoc: {me} serving SSH on port {settings.ssh_port}; waiting for {leader}", flush=True)

    ended = 0  # the latest attempt whose leftovers this host ended

    def over(status: dict) -> bool:
        if sshd.poll() is not None:
            raise JobError(f"Worker {me}: sshd exited ({sshd.returncode})")
        restart = status.get("state") == "restarting" and session.attempt_of(status) > ended
        return restart or status.get("state") == "done"

    try:
        while (status := follow.status(over)).get("state") != "done":
            ended = session.attempt_of(status)
            follow.ready(ended, keep=(sshd.pid,))
    except (coordinator.LeaderLost, coordinator.Refused) as exc:
        raise JobError(f"Worker {me}: {exc}; the job cannot finish") from exc
    code = int(status["exit_code"] if status.get("exit_code") is not None else 1)
    job.shutdown.result_known = True
    if code != 0:
        raise JobError(
            f"The job failed on the leader {leader} ({describe_exit(code)}); "
            "its failure file names the cause",
            code,
        )
    return 0
