"""Stalls (byoc.stall, byoc.stacks): Horovod's stall reports read, a silent job found and ended,
every rank's stack from a real blocked Python child, the failure's summary, the setting's bounds,
the coordinator's ask for stacks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from byoc import config, coordinator, procs, report, settings, stacks, stall
from byoc import constants as C

from tests.helpers import free_port, wait_until
from tests.unit.fakes import make_plan, make_tree

ROOT = Path(__file__).resolve().parents[2]
BLOCK = """import threading, time
def wait_for_the_others():
    threading.Event().wait()
print("ready", flush=True)
wait_for_the_others()
"""


def test_horovod_stall_report_on_one_line_and_over_several():
    watcher = report.OutputWatcher()
    watcher.feed("[0]<stderr>:[W stall_inspector.cc:107] One or more tensors were submitted to be")
    watcher.feed("[0]<stderr>:Missing ranks:")
    watcher.feed("[0]<stderr>:1: [allreduce.noname.1]")
    watcher.feed("[0]<stderr>:3: [allreduce.a, allreduce.b]")
    watcher.feed("[0]<stdout>:step 1")
    assert watcher.missing == {1: ["allreduce.noname.1"], 3: ["allreduce.a", "allreduce.b"]}
    assert watcher.stall_reported > 0
    watcher.feed("Missing ranks: 2: [broadcast.x]")  # as the issue quotes it, on one line
    assert watcher.missing == {2: ["broadcast.x"]}
    watcher.feed("step 2")
    watcher.feed("1: [not.a.report]")  # a line like it, outside a report, is not one
    assert watcher.missing == {2: ["broadcast.x"]}


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "5", "abc", "90000", "1e9", "0x10"])
def test_hostile_stall_timeouts_are_refused(raw):
    with pytest.raises(settings.SettingsError, match=f"{C.STALL_TIMEOUT_ENV}="):
        settings.load({C.STALL_TIMEOUT_ENV: raw})


def test_stall_timeout_default_off_and_own():
    assert settings.load({}).stall_timeout == C.DEFAULT_STALL_TIMEOUT
    assert settings.load({C.STALL_TIMEOUT_ENV: "0"}).stall_timeout == 0
    assert settings.load({C.STALL_TIMEOUT_ENV: " 30 "}).stall_timeout == 30


def test_horovod_gets_its_stall_shutdown_from_the_bound(tmp_path):
    cfg = config.load(make_tree(tmp_path))
    program = [sys.executable, "/opt/ml/code/t.py"]
    p = make_plan(cfg, program, 0, env={C.STALL_TIMEOUT_ENV: "30"}, launcher="horovod")
    assert p.env[C.HOROVOD_STALL_SHUTDOWN_ENV] == "30" and p.env[C.HOROVOD_STALL_CHECK_ENV] == "15"
    assert p.command[-3:] == ["-m", "byoc.armed", "/opt/ml/code/t.py"]
    default = make_plan(cfg, program, 0, launcher="horovod").env
    assert default[C.HOROVOD_STALL_CHECK_ENV] == "60"
    assert default[C.HOROVOD_STALL_SHUTDOWN_ENV] == "1800"
    off = make_plan(cfg, program, 0, env={C.STALL_TIMEOUT_ENV: "0"}, launcher="horovod").env
    assert C.HOROVOD_STALL_SHUTDOWN_ENV not in off and off[C.STACKS_DIR_ENV]
    gpus = make_plan(cfg, program, 2, launcher="torchrun").env
    assert gpus["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


@pytest.fixture
def blocked(tmp_path):
    """A real armed Python rank (rank 1) blocked in wait_for_the_others()."""
    script = tmp_path / "block.py"
    script.write_text(BLOCK)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "entrypoint"), RANK="1")
    env[C.STACKS_DIR_ENV] = str(tmp_path / "stacks")
    proc = subprocess.Popen(
        [sys.executable, "-m", "byoc.armed", str(script)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "ready\n"
    yield proc, env
    proc.kill()
    proc.wait()


def test_every_rank_dumps_its_stack_without_dying(blocked, tmp_path):
    proc, _ = blocked
    stray = tmp_path / "stacks" / "999999.txt"  # a dead process's file is dropped
    stray.write_text("byoc-rank 5 pid 999999 main 0x1\n")

    def dump() -> list[dict]:
        answer = stall.dump_host(tmp_path / "stacks", tmp_path / "out", "algo-2")
        assert [(a["rank"], a["pid"]) for a in answer] == [(1, proc.pid)]
        return answer

    # "ready" comes just before the call: under load the first dump may catch the rank between
    # the two, so dump (which leaves the rank running) until it is in the wait.
    frames = wait_until(
        lambda: (f := dump()[0]["frames"]) and "in wait" in f[0] and f, 60, what="a stack in wait"
    )
    assert "in wait_for_the_others" in " ".join(frames)
    assert not any("byoc" in f for f in frames)  # the wrapper's frames are left out
    text = (tmp_path / "out" / "stacks-algo-2.txt").read_text()
    assert f"== rank 1 (pid {proc.pid}) ==" in text and "block.py" in text
    assert proc.poll() is None and not stray.exists()
    again = stall.dump_host(tmp_path / "stacks", tmp_path / "out", "algo-2")  # once more
    assert again[0]["frames"] == frames


def test_a_process_that_does_not_catch_the_signal_is_not_signalled(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / f"{sleeper.pid}.txt").write_text(f"byoc-rank 0 pid {sleeper.pid} main 0x1\n")
        assert stacks.armed_ranks(tmp_path) == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()


def test_a_silent_job_is_ended_with_every_stack(blocked, tmp_path, monkeypatch):
    _, env = blocked
    monkeypatch.setattr(stall, "POLL", 0.2)
    watcher = report.OutputWatcher()
    gathered = []

    def gather():
        gathered.append(stall.dump_host(tmp_path / "stacks", tmp_path / "out", "algo-1"))
        return {"algo-1": gathered[-1]}

    watch = stall.Watch(watcher, env, 1.0, gather)
    start = time.monotonic()
    code = procs.run_watched(["sleep", "60"], env, tmp_path, watcher, watch)
    assert code != 0 and time.monotonic() - start < 30
    assert watch.found.how == "silent" and watch.found.seconds >= 1.0
    text = stall.summary(watch.found, lambda r: "?")
    assert text.startswith("Training stalled: no rank printed or used the CPU for")
    assert "outside any collective" not in text  # alone: no one waits
    assert "Rank 1 on algo-1, innermost first:" in text and "wait_for_the_others" in text


def test_a_busy_rank_is_progress(tmp_path, monkeypatch):
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        before = stall.busy_ticks([busy.pid])[busy.pid]
        time.sleep(1.0)
        assert stall.busy_ticks([busy.pid])[busy.pid] - before >= stall.CPU_SHARE * os.sysconf(
            "SC_CLK_TCK"
        )
    finally:
        busy.kill()


def frames(n: int, where: str) -> list[str]:
    return [f'File "/opt/ml/code/{where}.py", line {i} in step_{i}' for i in range(n)]


def test_horovod_summary_names_rank_host_tensor_and_frames_within_1024():
    found = stall.Found(
        "horovod",
        45,
        {1: ["allreduce.noname.1"]},
        {
            "algo-1": [{"rank": 0, "frames": ['File "/venv/horovod/torch/mpi_ops.py", line 9']}],
            "algo-2": [{"rank": 1, "frames": frames(40, "x" * 60)}],
        },
    )
    text = stall.summary(found, lambda r: "?")
    head = text[:1024]
    assert head.startswith(
        "Training stalled: rank 1 on algo-2 did not submit allreduce.noname.1, which rank 0 on "
        "algo-1 waited for (Horovod's stall inspector, after 45 s)."
    )
    assert "Rank 1 on algo-2, innermost first:" in head and "line 0 in step_0" in head
    assert "stacks-algo-1.txt, stacks-algo-2.txt" in text


def test_silent_summary_tells_the_stalled_from_the_waiting():
    found = stall.Found(
        "silent",
        31,
        {},
        {
            "algo-1": [
                {"rank": 0, "frames": ['File "/v/torch/distributed/distributed_c10d.py", line 1']}
            ],
            "algo-2": [{"rank": 1, "frames": frames(3, "train")}],
        },
    )
    text = stall.summary(found, lambda r: "?")
    assert text.startswith(
        "Training stalled: rank 1 on algo-2 made no progress outside any collective, while rank "
        "0 on algo-1 waited in one; no rank printed or used the CPU for 31 s (BYOC_STALL_TIMEOUT)."
    )
    assert "Rank 1 on algo-2, innermost first:" in text and "Rank 0 on" not in text


def test_horovod_rank_with_no_stack_is_placed_by_the_plan():
    found = stall.Found("horovod", 60, {3: []}, {"algo-1": []})
    text = stall.summary(found, lambda r: f"algo-{r // 2 + 1}")
    assert text.startswith("Training stalled: rank 3 on algo-2 did not submit a tensor")
    assert "(no stack)" in text


def test_the_leader_asks_and_each_host_answers_its_latest_ask():
    state = coordinator.JobState(["algo-1", "algo-2"], lambda h: {"127.0.0.1"})
    assert state.snapshot(None)["stacks"] == 0
    state.ask_stacks()
    assert state.snapshot("algo-2")["stacks"] == 1
    assert state.missing_stacks(["algo-2"])() == {"algo-2"}
    assert state.answer_stacks({"host": "algo-2", "ask": 0, "ranks": []}, "127.0.0.1") is None
    assert state.answered_stacks() == {}  # an answer to an older ask is dropped
    ranks = [{"rank": 1, "frames": ["x"]}]
    assert state.answer_stacks({"host": "algo-2", "ask": 1, "ranks": ranks}, "127.0.0.1") is None
    assert state.answered_stacks() == {"algo-2": ranks}
    assert state.answer_stacks({"host": "evil", "ask": 1, "ranks": []}, "127.0.0.1")[0] == 403
    assert state.answer_stacks({"host": "algo-2", "ask": 1, "ranks": "x"}, "127.0.0.1")[0] == 400


def test_stacks_travel_over_the_wire():
    port = free_port()
    state = coordinator.JobState(["algo-1", "algo-2"], lambda h: {"127.0.0.1"})
    server = coordinator.serve(state, port)
    try:
        client = coordinator.Client("127.0.0.1", port, "algo-2", appear=5, lost_after=5)
        state.ask_stacks()
        assert client.status(lambda s: True)["stacks"] == 1
        client.stacks({"host": "algo-2", "ask": 1, "ranks": [{"rank": 1, "frames": []}]})
        assert state.answered_stacks() == {"algo-2": [{"rank": 1, "frames": []}]}
    finally:
        server.shutdown()
