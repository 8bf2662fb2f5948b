"""Hostile input to byoc.data and byoc-shards: each is refused with the right exception type (or
exit status) and a message naming the file, channel or variable (and the byte offset where one
applies), quickly, with nothing written or deleted outside its place.

Grouped by what went wrong before: data loss, hangs, corrupt input, tracebacks instead of
messages. Everything happens under tmp_path: the epoch state, TMPDIR, the shard tool's runs.
"""

from __future__ import annotations

import io
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from byoc.data import (
    ChannelDataset,
    ChannelError,
    RecordError,
    StallError,
    Topology,
    dataset,
    framing,
    limits,
    shards,
)
from byoc.data.pipe import pipe_records

from tests.pipe_fake import FakePipe

ENTRYPOINT = Path(__file__).resolve().parents[3] / "entrypoint"
EXAMPLES = ENTRYPOINT.parent / "docker" / "examples"


@pytest.fixture(autouse=True)
def _contained(tmp_path, monkeypatch):
    """Defaults that would write to /tmp point into tmp_path; no BYOC_* knob leaks in."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv(dataset.STATE_DIR_ENV, str(tmp_path / "state"))
    for var in (limits.MAX_RECORD_ENV, limits.STALL_TIMEOUT_ENV):
        monkeypatch.delenv(var, raising=False)


def listing(root: Path) -> dict[str, object]:
    """Every entry under root (symlinks not followed): file bytes, 'dir', a link's target."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(mode):
                out[rel] = "dir"
            elif stat.S_ISREG(mode):
                out[rel] = p.read_bytes()
            else:
                out[rel] = "special"
    return out


def framed(records, kind="recordio", part_size=framing.MAX_PART) -> bytes:
    frame = framing.framer(kind, part_size)
    return b"".join(frame(r) for r in records)


def recs(n: int, tag: str = "r") -> list[bytes]:
    return [f"{tag}{i:05d}".encode() + b"x" * (i % 13) for i in range(n)]


def ml_root(tmp_path: Path, mode: str = "File", channel: str = "train") -> Path:
    root = tmp_path / "ml"
    (root / "input" / "config").mkdir(parents=True)
    (root / "input" / "data").mkdir(parents=True)
    config = {channel: {"TrainingInputMode": mode}}
    (root / "input" / "config" / "inputdataconfig.json").write_text(json.dumps(config))
    return root


def channel_ds(root: Path, tmp_path: Path, framing_: str = "recordio", **kw) -> ChannelDataset:
    return ChannelDataset("train", framing_, root=root, state_dir=tmp_path / "state", **kw)


def tfrecord_header(length: int) -> bytes:
    """A TFRecord header whose length CRC is right: only the cap can stop it."""
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", framing.masked_crc(raw))


def cli(tmp_path: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """byoc-shards as its own process (PYTHONPATH=entrypoint), in tmp_path."""
    full = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ENTRYPOINT),
        "TMPDIR": str(tmp_path / "tmp"),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", "import sys; from byoc.data.shards import main; sys.exit(main())"]
        + list(argv),
        cwd=tmp_path,
        env=full,
        capture_output=True,
        timeout=120,
        check=False,
    )


def shard_set(out: Path, lines: int, prefix: str = "train", per_shard: int = 2) -> None:
    src = out.parent / f"src-{prefix}.txt"
    src.write_bytes(b"".join(b"%s-%d\n" % (prefix.encode(), i) for i in range(lines)))
    argv = ["write", "--framing", "text", "--out", str(out), "--lines", str(src)]
    argv += ["--prefix", prefix, "--records-per-shard", str(per_shard)]
    assert shards.main(argv) == 0


def neighbours(out: Path) -> None:
    """Files next to the train shards that no write of prefix 'train' may touch."""
    (out / "train-extra-00000.txt").write_bytes(b"extra\n")
    (out / "train-00001-00000.txt").write_bytes(b"another prefix\n")
    (out / "train-00000.tfrecord").write_bytes(framed([b"other framing"], "tfrecord"))
    (out / "train-0001.txt").write_bytes(b"four digits: not ours\n")
    (out / "notes.md").write_bytes(b"# notes\n")
    (out / "sub").mkdir()
    (out / "sub" / "train-00000.txt").write_bytes(b"in a subdirectory\n")


