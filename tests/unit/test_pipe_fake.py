"""tests/pipe_fake.py, the fake SageMaker Pipe-mode writer the data tests read from: it must order
its FIFOs as SageMaker does, deliver every byte, report what stops it, and stop on request."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.pipe_fake import FakePipe


def open_reader(path: Path) -> int:
    # Non-blocking, as byoc.data opens it: a blocking open would wait for the writer unbounded.
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def read(fd: int, limit: int, timeout: float, piece: int = 65536, pause: float = 0.0) -> bytes:
    """Up to `limit` bytes, `piece` at a time with `pause` s between reads; less at end of
    file. TimeoutError when no byte (or end) comes for `timeout` s."""
    got = bytearray()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while len(got) < limit:
        if not poller.poll(timeout * 1000):
            raise TimeoutError(f"no byte nor end of file within {timeout} s, after {len(got)}")
        try:
            chunk = os.read(fd, min(piece, limit - len(got)))
        except BlockingIOError:
            continue
        if not chunk:
            break
        got += chunk
        time.sleep(pause)
    return bytes(got)


def first_fifo(pipe: FakePipe) -> Path:
    return wait_until(lambda: pipe.fifo(0).exists() and pipe.fifo(0), 10, what="the first FIFO")


def pattern(n: int) -> bytes:
    """n bytes in which a lost or repeated stretch shows (a repeated byte would not)."""
    return b"".join(i.to_bytes(4, "little") for i in range(n // 4))


@pytest.fixture
def pipes():
    started: list[FakePipe] = []
    yield started
    for p in started:
        p.stop()


def test_the_next_fifo_appears_only_after_the_previous_was_read_to_its_end(tmp_path, pipes):
    epoch0 = pattern(8000)  # far below the pipe's 64 KiB: written at once, read much later
    pipe = FakePipe(tmp_path / "data", "train", [epoch0, b"second"])
    pipe.start()
    pipes.append(pipe)
    # SageMaker makes <channel>_0 before the program starts.
    assert pipe.fifo(0).exists()
    fd = open_reader(pipe.fifo(0))
    try:
        got = read(fd, 4000, timeout=10)
        time.sleep(0.5)  # time enough for a writer that does not wait for the reader
        assert not pipe.fifo(1).exists(), "epoch 1's FIFO came with half of epoch 0 unread"
        got += read(fd, 4000, timeout=10)
        assert got == epoch0
        assert read(fd, 1, timeout=10) == b""  # the writer closes once every byte was taken
    finally:
        os.close(fd)
    wait_until(pipe.fifo(1).exists, 10, what="epoch 1's FIFO after epoch 0 was read")
    fd = open_reader(pipe.fifo(1))
    try:
        assert read(fd, 100, timeout=10) == b"second"
    finally:
        os.close(fd)
    pipe.wait_done(10)
    assert pipe.finished == [0, 1]


def test_a_reader_that_takes_small_pieces_slowly_gets_every_byte(tmp_path, pipes):
    # A signal that lands while a write waits for room makes os.write return what it wrote so
    # far: a writer that takes every write as whole loses the rest.
    data = pattern(512 * 1024)
    pipe = FakePipe(tmp_path / "data", "train", [data])
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    reading = threading.Event()

    def interrupt_the_writer():
        while not reading.is_set():
            try:
                signal.pthread_kill(pipe.ident, signal.SIGUSR1)
            except ProcessLookupError:  # the writer failed and ended
                return
            time.sleep(0.001)

    interrupter = threading.Thread(target=interrupt_the_writer, daemon=True)
    try:
        pipe.start()
        pipes.append(pipe)
        interrupter.start()
        fd = open_reader(first_fifo(pipe))
        try:
            # The signals stop while more is left than the pipe holds: the writer still runs.
            got = read(fd, len(data) - 65536, timeout=10, piece=4096, pause=0.001)
            reading.set()
            interrupter.join(10)
            got += read(fd, len(data), timeout=10, piece=4096)
        finally:
            os.close(fd)
    finally:
        reading.set()
        if interrupter.ident is not None:
            interrupter.join(10)  # no signal may come after the handler is gone: it would kill
        signal.signal(signal.SIGUSR1, previous)
    assert len(got) == len(data) and got == data
    pipe.wait_done(10)
    assert pipe.finished == [0]


def test_a_data_dir_that_is_a_file_fails_at_start(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    pipe = FakePipe(tmp_path / "data", "train", [b"x"])
    with pytest.raises(FileExistsError, match="data"):
        pipe.start()


@pytest.mark.parametrize(
    ("replace", "error", "message"),
    [
        (lambda p: None, FileNotFoundError, "No such file"),
        (Path.mkdir, IsADirectoryError, "Is a directory"),
        (lambda p: p.write_bytes(b"a regular file"), OSError, "is not a FIFO any more"),
    ],
    ids=["removed", "a-directory", "a-regular-file"],
)
def test_an_open_error_other_than_no_reader_yet_stops_the_writer(
    tmp_path, pipes, replace, error, message
):
    pipe = FakePipe(tmp_path / "data", "train", [b"x" * 100, b"y"])
    pipe.start()
    pipes.append(pipe)
    path = first_fifo(pipe)
    path.unlink()  # while the writer waits for a reader
    replace(path)
    with pytest.raises(error, match=message) as caught:
        pipe.wait_done(10)
    assert str(path) in str(caught.value)
    assert pipe.finished == [] and not pipe.fifo(1).exists()


def test_a_reader_that_closes_before_the_end_is_reported_and_no_next_fifo_comes(tmp_path, pipes):
    pipe = FakePipe(tmp_path / "data", "train", [pattern(8000), b"y"])
    pipe.start()
    pipes.append(pipe)
    fd = open_reader(first_fifo(pipe))
    try:
        assert read(fd, 1000, timeout=10) == pattern(8000)[:1000]
    finally:
        os.close(fd)
    with pytest.raises(BrokenPipeError, match=r"closed .*train_0 with 7000 of 8000 bytes unread"):
        pipe.wait_done(10)
    assert pipe.finished == [] and not pipe.fifo(1).exists()


@pytest.mark.parametrize("reader", ["never-comes", "stops-reading-mid-epoch"])
def test_stop_returns_at_once_whatever_the_reader_does(tmp_path, pipes, reader):
    data = pattern(1 << 20)  # more than the pipe holds: the writer is left waiting for room
    pipe = FakePipe(tmp_path / "data", "train", [data])
    pipe.start()
    pipes.append(pipe)
    fd = None
    if reader == "stops-reading-mid-epoch":
        fd = open_reader(first_fifo(pipe))  # and kept open, never read again after this
        assert read(fd, 1000, timeout=10) == data[:1000]
    try:
        time.sleep(0.3)  # the writer is waiting: for a reader, or for room in the pipe
        t0 = time.monotonic()
        pipe.stop()
        took = time.monotonic() - t0
    finally:
        if fd is not None:
            os.close(fd)
    assert not pipe.is_alive()
    assert took < 3, f"stop() took {took:.1f} s"
    assert pipe.error is None and pipe.finished == []
