"""The job's hosts meet at the leader's coordinator before anything runs across them.

Each host joins with its public SSH keys (none where the launcher needs no SSH); the leader waits,
bounded, until every host has joined, and names those that did not; then every host reads all
members and writes its SSH trust (byoc.ssh) from them. The same meeting serves `train` (both
launchers) and a platform driver's job (byoc.launch.sdk).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from byoc import coordinator, ssh
from byoc.config import JobConfig
from byoc.errors import JobError
from byoc.settings import Settings


def own_keys(host: str, identity: Path | None, given: str | None = None) -> dict:
    """What this host tells the others: its host keys and client key (identity None: no SSH)."""
    if identity is None:
        return {"host": host, "user_key": "", "host_keys": []}
    try:
        host_keys = ssh.generate_host_keys()
        return {
            "host": host,
            "user_key": ssh.ensure_identity(identity, given),
            "host_keys": ssh.host_public_keys(host_keys),
        }
    except (ssh.SSHError, OSError) as exc:
        raise JobError(f"SSH keys of {host}: {exc}") from exc


def _members(hosts: dict) -> list[ssh.Member]:
    try:
        members = [
            ssh.Member(
                host=str(name),
                addresses=[str(a) for a in info["addresses"]],
                user_key=str(info["user_key"]),
                host_keys=[str(k) for k in info["host_keys"]],
            )
            for name, info in hosts.items()
        ]
    except (TypeError, KeyError, AttributeError) as exc:
        raise JobError(f"the leader sent a malformed list of the job's hosts ({exc!r})") from exc
    for m in members:
        keys = [k for k in [m.user_key, *m.host_keys] if k]
        if not all(coordinator.PUBLIC_KEY.fullmatch(k) for k in keys):
            raise JobError(f"the leader sent a key of {m.host} that is no OpenSSH public key")
    return members


def lead(
    state: coordinator.JobState,
    cfg: JobConfig,
    keys: dict,
    settings: Settings,
    stop: threading.Event | None = None,
) -> list[ssh.Member]:
    """On the leader (state served by its coordinator): wait until every host has joined."""
    refused = state.join(keys, source=None)
    if refused:
        raise JobError(f"the leader cannot join its own job: {refused[1]}")
    # Where its own name does not resolve (yet), the address its host name has will do.
    state.fill_addresses(
        cfg.leader, coordinator.host_addresses(socket.gethostname()) - {"127.0.0.1"}
    )
    missing = state.wait_for(state.missing_members(cfg.others), settings.peer_timeout, stop)
    if missing:
        raise JobError(
            f"host(s) {', '.join(sorted(missing))} did not join the job within "
            f"{settings.peer_timeout:.0f} s (not started, or cannot reach {cfg.leader} on port "
            f"{settings.coordinator_port}); set BYOC_PEER_TIMEOUT to wait longer"
        )
    return _members(state.peers(None)["hosts"])


def client(cfg: JobConfig, settings: Settings) -> coordinator.Client:
    """This host's client of the leader's coordinator: BYOC_LEADER_TIMEOUT until the leader
    first answers, BYOC_LEADER_LOST_AFTER of silence after."""
    return coordinator.Client(
        cfg.leader,
        settings.coordinator_port,
        cfg.current_host,
        appear=settings.leader_timeout,
        lost_after=settings.leader_lost_after,
    )


def follow(
    cfg: JobConfig, keys: dict, settings: Settings, leader: coordinator.Client | None = None
) -> list[ssh.Member]:
    """On a worker: join at the leader (through leader, else this host's client), then wait
    for the complete list of members."""
    me = cfg.current_host
    leader = leader or client(cfg, settings)
    print(
        f"byoc: {me} waiting for the leader {cfg.leader} (up to {settings.leader_timeout:.0f} s)",
        flush=True,
    )
    try:
        leader.join(keys)
        answer = leader.peers(lambda a: bool(a.get("complete")) or a.get("state") == "done")
    except (coordinator.LeaderLost, coordinator.Refused) as exc:
        raise JobError(f"Worker {me}: {exc}") from exc
    if not answer.get("complete"):
        raise JobError(
            f"Worker {me}: the leader {cfg.leader} gave up before all hosts joined; its "
            "failure file names the cause",
            int(answer.get("exit_code") or 1),
        )
    members = _members(answer.get("hosts") or {})
    for m in members:  # the leader's address as this host reaches it, too
        if m.host == cfg.leader:
            m.addresses[:] = sorted(set(m.addresses) | coordinator.host_addresses(cfg.leader))
    return members
