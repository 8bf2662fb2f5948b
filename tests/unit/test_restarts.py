"""In-job restarts (byoc.restarts, BYOC_RESTARTS): the setting's bounds, the failure file's list
of attempts, `train` on one host killed once and resuming, and the launchers' multi-host
lifecycle (the leader and a worker over the coordinator on loopback, with stand-in programs for
horovodrun and torchrun: no Docker, no SSH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from byoc import config, coordinator, plan, procs, restarts, session, settings
from byoc import constants as C
from byoc.launch import Job
from byoc.launch import horovod as horovod_launcher
from byoc.launch import torchrun as torchrun_launcher

from tests.helpers import free_port
from tests.unit.fakes import make_tree, run_train, with_program

ROOT = Path(__file__).resolve().parents[2]


# --- the setting ---------------------------------------------------------------------------------
def test_restarts_are_off_by_default_and_bounded():
    assert settings.load({}).restarts == 0
    assert settings.load({C.RESTARTS_ENV: " 3 "}).restarts == 3
    assert settings.load({C.RESTARTS_ENV: str(C.MAX_RESTARTS)}).restarts == C.MAX_RESTARTS


@pytest.mark.parametrize(
    "raw", ["-1", "101", "1.5", "nan", "inf", "1e2", "0x10", "1_0", "٣", "two", "9" * 40]
)
def test_hostile_restart_counts_are_refused_naming_the_variable(raw):
    with pytest.raises(settings.SettingsError) as err:
        settings.load({C.RESTARTS_ENV: raw})
    assert f"{C.RESTARTS_ENV}={raw!r}: expected a whole number from 0 to 100" in str(err.value)


# --- the failure file ----------------------------------------------------------------------------
def test_the_failure_file_lists_every_attempt_first():
    attempts = restarts.Attempts(limit=1)
    attempts.failed("Training failed: rank 1 on algo-2 raised RuntimeError: a (exit code 1)\n\nTb")
    attempts.number = 2
    text = attempts.failure_text(
        "Training stalled: rank 1 on algo-2 made no progress outside any collective.\nmore"
    )
    assert text.splitlines()[:4] == [
        "Training failed on all 2 attempts (BYOC_RESTARTS=1):",
        "attempt 1: rank 1 on algo-2 raised RuntimeError: a (exit code 1)",
        "attempt 2: stalled: rank 1 on algo-2 made no progress outside any collective",
        "",
    ]
    assert text.endswith("any collective.\nmore")  # then the last attempt's own message


def test_without_restarts_the_message_is_as_before():
    assert restarts.Attempts(limit=0).failure_text("Training failed: x") == "Training failed: x"


def test_why_no_restart_followed_is_said():
    attempts = restarts.Attempts(limit=3, stopped="algo-2 did not say it was ready (gone)")
    text = attempts.failure_text("Training failed with exit code 137 (SIGKILL). Last output:\n")
    assert text.startswith(
        "Training failed on 1 attempt (BYOC_RESTARTS=3; no restart: algo-2 did not say it was "
        "ready (gone)):\nattempt 1: exit code 137 (SIGKILL)\n"
    )


def test_a_hundred_attempts_keep_the_head_within_what_sagemaker_shows():
    attempts = restarts.Attempts(limit=C.MAX_RESTARTS)
    for n in range(1, C.MAX_RESTARTS + 2):
        attempts.number = n
        attempts.failed(f"Training failed: rank 3 on algo-4 raised RuntimeError: {'x' * 300}")
    text = attempts.failure_text("the last message")
    head = text[: text.index("\n\nthe last message")]
    assert len(head) <= 1024, len(head)
    assert "attempt 1: rank 3" in head and "attempt 101: rank 3" in head
    assert "attempts 2 to " in head and "listed at the end of this file (101 in all)" in head
    listed = text[text.index("Every attempt:") :].splitlines()[1:]
    assert [line.split(":")[0] for line in listed] == [f"attempt {n}" for n in range(1, 102)]
    assert all(len(line) <= len("attempt 101: ") + restarts.LINE_LIMIT for line in listed)


# --- `train` on one host -------------------------------------------------------------------------
# Six steps, one checkpoint (JSON, replaced atomically) after each, with the steps it holds;
# attempt 1 is killed (SIGKILL, as the kernel's OOM killer does) before step 3.
KILLED_ONCE = """import json, os, signal
from pathlib import Path
ckpt = Path(os.environ["SM_CHECKPOINT_DIR"]) / "state.json"
state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "trained": []}
attempt = os.environ["BYOC_ATTEMPT"]
print(f"attempt {attempt} resumes at step {state['step']}", flush=True)
for step in range(state["step"], 6):
    if step == 3 and attempt == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    state = {"step": step + 1, "trained": state["trained"] + [step]}
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, ckpt)
"""


def test_a_killed_program_with_one_restart_finishes_every_step_once(tmp_path):
    ml = with_program(tmp_path, KILLED_ONCE)
    result = run_train(ml, 120, **{C.RESTARTS_ENV: "1"})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "byoc: restart 1 of 1: exit code 137 (SIGKILL)" in out
    assert "attempt 2 resumes at step 3" in out
    state = json.loads((ml / "checkpoints" / "state.json").read_text())
    assert state["trained"] == [0, 1, 2, 3, 4, 5]  # nothing trained twice, nothing lost
    assert (ml / "output" / "success").exists() and not (ml / "output" / "failure").exists()


def test_a_stalled_attempt_is_restarted_too(tmp_path):
    ml = with_program(
        tmp_path,
        "import os, time\n"
        "print('attempt', os.environ['BYOC_ATTEMPT'], flush=True)\n"
        "if os.environ['BYOC_ATTEMPT'] == '1':\n"
        "    time.sleep(300)  # silent, no CPU: a stall\n",
    )
    result = run_train(ml, 120, **{C.RESTARTS_ENV: "1", C.STALL_TIMEOUT_ENV: "10"})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "byoc: restart 1 of 1: stalled: no rank printed or used the CPU for" in out
    assert "attempt 2" in out


def test_without_restarts_the_killed_program_fails_the_job(tmp_path):
    ml = with_program(tmp_path, KILLED_ONCE)
    result = run_train(ml)
    assert result.returncode == 137
    assert (ml / "output" / "failure").read_text().startswith("Training failed with exit code 137")


def test_restarts_exhausted_end_with_every_attempt_listed(tmp_path):
    ml = with_program(
        tmp_path,
        "import os\nraise RuntimeError(f\"boom on attempt {os.environ['BYOC_ATTEMPT']}\")\n",
    )
    result = run_train(ml, 120, **{C.RESTARTS_ENV: "2"})
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert out.count("byoc: restart ") == 2 and "byoc: restart 2 of 2: rank 0 on algo-1" in out
    failure = (ml / "output" / "failure").read_text()
    assert failure.splitlines()[:4] == [
        "Training failed on all 3 attempts (BYOC_RESTARTS=2):",
        "attempt 1: rank 0 on algo-1 raised RuntimeError: boom on attempt 1 (exit code 1)",
        "attempt 2: rank 0 on algo-1 raised RuntimeError: boom on attempt 2 (exit code 1)",
        "attempt 3: rank 0 on algo-1 raised RuntimeError: boom on attempt 3 (exit code 1)",
    ]
    assert not (ml / "output" / "success").exists()


# --- several hosts: the leader and a worker over the coordinator --------------------------------
HOSTS = ("127.0.0.1", "localhost")  # both resolve to loopback here; the first leads
# What each host runs, by role and attempt: attempt 1 fails as the test says, attempt 2 succeeds.
PROGRAM = """import os, signal, sys, time
who, attempt = os.environ["WHO"], int(os.environ["BYOC_ATTEMPT"])
with open(os.environ["LEDGER"], "a") as ledger:
    ledger.write(f"{who} {attempt}\\n")
