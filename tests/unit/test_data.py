"""byoc.data without Docker or torch: framings, Pipe and File channels, sharding, the shard tool."""

from __future__ import annotations

import io
import json
import multiprocessing
import re
import struct
import threading
from collections import Counter
from pathlib import Path

import pytest
from byoc.data import ChannelDataset, ChannelError, RecordError, Topology, dataset, framing, shards

from tests.pipe_fake import FakePipe


@pytest.fixture(autouse=True)
def _epoch_state_in_tmp_path(tmp_path, monkeypatch):
    """ChannelDataset keeps epoch counters in a state directory: never the shared /tmp here."""
    monkeypatch.setenv("BYOC_DATA_STATE_DIR", str(tmp_path / "epoch-state"))


def recs(n: int, tag: str = "r", size: int = 0) -> list[bytes]:
    return [f"{tag}{i:05d}".encode() + b"x" * (size or i % 13) for i in range(n)]


def framed(records, kind="recordio", part_size=framing.MAX_PART) -> bytes:
    frame = framing.framer(kind, part_size)
    return b"".join(frame(r) for r in records)


def read_all(data: bytes, kind: str) -> list[bytes]:
    return list(framing.read(io.BytesIO(data), kind, "test"))


def make_root(tmp_path: Path, channels: dict | None = None, host="algo-1") -> Path:
    cfg = tmp_path / "input" / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "inputdataconfig.json").write_text(json.dumps(channels or {}))
    (cfg / "resourceconfig.json").write_text(
        json.dumps({"current_host": host, "hosts": ["algo-1", "algo-2"]})
    )
    (tmp_path / "input" / "data").mkdir(parents=True, exist_ok=True)
    return tmp_path


# --- framings ------------------------------------------------------------------------------
def test_crc32c_matches_the_standard_check_value():
    assert framing._crc32c_python(b"123456789") == 0xE3069283
    assert framing.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("kind", framing.FRAMINGS)
def test_every_framing_round_trips(kind):
    records = recs(50)
    assert read_all(framed(records, kind), kind) == records


def test_recordio_pads_to_4_bytes_and_reassembles_multipart_records():
    big = bytes(range(256)) * 40 + b"tail"  # 10244 bytes
    data = framed([b"a", big, b"bc"], "recordio", part_size=1000)
    # 11 parts for the big record: first, 9 middles, last.
    kinds = []
    off = 0
    while off < len(data):
        magic, word = struct.unpack_from("<II", data, off)
        assert magic == framing.RECORDIO_MAGIC
        kinds.append(word >> 29)
        off += 8 + (word & framing._LENGTH_MASK) + (-(word & framing._LENGTH_MASK) % 4)
    assert kinds == [0, 1] + [2] * 9 + [3, 0]
    assert len(data) % 4 == 0
    assert read_all(data, "recordio") == [b"a", big, b"bc"]


def test_a_corrupt_tfrecord_crc_names_the_offset():
    records = recs(5, size=20)
    data = bytearray(framed(records, "tfrecord"))
    second = 12 + len(records[0]) + 4
    data[second + 12 + 3] ^= 0xFF  # a payload byte of record 2
    with pytest.raises(RecordError, match=rf"test, byte {second}: TFRecord payload CRC mismatch"):
        read_all(bytes(data), "tfrecord")
    data = bytearray(framed(records, "tfrecord"))
    data[0] ^= 1  # the length of record 1
    with pytest.raises(RecordError, match="byte 0: TFRecord length CRC mismatch"):
        read_all(bytes(data), "tfrecord")
    # Turned off, the corruption goes through (as TensorFlow's reader does with no check).
    data = bytearray(framed(records, "tfrecord"))
    data[second + 12 + 3] ^= 0xFF
    got = list(framing.read_tfrecord(io.BytesIO(bytes(data)), "t", check_crc=False))
    assert len(got) == 5 and got[1] != records[1]


@pytest.mark.parametrize("kind", ["recordio", "tfrecord"])
def test_a_truncated_record_names_where_it_started(kind):
    records = recs(3, size=100)
    data = framed(records, kind)
    last_start = len(framed(records[:2], kind))
    for cut in (last_start + 3, last_start + 30, len(data) - 1):
        with pytest.raises(RecordError, match=rf"test, byte {last_start}: truncated record"):
            read_all(data[:cut], kind)


