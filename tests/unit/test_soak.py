"""hostkit.soak (make test-container-soak): its reading of pytest's reports, its counts and its
refusals. The soak itself runs the container tests: docs/tests.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hostkit import HostError, soak

ROOT = Path(__file__).resolve().parents[2]

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.container.test_train" name="test_a[horovod]" time="41.5" />
<testcase classname="tests.container.test_train" name="test_b" time="3.0">
  <failure message="AssertionError: rank 1 died&#10;more">trace</failure></testcase>
<testcase classname="tests.container.test_stall" name="test_c" time="1.0">
  <skipped message="no compose" /></testcase>
</testsuite></testsuites>"""


def test_a_report_gives_each_tests_outcome_seconds_and_first_line(tmp_path):
    path = tmp_path / "run.xml"
    path.write_text(REPORT)
    assert soak.read_junit(path) == {
        "tests.container.test_train::test_a[horovod]": ("passed", 41.5, ""),
        "tests.container.test_train::test_b": (
            "failed",
            3.0,
            "AssertionError: rank 1 died",
        ),
        "tests.container.test_stall::test_c": ("skipped", 1.0, ""),
    }
    (tmp_path / "bad.xml").write_text("<testsuites")
    with pytest.raises(ValueError, match="not a readable JUnit report"):
        soak.read_junit(tmp_path / "bad.xml")


def test_the_counts_name_every_failure_by_run_and_fail_the_soak():
    runs = [
        {"t::a": ("passed", 10.0, ""), "t::b": ("passed", 2.0, "")},
        {"t::a": ("passed", 30.0, ""), "t::b": ("failed", 2.0, "boom")},
    ]
    counts = soak.tally(runs)
    assert (counts["t::a"].passed, counts["t::a"].slowest) == (2, 30.0)
    assert (counts["t::b"].passed, counts["t::b"].failed, counts["t::b"].messages) == (
        1,
        1,
        ["run 2: boom"],
    )
    text, ok = soak.table(counts, 2, [])
    assert not ok and "FAILURES" in text and "run 2: boom" in text
    text, ok = soak.table(soak.tally(runs[:1]), 1, [])
    assert ok and "every one passed" in text
    text, ok = soak.table(soak.tally(runs[:1]), 1, ["run 1: pytest exited 3"])
    assert not ok and "error: run 1: pytest exited 3" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--runs", "0"], "--runs must be 1 to 200"),
        (["--runs", "201"], "--runs must be 1 to 200"),
        (["--load", "-1"], "--load must be 0 to 16"),
        (["--load", "17"], "--load must be 0 to 16"),
        (["--image", " "], "--image is empty"),
    ],
)
def test_bad_arguments_are_refused_naming_them(argv, message):
    with pytest.raises(HostError, match=message):
        soak.parse_args(argv)


def test_the_default_selection_is_the_timing_tests():
    assert soak.parse_args([]).pytest_args == ["-m", "timing"]
    assert soak.parse_args(["--", "-k", "pipe"]).pytest_args == ["-k", "pipe"]


def test_a_selection_that_matches_nothing_exits_2_saying_so(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hostkit.soak", "--load", "0", "--runs", "1"]
        + ["--out", str(tmp_path), "--", "-k", "no_such_test_anywhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no container test matches -k no_such_test_anywhere" in done.stderr
    assert "Traceback" not in done.stderr
