"""`byoc-exec CMD [ARGS...]`: byoc-init's start-time decisions, then CMD in their place.

For launchers that start a command in the image without its ENTRYPOINT: pyxis/enroot under
`srun --container-image=...` (its default), `srun` on a node that runs the image, a Kubernetes
`command:`. The decisions are byoc-init's (CUDA forward compatibility, the EFA/NCCL network:
byoc.init.prepare), made in the environment CMD inherits; then CMD replaces this process, so
the launcher's signals (scancel's SIGTERM, then SIGKILL) and exit status are CMD's own, with no
supervisor between. Only the node's first task prints the decisions (SLURM_LOCALID,
OMPI_COMM_WORLD_LOCAL_RANK or LOCAL_RANK 0, or none set); errors are printed by every task.
Exit 2 on a setting it cannot act on, 127 when CMD cannot be run.
"""

from __future__ import annotations

import os
import sys

from byoc import init

PROG = "byoc-exec"
LOCAL_RANK_VARS = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK")


def first_on_node(env: dict[str, str]) -> bool:
    for name in LOCAL_RANK_VARS:
        if name in env:
            return env[name].strip() == "0"
    return True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: {PROG} COMMAND [ARGS...]\n{__doc__.splitlines()[0]}", file=sys.stderr)
        return 0 if args else 2
    failed = init.prepare(PROG, quiet=not first_on_node(dict(os.environ)))
    if failed:
        return failed
    sys.stderr.flush()
    try:
        os.execvp(args[0], args)
    except OSError as exc:
        print(f"{PROG}: cannot run {args[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