def test_recordio_structure_errors():
    with pytest.raises(RecordError, match="byte 0: not a RecordIO record"):
        read_all(b"\0" * 16, "recordio")
    parts = framed([b"x" * 30], "recordio", part_size=10)
    with pytest.raises(RecordError, match="no last part"):
        read_all(parts[: len(parts) - 20], "recordio")
    with pytest.raises(RecordError, match="continuation part without a first part"):
        read_all(parts[20:], "recordio")


def test_text_lines_are_records():
    assert read_all(b"a\nbb\r\n\nccc", "text") == [b"a", b"bb", b"ccc"]
    with pytest.raises(ValueError, match="one non-empty line"):
        framing.text_frame(b"two\nlines")


# --- File mode -----------------------------------------------------------------------------
def write_files(directory: Path, per_file: list[list[bytes]], kind="recordio") -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i, records in enumerate(per_file):
        (directory / f"part-{i}.{kind}").write_bytes(framed(records, kind))
    (directory / ".hidden").write_bytes(b"not data")


def consume_all(make, consumers: list[Topology]) -> list[list[bytes]]:
    return [list(make(t)) for t in consumers]


def world(hosts: int, per_host: int) -> list[Topology]:
    size = hosts * per_host
    return [
        Topology(h * per_host + lr, size, lr, per_host, h, hosts)
        for h in range(hosts)
        for lr in range(per_host)
    ]


@pytest.mark.parametrize(("files", "shard"), [(8, "auto"), (3, "auto"), (8, "record")])
def test_file_mode_reads_every_record_once_across_consumers(tmp_path, files, shard):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "File"}})
    all_records = recs(101)
    write_files(root / "input" / "data" / "train", [all_records[i::files] for i in range(files)])
    got = consume_all(
        lambda t: ChannelDataset(
            "train", root=root, topology=t, shard=shard, state_dir=tmp_path / "s"
        ),
        world(2, 2),
    )
    flat = [r for part in got for r in part]
    assert Counter(flat) == Counter(all_records)
    assert all(part for part in got)


def test_sharded_by_s3_key_shares_only_among_the_hosts_consumers(tmp_path):
    got = []
    for host in range(2):
        root = make_root(
            tmp_path / f"h{host}",
            {"train": {"TrainingInputMode": "FastFile", "S3DistributionType": "ShardedByS3Key"}},
        )
        write_files(
            root / "input" / "data" / "train", [recs(10, f"h{host}f{i}-") for i in range(3)]
        )
        for t in world(2, 2)[host * 2 : host * 2 + 2]:
            got += list(ChannelDataset("train", root=root, topology=t, state_dir=tmp_path / "s"))
    expected = [r for h in range(2) for i in range(3) for r in recs(10, f"h{h}f{i}-")]
    assert Counter(got) == Counter(expected)


def test_channel_mode_and_errors(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "File"}})
    with pytest.raises(ChannelError, match=r"channel 'eval' is not in .*channels: train"):
        list(ChannelDataset("eval", root=root))
    with pytest.raises(ChannelError, match="is not a directory"):
        list(ChannelDataset("train", root=root))
    bare = tmp_path / "bare"
    (bare / "input" / "data").mkdir(parents=True)
    with pytest.raises(ChannelError, match="neither .* exists"):
        list(ChannelDataset("train", root=bare))
    for bad in ({"framing": "csv"}, {"mode": "Stream"}, {"shard": "host"}):
        with pytest.raises(ValueError):
            ChannelDataset("train", **bad)


def test_errors_in_file_mode_name_channel_epoch_file_and_offset(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "File"}})
    d = root / "input" / "data" / "train"
    d.mkdir(parents=True)
    data = framed(recs(4, size=50), "tfrecord")
    (d / "a.tfrecord").write_bytes(data[:-10])
    ds = ChannelDataset("train", "tfrecord", root=root, state_dir=tmp_path / "s")
    with pytest.raises(
        RecordError, match=r"channel 'train' epoch 0 \(a.tfrecord\), byte 216: trunc"
    ):
        list(ds)


# --- Pipe mode -----------------------------------------------------------------------------
def test_pipe_mode_reads_epoch_fifos_in_order_and_waits_for_a_late_one(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "Pipe"}})
    epochs = [recs(20, "e0-"), recs(20, "e1-"), recs(5, "e2-")]
    pipe = FakePipe(root / "input" / "data", "train", [framed(e) for e in epochs], [0, 1.5, 0])
    pipe.start()
    ds = ChannelDataset("train", root=root, state_dir=tmp_path / "s", fifo_timeout=20)
    try:
        # Each iteration is the next epoch, also when the iterator is made anew.
        assert [list(ds) for _ in range(3)] == epochs
        pipe.wait_done(10)
    finally:
        pipe.stop()


