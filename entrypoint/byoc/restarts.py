"""In-job restarts (BYOC_RESTARTS; docs/failures.md): an attempt of the job that failed (a rank
raised or died, or the job stalled) runs again on the same hosts, at most BYOC_RESTARTS times,
and the program resumes from its checkpoint.

leader: attempt N fails -> with restarts left and the job not stopped: "restarting" (the other
        hosts end their ranks and what is left of them, then say they are ready) -> this host's
        leftovers ended -> every other host ready (bounded: one that does not answer is gone,
        and a host that is gone ends the job as before) -> "restart N of M: <cause>" -> attempt
        N+1 on the same hosts
other:  "restarting" -> its ranks ended (the launcher's guard), its result reported, what is
        left ended -> ready -> the next attempt's "running", or the job's end ("done")
Each attempt has its own watch of the output and of stalls, and its number in BYOC_ATTEMPT
(byoc.launch.Job.begin_attempt). The failure file opens with every attempt's cause, within what
SageMaker shows of it (failure_text); the job's exit code is the last attempt's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from byoc import constants as C
from byoc.stall import HEAD_LIMIT

LINE_LIMIT = 200  # characters of one attempt's cause in the failure file's head
_PREFIXES = ("Training failed: ", "Training failed with ", "Training ")
ELSEWHERE = "nothing failed on this host (another host's ranks did: the leader's failure file)"


def cause_line(message: str, also: str = "") -> str:
    """An attempt's failure message as one line: its first, less what every one says, with also
    (e.g. the other hosts' exit codes) after it; LINE_LIMIT characters at most, all of it."""
    line = message.strip().splitlines()[0] if message.strip() else "no cause known"
    for prefix in _PREFIXES:
        if line.startswith(prefix):
            line = line[len(prefix) :]
            break
    line = line.removesuffix(" Last output:").rstrip(".") + also
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 3] + "..."


@dataclass
class Attempts:
    limit: int  # BYOC_RESTARTS: attempts after the first, at most
    number: int = 1  # the attempt under way
    causes: dict[int, str] = field(default_factory=dict)  # each failed attempt's, one line
    stopped: str = ""  # why no restart followed a failure while restarts were left

    def left(self) -> bool:
        """Whether another attempt may follow the one under way."""
        return self.number <= self.limit

    def failed(self, message: str, also: str = "") -> str:
        """The attempt under way failed with message (its failure file's text; also: what to
        add to its line): its cause."""
        return self.causes.setdefault(self.number, cause_line(message, also))

    def failure_text(self, message: str) -> str:
        """The failure file's text once the last attempt failed with message: with restarts on,
        every attempt's cause first, one line each (within HEAD_LIMIT characters: where they do
        not fit, the first and the latest, and all of them at the end), then message."""
        if not self.limit:
            return message
        self.failed(message)
        count = self.number
        why = f"; no restart: {self.stopped}" if self.stopped else ""
        every = "all " if count > self.limit else ""
        head = (
            f"Training failed on {every}{count} attempt{'s' * (count > 1)} "
            f"({C.RESTARTS_ENV}={self.limit}{why}):"
        )
        lines = [f"attempt {n}: {self.causes.get(n, ELSEWHERE)}" for n in range(1, count + 1)]
        budget = HEAD_LIMIT - len(head) - 1
        if sum(len(line) + 1 for line in lines) <= budget:
            return "\n".join([head, *lines, "", message])
        latest: list[str] = []
        note = f"attempts 2 to {{}}: listed at the end of this file ({count} in all)"
        budget -= len(lines[0]) + len(note) + 8
        for line in reversed(lines[1:]):
            if len(line) + 1 > budget:
                break
            latest.insert(0, line)
            budget -= len(line) + 1
        hidden_to = count - len(latest)
        if hidden_to < 2:  # none hidden after all
            return "\n".join([head, *lines, "", message])
        shown = [lines[0], note.format(hidden_to), *latest]
        return "\n".join([head, *shown, "", message, "", "Every attempt:", *lines])
