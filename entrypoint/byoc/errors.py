"""The job's own exceptions: a failure a person can act on, and a stop request."""

from __future__ import annotations


class JobError(Exception):
    """A failure with a message a person can act on, and the exit code to leave with."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(Exception):
    """SIGTERM arrived before the job's result was known."""
