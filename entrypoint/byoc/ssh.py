"""SSH between the job's hosts: host keys made at start, one job key, logins from job hosts only.

Trust: the private key is the job's, never the image's. Either the platform hands it to every
host (BYOC_SSH_PRIVATE_KEY or BYOC_SSH_PRIVATE_KEY_FILE; our launch tool makes one per job), or
the leader makes one at start and workers fetch its public half from the leader's coordinator.
authorized_keys accepts that key only from the addresses of the job's own hosts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from byoc import constants as C

SSH_DIR = Path(C.RUNTIME_DIR) / "ssh"
CLIENT_KEY = SSH_DIR / "id_job"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
SSHD_CONFIG = SSH_DIR / "sshd_config"
CLIENT_CONFIG = Path("/root/.ssh/config")


class SSHError(Exception):
    pass


def _run(cmd: list[str]) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SSHError(f"{cmd[0]} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def generate_host_keys(directory: Path = SSH_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    keys = []
    for kind in ("ed25519", "rsa"):
        key = directory / f"ssh_host_{kind}_key"
        if not key.exists():
            _run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(key)])
        keys.append(key)
    return keys


def install_private_key(text: str, path: Path = CLIENT_KEY) -> str:
    """Write the job's private key; return its public half."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text.strip() + "\n")
    try:
        return _run(["ssh-keygen", "-y", "-f", str(path)]).strip()
    except SSHError as exc:
        raise SSHError(f"the job's SSH private key is not a valid unencrypted key: {exc}") from exc


def generate_job_key(path: Path = CLIENT_KEY) -> str:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        path.unlink()
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "byoc-job", "-f", str(path)])
    return Path(str(path) + ".pub").read_text().strip()


def given_private_key(env: dict[str, str]) -> str | None:
    if env.get(C.SSH_KEY_ENV):
        return env[C.SSH_KEY_ENV]
    key_file = env.get(C.SSH_KEY_FILE_ENV)
    if key_file:
        try:
            return Path(key_file).read_text()
        except OSError as exc:
            raise SSHError(f"{C.SSH_KEY_FILE_ENV}={key_file} cannot be read: {exc}") from exc
    return None


def authorize(public_key: str, addresses: list[str], path: Path = AUTHORIZED_KEYS) -> None:
    """Accept public_key, and only from the given addresses."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    restriction = f'from="{",".join(sorted(set(addresses)))}",no-agent-forwarding,no-X11-forwarding'
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{restriction} {public_key.strip()}\n")


def write_sshd_config(port: int, host_keys: list[Path], path: Path = SSHD_CONFIG) -> Path:
    lines = [
        f"Port {port}",
        *[f"HostKey {k}" for k in host_keys],
        f"AuthorizedKeysFile {AUTHORIZED_KEYS}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "PermitEmptyPasswords no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        "PermitUserEnvironment no",
        "PidFile none",
        "LogLevel ERROR",
        # mpirun's orted and horovodrun open many sessions at once.
        "MaxStartups 100:30:200",
        "MaxSessions 100",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_client_config(port: int, path: Path = CLIENT_CONFIG) -> None:
    """ssh from here (ours, horovodrun's, mpirun's) uses the job key and port, no prompts."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(
        "\n".join(
            [
                "Host *",
                f"    Port {port}",
                f"    IdentityFile {CLIENT_KEY}",
                "    IdentitiesOnly yes",
                "    BatchMode yes",
                "    StrictHostKeyChecking no",
                "    UserKnownHostsFile /dev/null",
                "    LogLevel ERROR",
                "    ConnectTimeout 10",
                "    ServerAliveInterval 15",
                "",
            ]
        )
    )
    path.chmod(0o600)


def start_sshd(config: Path = SSHD_CONFIG) -> subprocess.Popen:
    Path("/run/sshd").mkdir(parents=True, exist_ok=True, mode=0o755)
    _run(["/usr/sbin/sshd", "-t", "-f", str(config)])
    return subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)])


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
            ["ssh", "-o", "ConnectTimeout=5", host, "true"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0:
            return time.monotonic() - start
        last = result.stderr.strip() or f"exit {result.returncode}"
        time.sleep(1)
    raise SSHError(f"worker {host} never accepted an SSH login within {timeout:.0f} s ({last})")