def test_a_missing_fifo_times_out_naming_the_path(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "Pipe"}})
    ds = ChannelDataset("train", root=root, state_dir=tmp_path / "s", fifo_timeout=0.5)
    with pytest.raises(ChannelError, match=r"channel 'train' epoch 0: .*train_0 did not appear"):
        list(ds)


def test_file_and_pipe_mode_yield_the_same_records(tmp_path):
    per_file = [recs(30, f"f{i}-") for i in range(3)]
    file_root = make_root(tmp_path / "file", {"train": {"TrainingInputMode": "File"}})
    write_files(file_root / "input" / "data" / "train", per_file, "tfrecord")
    pipe_root = make_root(tmp_path / "pipe", {"train": {"TrainingInputMode": "Pipe"}})
    # SageMaker streams the channel's S3 objects one after another into the FIFO.
    stream = b"".join(framed(p, "tfrecord") for p in per_file)
    pipe = FakePipe(pipe_root / "input" / "data", "train", [stream])
    pipe.start()
    try:
        from_file = list(ChannelDataset("train", "tfrecord", root=file_root, state_dir=tmp_path))
        from_pipe = list(ChannelDataset("train", "tfrecord", root=pipe_root, state_dir=tmp_path))
    finally:
        pipe.stop()
    assert from_file == from_pipe == [r for p in per_file for r in p]


def run_rank(args) -> list[list[bytes]]:
    """One rank of the 2x2 job, in a process of its own; its records for each epoch."""
    root, topo, distribution, epochs, state_dir = args
    ds = ChannelDataset(
        "train",
        root=root,
        topology=topo,
        distribution=distribution,
        state_dir=state_dir,
        fifo_timeout=30,
        shuffle_buffer=8,
        seed=5,
    )
    return [list(ds) for _ in range(epochs)]


@pytest.mark.parametrize("distribution", ["ShardedByS3Key", "FullyReplicated"])
def test_pipe_mode_two_hosts_two_ranks_read_each_record_once_per_epoch(tmp_path, distribution):
    epochs = 2
    pipes, expected = [], []
    for host in range(2):
        root = make_root(
            tmp_path / f"algo-{host + 1}",
            {"train": {"TrainingInputMode": "Pipe"}},
            host=f"algo-{host + 1}",
        )
        streams = []
        for e in range(epochs):
            if distribution == "ShardedByS3Key":
                mine = recs(41, f"h{host}e{e}-")  # each host streams its own objects
                expected.append(mine)
            else:
                mine = recs(83, f"e{e}-")  # every host streams all of it
                if host == 0:
                    expected.append(mine)
            streams.append(framed(mine, "recordio", part_size=7))  # multipart records too
        pipe = FakePipe(root / "input" / "data", "train", streams, [0, 1.0])
        pipe.start()
        pipes.append(pipe)
    ctx = multiprocessing.get_context("spawn")
    jobs = [
        (tmp_path / f"algo-{t.host_rank + 1}", t, distribution, epochs, tmp_path / "state")
        for t in world(2, 2)
    ]
    try:
        with ctx.Pool(4) as pool:
            results = pool.map(run_rank, jobs, chunksize=1)
        for p in pipes:
            p.wait_done(10)
    finally:
        for p in pipes:
            p.stop()
    for e in range(epochs):
        got = [r for rank in results for r in rank[e]]
        want = [r for part in expected for r in part if r.split(b"-")[0].endswith(f"e{e}".encode())]
        assert Counter(got) == Counter(want), f"epoch {e}"
        assert all(rank[e] for rank in results)  # every rank got a share


def test_fanout_passes_a_corrupt_record_error_to_every_consumer(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "Pipe"}})
    data = bytearray(framed(recs(200, size=30), "tfrecord"))
    data[96 * 52 + 15] ^= 0x55  # a payload byte of record 96 (52 bytes framed each)
    pipe = FakePipe(root / "input" / "data", "train", [bytes(data)])
    pipe.start()
    errors: dict[int, BaseException] = {}

    def consumer(local_rank):
        t = Topology(local_rank, 2, local_rank, 2, 0, 1)
        ds = ChannelDataset(
            "train", "tfrecord", root=root, topology=t, state_dir=tmp_path / "s", fifo_timeout=10
        )
        try:
            list(ds)
        except BaseException as exc:  # noqa: BLE001
            errors[local_rank] = exc

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        pipe.stop()
    assert sorted(errors) == [0, 1]
    for exc in errors.values():
        assert isinstance(exc, RecordError)
        assert re.search(r"channel 'train' epoch 0, byte 4992: TFRecord payload CRC", str(exc))


