"""`byoc-init`, the image's ENTRYPOINT: decide what to run, then supervise it as PID 1.

docker run IMAGE                 -> the image's CMD, `dev`: JupyterLab and sshd (byoc.dev); in a
                                    training job (resourceconfig.json present): `train`
docker run IMAGE train           -> the SageMaker training contract (byoc.train)
docker run IMAGE doctor [--json] -> checks of this container, each with its fix (byoc.doctor)
docker run IMAGE <command ...>   -> that command, run as is; in a training job, after what a
                                    platform driver needs (byoc.launch.sdk)
`bash -c CMD` as the container's command (SageMaker SDK v3, Kubernetes `command:`) comes back
here through the image's BASH_ENV hook (docker/bash-env.sh).
"""

from __future__ import annotations

import os
import sys

from byoc import config, cuda_compat, fabric, supervisor
from byoc import constants as C
from byoc.launch import sdk

TRAIN = [sys.executable, "-m", "byoc.train"]
DOCTOR = [sys.executable, "-m", "byoc.doctor"]


def in_training_job(env: dict[str, str]) -> bool:
    return (config.ml_root(env) / C.RESOURCE_CONFIG).is_file()


def command_for(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The command line to supervise for the container's arguments."""
    env = os.environ if env is None else env
    if not argv or argv == [C.DEV_COMMAND]:
        if in_training_job(env):
            # SDK v3's local mode sends no command (v2 sent `train`): a job must not open Jupyter.
            print("byoc-init: in a training job (resourceconfig.json) with no command: train")
            return list(TRAIN)
        return [sys.executable, "-m", "byoc.dev"]
    if argv[0] == "doctor":
        return [*DOCTOR, *argv[1:]]
    if argv == ["train"]:
        # A child, not in-process: PID 1 stays a plain supervisor whatever the launcher does.
        return list(TRAIN)
    return list(argv)


def prepare(prog: str, quiet: bool = False) -> int:
    """The start-time decisions, made in os.environ before anything starts (the command, and
    all it starts, inherit them): CUDA forward compatibility, then the network NCCL uses.
    0, or 2 with the message printed; quiet: only errors are printed."""
    # The BASH_ENV hook checks this, so bash under us never starts a second byoc-init.
    os.environ[C.INIT_MARKER_ENV] = "1"
    try:
        why = cuda_compat.decide(os.environ)
    except cuda_compat.CompatError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    lines = [why] if why else []
    if os.environ.get("BYOC_FLAVOR") != "cpu":  # the cpu flavor has no NCCL to steer
        try:
            lines += fabric.apply(os.environ)
        except fabric.FabricError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
    if not quiet:
        for line in lines:
            print(f"{prog}: {line}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    failed = prepare("byoc-init")
    if failed:
        return failed
    command = command_for(args)
    session = None
    if command[:3] not in (TRAIN, DOCTOR) and args and args != [C.DEV_COMMAND]:
        session = sdk.prepare(command, dict(os.environ))
        if isinstance(session, tuple):
            print(f"byoc-init: {session[1]}", file=sys.stderr, flush=True)
            return session[0]
    code = supervisor.run(command, watch=session.watch if session else None)
    if session and session.finish:
        session.finish(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
