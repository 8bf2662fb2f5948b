"""The job's result as SageMaker reads it: output/success, or output/failure with the cause."""

from __future__ import annotations

import collections
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from byoc import constants as C

# horovodrun's prefixes: MPI "[1,3]<stderr>:", Gloo "[3]<stderr>:".
_TAG = re.compile(r"^\[(?:\d+,)?(\d+)\]<std(?:out|err)>:(.*)$")
# mpirun tags every chunk a rank writes, so tags also land inside and at the end of lines.
_ANY_TAG = re.compile(r"\[(?:\d+,)?\d+\]<std(?:out|err)>:")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*)$")


@dataclass
class RankFailure:
    rank: int
    exception: str
    traceback: list[str]


@dataclass
class OutputWatcher:
    """Fed every output line of the job; remembers the tail and the first rank that raised."""

    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=60))
    first_failure: RankFailure | None = None
    _in_traceback: dict[int, list[str]] = field(default_factory=dict)

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        self.tail.append(line)
        match = _TAG.match(line)
        rank, text = (int(match.group(1)), match.group(2)) if match else (0, line)
        text = _ANY_TAG.sub("", text)
        if text.startswith("Traceback (most recent call last):"):
            self._in_traceback[rank] = [text]
            return
        if rank in self._in_traceback:
            self._in_traceback[rank].append(text)
            if text and not text[0].isspace() and _EXCEPTION.match(text):
                lines = self._in_traceback.pop(rank)
                if self.first_failure is None:
                    self.first_failure = RankFailure(rank, text.strip(), lines[-12:])


def describe_exit(code: int) -> str:
    if code == 137:
        return (
            "exit code 137 (SIGKILL): most often out of memory; use a larger instance, a "
            "smaller batch or fewer processes per host"
        )
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"exit code {code} ({signal.Signals(code - 128).name})"
    return f"exit code {code}"


def write_success(root: Path) -> None:
    out = root / C.OUTPUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    (root / C.FAILURE_FILE).unlink(missing_ok=True)
    (root / C.SUCCESS_FILE).write_text("")


def write_failure(root: Path, message: str) -> None:
    """The cause first: SageMaker shows the first 1024 characters as FailureReason."""
    try:
        (root / C.OUTPUT_DIR).mkdir(parents=True, exist_ok=True)
        (root / C.SUCCESS_FILE).unlink(missing_ok=True)
        (root / C.FAILURE_FILE).write_text(message.rstrip() + "\n")
    except OSError as exc:  # a read-only or missing /opt/ml must not hide the cause
        print(f"byoc: cannot write {root / C.FAILURE_FILE}: {exc}", flush=True)