def test_per_rank_strategy_reads_the_local_ranks_own_channel(tmp_path):
    root = make_root(tmp_path, {f"train_{i}": {"TrainingInputMode": "Pipe"} for i in range(2)})
    pipes = [
        FakePipe(root / "input" / "data", f"train_{i}", [framed(recs(10, f"c{i}-"))])
        for i in range(2)
    ]
    for p in pipes:
        p.start()
    try:
        got = [
            list(
                ChannelDataset(
                    "train_{local_rank}",
                    root=root,
                    pipe_strategy="per_rank",
                    topology=Topology(i, 2, i, 2, 0, 1),
                    state_dir=tmp_path / "s",
                )
            )
            for i in range(2)
        ]
    finally:
        for p in pipes:
            p.stop()
    assert got == [recs(10, "c0-"), recs(10, "c1-")]


# --- shuffling, epochs, topology ----------------------------------------------------------
def test_shuffle_buffer_is_local_seeded_and_loses_nothing():
    import random

    items = list(range(1000))
    a = list(dataset.shuffled(items, 64, random.Random("1")))
    b = list(dataset.shuffled(items, 64, random.Random("1")))
    c = list(dataset.shuffled(items, 64, random.Random("2")))
    assert a == b
    assert a not in (c, items)
    assert sorted(a) == items
    # Local: nothing moves earlier than the buffer allows.
    assert all(a.index(i) >= i - 64 for i in items)


def test_shuffled_channel_repeats_per_seed_and_differs_per_epoch(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "File"}})
    write_files(root / "input" / "data" / "train", [recs(300)])

    def run(seed, state):
        ds = ChannelDataset("train", root=root, shuffle_buffer=50, seed=seed, state_dir=state)
        return [list(ds), list(ds)]

    first, again = run(7, tmp_path / "s1"), run(7, tmp_path / "s2")
    assert first == again
    assert first[0] != first[1] and sorted(first[0]) == sorted(first[1]) == sorted(recs(300))


def test_set_epoch_picks_the_fifo(tmp_path):
    root = make_root(tmp_path, {"train": {"TrainingInputMode": "Pipe"}})
    data = root / "input" / "data"
    (data / "train_3").write_bytes(framed([b"three"]))  # a plain file reads like a FIFO
    ds = ChannelDataset("train", root=root, state_dir=tmp_path / "s")
    ds.set_epoch(3)
    assert list(ds) == [b"three"]


def test_topology_from_horovodrun_environments():
    gloo = {
        "HOROVOD_RANK": "3",
        "HOROVOD_SIZE": "4",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "1",
        "HOROVOD_CROSS_SIZE": "2",
    }
    assert dataset.topology(gloo) == Topology(3, 4, 1, 2, 1, 2)
    mpi = {
        "OMPI_COMM_WORLD_RANK": "2",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "2",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
    }
    assert dataset.topology(mpi) == Topology(2, 8, 2, 4, 0, 2)
    torchrun = {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
    }
    assert dataset.topology(torchrun) == Topology(5, 8, 1, 4, 1, 2)
    assert dataset.topology({}) == Topology()
    with pytest.raises(ChannelError, match="HOROVOD_RANK='x' is not a number"):
        dataset.topology({"HOROVOD_RANK": "x", "HOROVOD_SIZE": "2"})


SRUN_TASK = {  # task 3 of `srun -N2 --ntasks=5`: 3 tasks on node0, 2 on node1
    "SLURM_PROCID": "3",
    "SLURM_STEP_NUM_TASKS": "5",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_TASKS_PER_NODE": "3,2",
}


