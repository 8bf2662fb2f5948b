"""`byoc-init`, the image's ENTRYPOINT: decide what to run, then supervise it as PID 1.

docker run IMAGE                 -> the image's CMD, `dev`: JupyterLab and sshd (byoc.dev)
docker run IMAGE <command ...>   -> that command, run as is
"""

from __future__ import annotations

import os
import sys

from byoc import constants as C
from byoc import cuda_compat, supervisor


def command_for(argv: list[str]) -> list[str]:
    """The command line to supervise for the container's arguments."""
    if not argv or argv == [C.DEV_COMMAND]:
        return [sys.executable, "-m", "byoc.dev"]
    if argv == ["train"]:
        # A child, not in-process: PID 1 stays a plain supervisor whatever the launcher does.
        return [sys.executable, "-m", "byoc.train"]
    return list(argv)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        # Before anything starts: the command, and all it starts, inherit the environment.
        why = cuda_compat.decide(os.environ)
    except cuda_compat.CompatError as e:
        print(f"byoc-init: {e}", file=sys.stderr)
        return 2
    if why:
        print(f"byoc-init: {why}", file=sys.stderr)
    return supervisor.run(command_for(args))


if __name__ == "__main__":
    sys.exit(main())
