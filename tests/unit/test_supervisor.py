"""byoc-init as a supervisor: exit codes, signal forwarding to the whole group, zombie reaping."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from byoc import init, supervisor

from tests.helpers import ended, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]


def start_init(*argv: str, **kw) -> subprocess.Popen:
    # As the cpu flavor: no fabric line from byoc-init (that decision is test_fabric's), so the
    # command's own output is all there is.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "entrypoint"), BYOC_FLAVOR="cpu")
    return subprocess.Popen(
        [sys.executable, "-m", "byoc.init", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def run_init(*argv: str, timeout: float = 20) -> subprocess.CompletedProcess:
    proc = start_init(*argv)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose parent is pid."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = dict(
                line.split(":\t", 1) for line in (entry / "status").read_text().splitlines()
            )
        except (OSError, ValueError):
            continue
        if int(fields.get("PPid", "0")) == pid:
            found.append((int(entry.name), fields["State"].split()[0]))
    return found


def test_no_arguments_is_dev_mode_and_any_command_runs_as_is():
    assert init.command_for([]) == [sys.executable, "-m", "byoc.dev"]
    assert init.command_for(["dev"]) == [sys.executable, "-m", "byoc.dev"]
    assert init.command_for(["bash"]) == ["bash"]
    assert init.command_for(["python", "x.py"]) == ["python", "x.py"]


def test_exit_code_is_the_childs():
    assert run_init("sh", "-c", "echo out; exit 7").returncode == 7


def test_output_passes_through():
    result = run_init("sh", "-c", "echo hello; echo oops >&2")
    assert (result.returncode, result.stdout, result.stderr) == (0, "hello\n", "oops\n")


def test_killed_child_gives_128_plus_signal():
    assert run_init("sh", "-c", "kill -KILL $$").returncode == 128 + signal.SIGKILL


def test_missing_command_is_127_with_message():
    result = run_init("no-such-command-xyz")
    assert result.returncode == 127
    assert "no-such-command-xyz: command not found" in result.stderr


def test_sigterm_reaches_the_child_and_its_code_is_returned(tmp_path):
    ready = tmp_path / "ready"
    proc = start_init(
        "sh", "-c", f'trap "exit 42" TERM; touch {ready}; while :; do sleep 0.1; done'
    )
    wait_until(ready.exists, timeout=10, what="child ready")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 42


def test_sigterm_reaches_grandchildren(tmp_path):
    pidfile = tmp_path / "pid"
    proc = start_init("sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10, what="grandchild")
    grandchild = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM

    wait_until(lambda: ended(grandchild), timeout=10, what="grandchild ended")


def test_orphans_are_reaped(tmp_path):
    # The subshell exits at once, so its background child is re-parented to byoc-init (a
    # subreaper here, PID 1 in a container) and must not stay a zombie once it exits.
    done = tmp_path / "done"
    proc = start_init(
        "sh", "-c", f"(sh -c 'echo $$ > {done}.tmp; mv {done}.tmp {done}; exit 3' &); sleep 3"
    )
    orphan = int(wait_until(lambda: done.exists() and done.read_text().strip(), 10, what="orphan"))
    # Reaped, not merely exited: a zombie keeps its /proc entry until its parent waits for it.
    wait_until(lambda: not pathlib.Path(f"/proc/{orphan}").exists(), 10, what="orphan reaped")
    zombies = [pid for pid, state in children_of(proc.pid) if state == "Z"]
    assert zombies == []
    assert proc.wait(timeout=10) == 0


def test_exit_code_helper():
    assert supervisor.exit_code(3 << 8) == 3
    assert supervisor.exit_code(signal.SIGTERM) == 128 + signal.SIGTERM


def test_run_needs_a_command():
    with pytest.raises(ValueError):
        supervisor.run([])


def test_a_watch_beside_the_child_can_end_it_with_its_own_verdict():
    """What a SageMaker SDK worker's byoc-init does when its leader is done and the driver
    hangs on: stop(code) ends the child's group and the code is the exit code."""
    script = (
        "import sys, time\n"
        "from byoc import supervisor\n"
        "def watch(pid, stop):\n"
        "    time.sleep(0.5)\n"
        "    stop(7)\n"
        "sys.exit(supervisor.run(['sleep', '60'], watch=watch))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "entrypoint"))
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
    assert result.returncode == 7
    assert time.monotonic() - t0 < 30  # sleep 60 was ended, not waited for


def test_a_watch_that_says_nothing_leaves_the_childs_code():
    script = (
        "import sys\n"
        "from byoc import supervisor\n"
        "sys.exit(supervisor.run(['sh', '-c', 'exit 3'], watch=lambda pid, stop: None))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "entrypoint"))
    result = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
    assert result.returncode == 3