# ============================================================================================
# Data loss
# ============================================================================================
class TestDataLoss:
    def test_overwrite_replaces_only_exactly_this_prefixs_shards(self, tmp_path, capsys):
        out = tmp_path / "out"
        out.mkdir()
        shard_set(out, 6)  # train-00000 .. train-00002
        neighbours(out)
        old = {f"train-0000{i}.txt" for i in range(3)}
        others = {k: v for k, v in listing(out).items() if k not in old}
        assert len(others) == 7
        (tmp_path / "new.txt").write_bytes(b"new-0\nnew-1\n")
        argv = ["write", "--framing", "text", "--out", str(out), "--lines"]
        argv += [str(tmp_path / "new.txt"), "--prefix", "train", "--overwrite"]
        assert shards.main(argv) == 0
        after = listing(out)
        assert after["train-00000.txt"] == b"new-0\nnew-1\n"
        assert "train-00001.txt" not in after and "train-00002.txt" not in after
        assert {k: after[k] for k in others} == others  # byte for byte
        assert set(after) == set(others) | {"train-00000.txt"}  # no staging directory left

    @pytest.mark.parametrize(
        "prefix", ["*", "train*", "tr?in", "[t]rain", "a/b", "../x", "", ".hidden", "-x", "x" * 201]
    )
    def test_a_prefix_that_is_no_plain_name_is_refused_before_anything(
        self, tmp_path, capsys, prefix
    ):
        out = tmp_path / "out"
        out.mkdir()
        shard_set(out, 4)
        neighbours(out)
        (tmp_path / "new.txt").write_bytes(b"a\n")
        capsys.readouterr()
        before = listing(tmp_path)
        argv = ["write", "--framing", "text", "--out", str(out), "--lines"]
        argv += [str(tmp_path / "new.txt"), f"--prefix={prefix}", "--overwrite"]
        assert shards.main(argv) == 2
        err = capsys.readouterr().err
        assert f"prefix {prefix!r}" in err and "glob" in err and "Traceback" not in err
        assert listing(tmp_path) == before

    @pytest.mark.parametrize("failure", [OSError("source went away"), KeyboardInterrupt()])
    def test_a_failed_overwrite_leaves_the_old_set_whole_and_no_staging(self, tmp_path, failure):
        out = tmp_path / "out"
        out.mkdir()
        shard_set(out, 6)
        neighbours(out)
        before = listing(tmp_path)

        def source():
            for i in range(5):  # past the first shard: one is complete when it fails
                yield b"new %d" % i
            raise failure

        with pytest.raises(type(failure)):
            shards.write_shards(
                source(), out, "text", records_per_shard=2, prefix="train", overwrite=True
            )
        assert listing(tmp_path) == before

    def test_a_cli_write_failing_on_bad_input_midway_keeps_the_old_set(self, tmp_path, capsys):
        out = tmp_path / "out"
        out.mkdir()
        shard_set(out, 6)
        src = tmp_path / "new.txt"
        src.write_bytes(b"ok-1\nok-2\nok-3\n" + b"y" * 100 + b"\n")
        capsys.readouterr()
        before = listing(tmp_path)
        argv = ["write", "--framing", "text", "--out", str(out), "--lines", str(src)]
        argv += ["--prefix", "train", "--overwrite", "--records-per-shard", "1"]
        assert shards.main([*argv, "--max-record-bytes", "50"]) == 2
        err = capsys.readouterr().err
        assert f"{src}, byte 15: a line with no newline in its first 52 bytes is above the " in err
        assert "record cap of 50 bytes" in err
        assert listing(tmp_path) == before
        assert shards.main(["verify", "--framing", "text", str(out)]) == 0  # the old set, whole

    @pytest.mark.parametrize(
        ("record", "kind", "message"),
        [
            (5, "recordio", "record 1 is int, not bytes"),  # bytes(5): five zero bytes, silently
            ("text", "tfrecord", "record 1 is str, not bytes"),
            (b"ends in CR\r", "text", r"record 1: a text record cannot end in a carriage return"),
            (b"two\nlines", "text", "record 1: a text record must be one non-empty line"),
        ],
    )
    def test_records_that_would_not_come_back_as_given_are_refused(
        self, tmp_path, record, kind, message
    ):
        before = listing(tmp_path)
        with pytest.raises(shards.ShardError, match=message):
            shards.write_shards([b"fine", record], tmp_path / "out", kind)
        assert listing(tmp_path) == {**before, "out": "dir"}

    def test_a_record_the_readers_would_refuse_is_not_written(self, tmp_path):
        with pytest.raises(shards.ShardError, match="record 1 is 11 bytes, above the record cap"):
            shards.write_shards([b"ok", b"x" * 11], tmp_path / "out", max_record_bytes=10)
        assert list((tmp_path / "out").iterdir()) == []

    def test_a_symlinked_directory_in_a_file_channel_is_read_not_skipped(self, tmp_path):
        root = ml_root(tmp_path)
        d = root / "input" / "data" / "train"
        d.mkdir()
        (d / "a.recordio").write_bytes(framed(recs(3, "a")))
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "b.recordio").write_bytes(framed(recs(3, "b")))
        (d / "more").symlink_to(elsewhere)
        before = listing(root)
        assert list(channel_ds(root, tmp_path)) == recs(3, "a") + recs(3, "b")
        assert listing(root) == before

    def test_an_empty_file_channel_is_an_error_not_an_empty_epoch(self, tmp_path):
        root = ml_root(tmp_path)
        (root / "input" / "data" / "train").mkdir()
        (root / "input" / "data" / "train" / ".hidden").write_bytes(b"not data")
        with pytest.raises(ChannelError, match=r"channel 'train' epoch 0: .*train holds no data"):
            list(channel_ds(root, tmp_path))
        # ShardedByS3Key: a host may get no object at all; that is an empty share, not an error.
        assert list(channel_ds(root, tmp_path, distribution="ShardedByS3Key")) == []

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            # Every rank would read all of the data: trained on n times.
            ({"RANK": "3"}, r"RANK='3' is set, but no world size"),
            ({"WORLD_SIZE": "4"}, r"WORLD_SIZE='4' is set, but no rank"),
            # A host rank past the host count matched no record: that host read nothing.
            (
                {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "4", "HOROVOD_CROSS_RANK": "2"}
                | {"HOROVOD_CROSS_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}
                | {"HOROVOD_LOCAL_SIZE": "2"},
                r"HOROVOD_CROSS_RANK=2: must be from 0 to HOROVOD_CROSS_SIZE - 1 \(1\)",
            ),
        ],
    )
    def test_a_topology_that_would_lose_or_repeat_data_is_refused(self, env, message):
        with pytest.raises(ChannelError, match=message):
            dataset.topology(env)


