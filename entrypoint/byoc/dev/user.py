"""The account Jupyter and SSH logins run as (root, or BYOC_USER made at start) and its access
to the notebook directory."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

from byoc import constants as C
from byoc import procs
from byoc.dev.settings import DevConfig, DevError


def _run(cmd: list[str]) -> None:
    """groupadd/useradd/usermod: DevError with their own words when they fail."""
    try:
        procs.check_output(cmd)
    except procs.CommandFailed as exc:
        raise DevError(str(exc)) from None


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
            grp.getgrgid(cfg.gid)
        except KeyError:
            _run(["groupadd", "-o", "-g", str(cfg.gid), cfg.user])
        _run(
            ["useradd", "-o", "-m", "-u", str(cfg.uid), "-g", str(cfg.gid)]
            + ["-s", "/bin/bash", cfg.user]
        )
        # '*' rather than '!': no password works, yet sshd does not see a locked account.
        _run(["usermod", "-p", "*", cfg.user])
        entry = pwd.getpwnam(cfg.user)
    elif (entry.pw_uid, entry.pw_gid) != (cfg.uid, cfg.gid):
        raise DevError(
            f"user {cfg.user} exists with uid {entry.pw_uid} gid {entry.pw_gid}, "
            f"not {cfg.uid}:{cfg.gid}; pick another {C.DEV_USER_ENV} or matching ids"
        )
    return Path(entry.pw_dir)


def as_user(cfg: DevConfig, home: Path, env: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """Popen arguments and environment for a process of cfg.user."""
    child = dict(env, HOME=str(home), USER=cfg.user, LOGNAME=cfg.user, SHELL="/bin/bash")
    if cfg.root:
        return {}, child
    return {"user": cfg.uid, "group": cfg.gid, "extra_groups": []}, child


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