def test_topology_of_a_task_srun_started_itself():
    assert dataset.topology(SRUN_TASK) == Topology(3, 5, 0, 2, 1, 2)
    even = dict(SRUN_TASK, SLURM_STEP_NUM_TASKS="6", SLURM_STEP_TASKS_PER_NODE="3(x2)")
    assert dataset.topology(even) == Topology(3, 6, 0, 3, 1, 2)
    # A launcher's own variables win (mpirun inside an allocation also has SLURM_* around).
    assert dataset.topology({**SRUN_TASK, "RANK": "1", "WORLD_SIZE": "2"}).size == 2
    # A batch script has SLURM_PROCID but is no step's task: alone.
    assert dataset.topology({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) == Topology()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "3,x"}, "SLURM_STEP_TASKS_PER_NODE='3,x' is not Slurm's"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)"}, "does not add up"),
        ({"SLURM_NODEID": "2"}, "does not add up"),
        ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID=2"),
        ({"SLURM_LOCALID": None}, "not all of SLURM_LOCALID"),
    ],
)
def test_srun_variables_that_do_not_fit_are_named(change, message):
    env = {k: v for k, v in {**SRUN_TASK, **change}.items() if v is not None}
    with pytest.raises(ChannelError, match=re.escape(message)):
        dataset.topology(env)


# --- the shard tool ------------------------------------------------------------------------
def test_shards_cli_writes_verifies_and_refuses_to_overwrite(tmp_path, capsys):
    src = tmp_path / "data.jsonl"
    src.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(25)))
    out = tmp_path / "shards"
    argv = [
        "write",
        "--framing",
        "tfrecord",
        "--out",
        str(out),
        "--lines",
        str(src),
        "--records-per-shard",
        "10",
    ]
    assert shards.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "part-00000.tfrecord",
        "part-00001.tfrecord",
        "part-00002.tfrecord",
    ]
    assert "wrote" in capsys.readouterr().err
    assert shards.main(["verify", "--framing", "tfrecord", str(out)]) == 0
    assert "3 file(s), 25 tfrecord record(s)" in capsys.readouterr().out
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert shards.main(argv) == 2
    assert "already holds 3 shard(s)" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing lost
    assert shards.main(["write", "--out", str(out), "--lines", str(tmp_path / "nope")]) == 2
    assert "input not found" in capsys.readouterr().err
    (out / "part-00001.tfrecord").write_bytes(before["part-00001.tfrecord"][:-3])
    assert shards.main(["verify", "--framing", "tfrecord", str(out)]) == 2
    assert "part-00001.tfrecord, byte" in capsys.readouterr().err


def test_write_shards_leaves_no_torn_shard_on_error(tmp_path):
    def source():
        yield b"a"
        yield b"b"
        raise OSError("source went away")

    with pytest.raises(OSError, match="went away"):
        shards.write_shards(source(), tmp_path / "o", records_per_shard=10)
    assert list((tmp_path / "o").iterdir()) == []


def test_overwrite_stages_the_new_set_and_swaps_it_in_when_complete(tmp_path):
    out = tmp_path / "o"
    shards.write_shards(recs(10, "old"), out, "text", records_per_shard=2, prefix="train")
    seen = []

    def progress(path, count, size):
        # Mid-write: the new shards sit in a hidden directory; readers see the old set, whole.
        (stage,) = [p for p in out.iterdir() if p.name.startswith(".byoc-shards-train.")]
        seen.append((shards.verify(out, "text"), sorted(q.name for q in stage.iterdir())))

    written = shards.write_shards(
        recs(3, "new"), out, "text", 2, "train", overwrite=True, progress=progress
    )
    assert seen[0] == ((5, 10), ["train-00000.txt"])
    assert seen[1] == ((5, 10), ["train-00000.txt", "train-00001.txt"])
    assert [p.name for p in written] == ["train-00000.txt", "train-00001.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["train-00000.txt", "train-00001.txt"]
    assert shards.verify(out, "text") == (2, 3)


def test_limits_defaults_variables_and_keywords(monkeypatch):
    from byoc.data import limits

    for var in (limits.MAX_RECORD_ENV, limits.STALL_TIMEOUT_ENV):
        monkeypatch.delenv(var, raising=False)
    assert limits.record_cap() == 256 << 20
    assert limits.stall_timeout() == 600.0
    assert limits.record_cap(1) == 1 and limits.record_cap(1 << 31) == 1 << 31
    monkeypatch.setenv(limits.MAX_RECORD_ENV, "1024")
    monkeypatch.setenv(limits.STALL_TIMEOUT_ENV, "2.5")
    assert (limits.record_cap(), limits.stall_timeout()) == (1024, 2.5)
    ds = ChannelDataset("train")
    assert (ds.max_record_bytes, ds.stall_timeout) == (1024, 2.5)
    ds = ChannelDataset("train", max_record_bytes=5, stall_timeout=7)  # the keywords win
    assert (ds.max_record_bytes, ds.stall_timeout) == (5, 7.0)
    from byoc.data import StallError

    assert issubclass(StallError, RecordError)
