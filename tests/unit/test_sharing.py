"""tests/sharing.py: two pytest runs sharing one suite's modules, as `make test`'s lanes share
the container tests. A stand-in suite of six modules records each test it runs (a second run of
one would fail: the record is created exclusively) and each fixture's setup and teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = [f"test_{c}.py" for c in "abcdef"]

CONFTEST = """
import os
import time
from pathlib import Path

import pytest

from tests.sharing import pytest_configure, pytest_runtestloop, pytest_terminal_summary  # noqa


def note(line):
    with open(os.environ["RUN_LOG"], "a") as f:
        f.write(line + "\\n")


@pytest.fixture(scope="session")
def session_fixture():
    note("session setup")
    yield
    note("session teardown")


@pytest.fixture(scope="module")
def module_fixture(request, session_fixture):
    name = Path(request.module.__file__).name
    note(f"setup {name}")
    yield
    note(f"teardown {name}")


@pytest.fixture
def record(request, module_fixture):
    # Each run's first test waits (60 s at most) until the other run has claimed its own first
    # module: proof that both took part, with no timing in it.
    wanted = os.environ.get("WAIT_FOR_CLAIM")
    if wanted:
        claim = Path(os.environ["BYOC_TEST_SHARE"]) / wanted
        deadline = time.monotonic() + 60
        while not claim.exists():
            assert time.monotonic() < deadline, f"{wanted} never claimed"
            time.sleep(0.05)
    name = Path(request.module.__file__).name + "-" + request.node.name
    with open(Path(os.environ["RECORDS"]) / name, "x") as f:  # a second run of it fails
        f.write(os.environ.get("BYOC_TEST_SHARE_FROM", "alone"))
"""

MODULE = """
import os


def test_one(record):
    pass


def test_two(record):
    assert os.environ.get("FAIL") != __name__
"""


def suite(tmp_path: Path) -> Path:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    for name in MODULES:
        (root / name).write_text(MODULE)
    (tmp_path / "records").mkdir()
    (tmp_path / "claims").mkdir()
    return root


def start(tmp_path: Path, end: str | None, **env: str) -> subprocess.Popen:
    share = (
        {"BYOC_TEST_SHARE": str(tmp_path / "claims"), "BYOC_TEST_SHARE_FROM": end} if end else {}
    )
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path / "suite",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("BYOC_TEST_SHARE")},
            "PYTHONPATH": str(ROOT),
            "RECORDS": str(tmp_path / "records"),
            "RUN_LOG": str(tmp_path / f"{end or 'alone'}.log"),
            **share,
            **env,
        },
    )


def finish(run: subprocess.Popen) -> tuple[int, str]:
    out, _ = run.communicate(timeout=120)
    return run.returncode, out


def records(tmp_path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in (tmp_path / "records").iterdir()}


def every_test() -> set[str]:
    return {f"{m}-{t}" for m in MODULES for t in ("test_one", "test_two")}


def fixture_log(tmp_path: Path, end: str) -> list[str]:
    path = tmp_path / f"{end}.log"
    return path.read_text().splitlines() if path.exists() else []


def test_two_runs_side_by_side_run_every_module_once_between_them(tmp_path):
    suite(tmp_path)
    back = start(tmp_path, "back", WAIT_FOR_CLAIM="test_a.py")
    front = start(tmp_path, "front", WAIT_FOR_CLAIM="test_f.py")
    (front_code, front_out), (back_code, back_out) = finish(front), finish(back)
    assert (front_code, back_code) == (0, 0), front_out + back_out
    ran = records(tmp_path)
    assert set(ran) == every_test()
    assert ran["test_a.py-test_one"] == "front" and ran["test_f.py-test_one"] == "back"
    for end, out in (("front", front_out), ("back", back_out)):
        modules = sorted({name.split("-")[0] for name, who in ran.items() if who == end})
        assert f"{len(modules)} module(s) ran here" in out, out
        log = fixture_log(tmp_path, end)
        # The session fixture stays up across the modules a run claims one after another; each
        # module's fixture is set up and torn down once, before the next module's.
        assert log.count("session setup") == 1 and log[-1] == "session teardown", log
        per_module = [line.split() for line in log if "session" not in line]
        assert [w for w, _ in per_module[0::2]] == ["setup"] * len(modules), log
        assert [w for w, _ in per_module[1::2]] == ["teardown"] * len(modules), log
        assert [m for _, m in per_module[0::2]] == [m for _, m in per_module[1::2]], log
        assert sorted(m for _, m in per_module[0::2]) == modules, log


def test_a_run_alone_runs_everything_and_the_next_finds_nothing_left(tmp_path):
    suite(tmp_path)
    code, out = finish(start(tmp_path, "front", FAIL="test_c"))
    assert code == 1, out  # the failure is the run's, and every other module still ran
    assert set(records(tmp_path)) == every_test()
    assert "6 module(s) ran here" in out and "0 ran in the other" in out
    code, out = finish(start(tmp_path, "back"))
    assert code == 0, out  # collected, nothing left to run: a pass that says so
    assert "0 module(s) ran here (none); 6 ran in the other" in out


def test_without_the_variables_pytest_runs_as_ever(tmp_path):
    suite(tmp_path)
    code, out = finish(start(tmp_path, None))
    assert code == 0, out
    assert set(records(tmp_path)) == every_test() and "module(s) ran here" not in out


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BYOC_TEST_SHARE_FROM": "sideways"}, "BYOC_TEST_SHARE_FROM must be front or back"),
        ({"BYOC_TEST_SHARE_FROM": ""}, "BYOC_TEST_SHARE_FROM must be front or back"),
        ({"BYOC_TEST_SHARE": "/nonexistent/claims"}, "BYOC_TEST_SHARE=/nonexistent/claims"),
    ],
)
def test_a_bad_setting_stops_the_run_naming_the_variable(tmp_path, env, named):
    suite(tmp_path)
    code, out = finish(start(tmp_path, "front", **env))
    assert code != 0 and named in out, out
    assert records(tmp_path) == {}


def test_an_end_without_a_directory_is_refused(tmp_path):
    suite(tmp_path)
    code, out = finish(start(tmp_path, None, BYOC_TEST_SHARE_FROM="front"))
    assert code != 0 and "BYOC_TEST_SHARE_FROM is set but BYOC_TEST_SHARE is not" in out, out
    assert records(tmp_path) == {}
