"""Stalls (byoc.stall, byoc.stacks): Horovod's stall reports read, a silent job found and ended,
every rank's stack from a real blocked Python child, dumps that come late or slowly, the failure's
summary in each case, the setting's bounds and the room they leave before Horovod's shutdown, the
coordinator's ask for stacks."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from byoc import config, coordinator, procs, report, session, settings, stacks, stall
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
# A rank as byoc.stacks sees it (it catches SIGNAL), whose dump on SIGNAL starts DELAY s late and
# pauses PAUSE s between threads, the main thread last (as faulthandler writes them); with DIE,
# one that ends on the signal instead.
FAKE = """import os, signal, sys, threading, time
path, delay, pause, die = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
main = threading.main_thread().ident
def write():
    time.sleep(delay)
    with open(path, "a") as out:
        for n in range(1, 5):
            out.write(f"Thread 0x{n:016x} (most recent call first):\\n")
            out.write(f'  File "/opt/ml/code/late.py", line {n} in helper\\n\\n')
            out.flush()
            time.sleep(pause)
        out.write(f"Current thread 0x{main:016x} (most recent call first):\\n")
        out.write('  File "/opt/ml/code/late.py", line 7 in never_arrives\\n')
def dumped(signum, frame):
    if die:
        os._exit(0)
    threading.Thread(target=write).start()
signal.signal(signal.SIGUSR2, dumped)
print(main, flush=True)
while True:
    time.sleep(1)
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
    # 30 s would leave 15 s after the first report: room for the stacks makes it 2 x 15 + 22.
    assert p.env[C.HOROVOD_STALL_SHUTDOWN_ENV] == "52" and p.env[C.HOROVOD_STALL_CHECK_ENV] == "15"
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


@pytest.fixture
def fake_rank(tmp_path):
    """fake_rank(rank, delay, pause, die=False): a FAKE rank and its stacks.Armed."""
    started = []

    def start(rank: int, delay: float, pause: float, die: bool = False) -> stacks.Armed:
        script = tmp_path / "fake.py"
        script.write_text(FAKE)
        path = tmp_path / f"fake-{rank}.txt"
        path.write_text(f"byoc-rank {rank}\n")
        args = [str(path), str(delay), str(pause), "1" if die else "0"]
        proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE)
        started.append(proc)
        main = int(proc.stdout.readline())  # its handler is set from here on
        return stacks.Armed(rank, proc.pid, main, path)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def main_frames(texts: dict[stacks.Armed, str], armed: stacks.Armed) -> list[str]:
    return stacks.main_thread(texts[armed], armed.main)


def test_a_dump_that_starts_late_is_collected_and_the_wait_ends_with_the_last(
    blocked, fake_rank, tmp_path
):
    proc, _ = blocked
    real = stacks.armed_ranks(tmp_path / "stacks")
    assert [a.pid for a in real] == [proc.pid]
    late = fake_rank(2, delay=4.0, pause=0.0)  # a rank a loaded host schedules seconds late
    dies = fake_rank(3, delay=0.0, pause=0.0, die=True)  # ends on the signal: nothing comes
    gone = subprocess.Popen(["true"])
    gone.wait()  # ended before the signal: not waited for either
    (tmp_path / "gone.txt").write_text("byoc-rank 4\n")
    ended = stacks.Armed(4, gone.pid, 1, tmp_path / "gone.txt")
    start = time.monotonic()
    texts = stacks.dump([*real, late, dies, ended])
    took = time.monotonic() - start
    assert main_frames(texts, late) == ['File "/opt/ml/code/late.py", line 7 in never_arrives']
    assert "block.py" in " ".join(main_frames(texts, real[0]))
    assert texts[dies] == "" and texts[ended] == ""
    # Not before the late one was complete; not the whole bound, waiting for the ended ones.
    assert 4.0 <= took < stacks.DUMP_WAIT - 2, took


def test_a_dump_written_slowly_is_read_whole(fake_rank):
    slow = fake_rank(1, delay=0.0, pause=0.5)  # a rank paused between threads, main last
    start = time.monotonic()
    texts = stacks.dump([slow])
    took = time.monotonic() - start
    assert texts[slow].count("(most recent call first)") == 5
    assert main_frames(texts, slow) == ['File "/opt/ml/code/late.py", line 7 in never_arrives']
    assert took < stacks.DUMP_WAIT - 2, took


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


