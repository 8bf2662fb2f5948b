"""`python -m byoc.clean_exit SCRIPT [ARGS...]` (or `-m MODULE [ARGS...]`): run a Python program
as `python SCRIPT ARGS...` would, then end it with its own exit status without the interpreter's
teardown.

Why: a torch.distributed program that built a DistributedDataParallel keeps its process group's
worker threads (Gloo's, NCCL's watchdog) alive past destroy_process_group(). When such a thread
drops the last reference to a finished collective's tensor while the interpreter is being torn
down, it takes the GIL, Python (up to 3.13) ends the thread, and the C++ unwind through a noexcept
destructor aborts the process ("terminate called without an active exception", SIGABRT) after the
script returned: torchrun reports the rank as failed and the other hosts' agents wait out their
300 s exit barrier (pytorch/pytorch#190489). The torchrun launcher (byoc.plan) runs every
Python program through this module; BYOC_CLEAN_EXIT=off runs it bare.

What still happens, in the order the interpreter does it: non-daemon threads are joined, the
atexit handlers run (logging's flush, TensorBoard and W&B writers, multiprocessing's children,
tempfile's clean-up), stdout and stderr are flushed. What does not: the teardown of modules and
objects after that (C-level Py_AtExit hooks, __del__ of objects still alive at exit).

The exit status is the program's: 0 when it returned, SystemExit's code when it raised one
(a non-integer code is printed to stderr and gives 1, as in Python), 1 after printing the
traceback of any other exception. KeyboardInterrupt takes Python's own path.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import sys
import threading
from typing import NoReturn

USAGE = "usage: python -m byoc.clean_exit SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def _status(code: object) -> int:
    """The exit status Python gives `raise SystemExit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def run(argv: list[str]) -> int:
    """Run the program argv names in this interpreter; its exit status."""
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]  # run_module sets argv[0] to the module's file, as -m does
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            # As `python SCRIPT` does: the script's own directory first on the path.
            sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        return _status(exc.code)
    except KeyboardInterrupt:
        raise
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def finish(status: int) -> NoReturn:
    """What the interpreter does at exit that a program's result depends on, then leave."""
    main = threading.main_thread()
    while others := [t for t in threading.enumerate() if t is not main and not t.daemon]:
        for thread in others:
            thread.join()
    atexit._run_exitfuncs()  # prints, and goes past, a handler's exception as exit does
    for stream in (sys.stdout, sys.stderr):
        # A closed stream or a reader gone must not change a known result.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(status)


def main() -> NoReturn:
    argv = sys.argv[1:]
    if not argv or (argv[0] == "-m" and len(argv) < 2) or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        sys.exit(0 if argv[:1] in (["-h"], ["--help"]) else 2)
    finish(run(argv))


if __name__ == "__main__":
    main()
