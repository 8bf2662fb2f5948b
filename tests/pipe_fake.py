"""A fake SageMaker Pipe-mode writer: per-epoch FIFOs <channel>_<epoch>, as the platform makes them.

SageMaker creates <channel>_0 before the program starts, writes the channel's data into it and
closes it once the reader took every byte; <channel>_<e+1> appears only after epoch e was read
to its end. So does this writer: start() makes <channel>_0; the writer keeps its end of each FIFO
open until the pipe is empty (the reader has consumed every byte), then closes it (the reader's
end of file), waits delays[e + 1] and makes the next FIFO. delays[0] > 0 makes even the first
FIFO late (then the thread makes it).

`finished` lists the epochs read to their end. `error` is what stopped the writer: an open error
other than "no reader yet", a path that is no longer a FIFO, a reader that closed its end before
the end of the epoch. Every wait checks stop() at least every POLL seconds, so stop() returns
at once whatever the reader does (never comes, stops reading, goes away).
"""

from __future__ import annotations

import array
import errno
import fcntl
import os
import select
import stat
import termios
import threading
import time
from pathlib import Path


class FakePipe(threading.Thread):
    POLL = 0.01  # seconds between looks for a reader, room in the pipe, an empty pipe, stop()

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
        self.chunk = chunk  # the most one os.write is given
        self.error: BaseException | None = None
        self.finished: list[int] = []  # epochs read to their end
        self._halt = threading.Event()

    def fifo(self, epoch: int) -> Path:
        return self.data_dir / f"{self.channel}_{epoch}"

    def start(self) -> None:
        """Make <channel>_0 (unless delays[0] holds it back), then write in a thread. A data dir
        or FIFO that cannot be made raises here."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.epochs and not self.delays[0]:
            self._make(0)
        super().start()

    def _make(self, epoch: int) -> None:
        path = self.fifo(epoch)
        os.mkfifo(path, 0o666)
        os.chmod(path, 0o666)  # mkfifo's mode passes through the umask

    def run(self) -> None:
        try:
            for epoch, data in enumerate(self.epochs):
                if epoch or self.delays[0]:
                    if self._halt.wait(self.delays[epoch]):
                        return
                    self._make(epoch)
                fd = self._open(epoch)
                if fd is None:
                    return
                try:
                    if not (self._write(fd, data, epoch) and self._drain(fd, epoch)):
                        return
                finally:
                    os.close(fd)  # the reader's end of file
                self.finished.append(epoch)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _open(self, epoch: int) -> int | None:
        """The FIFO's write end once a reader has it open; None after stop()."""
        path = self.fifo(epoch)
        while True:
            try:
                # Non-blocking: a blocking open waits for a reader with no way to stop it.
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet; anything else is an error
                    raise
                if self._halt.wait(self.POLL):
                    return None
                continue
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{path} is not a FIFO any more: something replaced it")
            return fd

    def _write(self, fd: int, data: bytes, epoch: int) -> bool:
        """All of data into the pipe (False after stop()). os.write may take only part of what
        it is given (a pipe with less room, a signal): what it took is what counts."""
        view = memoryview(data)
        sent = 0
        room = select.poll()
        room.register(fd, select.POLLOUT)
        while sent < len(view):
            try:
                sent += os.write(fd, view[sent : sent + self.chunk])
                continue
            except BlockingIOError:
                pass
            except BrokenPipeError:
                raise BrokenPipeError(
                    errno.EPIPE,
                    f"the reader closed {self.fifo(epoch)} after {sent} of {len(data)} bytes",
                ) from None
            room.poll(self.POLL * 1000)  # room, or POLLERR: the next write says which
            if self._halt.is_set():
                return False
        return True

    def _drain(self, fd: int, epoch: int) -> bool:
        """Wait until the reader has consumed every byte (False after stop()): FIONREAD on the
        write end is what is still in the pipe (Linux); closing before would not be SageMaker's
        order, which makes the next FIFO only once this one was read to its end."""
        gone = select.poll()
        gone.register(fd, 0)  # POLLERR only: no reader has the FIFO open any more
        count = array.array("i", [0])

        def unread() -> int:
            fcntl.ioctl(fd, termios.FIONREAD, count)
            return count[0]

        while unread():
            # Checked again after POLLERR: a reader that took the last byte and closed is done.
            if gone.poll(self.POLL * 1000) and (left := unread()):
                raise BrokenPipeError(
                    errno.EPIPE,
                    f"the reader closed {self.fifo(epoch)} with {left} of "
                    f"{len(self.epochs[epoch])} bytes unread",
                )
            if self._halt.is_set():
                return False
        return True

    def stop(self) -> None:
        self._halt.set()
        if self.ident is not None:
            self.join(timeout=5)

    def wait_done(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            self.join(0.1)
        if self.error:
            raise self.error
        assert not self.is_alive(), f"the fake pipe's epochs {self.finished} only were read"
