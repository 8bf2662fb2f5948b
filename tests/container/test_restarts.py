"""In-job restarts (BYOC_RESTARTS, docs/failures.md) across 2 hosts x 1 rank: a rank killed once
(SIGKILL, rank 1 on algo-2, in attempt 1) ends in exit 0 on every host, the restart and its cause
in the log, every sample trained exactly once and equal weights (scripts/restart.py); a rank
that fails every attempt ends the job with both attempts in the failure file."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.container.support import HOSTS, SCRIPTS, logs, rank_text

# Every test here depends on timing (docs/tests.md, "Tests that depend on timing").
pytestmark = pytest.mark.timing

PROGRAM = {"sagemaker_program": "/opt/ml/code/restart.py"}
# One restart; one rank per host; a short grace for what is left of a failed attempt.
ENV = {"BYOC_RESTARTS": "1", "BYOC_CPU_SLOTS_PER_HOST": "1", "BYOC_TERM_GRACE": "10"}
SAMPLES = 8 * 4 * 2  # restart.py: steps x batch x ranks


def start(job, tmp_path, launcher: str, env: dict[str, str]):
    """Both hosts, restart.py in each one's code/; the containers and each host's /opt/ml."""
    hps = dict(PROGRAM)
    if launcher == "horovod":
        hps["sagemaker_mpi_num_of_processes_per_host"] = 1
    roots = [tmp_path / host for host in HOSTS]  # each host's /opt/ml (the job fixture's)
    for root in roots:
        (root / "code").mkdir(parents=True)
        shutil.copy(SCRIPTS / "restart.py", root / "code" / "restart.py")
    started = [job.start(h, hps=hps, env={**ENV, **env}, launcher=launcher)[0] for h in HOSTS]
    return started, roots


@pytest.mark.parametrize("launcher", ["horovod", "torchrun"])
def test_a_rank_killed_once_is_restarted_and_every_sample_is_trained_once(job, tmp_path, launcher):
    started, roots = start(job, tmp_path, launcher, {})
    results = job.wait_all(timeout=240)
    out = rank_text(*map(logs, started))
    assert all(code == 0 for code, _ in results.values()), (results, out)
    assert "rank 1: killing itself at step 3 of attempt 1" in out, out
    assert re.search(r"byoc: restart 1 of 1: \S", out), out  # with its cause
    assert re.search(r"rank 0: attempt 2 resumes at step [1-9]", out), out
    assert f"COVERAGE samples={SAMPLES} once={SAMPLES} missing=0 twice=0" in out, out
    assert "WEIGHTS max_diff=0 ranks=2" in out, out
    replay = re.search(r"^REPLAY max_diff=(\S+)$", out, re.M)
    assert replay and float(replay.group(1)) < 1e-9, out
    for root in roots:
        assert (root / "output" / "success").exists(), out
        assert not (root / "output" / "failure").exists(), out


def test_restarts_exhausted_fail_the_job_listing_every_attempt(job, tmp_path):
    started, roots = start(job, tmp_path, "torchrun", {"FAIL_ALWAYS": "1"})
    results = job.wait_all(timeout=240)
    out = "\n".join(logs(c) for c in started)
    assert all(code != 0 for code, _ in results.values()), (results, out)
    assert out.count("byoc: restart 1 of 1: rank 1 on algo-2 raised RuntimeError") == 1, out
    failure = (roots[0] / "output" / "failure").read_text()
    lines = failure.splitlines()
    assert lines[0] == "Training failed on all 2 attempts (BYOC_RESTARTS=1):", failure
    for attempt in (1, 2):
        assert lines[attempt].startswith(
            f"attempt {attempt}: rank 1 on algo-2 raised RuntimeError: deliberate failure on "
            f"attempt {attempt}"
        ), failure
    assert not (roots[0] / "output" / "success").exists()
