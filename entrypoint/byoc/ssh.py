"""SSH trust between the job's hosts: the one place that writes SSH keys and configuration.

Nothing is baked into the image. At start every host makes its own host keys and its own client
identity (or takes the key the platform hands in: BYOC_SSH_PRIVATE_KEY or
BYOC_SSH_PRIVATE_KEY_FILE), and the hosts swap the public halves through the leader's
coordinator (byoc.coordinator). Then each host:
- accepts logins only with the keys of the hosts allowed in (the leader's, or every job host's
  where the launcher logs in both ways) and only from the job hosts' addresses;
- knows the job hosts' host keys (known_hosts), so clients check them strictly;
- writes the sshd settings and a client configuration that applies to the job's hosts only.
`train` runs an sshd of its own on BYOC_SSH_PORT with that configuration; a platform driver that
starts `/usr/sbin/sshd -D` itself (SageMaker SDK v3) gets the same settings as a drop-in that the
distribution's sshd_config includes first.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C

SSH_DIR = Path(C.RUNTIME_DIR) / "ssh"
JOB_KEY = SSH_DIR / "id_job"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
SSHD_CONFIG = SSH_DIR / "sshd_config"
HOST_KEY_DIR = Path(C.HOST_KEY_DIR)
HOST_KEY_KINDS = ("ed25519", "rsa")
# Read first by Debian's and Ubuntu's ssh_config / sshd_config (their Include lines).
CLIENT_DROPIN = Path("/etc/ssh/ssh_config.d/00-byoc-job.conf")
SSHD_DROPIN = Path("/etc/ssh/sshd_config.d/00-byoc-job.conf")


class SSHError(Exception):
    pass


@dataclass(frozen=True)
class Member:
    """One job host as the others see it."""

    host: str
    addresses: list[str]
    user_key: str
    host_keys: list[str]


def _run(cmd: list[str]) -> str:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise SSHError(f"cannot run {cmd[0]}: {exc}") from exc
    if result.returncode != 0:
        raise SSHError(f"{cmd[0]} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _write(path: Path, text: str, mode: int) -> None:
    """Create or replace path with text, never readable by others while it is written."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def home_ssh_dir() -> Path:
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"


# --- keys ------------------------------------------------------------------------------------
def generate_host_keys(directory: Path = HOST_KEY_DIR) -> list[Path]:
    """This host's SSH host keys (made once per container, where the default sshd looks)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    keys = []
    for kind in HOST_KEY_KINDS:
        key = directory / f"ssh_host_{kind}_key"
        if not key.exists():
            _run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(key)])
        keys.append(key)
    return keys


def public_half(private: Path) -> str:
    try:
        return _run(["ssh-keygen", "-y", "-f", str(private)]).strip()
    except SSHError as exc:
        raise SSHError(f"{private} is not a usable unencrypted private key: {exc}") from exc


def host_public_keys(host_keys: list[Path]) -> list[str]:
    # Type and key only: the comment is no business of the peers.
    return [" ".join(Path(f"{k}.pub").read_text().split()[:2]) for k in host_keys]


def given_private_key(env: dict[str, str]) -> str | None:
    """The job's private key where the platform hands one in, else None."""
    if env.get(C.SSH_KEY_ENV):
        return env[C.SSH_KEY_ENV]
    key_file = env.get(C.SSH_KEY_FILE_ENV)
    if key_file:
        try:
            return Path(key_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SSHError(f"{C.SSH_KEY_FILE_ENV}={key_file} cannot be read: {exc}") from exc
    return None


def ensure_identity(path: Path, given: str | None = None) -> str:
    """This host's client key at path: the given key, the one already there, or a new one.
    Returns its public half. A key already at path is used as it is, never replaced."""
    if given is not None:
        _write(path, given.strip() + "\n", 0o600)
    elif not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "byoc-job", "-f", str(path)])
    return public_half(path)


# --- what each host writes from the members ----------------------------------------------------
def authorized_keys_text(keys: list[str], addresses: list[str]) -> str:
    """Each key, usable only from the given addresses (the job's hosts)."""
    restriction = f'from="{",".join(sorted(set(addresses)))}",no-agent-forwarding,no-X11-forwarding'
    return "".join(f"{restriction} {k}\n" for k in sorted({k.strip() for k in keys if k.strip()}))


def known_hosts_text(members: list[Member], me: str) -> str:
    lines = []
    for m in members:
        names = [m.host, *m.addresses] + (["localhost", "127.0.0.1"] if m.host == me else [])
        lines += [f"{','.join(dict.fromkeys(names))} {k}" for k in m.host_keys]
    return "".join(line + "\n" for line in lines)


