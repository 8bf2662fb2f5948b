"""The job's result as SageMaker reads it: output/success, or output/failure with the cause."""

from __future__ import annotations

import collections
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from byoc import constants as C

# horovodrun's prefixes: MPI "[1,3]<stderr>:", Gloo "[3]<stderr>:". They tag every chunk a
# rank writes, not every line: a chunk without its newline (print's newline is a write of its
# own when unbuffered) runs into the next rank's tag on one line ("sum=6[1,3]<stderr>:Traceback"),
# and its newline comes later, under its own tag again.
_RANK_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<std(?:out|err)>:")
# torch's "[rank3]: " (the global rank, on tracebacks of processes under torchrun): per line.
_TORCH_TAG = re.compile(r"^\[rank(\d+)\]: ?(.*)$")
# Horovod's stall inspector (on rank 0): a header, "Missing ranks:", then "N: [tensor, ...]" for
# each rank that did not submit what the others wait on (on the same line or the next ones).
_STALL_HEADER = "One or more tensors were submitted"
_MISSING = "Missing ranks:"
_MISSING_RANK = re.compile(r"(\d+): \[([^\]]*)\]")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*)$")


# Errors a rank raises because another one died first: never the cause when a real one exists.
_COLLATERAL = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote worker crash|Broken pipe|"
    r"NCCL communicator was aborted|DistNetworkError|DistBackendError|timed out|Timeout|"
    r"has been closed|Socket Timeout|Horovod has been shut down|HorovodInternalError|"
    r"ChildFailedError",  # torchrun's own summary of a failed rank, never the cause itself
    re.I,
)


@dataclass
class RankFailure:
    rank: int
    exception: str
    traceback: list[str]
    at: float = 0.0  # wall-clock time the traceback began (comparable across a job's hosts)
    host: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RankFailure | None:
        """From a worker's report; None for anything not shaped like one."""
        try:
            return cls(
                rank=int(data["rank"]),
                exception=str(data["exception"])[:2000],
                traceback=[str(line)[:2000] for line in list(data["traceback"])[:40]],
                at=float(data.get("at", 0.0)),
                host=str(data["host"]) if data.get("host") else None,
            )
        except (TypeError, KeyError, ValueError):
            return None


def collateral(failure: RankFailure) -> bool:
    """Whether the failure is a peer's echo of another one."""
    return bool(_COLLATERAL.search(failure.exception))


def root_cause(failures: list[RankFailure]) -> RankFailure | None:
    """The failure that brought the job down: the earliest that is not a peer's echo."""
    if not failures:
        return None
    return min(failures, key=lambda f: (collateral(f), f.at))


class RankLines:
    """Whole lines of each rank out of a launcher's merged, tagged output, fed line by line.

    Untagged text is rank 0's (a single process, mpirun's own messages); every tag starts a
    piece of its rank's line, and only the last piece of an output line ends one: the pieces
    before it wait, per rank, for the rest of their line. torch's "[rankN]: " tags whole lines.
    """

    def __init__(self) -> None:
        self._partial: dict[int, str] = {}  # each rank's line so far, unfinished

    def feed(self, line: str) -> tuple[int, str]:
        """The rank and whole text (tags gone) of the line this output line ends."""
        line = line.rstrip("\n")
        torch = _TORCH_TAG.match(line)
        if torch:
            return int(torch.group(1)), torch.group(2)
        parts = _RANK_TAG.split(line)
        pieces = [(0, parts[0])] if parts[0] or len(parts) == 1 else []
        pieces += [(int(parts[i]), parts[i + 1]) for i in range(1, len(parts), 2)]
        for rank, text in pieces[:-1]:
            self._partial[rank] = self._partial.get(rank, "") + text
        rank, text = pieces[-1]
        return rank, self._partial.pop(rank, "") + text


def rank_lines(text: str) -> list[tuple[int, str]]:
    """Every whole line of a job's output (a log read back), as (rank, text): RankLines."""
    joiner = RankLines()
    return [joiner.feed(line) for line in text.splitlines()]


@dataclass
class OutputWatcher:
    """Fed every output line of the job; remembers the tail and every rank that raised."""

    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=60))
    failures: list[RankFailure] = field(default_factory=list)
    _in_traceback: dict[int, list[str]] = field(default_factory=dict)
    _lines: RankLines = field(default_factory=RankLines)
    _began: dict[int, float] = field(default_factory=dict)
    last_line: float = field(default_factory=time.monotonic)  # when the last line came
    # Horovod's latest stall report: {rank: [tensors the others wait on]}, and when it came
    # (monotonic time; 0: never).
    missing: dict[int, list[str]] = field(default_factory=dict)
    stall_reported: float = 0.0
    _in_missing: bool = False

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        self.tail.append(line)
        self.last_line = time.monotonic()
        rank, text = self._lines.feed(line)
        self._rank_line(rank, text)

    def _rank_line(self, rank: int, text: str) -> None:
        """One whole line of rank's output, its tags gone."""
        self._stall_line(text)
        if text.startswith("Traceback (most recent call last):"):
            self._in_traceback[rank] = [text]
            self._began[rank] = time.time()
            return
        if rank in self._in_traceback:
            self._in_traceback[rank].append(text)
            if text and not text[0].isspace() and _EXCEPTION.match(text):
                lines = self._in_traceback.pop(rank)
                failure = RankFailure(rank, text.strip(), lines[-12:], self._began.pop(rank, 0))
                self.failures.append(failure)

    def _stall_line(self, text: str) -> None:
        if _STALL_HEADER in text:
            self._in_missing, self.stall_reported = False, time.monotonic()
            return
        ranks = text.split(_MISSING, 1)[1] if _MISSING in text else None
        if ranks is not None:
            self._in_missing, self.missing = True, {}
        elif self._in_missing and _MISSING_RANK.match(text.strip()):
            ranks = text
        else:
            self._in_missing = False
            return
        for rank, tensors in _MISSING_RANK.findall(ranks):
            self.missing[int(rank)] = [t.strip() for t in tensors.split(",") if t.strip()]


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
