"""Every rank's Python stack on demand, with no change to the user's program (faulthandler).

rank side: arm() in the rank's own interpreter (byoc.armed, byoc.clean_exit wrap it): the
           rank's dump file <dir>/<pid>.txt opens with a line naming its rank, its pid and its
           main thread, and SIGNAL makes faulthandler append every thread's stack to it, from a C
           signal handler, so a rank blocked in C (a collective, a lock) answers too.
host side: armed_ranks(dir): the ranks of this host that are alive and catch SIGNAL (a process
           that does not would die of it); dump(ranks): signal them, read what they appended.
The directory is the program's STACKS_DIR_ENV, the same on every host (/opt/ml/output/.stacks).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C

SIGNAL = signal.SIGUSR2
# A signalled rank's dump is complete once its file has grown and then kept its size for SETTLE s
# with the main thread's stack in it (faulthandler writes the oldest thread, the main one, last),
# or for QUIET s without it (a program of over 100 threads, whose main one faulthandler leaves
# out). A loaded host may schedule a rank seconds late, and pause it within its dump: every dump
# gets up to DUMP_WAIT s in all, and dump() returns as soon as each is complete.
DUMP_WAIT = 12.0
SETTLE = 1.0
QUIET = 3.0
LOOK = 0.1  # s between looks at the dump files
# The launchers' variables for the global rank: torchrun's, Horovod's (Gloo), Open MPI's.
RANK_VARIABLES = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_HEADER = re.compile(r"^byoc-rank (-?\d+) pid (\d+) main 0x([0-9a-f]+)$")
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x([0-9a-f]+)", re.M)  # faulthandler's


def arm(env: dict[str, str] | None = None) -> None:
    """In a rank: dump every thread's stack to this process's file on SIGNAL. Best effort: a
    rank that cannot write there runs as before."""
    env = os.environ if env is None else env
    folder = env.get(C.STACKS_DIR_ENV, "")
    if not folder:
        return
    rank = next((env[v] for v in RANK_VARIABLES if env.get(v, "").strip().isdigit()), "-1")
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        out = open(Path(folder) / f"{os.getpid()}.txt", "w")  # noqa: SIM115 - lives with us
        main = threading.main_thread().ident or 0
        out.write(f"byoc-rank {int(rank)} pid {os.getpid()} main 0x{main:x}\n")
        out.flush()
        faulthandler.register(SIGNAL, file=out, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):
        return


@dataclass(frozen=True)
class Armed:
    rank: int  # -1: the process named no rank
    pid: int
    main: int  # the main thread's id, as faulthandler prints it
    path: Path


def _catches(pid: int, signum: int) -> bool:
    """Whether pid is alive and has a handler for signum (SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)
    state = re.search(r"^State:\s*(\S)", status, re.M)
    if not caught or (state and state.group(1) in "ZX"):
        return False
    return bool(int(caught.group(1), 16) >> (signum - 1) & 1)


def armed_ranks(folder: Path) -> list[Armed]:
    """This host's armed ranks that are alive, by rank; dump files of dead ones are removed."""
    found = []
    for path in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
        with contextlib.suppress(OSError):
            first = path.read_text(errors="replace").split("\n", 1)[0]
            header = _HEADER.match(first)
            if not header or int(header.group(2)) != int(path.stem):
                continue
            pid = int(header.group(2))
            if not _catches(pid, SIGNAL):
                path.unlink()
                continue
            found.append(Armed(int(header.group(1)), pid, int(header.group(3), 16), path))
    return sorted(found, key=lambda a: (a.rank, a.pid))


def dump(ranks: list[Armed], wait: float = DUMP_WAIT) -> dict[Armed, str]:
    """Signal every rank at once; each one's stacks as it wrote them, once every dump is complete
    or wait s have passed ("" for a rank that wrote nothing: a program that took SIGNAL for
    itself, or one that ended)."""
    pending: dict[Armed, _Dump] = {}
    for armed in ranks:
        try:
            size = armed.path.stat().st_size
            os.kill(armed.pid, SIGNAL)
        except OSError:  # ended since it was listed: nothing to wait for
            continue
        pending[armed] = _Dump(size)
    starts = {armed: d.start for armed, d in pending.items()}
    deadline = time.monotonic() + wait
    while pending and time.monotonic() < deadline:
        time.sleep(LOOK)
        for armed in [a for a, d in pending.items() if d.complete(a)]:
            del pending[armed]
    return {a: _since(a.path, starts.get(a)) for a in ranks}


class _Dump:
    """One signalled rank's dump as it grows: its file's size before the signal, and since."""

    def __init__(self, start: int):
        self.start = self.size = start
        self.grew = time.monotonic()  # when the file last changed size

    def complete(self, armed: Armed) -> bool:
        try:
            size = armed.path.stat().st_size
        except OSError:
            return True  # its file is gone (the rank ended): nothing more will come
        now = time.monotonic()
        if size != self.size:
            self.size, self.grew = size, now
            return False
        if size == self.start:
            return not _alive(armed.pid)  # nothing written yet: wait, unless it ended
        quiet = now - self.grew
        if quiet >= QUIET or not _alive(armed.pid):
            return True
        return quiet >= SETTLE and armed.main in _threads(_since(armed.path, self.start))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in "ZX"


def _threads(text: str) -> set[int]:
    """The thread ids a faulthandler dump has a stack for."""
    return {int(m.group(1), 16) for m in _THREAD.finditer(text)}


def _since(path: Path, size: int | None) -> str:
    if size is None:
        return ""
    try:
        with path.open("rb") as f:
            f.seek(size)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


_OURS = f'  File "{Path(__file__).parent}/'  # the wrappers' frames, below the program's


def main_thread(text: str, main: int) -> list[str]:
    """The program's frames of the main thread in a faulthandler dump, innermost first."""
    frames: list[str] = []
    mine = False
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            mine = int(thread.group(1), 16) == main
        elif mine and line.startswith(_OURS):
            mine = False
        elif mine and line.startswith("  File "):
            frames.append(line.strip())
    return frames
