"""byoc.bench without torch, Horovod or a cluster: the statistics, the allreduce loop on a fake
communicator, the CLIs' refusals, the results table, and a small real Pipe-mode read."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from byoc.bench import allreduce, pipe, plot, stats

from tests.helpers import ended, wait_until

K, M = 1 << 10, 1 << 20


# --- stats -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ranks", "expected"),
    [(1, 2.0), (2, 2.0), (8, 3.5)],  # algbw 2 GB/s times 2(n-1)/n: 1 (alone: algbw), 1, 1.75
)
def test_busbw_is_nccl_tests_definition(ranks, expected):
    assert stats.busbw(2_000_000_000, 1.0, ranks) == pytest.approx(expected)
    assert stats.busbw(1_000_000, 0.001, 4) == pytest.approx(1.0 * 2 * 3 / 4)


@pytest.mark.parametrize(("seconds", "ranks"), [(0, 2), (-1, 2), (1, 0)])
def test_busbw_refuses_nonsense(seconds, ranks):
    with pytest.raises(ValueError):
        stats.busbw(1024, seconds, ranks)


def test_summary():
    assert stats.summary([3, 1, 2, 10]) == {"min": 1.0, "median": 2.5, "max": 10.0, "n": 4}
    assert stats.summary([0.5]) == {"min": 0.5, "median": 0.5, "max": 0.5, "n": 1}
    with pytest.raises(ValueError):
        stats.summary([])


def test_parse_sizes_and_human():
    assert stats.parse_sizes("64K,1M,256M") == [64 * K, M, 256 * M]
    assert stats.parse_sizes(" 65536 , 1g,4") == [65536, 1 << 30, 4]
    assert [stats.human(n) for n in (64 * K, M, 256 * M, 1 << 30, 1536, 100)] == [
        "64 KiB",
        "1 MiB",
        "256 MiB",
        "1 GiB",
        "1.5 KiB",
        "100 B",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0", "'0': a size must be above 0"),
        ("-1", "'-1' is not a size"),
        ("3", "'3': a size must be a multiple of 4 bytes"),
        ("2G", "'2G': a size must be at most 1 GiB"),
        ("abc", "'abc' is not a size"),
        ("64K,", "an empty size in '64K,'"),
        ("1M,64K,1M", "'1M': the size 1 MiB is given twice"),
        ("1.5M", "'1.5M' is not a size"),
        ("1" * 40, "is not a size"),
        (",".join(str(4 * i) for i in range(1, 34)), "at most 32 sizes, not 33"),
    ],
)
def test_parse_sizes_refuses_with_the_bad_item(text, says):
    with pytest.raises(ValueError) as exc:
        stats.parse_sizes(text)
    assert says in str(exc.value)


def test_parse_sizes_for_records():
    assert stats.parse_sizes("1,3K", multiple=1, what="record size") == [1, 3 * K]
    with pytest.raises(ValueError, match="a record size must be at most 256 MiB"):
        stats.parse_sizes("512M", multiple=1, limit=256 * M, what="record size")


# --- allreduce: pure parts ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("per_call", "expected"),
    [(0.01, 20), (0.2, 1), (5.0, 1), (0.001, 50), (0.0, 50), (-1.0, 50), (float("nan"), 50)],
)
def test_iters_for(per_call, expected):
    assert allreduce.iters_for(per_call, 0.2, 50) == expected


def test_iters_for_rounds_up():
    assert allreduce.iters_for(0.03, 0.2, 50) == 7  # 6.67 calls: 7, a repeat at least 0.2 s


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"lib": "horovod", "controller": "gloo", "backend": None, "compression": "none"},
         "Horovod gloo fp32"),
        ({"lib": "horovod", "controller": "mpi", "backend": None, "compression": "fp16"},
         "Horovod mpi fp16"),
        ({"lib": "horovod", "controller": "gloo", "backend": "nccl", "compression": "none"},
         "Horovod nccl fp32 (gloo)"),
        ({"lib": "torch", "controller": None, "backend": "gloo", "compression": "none"},
         "torch gloo"),
        ({"lib": "torch", "controller": None, "backend": "nccl", "compression": "none"},
         "torch nccl"),
    ],
)  # fmt: skip
def test_label(doc, expected):
    assert allreduce.label(doc) == expected


class FakeComm:
    """A communicator of one rank of a world of `size`: counts calls, and a clock that each
    allreduce advances by `per_call` seconds."""

    lib, controller, backend = "horovod", "gloo", None
    extra = {"horovod": {"gloo_built": True}}

    def __init__(self, rank=0, size=2, per_call=0.01, decided=None):
        self.rank, self.size, self.per_call = rank, size, per_call
        self.decided = decided  # what rank 0 broadcasts, seen from another rank
        self.now = 0.0
        self.calls: list[tuple] = []

    def clock(self) -> float:
        return self.now

    def tensor(self, nbytes):
        return nbytes

    def allreduce(self, t):
        self.calls.append(("allreduce", t))
        self.now += self.per_call

    def sync(self):
        self.calls.append(("sync",))

    def barrier(self):
        self.calls.append(("barrier",))

    def broadcast_int(self, value):
        self.calls.append(("broadcast", value))
        return value if self.decided is None else self.decided

    def hostnames(self):
        return ["b", "a", "b"][: self.size]

    def close(self):
        self.calls.append(("close",))


def test_measure_times_each_repeat_after_a_barrier():
    comm, lines = FakeComm(per_call=0.01), []
    results = allreduce.measure(comm, [M], 3, 0.2, 50, 2, say=lines.append, clock=comm.clock)
    (r,) = results
    assert r["bytes"] == M and r["iters"] == 20
    assert r["seconds"] == pytest.approx([0.01] * 3)
    assert r["busbw_gbps"] == pytest.approx([M / 0.01 / 1e9] * 3)  # 2 ranks: busbw = algbw
    assert r["summary"]["n"] == 3
    assert comm.calls.count(("barrier",)) == 3
    assert comm.calls.count(("allreduce", M)) == 2 + 3 * 20
    assert comm.calls[4] == ("broadcast", 20)  # after the 2 warmup calls and their syncs
    assert lines == ["1 MiB: median 0.10 GB/s (min 0.10, max 0.10)"]


def test_measure_other_ranks_follow_rank_0s_count_and_say_nothing():
    comm, lines = FakeComm(rank=1, per_call=0.5, decided=7), []
    (r,) = allreduce.measure(comm, [64 * K], 2, 0.2, 50, 1, say=lines.append, clock=comm.clock)
    assert r["iters"] == 7  # its own estimate (1 call) is not what it does
    assert comm.calls.count(("allreduce", 64 * K)) == 1 + 2 * 7
    assert lines == []


def test_main_writes_rank_0s_document(tmp_path, monkeypatch, capsys):
    comm = FakeComm(per_call=0.001)
    monkeypatch.setattr(allreduce, "HorovodComm", lambda backend, compression: comm)
    out = tmp_path / "deep" / "hvd.json"
    argv = ["--lib", "horovod", "--compression", "fp16", "--sizes", "64K,1M", "--out", str(out)]
    assert allreduce.main([*argv, "--repeats", "2", "--max-iters", "5"]) == 0
    doc = json.loads(out.read_text())
    assert {k: doc[k] for k in ("lib", "controller", "backend", "compression", "world_size")} == {
        "lib": "horovod",
        "controller": "gloo",
        "backend": None,
        "compression": "fp16",
        "world_size": 2,
    }
    assert doc["hosts"] == ["a", "b"]
    assert doc["horovod"] == {"gloo_built": True}
    assert [r["bytes"] for r in doc["results"]] == [64 * K, M]
    assert all(len(r["busbw_gbps"]) == len(r["seconds"]) == 2 for r in doc["results"])
    assert all(r["iters"] == 5 for r in doc["results"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("allreduce horovod/gloo fp16 64 KiB: median ")
    assert comm.calls[-1] == ("close",)
    assert not list(out.parent.glob(".*tmp"))


def test_main_on_other_ranks_writes_nothing(tmp_path, monkeypatch, capsys):
    comm = FakeComm(rank=1, per_call=0.001, decided=1)
    monkeypatch.setattr(allreduce, "TorchComm", lambda backend: comm)
    out = tmp_path / "t.json"
    assert allreduce.main(["--lib", "torch", "--sizes", "4", "--out", str(out)]) == 0
    assert not out.exists()
    assert capsys.readouterr().out == ""


@pytest.fixture
def no_torch(monkeypatch):
    """Any import of torch or Horovod fails: the CLI must refuse before it gets there."""
    for name in ("torch", "torch.distributed", "horovod", "horovod.torch"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--lib", "horovod", "--sizes", "3"], "'3': a size must be a multiple of 4 bytes"),
        (["--lib", "horovod", "--sizes", "2G"], "at most 1 GiB"),
        (["--lib", "horovod", "--sizes", "64K,"], "an empty size"),
        (["--lib", "mxnet", "--sizes", "1M"], "invalid choice: 'mxnet'"),
        (["--lib", "torch", "--backend", "mpi", "--sizes", "1M"], "invalid choice: 'mpi'"),
        (["--lib", "torch", "--compression", "fp16", "--sizes", "1M"], "Horovod's"),
        (["--lib", "torch", "--sizes", "1M", "--repeats", "0"], "at least 1 and at most 100"),
        (["--lib", "torch", "--sizes", "1M", "--min-seconds", "nan"], "must be at least"),
        (["--lib", "torch", "--sizes", "1M", "--max-iters", "x"], "'x' is not a whole number"),
        (["--lib", "torch", "--sizes", "1M"], "--out"),
    ],
)
def test_allreduce_cli_refuses_before_importing_torch(no_torch, tmp_path, capsys, args, says):
    argv = args if says == "--out" else [*args, "--out", str(tmp_path / "x.json")]
    with pytest.raises(SystemExit) as exc:
        allreduce.main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


# --- the table ---------------------------------------------------------------------------------
def _doc(lib, controller, backend, compression, rows):
    return {
        "lib": lib,
        "controller": controller,
        "backend": backend,
        "compression": compression,
        "world_size": 2,
        "hosts": ["algo-1", "algo-2"],
        "results": [
            {"bytes": n, "busbw_gbps": v, "seconds": [1.0] * len(v), "summary": stats.summary(v)}
            for n, v in rows
        ],
    }


SYNTHETIC = {
    "allreduce": [
        _doc("horovod", "gloo", None, "none", [(64 * K, [0.09, 0.1, 0.11]), (M, [0.5, 0.53])]),
        _doc("horovod", "mpi", None, "fp16", [(M, [0.8, 0.9, 1.0])]),
        _doc("torch", None, "gloo", "none", [(64 * K, [0.12]), (M, [0.6])]),
    ],
    "link": {"one_way_gbps": stats.summary([1.17, 1.2, 1.1]), "bidir_per_direction_gbps": 1.1},
    "throughput": [
        {"label": "Horovod", "samples_per_s": {"summary": stats.summary([950, 1000, 1010])}},
        {"label": "DDP", "samples_per_s": {"summary": stats.summary([1000, 1050, 1100])}},
    ],
    "pipe": {
        "results": [
            {
                "framing": "recordio",
                "record_bytes": 1024,
                "reader": {"summary": stats.summary([400.0])},
                "raw": {"summary": stats.summary([1600.0])},
            }
        ]
    },
    "errors": {"nccl_tests": "Traceback...\nall_reduce_perf: not found"},
}


def test_table_of_a_small_document():
    text = plot.table(SYNTHETIC)
    lines = text.splitlines()
    assert lines[0] == (
        "allreduce bus bandwidth, GB/s (median of 3 repeats); world size 2 on 2 host(s): "
        "algo-1, algo-2"
    )
    header, small, big = lines[1].split("  "), lines[2].split(), lines[3].split()
    assert [h.strip() for h in header if h.strip()] == [
        "size",
        "hvd gloo fp32",
        "hvd mpi fp16",
        "torch gloo",
    ]
    # Horovod's cells carry their ratio to torch gloo at that size.
    assert small == ["64", "KiB", "0.100", "0.83x", "-", "0.120"]
    assert big == ["1", "MiB", "0.515", "0.86x", "0.900", "1.50x", "0.600"]
    assert lines[4] == (
        "steadiness (slowest repeat / median, worst size): Horovod gloo fp32 0.90 at 64 KiB; "
        "Horovod mpi fp16 0.89 at 1 MiB; torch gloo 1.00 at 64 KiB"
    )
    assert "link: one way 1.17 GB/s, both ways at once 1.10 GB/s per direction" in lines
    assert (
        "training throughput, samples/s, median (min-max): Horovod 1000 (950-1010), "
        "DDP 1050 (1000-1100)"
    ) in lines
    assert "Horovod / DDP: 0.95x" in lines
    assert (
        "pipe recordio 1 KiB records: ChannelDataset 400 MB/s, raw FIFO read 1600 MB/s, 0.25x"
        in lines
    )
    assert lines[-1] == "FAILED nccl_tests: all_reduce_perf: not found"


def test_table_shows_what_there_is():
    assert plot.table({}) == "no results\n"
    assert plot.table({"allreduce": [], "link": None, "pipe": None, "throughput": []}) == (
        "no results\n"
    )
    # A part that cannot be read is named; the others are still there.
    text = plot.table({"allreduce": [{"results": [{"bytes": "x"}]}]})
    assert text.startswith("allreduce_table: unreadable (TypeError")
    text = plot.table({"pipe": {"results": [1]}, "link": {"one_way_gbps": 2.5}})
    assert "link: one way 2.50 GB/s" in text and "pipe_lines: unreadable" in text


def test_table_compares_gpu_horovod_with_torch_nccl():
    docs = [
        _doc("horovod", "gloo", "nccl", "none", [(M, [40.0])]),
        _doc("torch", None, "gloo", "none", [(M, [1.0])]),
        _doc("torch", None, "nccl", "none", [(M, [50.0])]),
    ]
    lines = plot.table(
        {"allreduce": docs, "nccl_tests": {"rows": [{"bytes": M, "busbw_gbps": 60}]}}
    )
    assert "hvd nccl fp32 (gloo)" in lines.splitlines()[1]
    # compared with torch nccl (the same transport), not torch gloo
    assert lines.splitlines()[2].split() == ["1", "MiB", "40.00", "0.80x", "1.00", "50.00", "60.00"]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is in the image, not in the host venv")
    png = tmp_path / "bench.png"
    plot.plot(SYNTHETIC, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plot.plot({}, tmp_path / "empty.png")
    assert (tmp_path / "empty.png").stat().st_size > 0


# --- the Pipe-mode benchmark -------------------------------------------------------------------
def _channel_dataset_imports() -> bool:
    try:
        from byoc.data import ChannelDataset  # noqa: F401
    except ImportError:
        return False
    return True


needs_reader = pytest.mark.skipif(
    not _channel_dataset_imports(), reason="byoc.data.ChannelDataset does not import here"
)


@needs_reader
def test_pipe_bench_reads_through_channel_dataset(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pipe.tempfile, "tempdir", str(tmp_path))  # to see that it is cleaned
    out = tmp_path / "out" / "pipe.json"
    argv = ["--record-bytes", "1K,5", "--framing", "recordio,tfrecord", "--megabytes", "0.25"]
    assert pipe.main([*argv, "--repeats", "1", "--timeout", "60", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["megabytes"] == 0.25 and doc["repeats"] == 1
    assert doc["crc32c"] in ("google_crc32c", "python")
    cases = [(c["framing"], c["record_bytes"]) for c in doc["results"]]
    assert cases == [("recordio", 1024), ("recordio", 5), ("tfrecord", 1024), ("tfrecord", 5)]
    for c in doc["results"]:
        assert c["records"] == 256 * K // c["record_bytes"]
        assert c["payload_bytes"] == c["records"] * c["record_bytes"]
        assert c["stream_bytes"] > c["payload_bytes"]
        for key in ("mb_per_s", "records_per_s"):
            assert len(c["reader"][key]) == 1 and c["reader"][key][0] > 0
        assert c["reader"]["summary"]["n"] == c["raw"]["summary"]["n"] == 1
        assert c["ratio"] == pytest.approx(
            c["reader"]["summary"]["median"] / c["raw"]["summary"]["median"]
        )
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the temp roots are gone


@needs_reader
def test_pipe_layout_is_what_channel_dataset_expects(tmp_path):
    data = pipe.make_root(tmp_path / "root", "tfrecord")
    config = json.loads((tmp_path / "root/input/config/inputdataconfig.json").read_text())
    assert config == {
        "train": {
            "TrainingInputMode": "Pipe",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
    }
    assert data == tmp_path / "root" / "input" / "data"
    # A regular file stands in for the FIFO: the same reader reads it.
    record = pipe.framed_record("tfrecord", 10)
    (data / "train_3").write_bytes(record * 4)
    assert pipe.read_channel(tmp_path / "root", "tfrecord", 3, 10) == (4, 40)


def test_pipe_writer_without_a_reader_is_stopped_at_its_timeout(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "record").write_bytes(b"x" * 8)
    started = []
    with pytest.raises(pipe.BenchError, match="ran past its timeout"):
        # (On a loaded machine the timeout may strike before the writer even says it started.)
        started.append(pipe.Writer(fifo, tmp_path / "record", 10, 0.3, tmp_path / "writer.log"))
        try:
            started[0].finish(10)
        finally:
            started[0].stop()
    assert all(w.proc.returncode is not None for w in started)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--record-bytes", "0", "--framing", "recordio"], "above 0"),
        (["--record-bytes", "1G", "--framing", "recordio"], "at most 256 MiB"),
        (["--record-bytes", "1K", "--framing", "text"], "a comma list of distinct"),
        (["--record-bytes", "1K", "--framing", "recordio,recordio"], "distinct"),
        (["--record-bytes", "2M", "--framing", "recordio", "--megabytes", "1"], "above"),
        (["--record-bytes", "1K", "--framing", "recordio", "--megabytes", "inf"], "at most"),
        (["--record-bytes", "1K", "--framing", "recordio", "--timeout", "0"], "above 0"),
    ],
)
def test_pipe_cli_refuses(tmp_path, capsys, args, says):
    with pytest.raises(SystemExit) as exc:
        pipe.main([*args, "--out", str(tmp_path / "p.json")])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


@needs_reader
def test_pipe_case_is_bounded_in_time(tmp_path, monkeypatch):
    monkeypatch.setattr(pipe.tempfile, "tempdir", str(tmp_path))
    # 1 GiB of 1 KiB records cannot be read in 0.3 s: the writer is stopped, the case fails
    # (under load, before it even started).
    with pytest.raises(pipe.BenchError, match=r"pipe recordio 1 KiB records: (the read )?ran past"):
        pipe.run(["recordio"], [1024], 1024, 1, 0.3)
    assert list(tmp_path.iterdir()) == []


# --- the driver (byoc.bench.run): its pure parts ------------------------------------------------


def test_samples_per_s_takes_the_last_epoch_even_in_horovodruns_interleaved_output():
    from byoc.bench import run

    out = (
        '[1,0]<stdout>:{"epoch": 0, "loss": 13.8, "samples_per_s": 42016.2}[1,0]<stdout>:\n'
        '[1,0]<stdout>:{"epoch": 1, "loss": 3.2, "samples_per_s": 53491.6}[1,1]<stdout>:rank 1\n'
    )
    assert run.samples_per_s(out) == 53491.6
    assert run.samples_per_s('{"epoch": 4, "loss": 0.1, "samples_per_s": 7.5}\n') == 7.5
    with pytest.raises(run.StepError, match="no per-epoch line"):
        run.samples_per_s("rank 0: done\n")


def test_each_timed_training_run_gets_fresh_directories():
    from byoc.bench import run

    first, second = run.train_args(quick=True), run.train_args(quick=True)
    model = first[first.index("--model-dir") + 1]
    assert model.startswith("/tmp/byoc-bench-") and model.endswith("/model")
    assert model != second[second.index("--model-dir") + 1]  # no checkpoint to resume from


def test_torchrun_ports_are_never_reused_within_a_run():
    from byoc.bench import run

    assert next(run.TORCH_PORTS) != next(run.TORCH_PORTS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "node0,node0", "--out", "x"],
        ["--hosts", "node0,-oProxyCommand=x", "--out", "x"],
        ["--hosts", "node0", "--out", "x", "--parts", "link,gpu-magic"],
        ["--hosts", "node0", "--out", "x", "--slots", "0"],
        ["--hosts", "node0", "--out", "x", "--repeats", "21"],
        ["--hosts", "node0", "--out", "x", "--sizes", "3"],
    ],
    ids=[
        "duplicate-host",
        "option-as-host",
        "unknown-part",
        "no-slots",
        "too-many-repeats",
        "bad-size",
    ],
)
def test_driver_refuses_bad_arguments_before_doing_anything(argv, tmp_path, monkeypatch):
    from byoc.bench import run

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        run.main(argv)
    assert exc.value.code == 2
    assert not (tmp_path / "x").exists()  # nothing written


@pytest.mark.parametrize(
    "argv",
    [
        ["--nodes", "0"],
        ["--nodes", "9"],
        ["--timeout", "5"],
        ["--cpus-per-node", "999"],
        ["--elastic-repeats", "7"],
        ["--elastic-repeats", "-1"],
    ],
    ids=[
        "no-nodes",
        "too-many-nodes",
        "short-timeout",
        "more-cores-than-the-host",
        "more-elastic-repeats-than-nodes",
        "negative-elastic-repeats",
    ],
)
def test_make_bench_refuses_bad_arguments_before_starting_a_cluster(argv, tmp_path, monkeypatch):
    from hostkit import bench

    started = []
    monkeypatch.setattr(bench.subprocess, "run", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as exc:
        bench.main([*argv, "--out", str(tmp_path / "out")])
    assert exc.value.code == 2 and started == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--repeats", "7"], ["--timeout", "1"]])
def test_elastic_bench_refuses_bad_arguments_before_starting_a_cluster(argv, monkeypatch):
    from hostkit import elastic_bench

    started = []
    monkeypatch.setattr(elastic_bench.subprocess, "run", lambda *a, **k: started.append(a))
    monkeypatch.setattr(elastic_bench.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as exc:
        elastic_bench.main(argv)
    assert exc.value.code == 2 and started == []


def test_elastic_bench_times_rank_0s_first_step_at_the_new_size(tmp_path):
    from hostkit import elastic_bench

    log = tmp_path / "job.log"
    log.write_text(
        "ELASTIC training size=3 epoch=0 step=9 rank=1 t=105.000\n"
        "ELASTIC training size=3 epoch=0 step=9 rank=0 t=99.000\n"  # before `after`
        "ELASTIC training size=2 epoch=0 step=9 rank=0 t=104.000\n"
        "ELASTIC training size=3 epoch=0 step=9 rank=0 t=106.500\n"
    )

    class Running:
        returncode = None

        def poll(self):
            return None

    assert elastic_bench.wait_training(log, 3, 100.0, time.monotonic() + 5, Running()) == 106.5
    with pytest.raises(RuntimeError, match="size 4"):
        elastic_bench.wait_training(log, 4, 100.0, time.monotonic() + 0.5, Running())


def test_horovod_reduces_in_place_compressed_first_as_distributed_optimizer_does():
    """hvd.allreduce (out of place) would time the allocator as well: a fresh output tensor per
    call. The bench reduces as hvd.DistributedOptimizer reduces gradients."""
    calls = []

    class T:
        def __init__(self, name):
            self.name = name

        def set_(self, other):
            calls.append(("set_", self.name, other.name))

    class Hvd:
        Sum = "sum"

        def allreduce_(self, t, op):
            calls.append(("allreduce_", t.name, op))

        def allreduce(self, *args, **kwargs):
            raise AssertionError("the bench must not reduce out of place")

    class NoCompression:
        @staticmethod
        def compress(t):
            return t, None

        @staticmethod
        def decompress(t, ctx):
            return t

    class Fp16:
        @staticmethod
        def compress(t):
            return T("half of " + t.name), "dtype"

        @staticmethod
        def decompress(t, ctx):
            assert ctx == "dtype"
            return T("float of " + t.name)

    comm = object.__new__(allreduce.HorovodComm)
    comm.hvd, comm.compression = Hvd(), NoCompression
    grad = T("grad")
    comm.allreduce(grad)
    assert calls == [("allreduce_", "grad", "sum")]
    calls.clear()
    comm.compression = Fp16
    comm.allreduce(grad)
    assert calls == [
        ("allreduce_", "half of grad", "sum"),
        ("set_", "grad", "float of half of grad"),
    ]


def test_run_with_returns_the_output_once_every_half_of_the_job_has_finished(tmp_path):
    from byoc.bench import run

    flag = tmp_path / "other-finished"
    other = ["sh", "-c", f"sleep 0.5; touch {flag}"]
    out = run.run_with(["sh", "-c", "echo first; echo second >&2"], [other], timeout=30)
    assert out.splitlines() == ["first", "second"]
    assert flag.exists()  # the other half was waited for, not cut off


def test_run_with_ends_the_job_as_soon_as_the_other_half_fails():
    """The bench's hang in CI: the other host's torchrun failed and this host's waited for it
    until the step's timeout. Now the failure ends the step at once, naming it, with its output."""
    from byoc.bench import run

    start = time.monotonic()
    with pytest.raises(run.StepError) as exc:
        run.run_with(["sleep", "60"], [["sh", "-c", "echo worker aborted; exit 134"]], timeout=60)
    assert time.monotonic() - start < 30
    assert "beside it, sh -c" in str(exc.value)
    assert "exited 134" in str(exc.value) and "worker aborted" in str(exc.value)