STALL_REPORT = [
    "[0]<stderr>:[W stall_inspector.cc:107] One or more tensors were submitted to be reduced",
    "[0]<stderr>:Missing ranks:",
    "[0]<stderr>:1: [allreduce.noname.1]",
]
WAITS = ['File "/v/torch/distributed/distributed_c10d.py", line 1 in all_reduce']


@pytest.mark.parametrize("stale", [False, True])
def test_a_silent_job_after_horovods_report_names_what_it_reported(tmp_path, monkeypatch, stale):
    monkeypatch.setattr(stall, "POLL", 0.2)
    # Its report, then silence; stale: a line a second later, so the job went on after it.
    after = "time.sleep(1); print('[0]<stdout>:step 5', flush=True)" if stale else ""
    report_text = "\n".join(STALL_REPORT)
    program = f"import time\nprint({report_text!r}, flush=True)\n{after}\n"
    watcher = report.OutputWatcher()
    answers = {
        "algo-1": [{"rank": 0, "frames": WAITS}],
        "algo-2": [{"rank": 1, "frames": []}],  # no stack: Horovod's report still names it
    }
    watch = stall.Watch(watcher, {C.STACKS_DIR_ENV: str(tmp_path)}, 1.0, lambda: answers)
    command = [sys.executable, "-c", program + "time.sleep(60)"]
    code = procs.run_watched(command, {}, tmp_path, watcher, watch)
    assert code != 0 and watch.found.how == "silent"
    assert watcher.stall_reported  # the report was read
    text = stall.summary(watch.found, lambda r: f"algo-{r + 1}", 2)
    if stale:
        assert watch.found.missing == {}
        assert text.startswith(
            "Training stalled: rank 1 on algo-2 gave no stack within 12 s, while rank 0 on algo-1 "
            "waited in a collective; no rank printed or used the CPU for"
        ), text
    else:
        assert watch.found.missing == {1: ["allreduce.noname.1"]}
        assert text.startswith(
            "Training stalled: rank 1 on algo-2 did not submit allreduce.noname.1, which rank 0 "
            "on algo-1 waited for (Horovod's stall inspector; then no rank printed or used the "
            "CPU for"
        ), text


class Clock:
    """time for byoc.stall: a job whose rank stalls at STALL s, watched by a Horovod inspector
    that checks every `check` s from `phase` on and shuts down the job after `shutdown` s."""

    STALL = 5.0

    def __init__(self, watcher, check: int, shutdown: int, phase: float):
        self.now, self.watcher = 0.0, watcher
        self.check, self.shutdown, self.phase = check, shutdown, phase
        self.checked = 0  # the checks done
        self.ended_at: float | None = None  # the inspector's shutdown
        self.gathered: tuple[float, float] | None = None  # the leader's gather: start, end
        self.ended_by_leader = False
        watcher.last_line = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self.ended_at is None and self.phase + self.checked * self.check <= self.now:
            at = self.phase + self.checked * self.check
            self.checked += 1
            lag = at - self.STALL
            if lag > self.shutdown:
                self.ended_at = at
            elif lag > self.check:
                self.watcher.stall_reported = self.watcher.last_line = at
                self.watcher.missing = {1: ["allreduce.noname.1"]}

    def gather(self) -> dict:
        """As long as the leader's gather may take on a loaded host."""
        start = self.now
        self.now += stall.GATHER_WAIT
        self.gathered = (start, self.now)
        return {}

    def poll(self) -> int | None:
        return None if self.ended_at is None else 1

    def terminate(self) -> None:  # procs.end: the leader ends the job itself
        if self.ended_at is None:
            self.ended_at, self.ended_by_leader = self.now, True

    def wait(self, timeout: float | None = None) -> int:
        return 1

    kill = terminate


