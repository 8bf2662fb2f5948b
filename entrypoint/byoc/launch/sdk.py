"""What a platform's own driver expects of the image, set up by byoc-init before it runs.

The SageMaker Python SDK v3 (`ModelTrainer` with `source_code`) replaces the image's ENTRYPOINT
with `bash -c "chmod +x .../sm_drivers/sm_train.sh && .../sm_train.sh"`; the image's BASH_ENV
hook (docker/bash-env.sh) puts byoc-init back as PID 1 in front of that command. The SDK's MPI
driver (sm_drivers/distributed_drivers/mpi_driver.py) then starts `/usr/sbin/sshd -D` with the
default configuration (port 22) and logs in from the leader to every worker and from every
worker to the leader, with paramiko and OpenSSH, as root, with `~/.ssh/id_*` and host-key checks.
DLC bakes one key pair into the image for that; here the job's hosts make their own at start:

- host keys where the default sshd looks (/etc/ssh), made now;
- a client key per host (~/.ssh/id_ed25519, made now unless one is there);
- the hosts meet at the leader's coordinator (byoc.peers) and swap the public halves;
- each host accepts every job host's key, only from the job hosts' addresses, and knows their
  host keys (strict checking, paramiko included through ~/.ssh/known_hosts);
- sshd's settings as a drop-in its default configuration includes first (byoc.ssh).

Afterwards the leader's coordinator stays up while the driver runs, and a worker's byoc-init
watches it: the SDK's worker driver waits for the leader's "done" file with no bound, so a
worker whose leader finished or vanished ends its driver (after SDK_WORKER_GRACE s, enough for
the driver's own 30 s poll) and exits with the leader's result instead of hanging forever.

BYOC_SSH_TRUST: auto (the SDK's MPI driver only), on (any command in a multi-host job), off.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from byoc import config, coordinator, peers, procs, report, session, settings, ssh
from byoc import constants as C
from byoc.deadline import Deadline
from byoc.errors import JobError, Terminated

SM_TRAIN = "input/data/sm_drivers/sm_train.sh"
SDK_SSH_PORT = 22  # the SDK's paramiko and sshd calls use the default port
SDK_WORKER_GRACE = 60.0  # s a worker's driver gets to end by itself once the leader is done


@dataclass
class Session:
    """What byoc-init keeps of the set-up while the driver runs."""

    watch: Callable[[int, Callable[[int], None]], None] | None = None  # supervisor.run's
    finish: Callable[[int], None] | None = None  # called with the driver's exit code


def sdk_driver(argv: list[str], root: Path) -> str | None:
    """Which SDK v3 driver argv runs: "mpi", "torchrun", "other", or None (not the SDK's)."""
    if not any("sm_drivers/sm_train.sh" in a for a in argv):
        return None
    try:
        script = (root / SM_TRAIN).read_text(errors="replace")
    except OSError:
        return "other"
    if "distributed_drivers/mpi_driver.py" in script:
        return "mpi"
    if "distributed_drivers/torchrun_driver.py" in script:
        return "torchrun"
    return "other"


def _raise_terminated(signum, frame):
    raise Terminated()


def _lead(cfg, keys, the_settings) -> tuple[list[ssh.Member], Session]:
    lead = session.Leading(cfg, the_settings)
    try:
        members = lead.meet(keys)
        # The workers read the list from here: wait until each has (bounded).
        late = lead.wait_for(lead.state.missing_peers_seen(lead.workers), the_settings.peer_timeout)
        if late:
            raise JobError(f"host(s) {', '.join(sorted(late))} never read the job's SSH keys")
    except BaseException:
        lead.end(1, wait_seen=False)
        raise
    lead.running()
    return members, Session(finish=lead.end)


def _follower(follow: session.Following, cfg, root: Path) -> Session:

    def watch(pid: int, stop: Callable[[int], None]) -> None:
        try:
            status = follow.status(lambda s: s.get("state") == "done")
            code = int(status.get("exit_code") or 0)
            why = f"the leader {cfg.leader} finished ({report.describe_exit(code)})"
        except (coordinator.LeaderLost, coordinator.Refused) as exc:
            code, why = 1, f"the leader {cfg.leader} is gone ({exc})"
        deadline = Deadline(SDK_WORKER_GRACE, "the grace of a worker's driver")
        while not deadline.expired():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return  # the driver ended by itself
            time.sleep(0.5)
        print(
            f"byoc-init: {why}, and this host's driver has not ended {SDK_WORKER_GRACE:.0f} s "
            "later: stopping it",
            flush=True,
        )
        if code:
            report.write_failure(root, f"The job failed on the leader: {why}")
        stop(code)

    return Session(watch=watch)


def prepare(argv: list[str], env: dict[str, str]) -> Session | tuple[int, str] | None:
    """Set up what the driver argv runs needs: a Session (or None: nothing to do) to go on,
    else (exit code, why not)."""
    root = config.ml_root(env)
    if not (root / C.RESOURCE_CONFIG).exists():
        return None  # not a training job
    try:
        the_settings = settings.load(env)
    except settings.SettingsError as exc:
        return _fail(root, 2, f"Invalid setting: {exc}")
    driver = sdk_driver(argv, root)
    if the_settings.ssh_trust == "off" or (the_settings.ssh_trust == "auto" and driver != "mpi"):
        return None
    if not procs.in_our_container():  # never rewrite the SSH set-up of somebody's machine
        return None
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        cfg = config.load(root)
        identity = ssh.home_ssh_dir() / "id_ed25519"
        keys = peers.own_keys(cfg.current_host, identity)
        job_session = Session()
        if len(cfg.everyone) == 1:
            me = cfg.current_host
            addresses = sorted(coordinator.host_addresses(me) | {"127.0.0.1"})
            members = [ssh.Member(me, addresses, keys["user_key"], keys["host_keys"])]
        elif cfg.is_leader:
            members, job_session = _lead(cfg, keys, the_settings)
        else:
            follow = session.Following(cfg, the_settings)
            members = follow.meet(keys)
            job_session = _follower(follow, cfg, root)
        ssh.write_trust(members, cfg.everyone, cfg.current_host, SDK_SSH_PORT, identity)
        ssh.write_sshd_dropin(SDK_SSH_PORT, ssh.generate_host_keys())
        ssh.link_into_home(ssh.KNOWN_HOSTS, "known_hosts")
    except config.ConfigError as exc:
        return _fail(root, 2, f"Invalid job configuration: {exc}")
    except JobError as exc:
        return _fail(root, exc.exit_code, f"SSH set-up for the SageMaker SDK's driver: {exc}")
    except (ssh.SSHError, OSError) as exc:
        return _fail(root, 1, f"SSH set-up for the SageMaker SDK's driver: {exc}")
    except Terminated:
        return _fail(root, 143, "Stopped by SIGTERM while the job's hosts set up SSH.")
    finally:
        # Blocked first: a SIGTERM from now on waits for the supervisor's sigwait instead of
        # meeting PID 1's default (ignore) in between.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        signal.signal(signal.SIGTERM, previous)
    print(
        f"byoc-init: SSH trust for {driver or 'this command'} across {len(cfg.everyone)} host(s): "
        f"per-job keys, both ways, port {SDK_SSH_PORT}, job hosts only",
        flush=True,
    )
    return job_session


def _fail(root: Path, code: int, message: str) -> tuple[int, str]:
    report.write_failure(root, message)
    return code, message