def test_run_with_stops_what_it_started_and_shows_what_was_printed_on_timeout(tmp_path):
    """A timeout shows the output so far and ends the whole group: a grandchild in the same
    group, and, through SIGTERM first (torchrun stops its workers on it), one in a session of
    its own as torchrun's workers are, which a SIGKILL to the group could not reach."""
    from byoc.bench import run

    pids = tmp_path / "pids"
    script = (
        f"sleep 300 & echo $! > {pids}; setsid sleep 301 & worker=$!; echo $worker >> {pids}; "
        'trap "kill $worker; exit 143" TERM; echo half-way; wait'
    )
    with pytest.raises(run.StepError, match=r"(?s)ran past 3 s.*half-way"):
        run.run_with(["sh", "-c", script], [], timeout=3)
    same_group, own_session = (int(x) for x in pids.read_text().split())
    wait_until(lambda: ended(same_group), 10, what="the end of a process of the group")
    wait_until(lambda: ended(own_session), 10, what="the end of a worker in its own session")


def test_run_with_reports_every_halfs_output_when_one_fails():
    from byoc.bench import run

    with pytest.raises(run.StepError) as exc:
        run.run_with(
            ["sh", "-c", "echo local traceback; sleep 60"],
            [["sh", "-c", "sleep 1; echo peer gone; exit 1"]],
            timeout=60,
        )
    assert "peer gone" in str(exc.value) and "local traceback" in str(exc.value)


