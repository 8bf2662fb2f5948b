"""Write a data set as RecordIO / TFRecord / text shards for S3 input, and verify shards.

    byoc-shards write --framing recordio --out shards/ --lines data.jsonl
    byoc-shards write --framing tfrecord --out shards/ --files images/
    byoc-shards verify --framing recordio shards/
    aws s3 cp --recursive shards/ s3://bucket/prefix/train/

From Python: byoc.data.write_shards(records, "shards/", framing="tfrecord").
Shards are <prefix>-<index, 5 digits or more>.<recordio|tfrecord|txt>. The whole set is written
into a hidden directory inside the output directory and moved into place only when complete, so
a failed or interrupted write leaves the shards that were there as they were. Existing shards of
the prefix are replaced only with --overwrite, and then only files of exactly that name pattern
(never another prefix's shards, never other files). Exit status: 0 done, 1 an I/O failure (disk
full, permission), 2 bad arguments or input (the message says which), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from byoc import config
from byoc.data import framing as fr
from byoc.data import limits
from byoc.data.pipe import ChannelError

SUFFIX = {"recordio": ".recordio", "tfrecord": ".tfrecord", "text": ".txt"}
# A prefix is a plain file-name start: no glob characters, no path separators, not hidden (the
# readers skip hidden files), so the shards it names are exactly the files it matches.
PREFIX = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,199}")
STAGING = ".byoc-shards-"  # the hidden directory a write is staged in, inside the output one


class ShardError(Exception):
    """Bad arguments or input for the shard tool; says which."""


def shard_name(prefix: str, index: int, framing: str) -> str:
    return f"{prefix}-{index:05d}{SUFFIX[framing]}"


def shard_pattern(prefix: str, framing: str) -> re.Pattern[str]:
    """Exactly the names shard_name() gives prefix: 'train' never matches 'train-extra-00000'."""
    return re.compile(re.escape(prefix) + r"-[0-9]{5,}" + re.escape(SUFFIX[framing]))


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not PREFIX.fullmatch(prefix):
        raise ShardError(
            f"prefix {prefix!r}: must be 1 to 200 letters, digits and '_.+=-', not starting "
            "with '.', '-' or the like (no glob characters, no path separators)"
        )
    return prefix


def shards_of(directory: Path, prefix: str, framing: str) -> list[Path]:
    """The prefix's shards in directory, by their exact name pattern."""
    pattern = shard_pattern(prefix, framing)
    with os.scandir(directory) as it:
        names = [e.name for e in it if pattern.fullmatch(e.name)]
    return [directory / n for n in sorted(names, key=config.natural_key)]


