"""The getting-started notebook (docker/notebooks/, in the image at C.NOTEBOOK_SOURCE): copied
into the notebook root at start where no file of its name is, never over one, so a user's
edits (or a file of their own by that name) stay."""

from __future__ import annotations

import os
from pathlib import Path

from byoc import constants as C
from byoc.dev.settings import DevConfig


def install(cfg: DevConfig, source: Path = Path(C.NOTEBOOK_SOURCE)) -> tuple[Path | None, str]:
    """(the notebook to open at start, or None; a warning, or ""). Copies it if absent."""
    dest = cfg.notebook_dir / source.name
    if not cfg.notebook or not source.is_file():
        return None, ""
    data = source.read_bytes()
    try:
        # O_EXCL: created here or not at all, never over anything of that name, a link (even a
        # dangling one) included; O_NOFOLLOW: never written through a link.
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:  # the user's copy, or their own file: open it, never replace it
        return (dest if dest.is_file() else None), ""
    except OSError as exc:
        return None, f"the getting-started notebook was not copied to {dest}: {exc.strerror}"
    try:
        with os.fdopen(fd, "wb") as f:
            if not cfg.root:
                os.fchown(f.fileno(), cfg.uid, cfg.gid)
            f.write(data)
    except OSError as exc:
        dest.unlink(missing_ok=True)  # ours, half written: no broken notebook left behind
        return None, f"the getting-started notebook was not copied to {dest}: {exc.strerror}"
    return dest, ""
