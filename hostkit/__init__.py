"""The host-side tools, one package (docs/layout.md): what runs on your machine, not in the image.

Run them from the repository root as modules, through make (`make local-train`, `make bench`,
`make test-horovod`, `make push` ...) or directly: `python3 -m hostkit.local_train --help`.
Every tool ends on HostError with "<tool>: error: <message>" and the error's exit code, and talks
through a Teller: one line per message on stderr, prefixed with the tool's name. Docker is called
through hostkit.docker only ($DOCKER may be two words), and the Dockerfile's pins are read through
hostkit.dockerfile only.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable

# The one statement of the host tools' Python floor: the dev venv's python3 (make makes the venv
# only where it holds), or the python3 that runs a tool directly.
MIN_PYTHON = (3, 10)
if sys.version_info < MIN_PYTHON:
    sys.exit(
        f"hostkit: needs Python {'.'.join(map(str, MIN_PYTHON))} or newer, and "
        f"{sys.executable} is {platform.python_version()}: put a newer python3 first on PATH"
    )


class HostError(Exception):
    """Ends a host tool with this message and exit code: 2 bad input (the default), 1 a step that
    failed (Docker or AWS refused), 126/127 a command that cannot run, as a shell says it."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


class Teller:
    """say("...") prints "<tool>: ..." on stderr at once (progress, decisions, errors)."""

    def __init__(self, tool: str):
        self.tool = tool

    def __call__(self, message: str) -> None:
        print(f"{self.tool}: {message}", file=sys.stderr, flush=True)


def run(tool: str, main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """main(argv)'s exit status; a HostError prints "<tool>: error: ..." and ends with its code,
    an interrupt with 130."""
    say = Teller(tool)
    try:
        return main(argv)
    except HostError as exc:
        say(f"error: {exc}")
        return exc.code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
