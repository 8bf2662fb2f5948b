"""Every variable development mode reads, read and validated here once: DevConfig or DevError."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C
from byoc import settings as byoc_settings

_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_PEER_RE = re.compile(r"^[A-Za-z0-9.*?_-]+$")
_MAX_ID = 2**31 - 2  # the largest uid/gid useradd takes (2**31 - 1 is "no id")


class DevError(byoc_settings.SettingsError):
    """Bad development-mode input: the message names the variable (or file) and how to fix it."""


@dataclass(frozen=True)
class DevConfig:
    jupyter: bool
    jupyter_port: int
    token: str
    token_generated: bool
    notebook_dir: Path
    sshd: bool
    ssh_port: int
    tensorboard: bool
    tensorboard_port: int
    notebook: bool  # copy the getting-started notebook into notebook_dir where absent
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

    @property
    def tensorboard_logdir(self) -> Path:
        return self.notebook_dir / C.TENSORBOARD_LOGDIR


def load(env: dict[str, str]) -> DevConfig:
    """The development-mode settings from the environment; DevError says what is wrong."""
    try:
        return _load(env)
    except DevError:
        raise
    except byoc_settings.SettingsError as exc:
        raise DevError(str(exc)) from None


def _load(env: dict[str, str]) -> DevConfig:
    jupyter = byoc_settings.flag(env, C.JUPYTER_ENABLED_ENV, True)
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
        uid = byoc_settings.integer(env, C.DEV_UID_ENV, C.DEFAULT_DEV_UID, 1, _MAX_ID)
        gid = byoc_settings.integer(env, C.DEV_GID_ENV, uid, 1, _MAX_ID)
    jupyter_port = byoc_settings.port(env, C.JUPYTER_PORT_ENV, C.DEFAULT_JUPYTER_PORT)
    ssh_port = byoc_settings.port(env, C.DEV_SSH_PORT_ENV, C.DEFAULT_DEV_SSH_PORT)
    sshd = byoc_settings.flag(env, C.SSHD_ENABLED_ENV, True)
    # TensorBoard has no login: it comes with Jupyter (whose port one publishes) unless asked.
    tensorboard = byoc_settings.flag(env, C.TENSORBOARD_ENABLED_ENV, jupyter)
    tensorboard_port = byoc_settings.port(env, C.TENSORBOARD_PORT_ENV, C.DEFAULT_TENSORBOARD_PORT)
    taken: dict[int, str] = {}
    for name, number, on in (
        (C.JUPYTER_PORT_ENV, jupyter_port, jupyter),
        (C.DEV_SSH_PORT_ENV, ssh_port, sshd),
        (C.TENSORBOARD_PORT_ENV, tensorboard_port, tensorboard),
    ):
        if on and (other := taken.setdefault(number, name)) != name:
            raise DevError(f"{other} and {name} are both {number}")
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
        tensorboard=tensorboard,
        tensorboard_port=tensorboard_port,
        notebook=byoc_settings.flag(env, C.NOTEBOOK_ENABLED_ENV, True),
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
