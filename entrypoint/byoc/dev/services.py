"""The supervisor of development mode's services (Jupyter, sshd): the first one to end, or
SIGTERM/SIGINT/SIGHUP, ends them all; one that ignores SIGTERM is killed after DEV_STOP_GRACE."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from byoc import constants as C


class Services:
    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = False

    def start(self, name: str, cmd: list[str], **kw) -> None:
        self.add(name, subprocess.Popen(cmd, stdin=subprocess.DEVNULL, **kw))

    def add(self, name: str, proc: subprocess.Popen) -> None:
        """A service started elsewhere (sshd, by byoc.ssh.start_sshd)."""
        self.procs[name] = proc

    def _on_signal(self, signum: int, _frame) -> None:
        self.stopping = True

    def catch_signals(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, self._on_signal)

    def wait(self) -> int:
        """Until a service ends (its code, 128+N for signal N) or a signal comes (0); then
        stop the rest."""
        ended: tuple[str, int] | None = None
        while not self.stopping and ended is None:
            for name, proc in self.procs.items():
                code = proc.poll()
                if code is not None:
                    ended = (name, 128 - code if code < 0 else code)
                    break
            else:
                time.sleep(0.2)
        others = [n for n in self.procs if ended is None or n != ended[0]]
        if ended:
            print(
                f"byoc-dev: {ended[0]} exited ({ended[1]}); "
                f"stopping {' '.join(others) or 'nothing else'}",
                file=sys.stderr,
                flush=True,
            )
        self.stop()
        return 0 if ended is None else ended[1]

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + C.DEV_STOP_GRACE
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(
                    f"byoc-dev: {name} ignored SIGTERM for {C.DEV_STOP_GRACE:.0f} s: killing it",
                    file=sys.stderr,
                    flush=True,
                )
                proc.kill()
                proc.wait()
