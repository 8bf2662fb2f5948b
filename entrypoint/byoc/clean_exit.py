"""`python -m byoc.clean_exit SCRIPT [ARGS...]` (or `-m MODULE [ARGS...]`): run a Python program
as `python SCRIPT ARGS...` would, then end it with its own exit status without the interpreter's
teardown.

Why: a torch.distributed program that built a DistributedDataParallel keeps its process group's
worker threads (Gloo's, NCCL's watchdog) alive past destroy_process_group(). When such a thread
drops the last reference to a finished collective's tensor while the interpreter is being torn
down, it takes the GIL, Python (up to 3.13) ends the thread, and the process dies after the
script returned (SIGABRT, "terminate called without an active exception", or SIGSEGV): torchrun
reports the rank as failed and the other hosts' agents wait out their 300 s exit barrier
(pytorch/pytorch#190489). The torchrun launcher (byoc.plan) runs every Python program through
this module; BYOC_CLEAN_EXIT=off runs it bare.

What still happens, in the order the interpreter does it: threading's exit hooks run and
non-daemon threads are joined, the atexit handlers run (logging's flush, TensorBoard and W&B
writers, multiprocessing's children, tempfile's clean-up), stdout and stderr are flushed. What
does not: the teardown of modules and objects after that (C-level Py_AtExit hooks, __del__ of
objects still alive at exit).

The exit status is the program's: 0 when it returned, SystemExit's code when it raised one
(a non-integer code is printed to stderr and gives 1, as in Python), 1 after printing the
traceback of any other exception. KeyboardInterrupt takes Python's own path.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import importlib.machinery
import io
import os
import runpy
import sys
import threading
import types
from typing import NoReturn

from byoc import stacks

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


def _run_script(path: str) -> None:
    """Execute the script at path as `python path` does: in a module named __main__ that stays
    in sys.modules afterwards (atexit handlers and threads can still pickle its classes), with
    an absolute __file__, its own directory first on sys.path."""
    path = os.path.abspath(path)
    with io.open_code(path) as f:  # bytes: compile() honours the file's encoding declaration
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=path,
        __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
    )
    sys.modules["__main__"] = main
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    exec(code, main.__dict__)


def run(argv: list[str]) -> int:
    """Run the program argv names in this interpreter; its exit status."""
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]  # argv[0] becomes the module's file, as with -m
            runpy._run_module_as_main(argv[1], alter_argv=True)  # what `python -m` calls
        else:
            sys.argv = list(argv)
            _run_script(argv[0])
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
    # As Py_FinalizeEx: threading's own exit hooks (they wake idle ThreadPoolExecutor workers,
    # inductor's compile pool among them), then every non-daemon thread joined.
    threading._shutdown()
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
    stacks.arm()  # a stalled rank can say where it is (byoc.stall)
    finish(run(argv))


if __name__ == "__main__":
    main()