def test_run_with_is_not_stalled_by_a_half_that_prints_more_than_a_pipe_holds():
    from byoc.bench import run

    chatty = ["python3", "-c", "import sys; sys.stdout.write('x' * (4 << 20))"]
    assert run.run_with(["true"], [chatty], timeout=60) == ""


def test_a_failed_elastic_bench_shows_the_jobs_elastic_lines_and_removes_its_cluster(
    monkeypatch, capsys
):
    """What the job said of its membership is what a failure is read by (a wait for a size
    that never came): every ELASTIC line, however far back, then the tail."""
    from hostkit import elastic_bench

    calls = []
    monkeypatch.setattr(elastic_bench.subprocess, "run", lambda *a, **k: calls.append(a[0]))

    def measure(env, work, repeats, timeout, program):
        lines = ["[0]<stdout>:ELASTIC init size=1 rank=0 t=1.000"]
        lines += [f'[0]<stdout>:{{"epoch": {e}}}' for e in range(2000)]
        (work / "job.log").write_text("\n".join(lines) + "\n")
        raise RuntimeError("no step at size 2 before the deadline")

    monkeypatch.setattr(elastic_bench, "measure", measure)
    assert elastic_bench.main(["--repeats", "1", "--timeout", "60"]) == 1
    err = capsys.readouterr().err
    assert "failed: no step at size 2 before the deadline" in err
    assert "ELASTIC init size=1 rank=0" in err and '"epoch": 1999' in err
    assert calls and calls[-1][-1] == "down"  # the cluster is taken down all the same
