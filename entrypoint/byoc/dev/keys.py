"""The keys development mode trusts: who may log in (authorized keys), and the peers' key."""

from __future__ import annotations

import os
import re
from pathlib import Path

from byoc import constants as C
from byoc import ssh
from byoc.dev.settings import DevConfig, DevError

_KEY_TYPE_RE = re.compile(r"(^|\s)(ssh-(ed25519|rsa|dss)|ecdsa-sha2-\S+|sk-\S+@openssh\.com)\s+\S")
PEER_KEY = "~/.ssh/byoc_peer_key"  # where ssh to the peers takes its identity
PEER_KNOWN_HOSTS = "~/.ssh/known_hosts_byoc_peers"


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


def install_peer_key(cfg: DevConfig, home: Path) -> Path:
    """Copy the cluster's private key where ssh takes it (0600, the user's own); its path.
    DevError when it cannot be read or is not an unencrypted private key."""
    assert cfg.peer_key_file is not None
    try:
        text = cfg.peer_key_file.read_text()
    except OSError as exc:
        raise DevError(
            f"{C.SSH_PEER_KEY_FILE_ENV}={cfg.peer_key_file} cannot be read: {exc}"
        ) from None
    dest = home / PEER_KEY.removeprefix("~/")
    dest.parent.mkdir(mode=0o700, exist_ok=True)
    os.chown(dest.parent, cfg.uid, cfg.gid)
    ssh.write_file(dest, text.strip() + "\n", 0o600, (cfg.uid, cfg.gid))
    try:
        ssh.public_half(dest)  # ssh-keygen -y: fails on a public key, junk or a passphrase
    except ssh.SSHError as exc:
        raise DevError(f"{C.SSH_PEER_KEY_FILE_ENV}={cfg.peer_key_file}: {exc}") from None
    return dest
