"""One reader per host, records dealt to the host's consumers over local sockets.

A Pipe-mode FIFO can be read by one process. With several ranks per host (and DataLoader
workers in each), consumer 0 of the host starts a reader process (`python -m byoc.data.fanout`)
that reads the epoch's FIFO and deals record j to consumer j % n; every consumer, consumer 0
included, reads its share through a Unix socket (Linux abstract namespace: nothing to clean up).
The reader is a process of its own so that it outlives any one DataLoader worker, and it feeds
each consumer from its own queue (fanout_queue records) so that one consumer that is busy in an
allreduce does not hold back the others. A read error (a corrupt record, a stalled writer, a
FIFO that never came) reaches every consumer as the same error, of the same type; a consumer that
goes away loses only its own share, the others read on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from byoc.data import limits
from byoc.data.framing import RecordError, StallError
from byoc.data.limits import Deadline
from byoc.data.pipe import ChannelError, pipe_records

_HEADER = struct.Struct("<BQ")  # kind, length
_DATA, _END, _ERROR = 0, 1, 2
_HELLO = struct.Struct("<II")  # consumer index, consumer count


class FanoutError(Exception):
    """The host's consumers and its reader could not meet, or the reader failed; says why."""


def socket_address(key: str) -> str:
    return "\0byoc-data-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _recv_exact(conn: socket.socket, n: int, deadline: Deadline | None = None) -> bytes | None:
    """n bytes, None when the peer closes first (or, with a deadline, when it passes first)."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None and not deadline.readable(conn.fileno()):
            return None
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


_PASSED_ON = {"RecordError": RecordError, "StallError": StallError}


def _error_frame(exc: BaseException) -> bytes:
    if isinstance(exc, RecordError):
        kind = type(exc).__name__ if type(exc).__name__ in _PASSED_ON else "RecordError"
        detail = {"type": kind, "where": exc.where, "offset": exc.offset, "reason": exc.reason}
    elif isinstance(exc, ChannelError):
        detail = {"type": "ChannelError", "message": str(exc)}
    else:
        detail = {"message": f"{type(exc).__name__}: {exc}"}
    body = json.dumps(detail).encode()
    return _HEADER.pack(_ERROR, len(body)) + body


def _sender(conn: socket.socket, q: queue.Queue) -> None:
    alive = True
    while True:
        frame = q.get()
        if alive:
            try:
                conn.sendall(frame)
            except OSError:
                # A consumer that went away loses only its own share; its queue is still drained,
                # so the reader never blocks on it and the others read on.
                alive = False
        if frame[0] != _DATA:
            return


def serve(spec: dict) -> int:
    """Serve one epoch (spec from start_server); 0 when every consumer got all of its share."""
    consumers, timeout = spec["consumers"], spec["timeout"]
    stall = spec.get("stall_timeout", limits.DEFAULT_STALL_TIMEOUT)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_address(spec["key"]))
    listener.listen(consumers)
    listener.setblocking(False)  # waited on with the deadline, never blocked in accept()
    conns: dict[int, socket.socket] = {}
    queues: list[queue.Queue] = []
    senders: list[threading.Thread] = []
    try:
        deadline = Deadline(timeout)
        while len(conns) < consumers:
            if not deadline.readable(listener.fileno()):
                missing = sorted(set(range(consumers)) - set(conns))
                raise FanoutError(
                    f"consumers {missing} of {consumers} on this host never connected within "
                    f"{timeout:g} s (every local rank and DataLoader worker must iterate the "
                    "dataset, in the same epoch)"
                )
            try:
                conn, _ = listener.accept()
            except BlockingIOError:  # the one that knocked went away again
                continue
            conn.setblocking(True)
            hello = _recv_exact(conn, _HELLO.size, deadline)  # one that never says hello: bounded
            if hello is None:
                conn.close()
                continue
            index, count = _HELLO.unpack(hello)
            if count != consumers or index in conns or index >= count:
                conn.close()
                raise FanoutError(
                    f"consumer {index} of {count} does not fit this host's {consumers} "
                    "consumers: do all local ranks use the same num_workers?"
                )
            conns[index] = conn
        listener.close()
        for i in range(consumers):
            q: queue.Queue = queue.Queue(maxsize=spec["queue"])
            t = threading.Thread(target=_sender, args=(conns[i], q), daemon=True)
            t.start()
            queues.append(q)
            senders.append(t)
        records = pipe_records(
            Path(spec["fifo"]),
            spec["framing"],
            spec["where"],
            timeout,
            spec["host_rank"],
            spec["host_count"],
            spec["check_crc"],
            stall_timeout=stall,
            max_record_bytes=spec.get("max_record_bytes"),
        )
        for j, record in enumerate(records):
            queues[j % consumers].put(_HEADER.pack(_DATA, len(record)) + record)
        for q in queues:
            q.put(_HEADER.pack(_END, 0))
        code = 0
    except BaseException as exc:  # noqa: BLE001 - passed on to every consumer
        print(f"byoc.data reader: {exc}", file=sys.stderr, flush=True)
        frame = _error_frame(exc)
        if queues:
            for q in queues:
                # The epoch failed: records still queued are dropped so that the error always
                # fits, also in the queue of a consumer that is not reading just now.
                with contextlib.suppress(queue.Empty):
                    while True:
                        q.get_nowait()
                q.put(frame)  # room: only this thread puts
        else:
            for conn in conns.values():
                with contextlib.suppress(OSError):
                    conn.sendall(frame)
        code = 1
    for t in senders:
        # After an error, a consumer that never reads again does not keep this process.
        t.join(None if code == 0 else stall)
    for conn in conns.values():
        with contextlib.suppress(OSError):
            conn.close()
    listener.close()
    return code


_started: list[subprocess.Popen] = []


def start_server(**spec) -> subprocess.Popen:
    """Start the host's reader process for one epoch (consumer 0 calls this).

    Not waited for at the end of the epoch (it may still be feeding the others); readers of
    earlier epochs are reaped here, and orphans by PID 1.
    """
    for proc in list(_started):
        if proc.poll() is not None:
            _started.remove(proc)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "byoc.data.fanout", json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        env=env,
    )
    _started.append(proc)
    return proc


def consume(
    key: str,
    index: int,
    count: int,
    timeout: float,
    where: str,
    server: subprocess.Popen | None = None,
) -> Iterator[bytes]:
    """This consumer's share of the epoch from the host's reader (which may start later)."""
    address = socket_address(key)

    def connected() -> socket.socket | None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(address)
            return conn
        except (ConnectionRefusedError, FileNotFoundError):
            conn.close()
            if server is not None and server.poll() is not None:
                raise FanoutError(
                    f"{where}: the host's reader exited ({server.returncode}) before serving; "
                    "its error is above"
                ) from None
            return None

    conn = Deadline(timeout).until(connected)
    if conn is None:
        raise FanoutError(
            f"{where}: the host's reader (local rank 0, worker 0) did not open this "
            f"epoch within {timeout:g} s; is local rank 0 iterating the same epoch?"
        )
    with conn:
        conn.sendall(_HELLO.pack(index, count))
        while True:
            header = _recv_exact(conn, _HEADER.size)
            if header is None:
                raise FanoutError(f"{where}: the host's reader went away in mid-epoch")
            kind, length = _HEADER.unpack(header)
            body = _recv_exact(conn, length) if length else b""
            if body is None:
                raise FanoutError(f"{where}: the host's reader went away in mid-record")
            if kind == _DATA:
                yield body
            elif kind == _END:
                return
            else:
                detail = json.loads(body)
                if "reason" in detail:
                    error = _PASSED_ON.get(detail.get("type", ""), RecordError)
                    raise error(detail["where"], detail["offset"], detail["reason"])
                if detail.get("type") == "ChannelError":
                    raise ChannelError(detail["message"])
                raise FanoutError(f"{where}: the host's reader failed: {detail['message']}")


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
