"""Development mode, the image's CMD: JupyterLab and sshd, run and stopped together.

`docker run -p 8888:8888 -p 2222:22 IMAGE` lands here (README.md, "Development container").
Jupyter always has a token (given, or made here and printed with the URL); sshd takes public keys
only, from SSH_AUTHORIZED_KEYS and a mounted file, with host keys made at the container's first
start. Both may run as a user chosen at run time instead of root. PID 1 (byoc-init) forwards
SIGTERM here and to both services; this module stops whatever is left after DEV_STOP_GRACE.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C
from byoc import ssh

_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_PEER_RE = re.compile(r"^[A-Za-z0-9.*?_-]+$")
_KEY_TYPE_RE = re.compile(r"(^|\s)(ssh-(ed25519|rsa|dss)|ecdsa-sha2-\S+|sk-\S+@openssh\.com)\s+\S")


class DevError(Exception):
    """Bad development-mode settings: the message names the variable and how to fix it."""


@dataclass(frozen=True)
class DevConfig:
    jupyter: bool
    jupyter_port: int
    token: str
    token_generated: bool
    notebook_dir: Path
    sshd: bool
    ssh_port: int
    user: str
    uid: int
    gid: int
    authorized_keys: str  # SSH_AUTHORIZED_KEYS as given
    authorized_keys_file: Path
    peers: tuple[str, ...]
    peer_key_file: Path | None

    @property
    def root(self) -> bool:
        return self.user == "root"


def _flag(env: dict[str, str], name: str) -> bool:
    value = env.get(name, "1").strip().lower()
    if value in ("1", "true", "yes", "on", ""):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise DevError(f"{name}={env[name]!r}: use 1 or 0")


def _int(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise DevError(f"{name}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise DevError(f"{name}={value} is out of range ({low}-{high})")
    return value


def load(env: dict[str, str]) -> DevConfig:
    """The development-mode settings from the environment; DevError says what is wrong."""
    jupyter = _flag(env, C.JUPYTER_ENABLED_ENV)
    token = env.get(C.JUPYTER_TOKEN_ENV)
    if jupyter and token is not None and not token.strip():
        raise DevError(
            f"{C.JUPYTER_TOKEN_ENV} is set but empty: Jupyter without a token is refused "
            f"(anyone who reaches the port could run code). Unset it to get a generated token, "
            f"give one, or set {C.JUPYTER_ENABLED_ENV}=0 for no Jupyter."
        )
    generated = token is None
    if generated:
        token = secrets.token_hex(24)
    user = env.get(C.DEV_USER_ENV, "").strip() or "root"
    if user != "root" and not _USER_RE.match(user):
        raise DevError(
            f"{C.DEV_USER_ENV}={user!r} is not a valid user name "
            "(lower-case letters, digits, _ and -, starting with a letter or _)"
        )
    if user == "root":
        uid = gid = 0
    else:
        uid = _int(env, C.DEV_UID_ENV, C.DEFAULT_DEV_UID, 1, 2**31 - 2)
        gid = _int(env, C.DEV_GID_ENV, uid, 1, 2**31 - 2)
    jupyter_port = _int(env, C.JUPYTER_PORT_ENV, C.DEFAULT_JUPYTER_PORT, 1, 65535)
    ssh_port = _int(env, C.DEV_SSH_PORT_ENV, C.DEFAULT_DEV_SSH_PORT, 1, 65535)
    sshd = _flag(env, C.SSHD_ENABLED_ENV)
    if jupyter and sshd and jupyter_port == ssh_port:
        raise DevError(f"{C.JUPYTER_PORT_ENV} and {C.DEV_SSH_PORT_ENV} are both {ssh_port}")
    peers = tuple(p for p in re.split(r"[\s,]+", env.get(C.SSH_PEERS_ENV, "")) if p)
    for p in peers:
        if not _PEER_RE.match(p):
            raise DevError(f"{C.SSH_PEERS_ENV}: {p!r} is not a host name or pattern")
    peer_key = env.get(C.SSH_PEER_KEY_FILE_ENV, "").strip()
    return DevConfig(
        jupyter=jupyter,
        jupyter_port=jupyter_port,
        token=token,
        token_generated=generated,
        notebook_dir=Path(env.get(C.NOTEBOOK_DIR_ENV, "").strip() or C.DEFAULT_NOTEBOOK_DIR),
        sshd=sshd,
        ssh_port=ssh_port,
        user=user,
        uid=uid,
        gid=gid,
        authorized_keys=env.get(C.AUTHORIZED_KEYS_ENV, ""),
        authorized_keys_file=Path(
            env.get(C.AUTHORIZED_KEYS_FILE_ENV, "").strip() or C.DEFAULT_AUTHORIZED_KEYS_FILE
        ),
        peers=peers,
        peer_key_file=Path(peer_key) if peer_key else None,
    )


def parse_keys(text: str, source: str) -> list[str]:
    """The public-key lines of an authorized_keys text; DevError names a line that is not one."""
    keys = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "PRIVATE KEY" in line:
            raise DevError(
                f"{source} holds a private key: give the public half (the .pub file) instead"
            )
        if not _KEY_TYPE_RE.search(line):
            raise DevError(
                f"{source}, line {number}: not an SSH public key "
                f"(expected e.g. 'ssh-ed25519 AAAA... comment'): {line[:40]!r}"
            )
        keys.append(line)
    return keys


def collect_keys(cfg: DevConfig, home: Path) -> list[str]:
    """Keys from SSH_AUTHORIZED_KEYS, the mounted file and ~/.ssh/authorized_keys, each once."""
    keys = parse_keys(cfg.authorized_keys, C.AUTHORIZED_KEYS_ENV)
    explicit_file = cfg.authorized_keys_file != Path(C.DEFAULT_AUTHORIZED_KEYS_FILE)
    for path in (cfg.authorized_keys_file, home / ".ssh" / "authorized_keys"):
        if path.is_dir():
            raise DevError(f"{path} is a directory; mount the authorized_keys file itself")
        try:
            text = path.read_text()
        except FileNotFoundError:
            if explicit_file and path == cfg.authorized_keys_file:
                raise DevError(
                    f"{C.AUTHORIZED_KEYS_FILE_ENV}={path} does not exist (is it mounted?)"
                ) from None
            continue
        except OSError as exc:
            raise DevError(f"{path} cannot be read: {exc}") from None
        keys += parse_keys(text, str(path))
    return list(dict.fromkeys(keys))


def session_env(env: dict[str, str]) -> dict[str, str]:
    """What SSH sessions inherit from the container's environment; never secrets or AWS keys."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k in C.SESSION_ENV_NAMES or k.startswith(C.SESSION_ENV_PREFIXES))
        and "\n" not in v
        and '"' not in v
    }


