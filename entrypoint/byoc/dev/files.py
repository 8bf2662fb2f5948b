"""What development mode writes: the keys sshd takes, sshd's configuration, the peers' client
configuration and the profile snippet. The SSH settings themselves come from byoc.ssh, the one
writer of SSH configuration, so dev's sshd and train's differ only where dev asks for it."""

from __future__ import annotations

import shlex
from pathlib import Path

from byoc import constants as C
from byoc import ssh
from byoc.dev.keys import PEER_KEY, PEER_KNOWN_HOSTS
from byoc.dev.settings import DevConfig


def session_env(env: dict[str, str]) -> dict[str, str]:
    """What SSH sessions get: the image's variables (ssh.session_env) and SSH_PORT where it is
    set, so byoc-discover-hosts run from a session probes sshd's port as from the container's
    own shell."""
    out = ssh.session_env(env)
    if env.get(C.DEV_SSH_PORT_ENV, "").strip().isdigit():
        out[C.DEV_SSH_PORT_ENV] = env[C.DEV_SSH_PORT_ENV].strip()
    return dict(sorted(out.items()))


def write_authorized_keys(keys: list[str], path: Path) -> Path:
    # Root-owned copy: sshd's StrictModes refuses a mounted file owned by the host's uid.
    ssh.write_file(path, "\n".join(keys) + "\n", 0o644)
    return path


def write_sshd_config(
    cfg: DevConfig, host_keys: list[Path], authorized_keys: Path, env: dict[str, str], path: Path
) -> Path:
    """sshd for a person: keys only, as cfg.user; TCP/agent forwarding and sftp for VS Code
    Remote-SSH and TensorBoard tunnels; INFO log (who logged in); the image's PATH for
    commands over ssh (horovodrun's, mpirun's), which get no login shell."""
    lines = ssh.sshd_settings(
        cfg.ssh_port,
        host_keys,
        authorized_keys,
        user=cfg.user,
        forwarding=True,
        pam=False,
        session_env=session_env(env),
        log_level="INFO",
    )
    # sshd runs in the foreground under our supervisor: no pid file to leave behind.
    ssh.write_file(path, "\n".join([*lines, "PidFile none"]) + "\n", 0o600)
    return path


def write_peers_config(cfg: DevConfig, path: Path) -> Path:
    """ssh client settings for the other nodes of a local cluster: their key, no prompts.
    Each cluster-up makes new containers with new host keys: trust on first use."""
    text = ssh.client_config_text(
        list(cfg.peers), cfg.ssh_port, PEER_KEY, PEER_KNOWN_HOSTS, strict="accept-new"
    )
    ssh.write_file(path, text, 0o644)
    return path


def profile_text(env: dict[str, str]) -> str:
    """/etc/profile.d snippet: login shells (Debian's /etc/profile resets PATH) get ours back."""
    body = "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in session_env(env).items() if k.isidentifier()
    )
    return (
        "# Written by byoc-dev at container start: the image's environment for SSH logins.\n" + body
    )


def write_profile(env: dict[str, str], path: Path) -> Path:
    ssh.write_file(path, profile_text(env), 0o644)
    return path
