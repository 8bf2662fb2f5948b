"""Run one command as a supervised child: forward signals to it, reap zombies, return its code.

This is what PID 1 of the image does (a container's PID 1 gets no default signal handling from
the kernel, and orphans of every process end up as its children). The child runs in a process
group of its own, so a forwarded signal reaches the whole tree it starts (mpirun, horovodrun and
their workers), and, on a terminal, that group owns the terminal so job control works.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

# Signals passed on to the child's process group. SIGCHLD is ours: it drives the reaping.
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)
_WAITED = set(FORWARDED) | {signal.SIGCHLD}
_PR_SET_CHILD_SUBREAPER = 36


def exit_code(status: int) -> int:
    """The shell's convention: the exit status, or 128 + the signal that killed the process."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _become_subreaper() -> None:
    # When we are not PID 1 (tests, `docker run --init`), orphans still come to us for reaping.
    if os.getpid() == 1 or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _exec_child(argv: list[str], env: dict[str, str] | None) -> None:
    """In the forked child: own process group, the terminal if there is one, then exec."""
    try:
        os.setpgid(0, 0)
        if os.isatty(0):
            # Taking the terminal's foreground from a background group raises SIGTTOU.
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            with contextlib.suppress(OSError):
                os.tcsetpgrp(0, os.getpgrp())
            signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        if env is None:
            os.execvp(argv[0], argv)
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        sys.stderr.write(f"byoc-init: {argv[0]}: command not found\n")
        os._exit(127)
    except PermissionError:
        sys.stderr.write(f"byoc-init: {argv[0]}: permission denied (not executable?)\n")
        os._exit(126)
    except OSError as exc:
        sys.stderr.write(f"byoc-init: cannot run {argv[0]}: {exc}\n")
        os._exit(126)


def _forward(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        # The group is gone or not yet made (the child has not reached setpgid): the child itself.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _reap(child: int) -> int | None:
    """Reap every exited child; the main child's exit code if it was among them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == child:
            code = exit_code(status)


STOP_GRACE = 10.0  # s between the SIGTERM and the SIGKILL of a stop()


def run(
    argv: list[str],
    env: dict[str, str] | None = None,
    watch: Callable[[int, Callable[[int], None]], None] | None = None,
) -> int:
    """Run argv until it exits; return its exit code (128 + N when killed by signal N).

    watch, if given, runs beside it in a thread as watch(pid, stop): stop(code) ends the child's
    group (SIGTERM, SIGKILL after STOP_GRACE s) and makes code the exit code."""
    if not argv:
        raise ValueError("run() needs a command")
    _become_subreaper()
    # Block before fork: no signal can slip in between fork and the wait loop.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _exec_child(argv, env)
    # Also from the parent, so a signal that comes at once already finds the group.
    with contextlib.suppress(OSError):
        os.setpgid(child, child)
    verdict: list[int] = []

    def stop(code: int) -> None:
        verdict.append(code)
        _forward(child, signal.SIGTERM)
        killer = threading.Timer(STOP_GRACE, _forward, (child, signal.SIGKILL))
        killer.daemon = True
        killer.start()

    if watch is not None:
        # Started with our signal mask, so every signal still reaches sigwait below.
        threading.Thread(target=watch, args=(child, stop), daemon=True, name="watch").start()
    try:
        while True:
            signum = signal.sigwait(_WAITED)
            if signum == signal.SIGCHLD:
                code = _reap(child)
                if code is not None:
                    return verdict[0] if verdict else code
            else:
                _forward(child, signum)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
