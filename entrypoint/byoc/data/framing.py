"""Record framings of SageMaker input: RecordIO, TFRecord and newline-delimited text.

Readers take a binary stream (a file or a Pipe-mode FIFO) and yield each record's bytes; a
corrupt or truncated record raises RecordError naming the channel, epoch and byte offset; so
does a record above the cap (byoc.data.limits: max_record_bytes=, $BYOC_MAX_RECORD_BYTES, 256 MiB
by default), before anything of it is allocated.
Writers produce the same framings (byoc.data.shards uses them to prepare S3 input).

RecordIO (SageMaker's, little-endian): uint32 magic 0xced7230a, uint32 whose low 29 bits are the
payload length and top 3 bits the part (0 whole, 1 first, 2 middle, 3 last), the payload, zero
padding to 4 bytes. TFRecord: uint64 length, uint32 masked CRC32C of those 8 bytes, the payload,
uint32 masked CRC32C of the payload.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

from byoc.data import limits

RECORDIO_MAGIC = 0xCED7230A
_LENGTH_MASK = (1 << 29) - 1
MAX_PART = _LENGTH_MASK  # the largest payload one RecordIO header can describe
WHOLE, FIRST, MIDDLE, LAST = 0, 1, 2, 3
FRAMINGS = ("recordio", "tfrecord", "text")


class RecordError(Exception):
    """A record that cannot be read whole; says where."""

    def __init__(self, where: str, offset: int, reason: str):
        super().__init__(f"{where}, byte {offset}: {reason}")
        self.where = where
        self.offset = offset
        self.reason = reason


class StallError(RecordError):
    """A Pipe-mode writer sent nothing for stall_timeout seconds and kept the FIFO open."""


# --- CRC32C (Castagnoli) -------------------------------------------------------------------
def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def _crc32c_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # Google's C implementation (in the image); the pure-Python one is ~100x slower.
    import google_crc32c as _gcrc

    def crc32c(data: bytes) -> int:
        return _gcrc.value(bytes(data))

except ImportError:  # pragma: no cover - depends on the environment
    crc32c = _crc32c_python


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# --- reading -------------------------------------------------------------------------------
_CHUNK = 16 << 20  # a long payload is read this much at a time: memory follows the data that came


class _Reader:
    """Exact reads from a stream, counting the offset; EOF in mid-record is a RecordError.

    Every record length of every framing goes through payload() (or line() for text), which
    refuses one above the cap before anything is allocated.
    """

    def __init__(self, stream: BinaryIO, where: str, max_record_bytes: int | None = None):
        self.stream = stream
        self.where = where
        self.offset = 0
        self.cap = limits.record_cap(max_record_bytes)

    def _too_big(self, what: str, record_start: int) -> RecordError:
        return RecordError(
            self.where,
            record_start,
            f"{what} is above the record cap of {self.cap} bytes "
            f"(max_record_bytes= or ${limits.MAX_RECORD_ENV}): corrupt data, another framing, "
            "or records larger than the cap allows",
        )

    def _stalled(self, exc: StallError, record_start: int) -> StallError:
        inside = (
            f"in the middle of the record that starts at byte {record_start}"
            if exc.offset > record_start
            else "between records"
        )
        return StallError(exc.where, exc.offset, f"{exc.reason}; {inside}")

    def payload(self, length: int, record_start: int, what: str, so_far: int = 0) -> bytes:
        """length bytes of a record (so_far: bytes of the record already read), or a RecordError
        when the record would be above the cap (what: the record, with a {size} to fill in)."""
        if so_far + length > self.cap:
            raise self._too_big(what.format(size=so_far + length), record_start)
        return self.read(length, record_start, f"a {length}-byte payload")

    def read(self, n: int, record_start: int, what: str, eof_ok: bool = False) -> bytes | None:
        """n bytes; with eof_ok, None when the stream ends before the first of them."""
        chunks = []
        need = n
        while need:
            try:
                chunk = self.stream.read(min(need, _CHUNK))
            except StallError as exc:
                raise self._stalled(exc, record_start) from None
            if not chunk:
                if eof_ok and need == n:
                    return None
                got = n - need
                raise RecordError(
                    self.where,
                    record_start,
                    f"truncated record: {what} needs {n} bytes, the stream ended after {got}",
                )
            chunks.append(chunk)
            need -= len(chunk)
        self.offset += n
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def line(self) -> bytes | None:
        """The next line with its newline (None at the end), refused when above the cap."""
        start = self.offset
        limit = self.cap + 2  # the record, and room for its "\r\n"
        try:
            raw = self.stream.readline(limit)
        except StallError as exc:
            raise self._stalled(exc, start) from None
        if not raw:
            return None
        self.offset += len(raw)
        record = raw.rstrip(b"\r\n")
        if len(raw) == limit and not raw.endswith(b"\n"):
            raise self._too_big(f"a line with no newline in its first {limit} bytes", start)
        if len(record) > self.cap:
            raise self._too_big(f"a line of {len(record)} bytes", start)
        return raw


def read_recordio(
    stream: BinaryIO, where: str = "stream", max_record_bytes: int | None = None
) -> Iterator[bytes]:
    r = _Reader(stream, where, max_record_bytes)
    parts: list[bytes] = []
    parts_size = 0
    part_start = 0
    while True:
        start = r.offset
        header = r.read(8, start, "header", eof_ok=True)
        if header is None:
            if parts:
                raise RecordError(
                    where, part_start, "truncated record: a multipart record has no last part"
                )
            return
        magic, word = struct.unpack("<II", header)
        if magic != RECORDIO_MAGIC:
            raise RecordError(
                where, start, f"not a RecordIO record: magic {magic:#010x}, not {RECORDIO_MAGIC:#x}"
            )
        length, kind = word & _LENGTH_MASK, word >> 29
        # The header alone tells these apart: nothing of the payload is read for them.
        if kind > LAST:
            raise RecordError(where, start, f"unknown RecordIO part flag {kind}")
        if kind == WHOLE and parts:
            raise RecordError(where, start, "a whole record inside a multipart record")
        if kind == FIRST and parts:
            raise RecordError(where, start, "a multipart record starts before the last ended")
        if kind in (MIDDLE, LAST) and not parts:
            raise RecordError(where, start, "a continuation part without a first part")
        if kind in (MIDDLE, LAST):
            size = "{size}" if kind == LAST else "at least {size}"
            what = f"a multipart record of {size} bytes"
            payload = r.payload(length, part_start, what, so_far=parts_size)
        else:
            payload = r.payload(length, start, "a record of {size} bytes")
        pad = (4 - length % 4) % 4
        if pad:
            r.read(pad, start, "padding")
        if kind == WHOLE:
            yield payload
        elif kind == FIRST:
            parts, parts_size, part_start = [payload], length, start
        else:
            parts.append(payload)
            parts_size += length
            if kind == LAST:
                yield b"".join(parts)
                parts, parts_size = [], 0


def read_tfrecord(
    stream: BinaryIO,
    where: str = "stream",
    check_crc: bool = True,
    max_record_bytes: int | None = None,
) -> Iterator[bytes]:
    r = _Reader(stream, where, max_record_bytes)
    while True:
        start = r.offset
        header = r.read(12, start, "header", eof_ok=True)
        if header is None:
            return
        (length,) = struct.unpack("<Q", header[:8])
        (length_crc,) = struct.unpack("<I", header[8:])
        if check_crc and masked_crc(header[:8]) != length_crc:
            raise RecordError(where, start, "TFRecord length CRC mismatch (corrupt data)")
        payload = r.payload(length, start, "a record of {size} bytes")
        (data_crc,) = struct.unpack("<I", r.read(4, start, "the payload CRC"))
        if check_crc and masked_crc(payload) != data_crc:
            raise RecordError(where, start, "TFRecord payload CRC mismatch (corrupt data)")
        yield payload


def read_text(
    stream: BinaryIO, where: str = "stream", max_record_bytes: int | None = None
) -> Iterator[bytes]:
    """Lines without their newline; a last line without one is still a record; blank lines skip.
    Bytes as they are: no encoding is assumed (non-UTF-8 lines are records like any other)."""
    r = _Reader(stream, where, max_record_bytes)
    while (raw := r.line()) is not None:
        line = raw.rstrip(b"\r\n")
        if line:
            yield line


def read(
    stream: BinaryIO,
    framing: str,
    where: str = "stream",
    check_crc: bool = True,
    max_record_bytes: int | None = None,
) -> Iterator[bytes]:
    """The records of stream in that framing (check_crc: TFRecord only; max_record_bytes: the
    cap, default $BYOC_MAX_RECORD_BYTES or 256 MiB)."""
    if framing == "tfrecord":
        return read_tfrecord(stream, where, check_crc, max_record_bytes)
    if framing == "recordio":
        return read_recordio(stream, where, max_record_bytes)
    if framing == "text":
        return read_text(stream, where, max_record_bytes)
    raise ValueError(f"framing {framing!r}: use one of {', '.join(FRAMINGS)}")


# --- writing -------------------------------------------------------------------------------
def recordio_frame(payload: bytes, part_size: int = MAX_PART) -> bytes:
    """payload as one RecordIO record, split into parts of at most part_size bytes."""
    if not 1 <= part_size <= MAX_PART:
        raise ValueError(f"part_size must be 1..{MAX_PART}")

    def one(data: bytes, kind: int) -> bytes:
        pad = (4 - len(data) % 4) % 4
        return struct.pack("<II", RECORDIO_MAGIC, (kind << 29) | len(data)) + data + b"\0" * pad

    if len(payload) <= part_size:
        return one(payload, WHOLE)
    chunks = [payload[i : i + part_size] for i in range(0, len(payload), part_size)]
    kinds = [FIRST] + [MIDDLE] * (len(chunks) - 2) + [LAST]
    return b"".join(one(c, k) for c, k in zip(chunks, kinds, strict=True))


def tfrecord_frame(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return (
        length
        + struct.pack("<I", masked_crc(length))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )


def text_frame(payload: bytes) -> bytes:
    if b"\n" in payload or not payload.strip(b"\r"):
        raise ValueError("a text record must be one non-empty line")
    if payload.endswith(b"\r"):  # read_text strips it: the record would come back changed
        raise ValueError("a text record cannot end in a carriage return (\\r)")
    return payload + b"\n"


def framer(framing: str, part_size: int = MAX_PART):
    if framing == "recordio":
        return lambda payload: recordio_frame(payload, part_size)
    if framing == "tfrecord":
        return tfrecord_frame
    if framing == "text":
        return text_frame
    raise ValueError(f"framing {framing!r}: use one of {', '.join(FRAMINGS)}")
