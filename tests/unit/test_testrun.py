"""hostkit.testrun (`make test`'s two lanes) with a stand-in make: what runs side by side, what
waits, what a failure stops, and the breakdown it prints."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hostkit import testrun
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]

# A stand-in make: logs "<target> start|end" (the container tests' second run as
# test-container-tail, and "share <stage> <end> <dir>" where the share's directory exists), fails
# the target named by FAIL, and, for the target
# named by WAIT_FOR_TARGET, waits (at most 30 s) until the stage named by WAIT_FOR has started:
# proof that the two ran at the same time, with no timing in the assertion.
FAKE_MAKE = r"""#!/bin/sh
for a in "$@"; do case "$a" in -*|*=*) ;; *) last=$a ;; esac; done
[ "$last" = build ] && last=build-cpu
[ "${BYOC_TEST_SHARE_FROM:-}" = back ] && last=test-container-tail
[ -n "${BYOC_TEST_SHARE:-}" ] && [ -d "$BYOC_TEST_SHARE" ] \
    && echo "share $last $BYOC_TEST_SHARE_FROM $BYOC_TEST_SHARE" >> "$LOG"
echo "$last start" >> "$LOG"
echo "output of $last"
if [ "$last" = "${WAIT_FOR_TARGET:-}" ]; then
    i=0
    until grep -q "^$WAIT_FOR start" "$LOG"; do
        i=$((i + 1)); [ $i -gt 300 ] && { echo "$WAIT_FOR never started" >&2; exit 9; }
        sleep 0.1
    done
fi
if [ -n "${BLOCK:-}" ]; then
    trap 'echo "$last interrupted" >> "$LOG"; exit 130' INT
    sleep 30 & wait