def _show(path: object) -> str:
    """A path fit for any terminal (a name that is not UTF-8 is escaped, not a traceback)."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def _out_dir(out: Path) -> None:
    """The output directory, made if missing; ShardError when it or a parent is no directory."""
    for p in (out, *out.parents):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                raise ShardError(f"--out {_show(out)}: {_show(p)} is not a directory")
            break
    out.mkdir(parents=True, exist_ok=True)


def write_shards(
    records: Iterable[bytes],
    out_dir: str | Path,
    framing: str = "recordio",
    records_per_shard: int = 10_000,
    prefix: str = "part",
    part_size: int = fr.MAX_PART,
    overwrite: bool = False,
    progress=None,
    max_record_bytes: int | None = None,
) -> list[Path]:
    """Write records into numbered shards; the shard paths. progress(path, count, bytes) as each
    shard is staged. A record above max_record_bytes ($BYOC_MAX_RECORD_BYTES, 256 MiB), which
    the readers would refuse, is a ShardError; so is anything that is not bytes."""
    if framing not in fr.FRAMINGS:
        raise ShardError(f"framing {framing!r}: use one of {', '.join(fr.FRAMINGS)}")
    if not limits.whole(records_per_shard):
        raise ShardError(f"records_per_shard={records_per_shard!r}: must be a whole number")
    if records_per_shard < 1:
        raise ShardError("records_per_shard must be at least 1")
    if not limits.whole(part_size):
        raise ShardError(f"part_size={part_size!r}: must be a whole number")
    if not 1 <= part_size <= fr.MAX_PART:
        raise ShardError(f"part_size {part_size}: must be 1 to {fr.MAX_PART} (RecordIO's limit)")
    check_prefix(prefix)
    try:
        cap = limits.record_cap(max_record_bytes)
    except ValueError as exc:
        raise ShardError(str(exc)) from None
    out = Path(out_dir)
    _out_dir(out)
    existing = shards_of(out, prefix, framing)
    if existing and not overwrite:
        raise ShardError(
            f"{_show(out)} already holds {len(existing)} shard(s) ({_show(existing[0].name)}, "
            "...): pick another directory or pass overwrite=True (--overwrite)"
        )
    frame = fr.framer(framing, part_size)
    stage = Path(tempfile.mkdtemp(prefix=f"{STAGING}{prefix}.", dir=out))
    names: list[str] = []
    f = None
    count = size = 0

    def finish() -> None:
        nonlocal f
        f.close()
        f = None
        if progress:
            progress(out / names[-1], count, size)

    try:
        for i, record in enumerate(records):
            if not isinstance(record, bytes | bytearray | memoryview):
                raise ShardError(
                    f"record {i} is {type(record).__name__}, not bytes: encode it first"
                )
            if len(record) > cap:
                raise ShardError(
                    f"record {i} is {len(record)} bytes, above the record cap of {cap} "
                    f"(max_record_bytes= / ${limits.MAX_RECORD_ENV}; readers need the same)"
                )
            try:
                data = frame(bytes(record))
            except ValueError as exc:
                raise ShardError(f"record {i}: {exc}") from None
            if f is None:
                names.append(shard_name(prefix, len(names), framing))
                f = open(stage / names[-1], "wb")  # noqa: SIM115 - closed by finish()
                count = size = 0
            f.write(data)
            count += 1
            size += len(data)
            if count == records_per_shard:
                finish()
        if f is not None:
            finish()
        # Complete: now, and only now, the new set replaces the prefix's old one. Each shard is
        # renamed over its old namesake (a reader sees the old file or the new one, whole), then
        # the old shards the new set has no namesake for go.
        for name in names:
            os.replace(stage / name, out / name)
        if overwrite:
            new = set(names)
            for p in shards_of(out, prefix, framing):
                if p.name not in new:
                    p.unlink()
    finally:
        if f is not None:
            f.close()
        shutil.rmtree(stage, ignore_errors=True)  # a failed write leaves nothing behind
    return [out / name for name in names]


class _Source:
    """The records of the inputs, remembering which input the current one came from."""

    def __init__(self, paths: list[Path], lines: bool, cap: int):
        self.paths, self.lines, self.cap = paths, lines, cap
        self.current = ""

    def __iter__(self) -> Iterator[bytes]:
        for p in self.paths:
            if self.lines:
                self.current = _show(p)
                with open(p, "rb") as f:
                    yield from fr.read_text(f, _show(p), self.cap)
            elif p.is_dir():
                for q in sorted(x for x in p.rglob("*") if x.is_file()):
                    yield self._file(q)
            else:
                yield self._file(p)

    def _file(self, p: Path) -> bytes:
        self.current = _show(p)
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block read_bytes() for good
            raise ShardError(f"{_show(p)} is not a regular file")
        if st.st_size > self.cap:  # refused before it is read into memory
            raise ShardError(
                f"{_show(p)} is {st.st_size} bytes, above the record cap of {self.cap} "
                f"(--max-record-bytes / ${limits.MAX_RECORD_ENV})"
            )
        return p.read_bytes()


def verify(
    directory: Path, framing: str, check_crc: bool = True, max_record_bytes: int | None = None
) -> tuple[int, int]:
    """(files, records) in directory; RecordError on the first bad record, ChannelError on a
    file that cannot be read (a broken symlink, a symlink loop, ...)."""
    from byoc.data.dataset import list_files

    files = list_files(directory)
    records = 0
    for p in files:
        with open(p, "rb") as f:
            for _ in fr.read(f, framing, _show(p), check_crc, max_record_bytes):
                records += 1
    return len(files), records


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="byoc-shards",
        description=__doc__.splitlines()[0],
        epilog="Exit status: 0 done, 1 an I/O failure, 2 bad arguments or input, 130 interrupted.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write records as shards")
    w.add_argument("--framing", choices=fr.FRAMINGS, default="recordio")
    w.add_argument("--out", required=True, type=Path, help="directory for the shards")
    src = w.add_mutually_exclusive_group(required=True)
    src.add_argument("--lines", nargs="+", type=Path, help="files whose lines are the records")
    src.add_argument("--files", nargs="+", type=Path, help="files (or directories) each a record")
    w.add_argument("--records-per-shard", type=int, default=10_000)
    w.add_argument("--prefix", default="part", help="shard names: PREFIX-00000.<suffix>, ...")
    w.add_argument("--part-size", type=int, default=fr.MAX_PART, help="RecordIO: split bigger")
    w.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the shards of exactly this prefix and framing (nothing else)",
    )
    v = sub.add_parser("verify", help="read every record of a directory of shards")
    v.add_argument("--framing", choices=fr.FRAMINGS, default="recordio")
    v.add_argument("directory", type=Path)
    for a in (w, v):
        a.add_argument(
            "--max-record-bytes",
            type=int,
            default=None,
            help=f"the record cap (default ${limits.MAX_RECORD_ENV}, else 256 MiB)",
        )
    return p


def _run(args: argparse.Namespace) -> int:
    try:
        cap = limits.record_cap(args.max_record_bytes)
    except ValueError as exc:
        raise ShardError(str(exc).replace("max_record_bytes=", "--max-record-bytes ")) from None
    if args.command == "verify":
        if not args.directory.is_dir():
            raise ShardError(f"{_show(args.directory)} is not a directory")
        files, records = verify(args.directory, args.framing, max_record_bytes=cap)
        if not files:
            raise ShardError(f"{_show(args.directory)} holds no shard files (hidden ones skipped)")
        print(
            f"{_show(args.directory)}: {files} file(s), {records} {args.framing} record(s), "
            "all whole"
        )
        return 0
    inputs = args.lines or args.files
    missing = [_show(x) for x in inputs if not x.exists()]
    if missing:
        raise ShardError(f"input not found: {', '.join(missing)}")
    if args.lines:
        dirs = [_show(x) for x in inputs if x.is_dir()]
        if dirs:
            raise ShardError(f"--lines takes files, not directories: {', '.join(dirs)}")
    source = _Source(inputs, bool(args.lines), cap)

    def progress(path: Path, count: int, size: int) -> None:
        print(f"wrote {_show(path)} ({count} records, {size / 1e6:.1f} MB)", file=sys.stderr)

    try:
        written = write_shards(
            source,
            args.out,
            args.framing,
            args.records_per_shard,
            args.prefix,
            args.part_size,
            args.overwrite,
            progress,
            cap,
        )
    except (ShardError, fr.RecordError) as exc:
        if source.current and source.current not in str(exc):
            raise ShardError(f"{exc} (input {source.current})") from None
        raise
    print(f"{len(written)} shard(s) in {_show(args.out)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse has said what is wrong (or printed --help)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return _run(args)
    except (ShardError, fr.RecordError, ChannelError, ValueError) as exc:
        print(f"byoc-shards: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f": {_show(exc.filename)}" if exc.filename else ""
        print(f"byoc-shards: I/O error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("byoc-shards: interrupted; existing shards are as they were", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
