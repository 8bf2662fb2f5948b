"""One reader per host, records dealt to the host's consumers over local sockets.

A Pipe-mode FIFO can be read by one process. With several ranks per host (and DataLoader
workers in each), consumer 0 of the host starts a reader process (`python -m byoc.data.fanout`)
that reads the epoch's FIFO and deals record j to consumer j % n; every consumer, consumer 0
included, reads its share through a Unix socket (Linux abstract namespace: nothing to clean up).
The reader is a process of its own so that it outlives any one DataLoader worker, and it feeds
each consumer from its own queue (fanout_queue records) so that one consumer that is busy in an
allreduce does not hold back the others. A read error reaches every consumer as the same error.
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
import time
from collections.abc import Iterator
from pathlib import Path

from byoc.data.framing import RecordError

_HEADER = struct.Struct("<BQ")  # kind, length
_DATA, _END, _ERROR = 0, 1, 2
_HELLO = struct.Struct("<II")  # consumer index, consumer count


class FanoutError(Exception):
    """The host's consumers and its reader could not meet, or the reader failed; says why."""


def socket_address(key: str) -> str:
    return "\0byoc-data-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _error_frame(exc: BaseException) -> bytes:
    if isinstance(exc, RecordError):
        detail = {"where": exc.where, "offset": exc.offset, "reason": exc.reason}
    else:
        detail = {"message": f"{type(exc).__name__}: {exc}"}
    body = json.dumps(detail).encode()
    return _HEADER.pack(_ERROR, len(body)) + body


def _sender(conn: socket.socket, q: queue.Queue) -> None:
    with contextlib.suppress(OSError):  # a consumer that went away loses only its own share
        while True:
            frame = q.get()
            conn.sendall(frame)
            if frame[0] != _DATA:
                return


def serve(spec: dict) -> int:
    """Serve one epoch (spec from start_server); 0 when every consumer got all of its share."""
    from byoc.data.pipe import pipe_records  # here: the reader needs no torch, no dataset

    consumers, timeout = spec["consumers"], spec["timeout"]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_address(spec["key"]))
    listener.listen(consumers)
    conns: dict[int, socket.socket] = {}
    queues: list[queue.Queue] = []
    senders: list[threading.Thread] = []
    try:
        deadline = time.monotonic() + timeout
        while len(conns) < consumers:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(consumers)) - set(conns))
                raise FanoutError(
                    f"consumers {missing} of {consumers} on this host never connected within "
                    f"{timeout:.0f} s (every local rank and DataLoader worker must iterate the "
                    "dataset, in the same epoch)"
                )
            listener.settimeout(left)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            hello = _recv_exact(conn, _HELLO.size)
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
                with contextlib.suppress(queue.Full):
                    q.put(frame, timeout=5)
        else:
            for conn in conns.values():
                with contextlib.suppress(OSError):
                    conn.sendall(frame)
        code = 1
    for t in senders:
        t.join()
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
    deadline = time.monotonic() + timeout
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(address)
            break
        except (ConnectionRefusedError, FileNotFoundError):
            conn.close()
            if server is not None and server.poll() is not None:
                raise FanoutError(
                    f"{where}: the host's reader exited ({server.returncode}) before serving; "
                    "its error is above"
                ) from None
            if time.monotonic() >= deadline:
                raise FanoutError(
                    f"{where}: the host's reader (local rank 0, worker 0) did not open this "
                    f"epoch within {timeout:.0f} s; is local rank 0 iterating the same epoch?"
                ) from None
            time.sleep(0.05)
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
                    raise RecordError(detail["where"], detail["offset"], detail["reason"])
                raise FanoutError(f"{where}: the host's reader failed: {detail['message']}")


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