fi
echo "$last end" >> "$LOG"
[ "$last" = "${FAIL:-}" ] && exit 3
exit 0
"""


def fake_make(tmp_path: Path) -> tuple[Path, Path]:
    """The stand-in make, and its (empty) log."""
    make = tmp_path / "make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    return make, log


def run(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, list[str]]:
    make, log = fake_make(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "hostkit.testrun", "--make", str(make), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LOG": str(log), **env},
    )
    return done.returncode, done.stdout + done.stderr, log.read_text().splitlines()


def test_the_lanes_run_side_by_side_and_every_stage_passes(tmp_path):
    # build-cpu (lane images) waits for lint (lane checks) to start: only side by side can it.
    code, out, log = run(tmp_path, WAIT_FOR_TARGET="build-cpu", WAIT_FOR="lint")
    assert code == 0, out
    assert log.index("lint start") < log.index("build-cpu end")
    for stage in ("build-cpu", "test-container", "smoke", "lint", "test-unit"):
        assert f"{stage} end" in log
    assert re.search(r"^test-container +\| output of test-container$", out, re.M), out
    assert "wall time" in out and "passed" in out


def test_the_container_tests_are_shared_between_the_lanes_through_one_directory(tmp_path):
    code, out, log = run(tmp_path)
    assert code == 0, out
    shares = sorted(line.split()[1:] for line in log if line.startswith("share "))
    # The images lane's run and the units lane's from the front, the checks lane's from the back.
    assert [s[:2] for s in shares] == [
        ["test-container", "front"],
        ["test-container", "front"],
        ["test-container-tail", "back"],
    ]
    assert len({s[2] for s in shares}) == 1  # one directory, which existed while they ran
    assert not Path(shares[0][2]).exists()  # and is gone with the run
    assert log.index("test-horovod end") < log.index("test-container-tail start")
    assert re.search(r"^test-container-tail +\| output of test-container-tail$", out, re.M)


def test_a_failure_stops_its_lane_and_the_other_goes_on(tmp_path):
    code, out, log = run(tmp_path, FAIL="test-unit")
    assert code == 1, out
    assert [line for line in log if line.startswith("share ")] != []
    assert len([line for line in log if line.startswith("test-container start")]) == 1
    assert "smoke end" in log and "test-horovod end" in log  # the other lanes went on
    assert "not run: test-unit failed" in out
    assert "failed (exit 3)" in out and "FAILED" in out


def test_the_builds_run_side_by_side_and_the_suites_wait_for_the_cpu_image(tmp_path):
    # build-cpu waits for the gpu stand-in's build to start: only side by side can it; the
    # checks lane's later stages take no time here, and Horovod's suites still wait for it.
    code, out, log = run(tmp_path, WAIT_FOR_TARGET="build-cpu", WAIT_FOR="build-gpu-standin")
    assert code == 0, out
    assert log.index("build-gpu-standin start") < log.index("build-cpu end")
    assert log.index("build-cpu end") < log.index("test-horovod start")
    code, out, log = run(tmp_path, FAIL="build-cpu")
    assert code == 1
    for stage in ("test-horovod", "test-container", "test-container-tail"):
        assert f"{stage} start" not in log
    for stage in ("build-gpu-standin", "test-unit", "test-gpu-flavor"):
        assert f"{stage} end" in log  # what needs no cpu image still ran
    assert "not run: build-cpu did not pass" in out


def test_one_lane_runs_every_stage_in_order(tmp_path):
    code, out, log = run(tmp_path, "--lanes", "1")
    assert code == 0, out
    starts = [line.split()[0] for line in log if line.endswith("start")]
    assert starts == [
        "build-cpu",
        "test-container",
        "smoke",
        "lint",
        "build-gpu-standin",
        "test-unit",
        "test-gpu-flavor",
        "test-horovod",
        "test-container-tail",
    ]


@pytest.mark.parametrize("lanes", ["4", "0", "", "two"])
def test_a_bad_lane_count_is_refused(tmp_path, lanes):
    code, out, log = run(tmp_path, "--lanes", lanes)
    assert code == 2
    assert "TEST_LANES" in out
    assert log == []


def test_a_make_that_cannot_run_fails_each_lane_with_a_message(tmp_path):
    code, out, _ = run(tmp_path, "--make", str(tmp_path / "no-such-make"))
    assert code == 1, out
    assert "failed (cannot run" in out and "Traceback" not in out
    assert "not run: build-cpu failed" in out and "not run: lint failed" in out


def test_an_interrupt_reaches_every_running_stage_and_ends_the_run(tmp_path):
    make, log = fake_make(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "hostkit.testrun", "--make", str(make)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "LOG": str(log), "BLOCK": "1"},
    )
    try:
        wait_until(
            lambda: {"build-cpu start", "lint start"} <= set(log.read_text().splitlines()),
            30,
            what="both lanes' first stages",
        )
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 130, out
    lines = log.read_text().splitlines()
    assert "build-cpu interrupted" in lines and "lint interrupted" in lines
    assert "test-container start" not in lines and "test-unit start" not in lines


# --- the budgets (docs/tests.md) ------------------------------------------------------------------
def test_every_stage_and_the_run_have_a_budget_in_the_docs_within_the_projects_aims():
    limits = testrun.read_budgets()
    names = {s.name for lane in testrun.stages("/nonexistent").values() for s in lane}
    assert set(limits) == names | {testrun.WALL}, sorted(set(limits) ^ (names | {testrun.WALL}))
    for name, budget in limits.items():
        assert 0 < budget.warm <= budget.cold, (name, budget)
    # The project's aims: a cold run under 40 minutes on 2 cores, a warm one under 20.
    assert limits[testrun.WALL].cold <= 40 * 60 and limits[testrun.WALL].warm <= 20 * 60


def test_the_closing_table_marks_a_stage_and_a_run_over_budget():
    lanes = testrun.stages("/nonexistent")
    for lane in lanes.values():
        for stage in lane:
            stage.result, stage.seconds = "ok", 10.0
    lanes["images"][1].seconds = 500.0  # test-container
    limits = {
        "test-container": testrun.Budget(cold=600, warm=400),
        testrun.WALL: testrun.Budget(cold=900, warm=450),
    }
    text, passed = testrun.summary(lanes, 480.0, limits, "warm")
    assert passed  # a budget marks, it fails nothing
    line = next(x for x in text.splitlines() if x.startswith("test-container "))
    assert "400" in line and "OVER its warm budget by 100 s" in line, text
    assert "OVER" not in next(x for x in text.splitlines() if x.startswith("lint "))
    assert "wall time 480 s of a 450 s budget (warm cache), OVER by 30 s: passed" in text, text
    assert "over budget: test-container, make test" in text
    text, _ = testrun.summary(lanes, 480.0, limits, "cold")
    assert "OVER" not in text, text  # the cold budgets hold both


def test_budgets_are_read_from_their_section_only():
    page = "\n".join(
        [
            "| `lint` | checks | elsewhere | 1 | 1 |",
            testrun.BUDGETS_HEADING,
            "| stage | lane | runs | cold (s) | warm (s) |",
            "|---|---|---|---|---|",
            "| `lint` | checks | ruff | 30 | 20 |",
            "| `make test` | - | the whole run | 2400 | 1200 |",
            "## Next",
            "| `smoke` | images | later | 5 | 5 |",
        ]
    )
    assert testrun.budgets(page) == {
        "lint": testrun.Budget(30, 20),
        "make test": testrun.Budget(2400, 1200),
    }


def test_the_run_says_which_budgets_apply_and_shows_them(tmp_path):
    code, out, _ = run(tmp_path, "--cache", "warm")
    assert code == 0, out
    assert "warm build cache: the warm budgets apply" in out, out
    assert re.search(r"^testrun: stage +lane +seconds +budget +result$", out, re.M), out
    assert re.search(r"wall time \d+ s of a \d+ s budget \(warm cache\)", out), out


def test_two_lanes_put_the_unit_tests_after_the_gpu_build_and_run_the_container_tests_twice(
    tmp_path,
):
    code, out, log = run(tmp_path, "--lanes", "2")
    assert code == 0, out
    assert len([line for line in log if line.startswith("share ")]) == 2
    assert log.index("build-gpu-standin end") < log.index("test-unit start")
    assert "test-container-side" not in out