def sshd_config_text(
    cfg: DevConfig, host_keys: list[Path], authorized_keys: Path, env: dict[str, str]
) -> str:
    lines = [
        f"Port {cfg.ssh_port}",
        *[f"HostKey {k}" for k in host_keys],
        f"AuthorizedKeysFile {authorized_keys}",
        # Keys only: no password, no keyboard-interactive, no empty passwords, no PAM.
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "PermitEmptyPasswords no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        f"PermitRootLogin {'prohibit-password' if cfg.root else 'no'}",
        f"AllowUsers {cfg.user}",
        "PermitUserEnvironment no",
        # VS Code Remote-SSH and port forwards of TensorBoard need TCP forwarding and sftp.
        "AllowTcpForwarding yes",
        "AllowAgentForwarding yes",
        "X11Forwarding no",
        "Subsystem sftp internal-sftp",
        "ClientAliveInterval 60",
        "PrintMotd no",
        "PidFile none",
        "LogLevel INFO",
        # horovodrun and mpirun open many sessions at once.
        "MaxStartups 100:30:200",
        "MaxSessions 100",
    ]
    pairs = [f'"{k}={v}"' for k, v in session_env(env).items()]
    if pairs:
        # A command over ssh (horovodrun's, mpirun's) gets no login shell: give it our PATH.
        lines.append("SetEnv " + " ".join(pairs))
    return "\n".join(lines) + "\n"


def profile_text(env: dict[str, str]) -> str:
    """/etc/profile.d snippet: login shells (Debian's /etc/profile resets PATH) get ours back."""
    body = "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in session_env(env).items() if k.isidentifier()
    )
    return (
        "# Written by byoc-dev at container start: the image's environment for SSH logins.\n" + body
    )


def peers_config_text(cfg: DevConfig) -> str:
    """ssh client settings for the other nodes of a local cluster: their key, no prompts."""
    return (
        f"Host {' '.join(cfg.peers)}\n"
        f"    Port {cfg.ssh_port}\n"
        "    IdentityFile ~/.ssh/byoc_peer_key\n"
        "    IdentitiesOnly yes\n"
        "    BatchMode yes\n"
        # Each cluster-up makes new containers with new host keys: trust on first use.
        "    StrictHostKeyChecking accept-new\n"
        "    UserKnownHostsFile ~/.ssh/known_hosts_byoc_peers\n"
        "    ConnectTimeout 10\n"
        "    LogLevel ERROR\n"
    )


