"""A fake SageMaker Pipe-mode writer: per-epoch FIFOs <channel>_<epoch>, as the platform makes them.

SageMaker creates <channel>_0 before the program starts, writes the channel's data into it and
closes it; <channel>_<e+1> appears only after epoch e was read to its end. `delays` holds, per
epoch, how long the writer waits before making that epoch's FIFO (an epoch that appears late).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path


class FakePipe(threading.Thread):
    def __init__(
        self,
        data_dir: Path,
        channel: str,
        epochs: list[bytes],
        delays: list[float] | None = None,
        chunk: int = 65536,
    ):
        super().__init__(name=f"fake-pipe-{channel}", daemon=True)
        self.data_dir = Path(data_dir)
        self.channel = channel
        self.epochs = epochs
        self.delays = delays or [0.0] * len(epochs)
        self.chunk = chunk
        self.error: BaseException | None = None
        self.finished = []  # epochs written to their end
        self._halt = threading.Event()

    def fifo(self, epoch: int) -> Path:
        return self.data_dir / f"{self.channel}_{epoch}"

    def run(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            for epoch, data in enumerate(self.epochs):
                if self._halt.wait(self.delays[epoch]):
                    return
                path = self.fifo(epoch)
                os.mkfifo(path, 0o666)
                os.chmod(path, 0o666)  # mkfifo's mode passes through the umask
                # Opening for writing blocks until the reader opens: poll so stop() works.
                fd = None
                while fd is None:
                    try:
                        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    except OSError:
                        if self._halt.wait(0.02):
                            return
                os.set_blocking(fd, True)
                with os.fdopen(fd, "wb", buffering=0) as f:
                    for i in range(0, len(data), self.chunk):
                        f.write(data[i : i + self.chunk])
                self.finished.append(epoch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        # A reader that gave up leaves the writer blocked: opening the FIFO frees it.
        for epoch in range(len(self.epochs)):
            with contextlib.suppress(OSError):
                fd = os.open(self.fifo(epoch), os.O_RDONLY | os.O_NONBLOCK)
                os.close(fd)
        self.join(timeout=5)

    def wait_done(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            self.join(0.1)
        if self.error:
            raise self.error
        assert not self.is_alive(), f"the fake pipe wrote epochs {self.finished} only"