# ============================================================================================
# Hangs
# ============================================================================================
def fifo_with_writer(path: Path, data: bytes) -> int:
    """A FIFO whose writer sent data and then went quiet without closing: the writer's fd."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)  # Linux: never blocks, and keeps the FIFO open for writing
    os.write(fd, data)
    return fd


BAD_SECONDS = ["nan", "inf", "-inf", "0", "-1", "1e9"]


def example_without_torch(tmp_path: Path, args: list[str]) -> subprocess.CompletedProcess:
    """python ARGS beside the examples, with empty torch and horovod packages: the examples
    parse their arguments before they use either (the dev venv has neither)."""
    stubs = tmp_path / "stubs"
    for package in ("torch", "torch/utils", "torch/utils/data", "horovod", "horovod/torch"):
        (stubs / package).mkdir(parents=True, exist_ok=True)
        (stubs / package / "__init__.py").touch()
    (stubs / "torch/utils/data/__init__.py").write_text(
        "DataLoader = DistributedSampler = TensorDataset = None\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stubs), str(ENTRYPOINT)])}
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=EXAMPLES,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


class TestHangs:
    @pytest.mark.parametrize("param", ["fifo_timeout", "stall_timeout"])
    @pytest.mark.parametrize(
        "value", [float("nan"), float("inf"), float("-inf"), -1, 0, "600", True, 1e9]
    )
    def test_a_timeout_that_never_expires_or_never_waits_is_refused(self, tmp_path, param, value):
        before = listing(tmp_path)
        with pytest.raises(ValueError, match=rf"^{param}=.*(timeout must be|a number of sec)"):
            ChannelDataset("train", root=tmp_path, **{param: value})
        assert listing(tmp_path) == before

    def test_pipe_records_itself_refuses_nan(self, tmp_path):
        with pytest.raises(ValueError, match="fifo_timeout=nan"):
            list(pipe_records(tmp_path / "train_0", "recordio", "w", float("nan")))

    @pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "abc", "1e9"])
    def test_a_bad_stall_timeout_variable_is_named(self, monkeypatch, value):
        monkeypatch.setenv(limits.STALL_TIMEOUT_ENV, value)
        with pytest.raises(ValueError, match=rf"BYOC_PIPE_STALL_TIMEOUT='{value}': .*604800"):
            ChannelDataset("train")

    @pytest.mark.parametrize(
        ("value", "reason"),
        [
            *[(v, "a timeout must be more than 0 and at most 604800 s") for v in BAD_SECONDS],
            ("abc", "is not a number of seconds"),
            ("", "is not a number of seconds"),
        ],
    )
    def test_the_examples_fifo_timeout_refuses_what_is_no_timeout(self, tmp_path, value, reason):
        run = example_without_torch(
            tmp_path, [str(EXAMPLES / "train_synthetic.py"), f"--fifo_timeout={value}"]
        )
        assert run.returncode == 2, run.stderr
        last = run.stderr.strip().splitlines()[-1]
        assert last.startswith(
            f"train_synthetic.py: error: argument --fifo-timeout/--fifo_timeout: {value!r}"
        ), run.stderr
        assert reason in last and "Traceback" not in run.stderr

    @pytest.mark.parametrize(("args", "seconds"), [([], 600.0), (["--fifo-timeout", "60"], 60.0)])
    def test_the_examples_fifo_timeout_is_taken(self, tmp_path, args, seconds):
        run = example_without_torch(
            tmp_path,
            ["-c", "import train_synthetic as t; print(t.parse_args().fifo_timeout)", *args],
        )
        assert run.returncode == 0, run.stderr
        assert float(run.stdout) == seconds

    @pytest.mark.parametrize(
        ("cut", "offset", "where"),
        [
            (-50, None, "in the middle of the record that starts at byte 232"),
            (0, 348, "between records"),
        ],
    )
    def test_a_writer_that_stops_without_closing_fails_after_the_stall_timeout(
        self, tmp_path, cut, offset, where
    ):
        root = ml_root(tmp_path, "Pipe")
        data = framed([b"x" * 100] * 3, "tfrecord")  # 116 bytes each
        fd = fifo_with_writer(root / "input" / "data" / "train_0", data[: len(data) + cut])
        try:
            t0 = time.monotonic()
            ds = channel_ds(root, tmp_path, "tfrecord", fifo_timeout=30, stall_timeout=0.5)
            with pytest.raises(StallError) as caught:
                list(ds)
            took = time.monotonic() - t0
        finally:
            os.close(fd)
        got = offset if offset is not None else len(data) + cut
        assert str(caught.value).startswith(f"channel 'train' epoch 0, byte {got}: the writer")
        assert "sent nothing for 0.5 s" in str(caught.value) and where in str(caught.value)
        assert 0.4 <= took < 60

    def test_a_stalled_writer_reaches_every_fanout_consumer_as_the_same_error(self, tmp_path):
        root = ml_root(tmp_path, "Pipe")
        data = framed(recs(50), "recordio")
        fd = fifo_with_writer(root / "input" / "data" / "train_0", data[:-7])
        errors: dict[int, BaseException] = {}
        got: dict[int, int] = {}

        def consumer(i):
            topo = Topology(i, 2, i, 2, 0, 1)
            ds = channel_ds(root, tmp_path, topology=topo, fifo_timeout=30, stall_timeout=1)
            n = 0
            try:
                for _ in ds:
                    n += 1
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors[i] = exc
            got[i] = n

        threads = [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(2)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
        finally:
            os.close(fd)
        assert not any(t.is_alive() for t in threads), "a consumer hung"
        assert sorted(errors) == [0, 1]
        for exc in errors.values():
            assert type(exc) is StallError
            assert str(exc).startswith(f"channel 'train' epoch 0, byte {len(data) - 7}: ")
            assert "in the middle of the record that starts at byte" in str(exc)

    def test_a_consumer_that_leaves_early_does_not_hold_up_the_others(self, tmp_path):
        root = ml_root(tmp_path, "Pipe")
        records = recs(400)
        pipe = FakePipe(root / "input" / "data", "train", [framed(records)])
        pipe.start()
        got: dict[int, list[bytes]] = {}

        def consumer(i):
            ds = channel_ds(root, tmp_path, topology=Topology(i, 2, i, 2, 0, 1), fanout_queue=2)
            it = iter(ds)
            if i == 1:
                got[i] = [next(it)]
                it.close()  # goes away with 199 records of its share unread
            else:
                got[i] = list(it)

        threads = [threading.Thread(target=consumer, args=(i,), daemon=True) for i in range(2)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(90)
        finally:
            pipe.stop()
        assert not any(t.is_alive() for t in threads), "the staying consumer hung"
        assert got[0] == records[0::2]

    def test_a_fifo_path_that_is_a_symlink_loop_fails_at_once(self, tmp_path):
        root = ml_root(tmp_path, "Pipe")
        data = root / "input" / "data"
        (data / "train_0").symlink_to("loop")
        (data / "loop").symlink_to("train_0")
        before = listing(root)
        t0 = time.monotonic()
        with pytest.raises(ChannelError, match=r"epoch 0: cannot open .*train_0: Too many levels"):
            list(channel_ds(root, tmp_path))  # fifo_timeout: 600 s; not waited for
        assert time.monotonic() - t0 < 30
        assert listing(root) == before

    @pytest.mark.parametrize(("make", "kind"), [("dir", "a directory"), ("dev", "a device")])
    def test_a_fifo_path_that_is_no_fifo_is_named(self, tmp_path, make, kind):
        root = ml_root(tmp_path, "Pipe")
        path = root / "input" / "data" / "train_0"
        if make == "dir":
            path.mkdir()
        else:
            path.symlink_to("/dev/null")
        with pytest.raises(ChannelError, match=rf"epoch 0: .*train_0 is {kind}"):
            list(channel_ds(root, tmp_path, fifo_timeout=5))

    def test_a_fifo_nobody_writes_is_waited_for_only_fifo_timeout(self, tmp_path):
        root = ml_root(tmp_path, "Pipe")
        os.mkfifo(root / "input" / "data" / "train_0")
        t0 = time.monotonic()
        with pytest.raises(ChannelError, match=r"train_0 exists but no data came within 0.5 s"):
            list(channel_ds(root, tmp_path, fifo_timeout=0.5))
        assert 0.4 <= time.monotonic() - t0 < 30

    def test_a_fifo_given_to_files_is_refused_not_read_forever(self, tmp_path):
        os.mkfifo(tmp_path / "fifo")
        before = listing(tmp_path)
        run = cli(tmp_path, "write", "--out", "out", "--files", "fifo")
        assert run.returncode == 2, run.stderr
        assert b"fifo is not a regular file" in run.stderr and b"Traceback" not in run.stderr
        assert listing(tmp_path) == {**before, "out": "dir"}


# ============================================================================================
# Corrupt input
# ============================================================================================
class TestCorruptInput:
    @pytest.mark.parametrize("length", [2**34, 2**62, 2**64 - 1])
    @pytest.mark.parametrize("check_crc", [True, False])
    def test_a_giant_tfrecord_length_is_a_record_error_naming_the_file(
        self, tmp_path, length, check_crc
    ):
        root = ml_root(tmp_path)
        d = root / "input" / "data" / "train"
        d.mkdir()
        good = framed([b"first"], "tfrecord")
        (d / "bad.tfrecord").write_bytes(good + tfrecord_header(length) + b"x" * 64)
        before = listing(root)
        tracemalloc.start()
        try:
            with pytest.raises(RecordError) as caught:
                list(channel_ds(root, tmp_path, "tfrecord", check_crc=check_crc))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert str(caught.value) == (
            f"channel 'train' epoch 0 (bad.tfrecord), byte {len(good)}: a record of {length} "
            f"bytes is above the record cap of {limits.DEFAULT_MAX_RECORD} bytes "
            "(max_record_bytes= or $BYOC_MAX_RECORD_BYTES): corrupt data, another framing, or "
            "records larger than the cap allows"
        )
        assert peak < 64 << 20  # nothing of the claimed length was allocated
        assert listing(root) == before

    @pytest.mark.parametrize("length", [2**34, 2**62, 2**64 - 1])
    def test_a_giant_tfrecord_length_in_pipe_mode_names_channel_epoch_offset(
        self, tmp_path, length
    ):
        root = ml_root(tmp_path, "Pipe")
        good = framed(recs(3), "tfrecord")
        pipe = FakePipe(root / "input" / "data", "train", [good + tfrecord_header(length)])
        pipe.start()
        try:
            with pytest.raises(RecordError, match=rf"^channel 'train' epoch 0, byte {len(good)}: "):
                list(channel_ds(root, tmp_path, "tfrecord", fifo_timeout=30, stall_timeout=30))
        finally:
            pipe.stop()

    def test_recordio_lengths_above_the_cap_keyword_and_variable(self, tmp_path, monkeypatch):
        data = framed([b"a" * 8, b"b" * 40])
        at = len(framed([b"a" * 8]))
        with pytest.raises(
            RecordError, match=rf"^f, byte {at}: a record of 40 bytes is above .*32"
        ):
            list(framing.read(io.BytesIO(data), "recordio", "f", max_record_bytes=32))
        monkeypatch.setenv(limits.MAX_RECORD_ENV, "32")
        with pytest.raises(RecordError, match=rf"byte {at}: a record of 40 bytes"):
            list(framing.read(io.BytesIO(data), "recordio", "f"))
        # The variable applies to a dataset made now; the keyword wins over it.
        root = ml_root(tmp_path)
        (root / "input" / "data" / "train").mkdir()
        (root / "input" / "data" / "train" / "p.recordio").write_bytes(data)
        with pytest.raises(RecordError, match=r"\(p.recordio\), byte 16: a record of 40 bytes"):
            list(channel_ds(root, tmp_path))
        assert len(list(channel_ds(root, tmp_path, max_record_bytes=40))) == 2

    def test_a_multipart_recordio_record_is_capped_as_a_whole(self):
        data = framed([b"ok", b"z" * 200], part_size=16)  # 13 parts of at most 16 bytes
        with pytest.raises(RecordError, match=r"byte 12: a multipart record of at least 112 bytes"):
            list(framing.read(io.BytesIO(data), "recordio", "f", max_record_bytes=99))
        with pytest.raises(RecordError, match=r"byte 12: a multipart record of 200 bytes is above"):
            list(framing.read(io.BytesIO(data), "recordio", "f", max_record_bytes=199))
        assert len(list(framing.read(io.BytesIO(data), "recordio", "f", max_record_bytes=200))) == 2

    def test_a_recordio_header_flag_that_cannot_be_is_named_before_any_payload(self):
        header = struct.pack("<II", framing.RECORDIO_MAGIC, (5 << 29) | ((1 << 29) - 1))
        with pytest.raises(RecordError, match=r"^f, byte 0: unknown RecordIO part flag 5$"):
            list(framing.read(io.BytesIO(header + b"short"), "recordio", "f"))

    def test_a_truncated_length_under_the_cap_allocates_as_the_data_comes(self, tmp_path):
        p = tmp_path / "t.recordio"
        p.write_bytes(struct.pack("<II", framing.RECORDIO_MAGIC, 200 << 20) + b"x" * 100)
        tracemalloc.start()
        try:
            with (
                open(p, "rb", buffering=1 << 20) as f,
                pytest.raises(
                    RecordError, match=r"^t, byte 0: truncated record: a 209715200-byte payload"
                ),
            ):
                list(framing.read(f, "recordio", "t"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20  # not the 200 MiB the header claims

    @pytest.mark.parametrize("kind", ["text", "recordio"])
    def test_an_endless_stream_of_zeros_ends_in_a_record_error(self, kind):
        class Zeros(io.RawIOBase):
            def readable(self):
                return True

            def readinto(self, b):
                b[:] = bytes(len(b))
                return len(b)

        stream = io.BufferedReader(Zeros(), 1 << 16)
        message = "not a RecordIO record" if kind == "recordio" else "no newline in its first"
        with pytest.raises(RecordError, match=rf"^/dev/zero, byte 0: .*{message}"):
            list(framing.read(stream, kind, "/dev/zero", max_record_bytes=1 << 20))

    @pytest.mark.parametrize("value", ["0", "-1", "2147483649", "abc", "1.5", "1e6", "0x10"])
    def test_a_bad_record_cap_variable_is_named_with_its_range(self, monkeypatch, value):
        monkeypatch.setenv(limits.MAX_RECORD_ENV, value)
        with pytest.raises(
            ValueError, match=rf"^BYOC_MAX_RECORD_BYTES='{value}': .* from 1 to 2147483648"
        ):
            ChannelDataset("train")
        with pytest.raises(ValueError, match="BYOC_MAX_RECORD_BYTES"):
            list(framing.read(io.BytesIO(b"a\n"), "text"))

    @pytest.mark.parametrize("value", [0, -1, 2**31 + 1, 1.5, True, "256"])
    def test_a_bad_record_cap_keyword_is_named(self, value):
        with pytest.raises(ValueError, match=r"^max_record_bytes=.* from 1 to 2147483648"):
            ChannelDataset("train", max_record_bytes=value)

    def test_non_utf8_text_records_round_trip_as_bytes(self, tmp_path, capsys):
        src = tmp_path / "latin1.txt"
        lines = [b"caf\xe9", b"\xff\xfe\x00binary", "naïve".encode()]
        src.write_bytes(b"\n".join(lines) + b"\r\n")
        root = ml_root(tmp_path)
        out = root / "input" / "data" / "train"
        argv = ["write", "--framing", "text", "--out", str(out), "--lines", str(src)]
        assert shards.main(argv) == 0
        assert shards.main(["verify", "--framing", "text", str(out)]) == 0
        assert list(channel_ds(root, tmp_path, "text")) == lines


# ============================================================================================
# Tracebacks instead of messages
# ============================================================================================
GLOO = {
    "HOROVOD_RANK": "1",
    "HOROVOD_SIZE": "4",
    "HOROVOD_LOCAL_RANK": "1",
    "HOROVOD_LOCAL_SIZE": "2",
}


class TestMessagesNotTracebacks:
    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"HOROVOD_SIZE": "0"}, r"^HOROVOD_SIZE=0: the number of processes must be at least"),
            ({"HOROVOD_SIZE": "-2"}, r"^HOROVOD_SIZE=-2: "),
            ({"HOROVOD_RANK": "4"}, r"^HOROVOD_RANK=4: must be from 0 to HOROVOD_SIZE - 1 \(3\)"),
            ({"HOROVOD_RANK": "-1"}, r"^HOROVOD_RANK=-1: must be from 0"),
            ({"HOROVOD_LOCAL_SIZE": "0"}, r"^HOROVOD_LOCAL_SIZE=0: processes on this host"),
            ({"HOROVOD_LOCAL_SIZE": "8"}, r"^HOROVOD_LOCAL_SIZE=8: processes on this host must"),
            ({"HOROVOD_LOCAL_RANK": "2"}, r"^HOROVOD_LOCAL_RANK=2: must be from 0 to HOROVOD_LOC"),
            ({"HOROVOD_LOCAL_SIZE": "3"}, r"^HOROVOD_SIZE=4 is not a multiple of HOROVOD_LOCAL_S"),
            ({"HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "0"}, r"^HOROVOD_CROSS_SIZE=0: "),
            ({"HOROVOD_RANK": "1e3"}, r"^HOROVOD_RANK='1e3' is not a number"),
        ],
    )
    def test_a_topology_that_cannot_be_names_the_variable(self, tmp_path, change, message):
        env = {**GLOO, **change}
        with pytest.raises(ChannelError, match=message):
            dataset.topology(env)

    def test_an_explicit_topology_that_cannot_be_is_named_too(self):
        with pytest.raises(ChannelError, match=r"^Topology.size=0: the number of processes"):
            ChannelDataset("train", topology=Topology(0, 0, 0, 1, 0, 1))

    @pytest.mark.parametrize("channel", ["../etc", "a/b", "{foo}", "train_{rank", "", 5, "a b"])
    def test_a_channel_that_is_no_channel_name_is_refused(self, tmp_path, channel):
        before = listing(tmp_path)
        with pytest.raises(ValueError, match=r"^channel .*: (a channel name|not a SageMaker)"):
            ChannelDataset(channel, root=tmp_path)
        assert listing(tmp_path) == before

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"fanout_queue": 0}, "fanout_queue=0: must be a whole number >= 1"),
            ({"shuffle_buffer": 2.5}, "shuffle_buffer=2.5: must be a whole number"),
            ({"framing": "csv"}, "framing 'csv': use one of recordio, tfrecord, text"),
        ],
    )
    def test_bad_dataset_arguments_are_named(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            ChannelDataset("train", **kwargs)

    @pytest.mark.parametrize("epoch", [-1, 1.5, True])
    def test_set_epoch_refuses_what_is_no_epoch(self, epoch):
        with pytest.raises(ValueError, match=r"set_epoch\(.*\): an epoch is a whole number >= 0"):
            ChannelDataset("train").set_epoch(epoch)

    def test_an_unusable_state_dir_or_counter_is_named(self, tmp_path):
        root = ml_root(tmp_path)
        (root / "input" / "data" / "train").mkdir()
        (root / "input" / "data" / "train" / "a.recordio").write_bytes(framed([b"x"]))
        (tmp_path / "state-file").write_bytes(b"")
        ds = ChannelDataset("train", root=root, state_dir=tmp_path / "state-file")
        with pytest.raises(ChannelError, match=r"epoch counter in .*state-file cannot be kept"):
            list(ds)
        state = tmp_path / "state"
        assert list(channel_ds(root, tmp_path)) == [b"x"]
        (counter,) = state.iterdir()
        counter.write_text("-3")
        with pytest.raises(ChannelError, match=r"epoch counter .* holds '-3', not an epoch"):
            list(channel_ds(root, tmp_path))

    @pytest.mark.parametrize("link", ["loop", "cycle", "dangling", "fifo"])
    def test_links_and_specials_in_a_file_channel_are_named(self, tmp_path, link, capsys):
        root = ml_root(tmp_path)
        d = root / "input" / "data" / "train"
        (d / "sub").mkdir(parents=True)
        (d / "a.recordio").write_bytes(framed([b"x"]))
        if link == "loop":
            (d / "l1").symlink_to("l2")
            (d / "l2").symlink_to("l1")
            message = r"train/l\d is a symlink loop"
        elif link == "cycle":
            (d / "sub" / "up").symlink_to("..")
            message = r"train/sub/up leads back to a directory already read"
        elif link == "dangling":
            (d / "gone").symlink_to("nowhere")
            message = r"train/gone is a broken symlink"
        else:
            os.mkfifo(d / "fifo")
            message = r"train/fifo is neither a file nor a directory"
        before = listing(root)
        with pytest.raises(ChannelError, match=rf"^channel 'train' epoch 0: .*{message}"):
            list(channel_ds(root, tmp_path))
        assert shards.main(["verify", str(d)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.startswith("byoc-shards: error: ")
        assert listing(root) == before

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["write", "--out", "afile", "--lines", "in.txt"], "--out afile: afile is not a dir"),
            (["write", "--out", "afile/x", "--lines", "in.txt"], "afile is not a directory"),
            (["write", "--out", "o", "--lines", "adir"], "--lines takes files, not directories"),
            (["write", "--out", "o", "--lines", "nope"], "input not found: nope"),
            (["write", "--out", "o", "--lines", "in.txt", "--part-size", str(2**40)], "part_size"),
            (["write", "--out", "o", "--lines", "in.txt", "--records-per-shard", "-1"], "at least"),
            (["write", "--out", "o", "--lines", "in.txt", "--records-per-shard", "0"], "at least"),
            (["write", "--out", "o", "--lines", "in.txt", "--framing", "csv"], "invalid choice"),
            (["write", "--out", "o", "--lines", "in.txt", "--max-record-bytes", "0"], "1 to 21"),
            (["write", "--out", "o", "--lines", "in.txt", "--records-per-shard", "x"], "invalid"),
            (["write", "--out", "o", "--files", "in.txt", "--max-record-bytes", "3"], "in.txt is"),
            (["verify", "adir"], "adir holds no shard files"),
            (["verify", "nope"], "nope is not a directory"),
            (["verify", "afile"], "afile is not a directory"),
            (["shuffle"], "invalid choice"),
            ([], "the following arguments are required"),
        ],
    )
    def test_bad_cli_arguments_exit_2_with_a_message(self, tmp_path, argv, message):
        (tmp_path / "afile").write_bytes(b"a file\n")
        (tmp_path / "adir").mkdir()
        (tmp_path / "in.txt").write_bytes(b"one\ntwo\n")
        before = listing(tmp_path)
        run = cli(tmp_path, *argv)
        assert run.returncode == 2, run.stderr
        assert message.encode() in run.stderr and b"Traceback" not in run.stderr
        after = listing(tmp_path)
        assert after in (before, {**before, "o": "dir"})  # at most the (empty) output directory

    def test_an_io_failure_exits_1_and_keeps_the_old_set(self, tmp_path, monkeypatch, capsys):
        out = tmp_path / "out"
        out.mkdir()
        shard_set(out, 6)
        capsys.readouterr()
        before = listing(tmp_path)
        real_open = open

        class Full(io.RawIOBase):
            """A disk that fills up after the first shard."""

            def __init__(self, path):
                self.path = path
                self.f = real_open(path, "wb")

            def writable(self):
                return True

            def write(self, b):
                if "00001" in str(self.path):
                    raise OSError(28, "No space left on device", str(self.path))
                return self.f.write(b)

            def close(self):
                self.f.close()
                super().close()

        def fake_open(path, mode="r", *args, **kwargs):
            return Full(path) if "w" in mode else real_open(path, mode, *args, **kwargs)

        monkeypatch.setattr(shards, "open", fake_open, raising=False)
        argv = [
            "write",
            "--framing",
            "text",
            "--out",
            str(out),
            "--lines",
            str(tmp_path / "src-train.txt"),
        ]
        argv += ["--prefix", "train", "--overwrite", "--records-per-shard", "1"]
        assert shards.main(argv) == 1
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith("byoc-shards: I/O error: No space left on device: ")
        assert "train-00001.txt" in err and "Traceback" not in err
        assert listing(tmp_path) == before

    def test_a_name_that_is_not_utf8_is_printed_not_a_traceback(self, tmp_path):
        (tmp_path / "in.txt").write_bytes(b"one\ntwo\n")
        out = os.fsdecode(b"out-\xff")
        env = {"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}
        run = cli(tmp_path, "write", "--out", out, "--lines", "in.txt", env=env)
        assert run.returncode == 0, run.stderr
        assert run.stdout == b"1 shard(s) in out-\\xff\n"
        run = cli(tmp_path, "verify", out, env=env)
        assert run.returncode == 0, run.stderr
        assert b"out-\\xff: 1 file(s), 2 recordio record(s), all whole" in run.stdout
