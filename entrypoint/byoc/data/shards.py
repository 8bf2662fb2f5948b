"""Write a data set as RecordIO / TFRecord / text shards for S3 input, and verify shards.

    byoc-shards write --framing recordio --out shards/ --lines data.jsonl
    byoc-shards write --framing tfrecord --out shards/ --files images/
    byoc-shards verify --framing recordio shards/
    aws s3 cp --recursive shards/ s3://bucket/prefix/train/

From Python: byoc.data.write_shards(records, "shards/", framing="tfrecord").
Shards are written to a temporary name and renamed when complete; existing shards are never
overwritten unless --overwrite is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from byoc.data import framing as fr

SUFFIX = {"recordio": ".recordio", "tfrecord": ".tfrecord", "text": ".txt"}


class ShardError(Exception):
    pass


def shard_name(prefix: str, index: int, framing: str) -> str:
    return f"{prefix}-{index:05d}{SUFFIX[framing]}"


def write_shards(
    records: Iterable[bytes],
    out_dir: str | Path,
    framing: str = "recordio",
    records_per_shard: int = 10_000,
    prefix: str = "part",
    part_size: int = fr.MAX_PART,
    overwrite: bool = False,
    progress=None,
) -> list[Path]:
    """Write records into numbered shards; the shard paths. progress(path, count, bytes)."""
    if framing not in fr.FRAMINGS:
        raise ShardError(f"framing {framing!r}: use one of {', '.join(fr.FRAMINGS)}")
    if records_per_shard < 1:
        raise ShardError("records_per_shard must be at least 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(out.glob(f"{prefix}-*{SUFFIX[framing]}"))
    if existing and not overwrite:
        raise ShardError(
            f"{out} already holds {len(existing)} shard(s) ({existing[0].name}, ...): "
            "pick another directory or pass overwrite=True (--overwrite)"
        )
    frame = fr.framer(framing, part_size)
    written: list[Path] = []
    f = None
    tmp = path = None
    count = size = 0

    def finish() -> None:
        """Close the shard being written and give it its name."""
        nonlocal f
        f.close()
        f = None
        tmp.replace(path)
        written.append(path)
        if progress:
            progress(path, count, size)

    try:
        for record in records:
            if f is None:
                path = out / shard_name(prefix, len(written), framing)
                tmp = path.with_name(path.name + ".partial")
                f = open(tmp, "wb")  # noqa: SIM115 - closed by finish(), across records
                count = size = 0
            data = frame(bytes(record))
            f.write(data)
            count += 1
            size += len(data)
            if count == records_per_shard:
                finish()
        if f is not None:
            finish()
    finally:
        if f is not None:  # an error in mid-shard: no torn shard is left behind
            f.close()
            tmp.unlink(missing_ok=True)
    if overwrite:
        for stale in existing:
            if stale not in written:
                stale.unlink()
    return written


def _lines(paths: list[Path]) -> Iterator[bytes]:
    for p in paths:
        with open(p, "rb") as f:
            yield from fr.read_text(f, str(p))


def _files(paths: list[Path]) -> Iterator[bytes]:
    for p in paths:
        if p.is_dir():
            for q in sorted(x for x in p.rglob("*") if x.is_file()):
                yield q.read_bytes()
        else:
            yield p.read_bytes()


def verify(directory: Path, framing: str, check_crc: bool = True) -> tuple[int, int]:
    """(files, records) in directory; RecordError on the first bad record."""
    from byoc.data.dataset import list_files

    files = list_files(directory)
    records = 0
    for p in files:
        with open(p, "rb") as f:
            for _ in fr.read(f, framing, str(p), check_crc):
                records += 1
    return len(files), records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="byoc-shards", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write records as shards")
    w.add_argument("--framing", choices=fr.FRAMINGS, default="recordio")
    w.add_argument("--out", required=True, type=Path, help="directory for the shards")
    src = w.add_mutually_exclusive_group(required=True)
    src.add_argument("--lines", nargs="+", type=Path, help="files whose lines are the records")
    src.add_argument("--files", nargs="+", type=Path, help="files (or directories) each a record")
    w.add_argument("--records-per-shard", type=int, default=10_000)
    w.add_argument("--prefix", default="part")
    w.add_argument("--part-size", type=int, default=fr.MAX_PART, help="RecordIO: split bigger")
    w.add_argument("--overwrite", action="store_true")
    v = sub.add_parser("verify", help="read every record of a directory of shards")
    v.add_argument("--framing", choices=fr.FRAMINGS, default="recordio")
    v.add_argument("directory", type=Path)
    args = p.parse_args(argv)
    try:
        if args.command == "verify":
            if not args.directory.is_dir():
                raise ShardError(f"{args.directory} is not a directory")
            files, records = verify(args.directory, args.framing)
            print(
                f"{args.directory}: {files} file(s), {records} {args.framing} record(s), all whole"
            )
            return 0
        inputs = args.lines or args.files
        missing = [str(x) for x in inputs if not x.exists()]
        if missing:
            raise ShardError(f"input not found: {', '.join(missing)}")
        source = _lines(inputs) if args.lines else _files(inputs)

        def progress(path: Path, count: int, size: int) -> None:
            print(f"wrote {path} ({count} records, {size / 1e6:.1f} MB)", file=sys.stderr)

        written = write_shards(
            source,
            args.out,
            args.framing,
            args.records_per_shard,
            args.prefix,
            args.part_size,
            args.overwrite,
            progress,
        )
        print(f"{len(written)} shard(s) in {args.out}")
        return 0
    except (ShardError, fr.RecordError, ValueError, OSError) as exc:
        print(f"byoc-shards: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