def _write(path: Path, text: str, mode: int, owner: tuple[int, int] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    if owner:
        os.chown(tmp, *owner)
    os.replace(tmp, path)


def ensure_user(cfg: DevConfig) -> Path:
    """The home of cfg.user, creating the user (and group) with the given ids if missing."""
    if cfg.root:
        return Path(pwd.getpwuid(0).pw_dir)
    try:
        entry = pwd.getpwnam(cfg.user)
    except KeyError:
        entry = None
    if entry is None:
        try:
            group = grp.getgrgid(cfg.gid).gr_name
        except KeyError:
            group = cfg.user
            ssh._run(["groupadd", "-o", "-g", str(cfg.gid), group])
        ssh._run(
            [
                "useradd",
                "-o",
                "-m",
                "-u",
                str(cfg.uid),
                "-g",
                str(cfg.gid),
                "-s",
                "/bin/bash",
                cfg.user,
            ]
        )
        # '*' rather than '!': no password works, yet sshd does not see a locked account.
        ssh._run(["usermod", "-p", "*", cfg.user])
        entry = pwd.getpwnam(cfg.user)
    elif (entry.pw_uid, entry.pw_gid) != (cfg.uid, cfg.gid):
        raise DevError(
            f"user {cfg.user} exists with uid {entry.pw_uid} gid {entry.pw_gid}, "
            f"not {cfg.uid}:{cfg.gid}; pick another {C.DEV_USER_ENV} or matching ids"
        )
    return Path(entry.pw_dir)


def prepare_notebook_dir(cfg: DevConfig) -> str | None:
    """Make the notebook root; a warning when the chosen user cannot write to it."""
    d = cfg.notebook_dir
    d.mkdir(parents=True, exist_ok=True)
    if cfg.root:
        return None
    st = d.stat()
    if st.st_uid != cfg.uid and not os.path.ismount(d) and not any(d.iterdir()):
        os.chown(d, cfg.uid, cfg.gid)  # the image's empty /workspace, not a user's volume
        return None
    writable = (
        st.st_uid == cfg.uid
        or (st.st_gid == cfg.gid and st.st_mode & 0o020)
        or (st.st_mode & 0o002)
    )
    if not writable:
        return (
            f"{d} belongs to uid {st.st_uid}, so {cfg.user} (uid {cfg.uid}) cannot write there: "
            f"run with -e {C.DEV_UID_ENV}={st.st_uid} (e.g. -e {C.DEV_UID_ENV}=$(id -u))"
        )
    return None


def install_peer_key(cfg: DevConfig, home: Path) -> None:
    """Copy the cluster's private key where ssh takes it (0600, the user's own)."""
    assert cfg.peer_key_file is not None
    try:
        text = cfg.peer_key_file.read_text()
    except OSError as exc:
        raise DevError(
            f"{C.SSH_PEER_KEY_FILE_ENV}={cfg.peer_key_file} cannot be read: {exc}"
        ) from None
    dest = home / ".ssh" / "byoc_peer_key"
    dest.parent.mkdir(mode=0o700, exist_ok=True)
    os.chown(dest.parent, cfg.uid, cfg.gid)
    _write(dest, text.strip() + "\n", 0o600, (cfg.uid, cfg.gid))
    try:
        ssh._run(["ssh-keygen", "-y", "-f", str(dest)])
    except ssh.SSHError as exc:
        raise DevError(
            f"{C.SSH_PEER_KEY_FILE_ENV}: not an unencrypted private key: {exc}"
        ) from None


def jupyter_command(cfg: DevConfig) -> list[str]:
    cmd = [
        os.path.join(os.path.dirname(sys.executable), "jupyter"),
        "lab",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={cfg.jupyter_port}",
        "--ServerApp.port_retries=0",  # a taken port is an error, not a silent other port
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={cfg.notebook_dir}",
    ]
    if cfg.root:
        cmd.append("--allow-root")
    return cmd


def _as_user(cfg: DevConfig, home: Path, env: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """Popen arguments and environment for a process of cfg.user."""
    child = dict(env, HOME=str(home), USER=cfg.user, LOGNAME=cfg.user, SHELL="/bin/bash")
    if cfg.root:
        return {}, child
    return {"user": cfg.uid, "group": cfg.gid, "extra_groups": []}, child


class Services:
    """The dev services: the first one to end, or SIGTERM, ends them all."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = False

    def start(self, name: str, cmd: list[str], **kw) -> None:
        self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, **kw)

    def _on_signal(self, signum: int, _frame) -> None:
        self.stopping = True

    def catch_signals(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, self._on_signal)

    def wait(self) -> int:
        ended: tuple[str, int] | None = None
        while not self.stopping and ended is None:
            for name, proc in self.procs.items():
                code = proc.poll()
                if code is not None:
                    ended = (name, 128 - code if code < 0 else code)
                    break
            else:
                time.sleep(0.2)
        others = [n for n in self.procs if ended is None or n != ended[0]]
        if ended:
            print(
                f"byoc-dev: {ended[0]} exited ({ended[1]}); "
                f"stopping {' '.join(others) or 'nothing else'}",
                file=sys.stderr,
                flush=True,
            )
        self.stop()
        return 0 if ended is None else ended[1]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + C.DEV_STOP_GRACE
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(
                    f"byoc-dev: {name} ignored SIGTERM for {C.DEV_STOP_GRACE:.0f} s: killing it",
                    file=sys.stderr,
                    flush=True,
                )
                proc.kill()
                proc.wait()


def _say(text: str) -> None:
    print(f"byoc-dev: {text}", flush=True)


def start(cfg: DevConfig, env: dict[str, str], services: Services) -> list[str]:
    """Set up and start the services; the warnings to show. DevError/SSHError on bad input."""
    warnings = []
    home = ensure_user(cfg)
    if cfg.peers and cfg.peer_key_file:
        install_peer_key(cfg, home)
        _write(Path(C.PEERS_CLIENT_CONFIG), peers_config_text(cfg), 0o644)
    if cfg.sshd:
        keys = collect_keys(cfg, home)
        if not keys:
            warnings.append(
                "sshd not started: no authorized keys. Pass "
                f'-e {C.AUTHORIZED_KEYS_ENV}="$(cat ~/.ssh/id_ed25519.pub)" or mount a file at '
                f"{C.DEFAULT_AUTHORIZED_KEYS_FILE} "
                f"(-v ~/.ssh/id_ed25519.pub:{C.DEFAULT_AUTHORIZED_KEYS_FILE}:ro)"
            )
        else:
            runtime = Path(C.DEV_RUNTIME_DIR)
            runtime.mkdir(parents=True, exist_ok=True, mode=0o755)
            authorized = runtime / "authorized_keys"
            # Root-owned copy: sshd's StrictModes refuses a mounted file owned by the host's uid.
            _write(authorized, "\n".join(keys) + "\n", 0o644)
            host_keys = ssh.generate_host_keys(Path(C.HOST_KEY_DIR))
            config = runtime / "sshd_config"
            _write(config, sshd_config_text(cfg, host_keys, authorized, env), 0o600)
            _write(Path(C.PROFILE_SNIPPET), profile_text(env), 0o644)
            services.procs["sshd"] = ssh.start_sshd(config)  # checks the config with sshd -t
            fingerprint = ssh._run(["ssh-keygen", "-l", "-f", str(host_keys[0]) + ".pub"]).split()
            _say(
                f"sshd on port {cfg.ssh_port}: {len(keys)} authorized key(s), login as {cfg.user}; "
                f"host key {fingerprint[1] if len(fingerprint) > 1 else '?'}"
            )
    if cfg.jupyter:
        warning = prepare_notebook_dir(cfg)
        if warning:
            warnings.append(warning)
        popen_kw, child_env = _as_user(cfg, home, env)
        # Through the environment, not argv: the token stays out of `ps`.
        child_env[C.JUPYTER_TOKEN_ENV] = cfg.token
        services.start(
            "jupyter", jupyter_command(cfg), env=child_env, cwd=str(cfg.notebook_dir), **popen_kw
        )
        query = f"?token={cfg.token}" if cfg.token_generated else ""
        origin = "generated for this start" if cfg.token_generated else C.JUPYTER_TOKEN_ENV
        port = cfg.jupyter_port
        _say(
            f"JupyterLab on port {port} as {cfg.user}, notebooks in {cfg.notebook_dir}:\n"
            f"    http://127.0.0.1:{port}/lab{query}\n"
            f"    http://{socket.gethostname()}:{port}/lab{query}\n"
            f"  (the host port is the one you published with -p; token: {origin})"
        )
    return warnings


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    services = Services()
    services.catch_signals()  # before anything starts: a stop during set-up still stops cleanly
    try:
        cfg = load(env)
        warnings = start(cfg, env, services)
    except (DevError, ssh.SSHError, OSError) as exc:
        services.stop()
        print(f"byoc-dev: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if services.stopping:
        services.stop()
        return 0
    for w in warnings:
        print(f"byoc-dev: warning: {w}", file=sys.stderr, flush=True)
    if not services.procs:
        print(
            "byoc-dev: nothing to run (no Jupyter, no sshd); give a command instead, e.g. "
            "`docker run -it IMAGE bash`",
            file=sys.stderr,
            flush=True,
        )
        return 2
    return services.wait()


if __name__ == "__main__":
    sys.exit(main())