for _ in range(300):  # the rendezvous: every host's program of this attempt has started
    lines = set(open(os.environ["LEDGER"]).read().splitlines())
    if all(f"{w} {attempt}" in lines for w in os.environ["WORLD"].split()):
        break
    time.sleep(0.1)
if attempt == 1 and who == os.environ.get("DIES", ""):
    os.kill(os.getpid(), signal.SIGKILL)
if attempt == 1 and who == os.environ.get("RAISES", ""):
    print("[1]<stderr>:Traceback (most recent call last):", flush=True)
    print('[1]<stderr>:  File "/c/t.py", line 3, in <module>', flush=True)
    print("[1]<stderr>:RuntimeError: rank 1 lost its data", flush=True)
    sys.exit(1)
if attempt == 1 and who == os.environ.get("WAITS", ""):
    time.sleep(60)  # a rank blocked in a collective with a dead peer: ended by the guard
print(f"{who} attempt {attempt} done", flush=True)
"""


def host_job(tmp_path: Path, current: str, launcher: str, env: dict[str, str]) -> Job:
    root = make_tree(tmp_path / current, hosts=HOSTS, current=current)
    cfg = config.load(root)
    role = "leader" if current == HOSTS[0] else "worker"
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    the_plan = plan.Plan(role, launcher, 1, 2, [sys.executable, str(program)])
    who = {"WHO": role, "LEDGER": str(tmp_path / "ledger"), "PATH": os.environ["PATH"]}
    return Job(cfg, settings.load(env), the_plan, {**env, **who}, tmp_path)


def run_hosts(tmp_path, monkeypatch, launcher: str, **program_env) -> dict:
    env = {
        C.END_GRACE_ENV: "0.5",
        C.COORD_PORT_ENV: str(free_port()),
        C.LEADER_TIMEOUT_ENV: "30",
        C.LEADER_LOST_ENV: "5",
        C.TERM_GRACE_ENV: "5",
        C.STALL_TIMEOUT_ENV: "0",
        C.RESTARTS_ENV: "1",
        **program_env,
    }
    env["WORLD"] = "leader worker" if launcher == "torchrun" else "leader"
    jobs = {
        role: host_job(tmp_path, h, launcher, env)
        for role, h in zip(("leader", "worker"), HOSTS, strict=True)
    }
    results: dict = {}
    module = horovod_launcher if launcher == "horovod" else torchrun_launcher

    def host(role):
        try:
            results[role] = module.run(jobs[role])
        except Exception as exc:  # noqa: BLE001 - the test reports it
            results[role] = exc

    threads = [threading.Thread(target=host, args=(r,), daemon=True) for r in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), f"still running: {results}"
    ledger = (tmp_path / "ledger").read_text().split()
    return {
        "results": results,
        "jobs": jobs,
        "ledger": sorted(zip(ledger[::2], ledger[1::2], strict=True)),
    }


def test_torchrun_a_worker_killed_once_restarts_every_host(tmp_path, monkeypatch, capsys):
    run = run_hosts(tmp_path, monkeypatch, "torchrun", DIES="worker", WAITS="leader")
    assert run["results"]["leader"] == (0, []), run
    assert run["results"]["worker"][0] == 0, run
    # Each host ran attempt 1 and attempt 2 once, with BYOC_ATTEMPT telling which.
    assert run["ledger"] == [("leader", "1"), ("leader", "2"), ("worker", "1"), ("worker", "2")]
    assert run["jobs"]["worker"].attempts.causes[1].startswith("exit code 137 (SIGKILL)")
    out = capsys.readouterr().out
    # The leader's ranks were ended (SIGTERM); the worker's own exit code says what happened.
    assert (
        "byoc: restart 1 of 1: exit code 143 (SIGTERM) (reported: localhost: exit code 137" in out
    )
    assert "the leader restarts the job after attempt 1" in out
    assert "leader attempt 2 done" in out and "worker attempt 2 done" in out


def test_horovod_a_rank_that_raised_restarts_horovodrun_and_the_worker_waits(
    tmp_path, monkeypatch, capsys
):
    # horovodrun's stand-in is the leader's program; the worker only serves (an idle "sshd").
    sshd = subprocess.Popen(["sleep", "120"])
    monkeypatch.setattr(horovod_launcher, "_keys", lambda job: {"host": job.cfg.current_host})
    monkeypatch.setattr(horovod_launcher, "_trust", lambda job, members: sshd)
    monkeypatch.setattr(horovod_launcher.ssh, "wait_for_login", lambda host, timeout: 0.0)
    try:
        run = run_hosts(tmp_path, monkeypatch, "horovod", RAISES="leader")
        assert sshd.poll() is None  # what the next attempt logs in through is kept
    finally:
        sshd.kill()
        sshd.wait()
    assert run["results"]["leader"] == (0, []), run
    assert run["results"]["worker"] == (0, []), run
    assert run["ledger"] == [("leader", "1"), ("leader", "2")]
    assert run["jobs"]["leader"].attempts.number == 2
    out = capsys.readouterr().out
    assert (
        "byoc: restart 1 of 1: rank 1 on localhost raised RuntimeError: rank 1 lost its data" in out
    )


def test_a_host_that_does_not_say_it_is_ready_is_gone_and_ends_the_job(tmp_path, monkeypatch):
    """The leader's side alone: its worker joined, then vanished; no restart, and the failure
    file says why. The bound: BYOC_END_GRACE + 2 x BYOC_TERM_GRACE + BYOC_LEADER_LOST_AFTER."""
    env = {
        C.COORD_PORT_ENV: str(free_port()),
        C.END_GRACE_ENV: "1",
        C.TERM_GRACE_ENV: "1",
        C.LEADER_LOST_ENV: "1",
    }
    job = host_job(tmp_path, HOSTS[0], "torchrun", {**env, C.RESTARTS_ENV: "2"})
    lead = session.Leading(job.cfg, job.settings)
    try:
        lead.running(job.begin_attempt())
        lead.restarting(1)
        assert job.restart(1, []) is True  # one host alone: nobody to wait for
        job.attempts.number = 2
        assert job.restart(1, [], lead) is False
    finally:
        lead.end(1, wait_seen=False)
    assert "localhost did not say it was ready within 4 s (gone)" in job.attempts.stopped
    text = job.attempts.failure_text("Training failed with exit code 1. Last output:\n")
    assert text.startswith("Training failed on 2 attempts (BYOC_RESTARTS=2; no restart: localhost")


def test_late_reports_and_readiness_of_another_attempt_are_dropped():
    state = coordinator.JobState(["a", "b"], lambda h: {"127.0.0.1"})
    state.begin(2)
    state.report({"host": "b", "exit_code": 1, "attempt": 1}, None)
    assert state.reported() == {}  # attempt 1's report, late: not this attempt's failure
    state.answer_ready({"host": "b", "attempt": 2}, None)
    assert state.ready == set()  # no restart under way
    state.set("restarting", 1)
    state.answer_ready({"host": "b", "attempt": 1}, None)
    state.answer_ready({"host": "b", "attempt": 2}, None)
    assert state.ready == {"b"} and state.snapshot(None)["attempt"] == 2
    state.begin(3)
    assert state.ready == set() and state.snapshot(None)["state"] == "running"


def test_leftovers_are_ended_but_what_is_kept(monkeypatch):
    """In the container: every process but PID 1, this one and keep."""
    spared = subprocess.Popen(["sleep", "60"])
    victim = subprocess.Popen(["sleep", "60"])
    monkeypatch.setattr(procs, "in_our_container", lambda: True)
    monkeypatch.setattr(procs, "_others", lambda: [spared.pid, victim.pid])
    try:
        procs.terminate_all(5, (spared.pid,))
        assert victim.wait(10) == -15 and spared.poll() is None
    finally:
        for p in (spared, victim):
            p.kill()
            p.wait()


def test_the_wait_for_readiness_covers_an_honest_hosts_worst_case():
    s = settings.load({C.TERM_GRACE_ENV: "60", C.LEADER_LOST_ENV: "30"})
    from byoc.launch import ready_bound

    # its ranks and then their leftovers each SIGKILLed after the grace, its results gathered
    assert ready_bound(s) == C.DEFAULT_END_GRACE + 2 * 60 + 30
    s = settings.load({C.END_GRACE_ENV: "5", C.TERM_GRACE_ENV: "60", C.LEADER_LOST_ENV: "30"})
    assert ready_bound(s) == 5 + 2 * 60 + 30


def test_an_attempts_line_stays_within_its_limit_with_every_hosts_code():
    codes = ", ".join(f"algo-{i}: exit code 143 (SIGTERM)" for i in range(1, 33))
    line = restarts.cause_line(
        "Training failed: rank 0 on algo-1 was killed", f" (reported: {codes})"
    )
    assert len(line) <= restarts.LINE_LIMIT
    assert line.startswith("rank 0 on algo-1 was killed (reported: algo-1: exit code 143")
    assert line.endswith("...")


def test_a_host_that_missed_an_attempt_says_ready_for_the_latest(tmp_path, monkeypatch):
    """Attempt 2 started and failed between two of this host's polls (it ran attempt 1 only):
    it ends its leftovers and says ready for attempt 2, and follows attempt 3."""
    root = make_tree(tmp_path, hosts=HOSTS, current=HOSTS[1])
    follow = session.Following(config.load(root), settings.load({}))
    statuses = iter(
        [
            {"state": "restarting", "attempt": 2},
            {"state": "restarting", "attempt": 2},
            {"state": "running", "attempt": 3},
        ]
    )

    def status(until):
        for seen in statuses:
            if until(seen):
                return seen
        raise AssertionError("the statuses ran out")

    said = []
    monkeypatch.setattr(follow, "status", status)
    monkeypatch.setattr(follow, "ready", lambda attempt, keep=(): said.append(attempt))
    assert follow.next_attempt(1) == {"state": "running", "attempt": 3}
    assert said == [2]
