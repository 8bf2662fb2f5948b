"""byoc.clean_exit: a program's result kept, the interpreter's teardown skipped, what a program
relies on at exit (threads, atexit, flushed output) still done. Each case runs a real
interpreter, once bare and once through the module, where the two must agree."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoint"

# Everything a program relies on at exit, and one thing only teardown does (a global's __del__).
SCRIPT = """
import atexit, concurrent.futures, os, pickle, sys, threading, time

class Teardown:
    def __del__(self):
        os.write(2, b"teardown ran\\n")

class Point:
    pass

kept = Teardown()
atexit.register(lambda: print("atexit ran", flush=True))
# A class of the script pickled at exit: __main__ must still be the script's module.
atexit.register(lambda: print("pickled", len(pickle.dumps(Point())) > 0, flush=True))
# An idle pool's workers wait until threading's exit hook wakes them: joined without it, hang.
pool = concurrent.futures.ThreadPoolExecutor(2)
power = pool.submit(pow, 2, 10)
def late():
    time.sleep(0.3)
    print("thread finished")
threading.Thread(target=late).start()
print("name", __name__, "argv", sys.argv[1:], "path0", sys.path[0])
print("file", __file__)
print("pool", power.result())
sys.stdout.write("no newline")  # block-buffered: flushed only at exit
{end}
"""


def run(tmp_path: Path, end: str, clean: bool) -> subprocess.CompletedProcess:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(SCRIPT.format(end=end)))
    env = {**os.environ, "PYTHONPATH": str(ENTRYPOINT)}
    env.pop("PYTHONUNBUFFERED", None)
    head = [sys.executable, "-m", "byoc.clean_exit"] if clean else [sys.executable]
    return subprocess.run(
        [*head, str(script), "--lr", "0.1"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("end", "status"),
    [("", 0), ("sys.exit(3)", 3), ("sys.exit('bad input')", 1), ("raise ValueError('boom')", 1)],
)
def test_same_result_and_output_as_python_without_the_teardown(tmp_path, end, status):
    bare, clean = run(tmp_path, end, clean=False), run(tmp_path, end, clean=True)
    assert bare.returncode == clean.returncode == status
    assert clean.stdout == bare.stdout
    header = f"name __main__ argv ['--lr', '0.1'] path0 {tmp_path}\nfile {tmp_path}/prog.py\n"
    assert header in clean.stdout
    for printed in ("pool 1024", "no newline", "thread finished", "atexit ran", "pickled True"):
        assert printed in clean.stdout
    # The teardown (and so the abort of pytorch/pytorch#190489) is what is skipped.
    assert "teardown ran" in bare.stderr and "teardown ran" not in clean.stderr
    for message in ("bad input", "ValueError: boom"):
        assert (message in bare.stderr) == (message in clean.stderr)
    if "ValueError" in end:
        assert "Traceback (most recent call last)" in clean.stderr


def test_runs_a_module_as_python_m_does(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        "import sys\nprint(__name__, sys.argv[0].endswith('train.py'), sys.argv[1:])\n"
        "raise SystemExit(4)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ENTRYPOINT)}
    out = subprocess.run(
        [sys.executable, "-m", "byoc.clean_exit", "-m", "pkg.train", "a"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert out.returncode == 4 and out.stdout == "__main__ True ['a']\n", out.stderr


@pytest.mark.parametrize("argv", [[], ["-m"]])
def test_usage(argv):
    env = {**os.environ, "PYTHONPATH": str(ENTRYPOINT)}
    out = subprocess.run(
        [sys.executable, "-m", "byoc.clean_exit", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2 and "usage: python -m byoc.clean_exit" in out.stderr