@pytest.mark.parametrize("bound", [10, 17, 30, 45, 60, 100, 119, 120, 200, 1800])
def test_every_stack_is_collected_before_horovods_shutdown(tmp_path, monkeypatch, capsys, bound):
    """Whatever the inspector's phase, the leader's gather, as long as it may take on a loaded
    host, ends before the shutdown that plan.stall_env sets; the leader then ends the job once
    the stall has lasted the bound (never before), and Horovod's shutdown, the backstop, at the
    latest: max(bound, 2 x check + COLLECT_ROOM) + check s into the stall."""
    cfg = config.load(make_tree(tmp_path))
    program = [sys.executable, "/opt/ml/code/t.py"]
    env = make_plan(cfg, program, 0, env={C.STALL_TIMEOUT_ENV: str(bound)}, launcher="horovod").env
    check, shutdown = int(env[C.HOROVOD_STALL_CHECK_ENV]), int(env[C.HOROVOD_STALL_SHUTDOWN_ENV])
    monkeypatch.setattr(stall, "busy_ticks", lambda pids: {})  # no ranks here
    ended_early: set[float] = set()
    for phase in [check * i / 7 for i in range(7)]:
        watcher = report.OutputWatcher()
        clock = Clock(watcher, check, shutdown, phase)
        monkeypatch.setattr(stall, "time", clock)
        watch = stall.Watch(watcher, env, bound, clock.gather)
        watch(clock)
        while clock.ended_at is None:  # Horovod's shutdown ends the job
            clock.sleep(1.0)
        assert watch.found and watch.found.how == "horovod", (phase, clock.now)
        start, end = clock.gathered
        assert end <= clock.ended_at, (phase, start, end, clock.ended_at)
        limit = max(bound, 2 * check + math.ceil(stall.COLLECT_ROOM)) + check
        assert clock.ended_at - Clock.STALL <= limit, (phase, clock.ended_at)
        if clock.ended_by_leader:
            assert clock.ended_at - Clock.STALL >= bound, (phase, clock.ended_at)
            ended_early.add(phase)
    # With the default shutdown's room, the leader ends it, in time, in every phase but where
    # the bound is so long that Horovod's shutdown and the bound meet.
    assert ended_early or bound >= 1800, bound
    assert "some may be missing" not in capsys.readouterr().out  # the room is there


def test_horovod_settings_of_the_users_that_leave_no_room_are_named(capsys):
    env = {C.HOROVOD_STALL_CHECK_ENV: "5", C.HOROVOD_STALL_SHUTDOWN_ENV: "10"}
    watch = stall.Watch(report.OutputWatcher(), env, 10, dict)
    assert watch.collect_after == 0  # at its first report: as early as it can
    out = capsys.readouterr().out
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=10 with HOROVOD_STALL_CHECK_TIME_SECONDS=5" in out
    assert "some may be missing" in out


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


def test_a_rank_outside_any_collective_is_named_though_another_gave_no_stack():
    found = stall.Found(
        "silent",
        60,
        {},
        {
            "algo-1": [{"rank": 0, "frames": []}],  # its dump did not come in time
            "algo-2": [{"rank": 1, "frames": frames(3, "stall")}],
        },
    )
    text = stall.summary(found, lambda r: "?", 2)
    assert text.startswith(
        "Training stalled: rank 1 on algo-2 made no progress outside any collective; rank 0 on "
        "algo-1 gave no stack within 12 s; no rank printed or used the CPU for 60 s "
        "(BYOC_STALL_TIMEOUT).\nRank 1 on algo-2, innermost first:\n"
    ), text
    assert "line 0 in step_0" in text[:1024] and "Rank 0 on" not in text


def test_ranks_of_a_host_that_sent_no_stacks_are_placed_by_the_plan():
    found = stall.Found(
        "silent",
        60,
        {},
        {"algo-2": [{"rank": 2, "frames": WAITS}, {"rank": 3, "frames": frames(2, "train")}]},
    )
    text = stall.summary(found, lambda r: f"algo-{r // 2 + 1}", 4)
    assert text.startswith(
        "Training stalled: rank 3 on algo-2 made no progress outside any collective, while rank "
        "2 on algo-2 waited in one; ranks 0, 1 on algo-1 gave no stack within 12 s; no rank "
    ), text