def sshd_settings(port: int, host_keys: list[Path]) -> list[str]:
    """Public keys only, from the job's authorized_keys file; no forwarding; room for mpirun."""
    return [
        f"Port {port}",
        *[f"HostKey {k}" for k in host_keys],
        f"AuthorizedKeysFile {AUTHORIZED_KEYS}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "PermitEmptyPasswords no",
        "KbdInteractiveAuthentication no",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        "PermitUserEnvironment no",
        "LogLevel ERROR",
        # mpirun's orted and horovodrun open many sessions at once.
        "MaxStartups 100:30:200",
        "MaxSessions 100",
    ]


def client_config_text(members: list[Member], port: int, identity: Path) -> str:
    """ssh to a job host (ours, horovodrun's, mpirun's, a platform driver's) uses the job's
    identity and port, checks the host key strictly against the job's known_hosts, never asks."""
    patterns = sorted({m.host for m in members} | {a for m in members for a in m.addresses})
    return "\n".join(
        [
            f"Host {' '.join(patterns)}",
            f"    Port {port}",
            f"    IdentityFile {identity}",
            "    IdentitiesOnly yes",
            "    BatchMode yes",
            "    StrictHostKeyChecking yes",
            f"    UserKnownHostsFile {KNOWN_HOSTS}",
            "    LogLevel ERROR",
            "    ConnectTimeout 10",
            "    ServerAliveInterval 15",
            "",
        ]
    )


def write_trust(
    members: list[Member], allowed: list[str], me: str, port: int, identity: Path
) -> None:
    """authorized_keys (the keys of the `allowed` hosts, from any job host's address),
    known_hosts (every job host's host keys) and the client configuration."""
    keys = [m.user_key for m in members if m.host in allowed]
    addresses = [a for m in members for a in m.addresses] + ["127.0.0.1"]
    _write(AUTHORIZED_KEYS, authorized_keys_text(keys, addresses), 0o600)
    _write(KNOWN_HOSTS, known_hosts_text(members, me), 0o644)
    _write(CLIENT_DROPIN, client_config_text(members, port, identity), 0o644)


def write_sshd_config(port: int, host_keys: list[Path], path: Path = SSHD_CONFIG) -> Path:
    """A complete sshd configuration for `train`'s own sshd (started with -f)."""
    lines = [*sshd_settings(port, host_keys), "UsePAM no", "PidFile none"]
    _write(path, "\n".join(lines) + "\n", 0o600)
    return path


def write_sshd_dropin(port: int, host_keys: list[Path], path: Path = SSHD_DROPIN) -> Path:
    """The same settings for the distribution's own sshd_config, which includes this first
    (first value wins in sshd). PAM stays as the distribution has it: the SageMaker SDK's MPI
    driver hands the job's environment to remote ranks through /etc/environment, which only
    pam_env reads."""
    _write(path, "\n".join(sshd_settings(port, host_keys)) + "\n", 0o644)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True, mode=0o755)
    _run(["/usr/sbin/sshd", "-t"])
    return path


def start_sshd(config: Path = SSHD_CONFIG) -> subprocess.Popen:
    Path("/run/sshd").mkdir(parents=True, exist_ok=True, mode=0o755)
    _run(["/usr/sbin/sshd", "-t", "-f", str(config)])
    return subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)])


def link_into_home(target: Path, name: str) -> None:
    """~/.ssh/<name> -> target, for clients that look only there (paramiko). An existing file
    is the user's and stays."""
    link = home_ssh_dir() / name
    link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not link.exists() and not link.is_symlink():
        link.symlink_to(target)


# --- waiting for the peers ---------------------------------------------------------------------
def resolve(host: str, timeout: float) -> str:
    """The IPv4 address of host, retrying while the name does not resolve yet (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        except socket.gaierror as exc:
            if time.monotonic() >= deadline:
                raise SSHError(
                    f"host {host} did not resolve within {timeout:.0f} s: {exc}"
                ) from exc
            time.sleep(1)


def wait_for_login(host: str, timeout: float) -> float:
    """Retry `ssh host true` until it works; the seconds it took. Error names the host."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        result = subprocess.run(
            ["ssh", "-o", "ConnectTimeout=5", "--", host, "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0:
            return time.monotonic() - start
        last = result.stderr.strip() or f"exit {result.returncode}"
        time.sleep(1)
    raise SSHError(f"worker {host} never accepted an SSH login within {timeout:.0f} s ({last})")
