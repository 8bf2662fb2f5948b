"""The Pipe-mode reader against a raw read of the same FIFO, in one process (no cluster):

    python -m byoc.bench.pipe --record-bytes 1024,1048576 --framing recordio,tfrecord \
        [--megabytes 256] [--repeats 3] [--timeout 300] --out pipe.json

Per framing and record size: a temporary ML root laid out as SageMaker lays out a Pipe-mode
channel (input/config/inputdataconfig.json declaring channel "train" with TrainingInputMode
Pipe; FIFOs input/data/train_<epoch>), a writer process that streams --megabytes MiB of framed
records into the FIFO, and byoc.data.ChannelDataset reading it (the real reader: framing,
checks, the stall watch), timed from the start of the epoch to its last record. The baseline:
the same stream through `cat FIFO > /dev/null`. Both are timed from the start of the read to its
end, with the writer already started, and both speeds are payload MB/s (1e6 bytes) so that
ratio = reader / raw is the share of the pipe's speed the reader keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from byoc.bench import stats

CHANNEL = "train"
FRAMINGS = ("recordio", "tfrecord")
# SageMaker's RecordWrapperType: RecordIO wraps each S3 object in RecordIO; "None" streams the
# objects as they are, which is how TFRecord shards (framed already) come down a Pipe channel.
WRAPPER = {"recordio": "RecordIO", "tfrecord": "None"}
MAX_RECORD = 256 << 20  # byoc.data's default record cap
BLOCK = 1 << 20  # the writer writes this much at a time: the writer costs next to nothing

# The writer: prints "ready" once started (so neither read is timed with the interpreter's
# start-up), then writes `count` copies of the framed record into the FIFO, BLOCK at a time.
WRITER = """
import os, sys
fifo, record_file, count, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
record = open(record_file, "rb").read()
per_block = max(1, block // len(record))
chunk = record * per_block
full, rest = divmod(count, per_block)
print("ready", flush=True)
with open(fifo, "wb") as f:
    for _ in range(full):
        f.write(chunk)
    f.write(record * rest)
"""


TIMED_OUT = "ran past its timeout (the writer was stopped)"


class BenchError(RuntimeError):
    """A case that could not be measured; says which and why."""


class Writer:
    """The writer process of one read, killed at its deadline (which ends the read too: the FIFO
    closes, the reader sees the end) and in any case by stop()."""

    def __init__(self, fifo: Path, record_file: Path, count: int, timeout: float, log: Path):
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(fifo), str(record_file), str(count), str(BLOCK)],
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        self.timed_out = False
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True
        self._timer.start()
        line = self.proc.stdout.readline()  # bounded: the timer kills the process
        if line.strip() != b"ready":
            self.stop()
            if self.timed_out:
                raise BenchError(TIMED_OUT)
            raise BenchError(f"the writer did not start: {self.error()}")

    def _expire(self) -> None:
        self.timed_out = True
        self.proc.kill()

    def error(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-800:].strip() or "no message"
        except OSError:
            return "no message"

    def finish(self, timeout: float) -> None:
        """Wait for the writer's exit after the read (it has written everything by then)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise BenchError("the writer did not exit after the read ended") from None
        if self.timed_out:
            raise BenchError(TIMED_OUT)
        if rc != 0:
            raise BenchError(f"the writer exited {rc}: {self.error()}")

    def stop(self) -> None:
        self._timer.cancel()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def make_root(root: Path, framing: str) -> Path:
    """An ML root with one Pipe-mode channel, as SageMaker lays it out; its input/data."""
    config = root / "input" / "config"
    config.mkdir(parents=True)
    channel = {
        "TrainingInputMode": "Pipe",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": WRAPPER[framing],
    }
    (config / "inputdataconfig.json").write_text(json.dumps({CHANNEL: channel}))
    data = root / "input" / "data"
    data.mkdir(parents=True)
    return data


def framed_record(framing: str, record_bytes: int) -> bytes:
    """One record of record_bytes payload, framed by byoc.data's own writers."""
    from byoc.data import framing as fr

    payload = bytes(i % 251 for i in range(min(record_bytes, 251))) * (record_bytes // 251 + 1)
    return fr.framer(framing)(payload[:record_bytes])


def read_channel(root: Path, framing: str, epoch: int, timeout: float) -> tuple[int, int]:
    """(records, payload bytes) of epoch `epoch` of the channel, read by ChannelDataset in this
    process: one consumer (the topology given, not the environment's, so a bench run inside a
    Horovod or torchrun job still reads the whole stream)."""
    from byoc.data import ChannelDataset, Topology

    ds = ChannelDataset(
        CHANNEL,
        framing=framing,
        root=root,
        topology=Topology(),
        fifo_timeout=timeout,
        stall_timeout=timeout,
        state_dir=root / "state",
    )
    ds.set_epoch(epoch)
    records = payload = 0
    for record in ds:
        records += 1
        payload += len(record)
    return records, payload


def read_raw(fifo: Path, timeout: float) -> None:
    with open(os.devnull, "wb") as null:
        try:
            done = subprocess.run(
                ["cat", str(fifo)],
                stdout=null,
                stderr=subprocess.PIPE,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchError(f"cat {fifo} ran past {timeout:g} s") from None
    if done.returncode != 0:
        raise BenchError(f"cat {fifo} exited {done.returncode}: {done.stderr.decode()[-400:]}")


def run_case(
    framing: str, record_bytes: int, megabytes: float, repeats: int, timeout: float, tmp: Path
) -> dict:
    """One (framing, record size) case, measured `repeats` times each way."""
    # Imported before any clock starts (it brings torch): the first repeat timed the import too.
    from byoc.data import ChannelDataset  # noqa: F401

    count = max(1, int(megabytes * stats.MIB) // record_bytes)
    payload_bytes = count * record_bytes
    record = framed_record(framing, record_bytes)
    root = Path(tempfile.mkdtemp(prefix=f"{framing}-{record_bytes}-", dir=tmp))
    data = make_root(root, framing)
    record_file = root / "record"
    record_file.write_bytes(record)
    reader: dict = {"mb_per_s": [], "records_per_s": []}
    raw: dict = {"mb_per_s": []}
    for epoch in range(repeats):
        # The reader: the channel's FIFO for this epoch, read through ChannelDataset.
        fifo = data / f"{CHANNEL}_{epoch}"
        os.mkfifo(fifo)
        writer = Writer(fifo, record_file, count, timeout, root / "writer.log")
        try:
            t0 = time.perf_counter()
            try:
                got, got_bytes = read_channel(root, framing, epoch, timeout)
            except Exception as exc:  # noqa: BLE001 - a killed writer shows as a short stream
                if writer.timed_out:
                    raise BenchError(f"the read ran past {timeout:g} s") from None
                raise BenchError(f"ChannelDataset failed: {type(exc).__name__}: {exc}") from None
            seconds = time.perf_counter() - t0
            writer.finish(timeout)
        finally:
            writer.stop()
        if (got, got_bytes) != (count, payload_bytes):
            raise BenchError(
                f"ChannelDataset read {got} records ({got_bytes} bytes), not {count} "
                f"({payload_bytes} bytes)"
            )
        reader["mb_per_s"].append(payload_bytes / 1e6 / seconds)
        reader["records_per_s"].append(count / seconds)
        # The baseline: the same stream through cat, nothing parsed.
        fifo = root / f"raw_{epoch}"
        os.mkfifo(fifo)
        writer = Writer(fifo, record_file, count, timeout, root / "writer.log")
        try:
            t0 = time.perf_counter()
            read_raw(fifo, timeout)
            seconds = time.perf_counter() - t0
            writer.finish(timeout)
        finally:
            writer.stop()
        raw["mb_per_s"].append(payload_bytes / 1e6 / seconds)
    reader["summary"] = stats.summary(reader["mb_per_s"])
    reader["records_per_s_summary"] = stats.summary(reader["records_per_s"])
    raw["summary"] = stats.summary(raw["mb_per_s"])
    return {
        "framing": framing,
        "record_bytes": record_bytes,
        "records": count,
        "payload_bytes": payload_bytes,
        "stream_bytes": count * len(record),
        "reader": reader,
        "raw": raw,
        "ratio": reader["summary"]["median"] / raw["summary"]["median"],
    }


def run(
    framings: list[str],
    record_sizes: list[int],
    megabytes: float,
    repeats: int,
    timeout: float,
    say=None,
) -> dict:
    """Every case; the document written to --out: {"megabytes", "repeats", "crc32c",
    "results": [run_case(...) per framing and record size]}."""
    from byoc.data import framing as fr

    tmp = Path(tempfile.mkdtemp(prefix="byoc-bench-pipe-"))
    try:
        results = []
        for framing in framings:
            for record_bytes in record_sizes:
                name = f"pipe {framing} {stats.human(record_bytes)} records"
                try:
                    case = run_case(framing, record_bytes, megabytes, repeats, timeout, tmp)
                except BenchError as exc:
                    raise BenchError(f"{name}: {exc}") from None
                results.append(case)
                if say is not None:
                    r, w = case["reader"], case["raw"]["summary"]
                    say(
                        f"{name}: reader {r['summary']['median']:.0f} MB/s "
                        f"({r['records_per_s_summary']['median']:.0f} records/s), "
                        f"raw {w['median']:.0f} MB/s, {case['ratio']:.2f}x"
                    )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Which CRC32C the TFRecord reader used: the C one of the image, or the slow fallback.
    crc = "google_crc32c" if fr.crc32c is not fr._crc32c_python else "python"
    return {"megabytes": megabytes, "repeats": repeats, "crc32c": crc, "results": results}


def _list(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",")]
        bad = [t for t in items if t not in allowed]
        if bad or len(set(items)) != len(items):
            raise argparse.ArgumentTypeError(
                f"{text!r}: a comma list of distinct {', '.join(allowed)}"
            )
        return items

    return parse


def _record_sizes(text: str) -> list[int]:
    try:
        return stats.parse_sizes(text, multiple=1, limit=MAX_RECORD, most=8, what="record size")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m byoc.bench.pipe", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--record-bytes", required=True, type=_record_sizes, help="e.g. 1K,1M")
    p.add_argument("--framing", required=True, type=_list(FRAMINGS), help="recordio,tfrecord")
    p.add_argument(
        "--megabytes",
        type=stats.bounded(float, 0, 65536, above_low=True),
        default=256.0,
        help="MiB per read",
    )
    p.add_argument("--repeats", type=stats.bounded(int, 1, 20), default=3)
    p.add_argument(
        "--timeout",
        type=stats.bounded(float, 0, 3600, above_low=True),
        default=300.0,
        help="seconds per read",
    )
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    too_big = [n for n in args.record_bytes if n > args.megabytes * stats.MIB]
    if too_big:
        p.error(f"record size {stats.human(too_big[0])} is above --megabytes {args.megabytes:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        doc = run(
            args.framing,
            args.record_bytes,
            args.megabytes,
            args.repeats,
            args.timeout,
            say=lambda line: print(line, flush=True),
        )
    except BenchError as exc:
        print(f"byoc.bench.pipe: {exc}", file=sys.stderr, flush=True)
        return 1
    from byoc.bench.allreduce import write_json

    write_json(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