@pytest.mark.parametrize(
    "ranks, head, listed",
    [
        pytest.param(
            {"algo-1": [{"rank": 0, "frames": WAITS}], "algo-2": [{"rank": 1, "frames": WAITS}]},
            "every rank waits in a collective; no rank printed or used the CPU for 60 s "
            "(BYOC_STALL_TIMEOUT).",
            [0, 1],
            id="all-waiting",
        ),
        pytest.param(
            {"algo-1": [{"rank": 0, "frames": WAITS}], "algo-2": [{"rank": 1, "frames": []}]},
            "rank 1 on algo-2 gave no stack within 12 s, while rank 0 on algo-1 waited in a "
            "collective; no rank printed or used the CPU for 60 s (BYOC_STALL_TIMEOUT).",
            [1, 0],  # the suspect first; with no frames of its own, the others' after it
            id="waiting-and-no-stack",
        ),
        pytest.param(
            {"algo-1": [{"rank": 0, "frames": []}]},  # algo-2 sent nothing
            "no rank printed or used the CPU for 60 s (BYOC_STALL_TIMEOUT); no rank gave a stack "
            "within 12 s.",
            [0, 1],
            id="none",
        ),
        pytest.param(
            {"algo-1": [{"rank": -1, "frames": frames(1, "a")}], "algo-2": []},
            "no rank printed or used the CPU for 60 s (BYOC_STALL_TIMEOUT).",
            [-1],  # a program that names no rank: the hosts that answered have no others
            id="unnumbered",
        ),
        pytest.param(
            {
                "algo-1": [{"rank": 0, "frames": frames(1, "a")}],
                "algo-2": [{"rank": 1, "frames": frames(1, "b")}],
            },
            "no rank printed or used the CPU for 60 s (BYOC_STALL_TIMEOUT).",
            [0, 1],  # none waits on another: no one is singled out
            id="all-outside",
        ),
    ],
)
def test_silent_summary_in_each_case(ranks, head, listed):
    text = stall.summary(stall.Found("silent", 60, {}, ranks), lambda r: f"algo-{r + 1}", 2)
    assert text.startswith(f"Training stalled: {head}\n"), text
    order = [int(line.split()[1]) for line in text.splitlines() if line.startswith("Rank ")]
    assert order == listed, text


def test_with_hundreds_of_hosts_the_suspect_and_its_frames_still_come_first():
    answers = {
        f"algo-{h + 1}": [{"rank": r, "frames": WAITS} for r in range(8 * h, 8 * h + 8)]
        for h in range(300)
    }
    answers["algo-9"][3]["frames"] = frames(3, "train")  # rank 67
    text = stall.summary(stall.Found("silent", 60, {}, answers), lambda r: "?", 2400)
    head = text[:1024]
    assert head.startswith(
        "Training stalled: rank 67 on algo-9 made no progress outside any collective, while "
        "ranks 0-7 on algo-1, "
    ), head
    assert "Rank 67 on algo-9, innermost first:\n  File" in head, head


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
    for hostile in (
        [{"rank": "1", "frames": []}],
        [{"rank": True, "frames": []}],
        [{"rank": 1}],
        [{"rank": 1, "frames": "File x"}],
        [{"rank": 1, "frames": [{"x": 1}]}],
    ):
        answer = {"host": "algo-2", "ask": 1, "ranks": hostile}
        assert state.answer_stacks(answer, "127.0.0.1")[0] == 400, hostile
    assert state.answered_stacks() == {"algo-2": ranks}


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


def test_the_leader_asks_the_others_before_its_own_dump_and_waits_from_the_ask(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(stall, "GATHER_WAIT", 3.0)
    the_settings = settings.load({C.COORD_PORT_ENV: str(free_port())})
    cfg = config.load(make_tree(tmp_path, hosts=("algo-1", "algo-2", "algo-3")))
    lead = session.Leading(cfg, the_settings)
    monkeypatch.setattr(lead.state, "claim", lambda host, source: None)
    try:

        def dump_mine() -> list[dict]:
            # The others were asked already: algo-2 answers while this host dumps; algo-3 never.
            ask = lead.state.snapshot("algo-2")["stacks"]
            assert lead.state.answer_stacks({"host": "algo-2", "ask": ask, "ranks": []}, "") is None
            time.sleep(3.0)  # a dump as long as the whole wait
            return [{"rank": 0, "frames": []}]

        start = time.monotonic()
        gathered = lead.gather_stacks(dump_mine)
        took = time.monotonic() - start
    finally:
        lead.end(1, wait_seen=False)
    assert gathered == {"algo-1": [{"rank": 0, "frames": []}], "algo-2": []}
    assert took < 3.0 + 2.0, took  # algo-3's wait ran during this host's dump, not after it
