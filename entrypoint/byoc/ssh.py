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

import base64
import binascii
import contextlib
import hashlib
import os
import pwd
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C
from byoc import procs
from byoc.deadline import Deadline

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
# Written at build time, for the sshd and ssh that Kubernetes engines start in place of our
# ENTRYPOINT (write_engine_config). A job of ours that runs the distribution's sshd (SageMaker
# SDK v3) removes the sshd one first (write_sshd_dropin): its SetEnv would win over the
# environment the SDK's driver hands on, and its HostKey would add to ours.
ENGINE_SSHD_DROPIN = Path("/etc/ssh/sshd_config.d/50-byoc-engines.conf")
ENGINE_CLIENT_DROPIN = Path("/etc/ssh/ssh_config.d/50-byoc-engines.conf")
# Where the MPI Operator, Kubeflow Trainer and Volcano mount the job's key pair: ~/.ssh of the
# user the pod runs as (their sshAuthMountPath / --ssh-key-file-path defaults).
ENGINE_KEY = "~/.ssh/id_rsa"


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
        return procs.check_output(cmd)
    except procs.CommandFailed as exc:
        raise SSHError(str(exc)) from exc


def write_file(path: Path, text: str, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Create or replace path with text, never readable by others while it is written, and
    never through a link planted where the temporary file goes (mkstemp: O_EXCL)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
            if owner:
                os.fchown(f.fileno(), *owner)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def home_ssh_dir() -> Path:
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    except KeyError:
        raise SSHError(f"uid {os.getuid()} has no passwd entry, so no home for ~/.ssh") from None


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


def fingerprint(public_key: str) -> str:
    """SHA256:... of an 'ssh-ed25519 AAAA...' line, as `ssh-keygen -l` prints it; '?' if bad."""
    try:
        blob = base64.b64decode(public_key.split()[1], validate=True)
    except (IndexError, binascii.Error):
        return "?"
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


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
        write_file(path, given.strip() + "\n", 0o600)
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


# Every sshd the image sets up: public keys only, no passwords, no user environment, no X11; room
# for mpirun's orted and horovodrun, which open many sessions at once.
_KEYS_ONLY = [
    "AuthenticationMethods publickey",
    "PubkeyAuthentication yes",
    "PasswordAuthentication no",
    "PermitEmptyPasswords no",
    "KbdInteractiveAuthentication no",
    "PermitUserEnvironment no",
    "X11Forwarding no",
    "MaxStartups 100:30:200",
    "MaxSessions 100",
]


def _setenv(env: dict[str, str]) -> list[str]:
    """A command over ssh (horovodrun's, mpirun's) gets no login shell: give it our variables."""
    pairs = [f'"{k}={v}"' for k, v in env.items()]
    return ["SetEnv " + " ".join(pairs)] if pairs else []


def sshd_settings(
    port: int,
    host_keys: list[Path],
    authorized_keys: Path = AUTHORIZED_KEYS,
    *,
    user: str = "root",
    forwarding: bool = False,
    pam: bool | None = False,
    session_env: dict[str, str] | None = None,
    log_level: str = "ERROR",
) -> list[str]:
    """sshd settings for every sshd the image runs: public keys only, from one authorized_keys
    file; no passwords; room for mpirun's many sessions. forwarding: TCP and agent forwarding
    and sftp (development mode: VS Code, TensorBoard tunnels). pam None: the distribution's
    choice. session_env: variables every session gets (SetEnv)."""
    lines = [
        f"Port {port}",
        *[f"HostKey {k}" for k in host_keys],
        f"AuthorizedKeysFile {authorized_keys}",
        *_KEYS_ONLY,
        f"PermitRootLogin {'prohibit-password' if user == 'root' else 'no'}",
        f"AllowUsers {user}",
        # Said outright: only the engines' drop-in (engine_sshd_settings) turns it off.
        "StrictModes yes",
        f"AllowTcpForwarding {'yes' if forwarding else 'no'}",
        f"AllowAgentForwarding {'yes' if forwarding else 'no'}",
        f"LogLevel {log_level}",
    ]
    if forwarding:
        lines += ["Subsystem sftp internal-sftp", "ClientAliveInterval 60", "PrintMotd no"]
    if pam is not None:
        lines.append(f"UsePAM {'yes' if pam else 'no'}")
    return lines + _setenv(session_env or {})


def session_env(env: dict[str, str]) -> dict[str, str]:
    """What SSH sessions inherit from the container's environment; never secrets or AWS keys."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k in C.SESSION_ENV_NAMES or k.startswith(C.SESSION_ENV_PREFIXES))
        and "\n" not in v
        and '"' not in v
    }


def engine_sshd_settings(env: dict[str, str]) -> list[str]:
    """sshd as Kubernetes engines start it (`/usr/sbin/sshd -De`, as root or as uid 1000 with
    `-p 2222`), with the distribution's sshd_config and this drop-in:
    - the host key is the job's own key pair that the engine mounts in ~/.ssh (the image has
      none, and the engines make no host keys), so clients can check it (engine_client_text);
    - StrictModes off: a Secret volume is a world-writable directory (kubernetes#61049), which
      StrictModes refuses whatever the files' modes; the files are the engine's, read-only;
    - public keys only, and the image's environment for commands over ssh (mpirun's orted,
      horovodrun's task services), which get no login shell."""
    return [
        f"HostKey {ENGINE_KEY}",
        "StrictModes no",
        *_KEYS_ONLY,
        "AllowAgentForwarding no",
        "AllowTcpForwarding no",
        # In the foreground as the pod's process: no pid file (a non-root sshd cannot write one).
        "PidFile none",
        *_setenv(session_env(env)),
    ]


def engine_client_text() -> str:
    """ssh where an engine mounted the job's key pair read-only in ~/.ssh: every worker's host
    key is that key (engine_sshd_settings), so a host is known when it proves it holds it:
    checked strictly, nothing written to the read-only ~/.ssh, no StrictHostKeyChecking=no."""
    home_key = ENGINE_KEY.replace("~", "%d") + ".pub"
    # Only under an engine's mount: a Secret volume (read-only) whose authorized_keys is the
    # job key itself, as all three engines write it; a person's own ~/.ssh keeps ssh's usual
    # questions, mounted read-only or not.
    keys = home_key.replace("id_rsa.pub", "authorized_keys")
    return "\n".join(
        [
            f'Match exec "test -r {home_key} -a ! -w %d/.ssh && cmp -s {home_key} {keys}"',
            f"    KnownHostsCommand /usr/bin/awk -v h=%H '{{print h, $1, $2}}' {home_key}",
            "    StrictHostKeyChecking yes",
            "    BatchMode yes",
            "    ConnectTimeout 10",
            "    ServerAliveInterval 15",
            "",
        ]
    )


def write_engine_config(env: dict[str, str] | None = None) -> None:
    """At build time (Dockerfile): the drop-ins for engine-started sshd and ssh. No keys."""
    text = "\n".join(engine_sshd_settings(dict(os.environ if env is None else env))) + "\n"
    write_file(ENGINE_SSHD_DROPIN, text, 0o644)
    write_file(ENGINE_CLIENT_DROPIN, engine_client_text(), 0o644)


def client_config_text(
    patterns: list[str],
    port: int,
    identity: str | Path,
    known_hosts: str | Path,
    strict: str = "yes",
) -> str:
    """ssh to the given hosts (ours, horovodrun's, mpirun's, a platform driver's) uses that
    identity and port, checks host keys against known_hosts (strict: yes, or accept-new where
    they cannot be known in advance), never asks."""
    return "\n".join(
        [
            f"Host {' '.join(patterns)}",
            f"    Port {port}",
            f"    IdentityFile {identity}",
            "    IdentitiesOnly yes",
            "    BatchMode yes",
            f"    StrictHostKeyChecking {strict}",
            f"    UserKnownHostsFile {known_hosts}",
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
    write_file(AUTHORIZED_KEYS, authorized_keys_text(keys, addresses), 0o600)
    write_file(KNOWN_HOSTS, known_hosts_text(members, me), 0o644)
    patterns = sorted({m.host for m in members} | {a for m in members for a in m.addresses})
    write_file(CLIENT_DROPIN, client_config_text(patterns, port, identity, KNOWN_HOSTS), 0o644)


def write_sshd_config(port: int, host_keys: list[Path], path: Path = SSHD_CONFIG) -> Path:
    """A complete sshd configuration for `train`'s own sshd (started with -f)."""
    lines = [*sshd_settings(port, host_keys), "PidFile none"]
    write_file(path, "\n".join(lines) + "\n", 0o600)
    return path


def write_sshd_dropin(port: int, host_keys: list[Path], path: Path = SSHD_DROPIN) -> Path:
    """The same settings for the distribution's own sshd_config, which includes this first
    (first value wins in sshd). PAM stays as the distribution has it: the SageMaker SDK's MPI
    driver hands the job's environment to remote ranks through /etc/environment, which only
    pam_env reads."""
    write_file(path, "\n".join(sshd_settings(port, host_keys, pam=None)) + "\n", 0o644)
    # Not an engine's pod: the engines' settings (see ENGINE_SSHD_DROPIN) must not mix in.
    ENGINE_SSHD_DROPIN.unlink(missing_ok=True)
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
def wait_for_login(host: str, timeout: float) -> float:
    """Retry `ssh host true` until it works; the seconds it took. Error names the host."""
    start = time.monotonic()
    deadline = Deadline(timeout, "the wait for a worker's sshd")
    last = ""
    while not deadline.expired():
        try:
            result = subprocess.run(
                ["ssh", "-o", "ConnectTimeout=5", "--", host, "true"],
                capture_output=True,
                text=True,
                check=False,
                timeout=max(5.0, min(30.0, deadline.left())),
            )
        except subprocess.TimeoutExpired:
            last = "ssh did not finish (a peer that accepts and stalls?)"
        else:
            if result.returncode == 0:
                return time.monotonic() - start
            last = result.stderr.strip() or f"exit {result.returncode}"
        time.sleep(1)
    raise SSHError(f"worker {host} never accepted an SSH login within {timeout:.0f} s ({last})")
