"""A stalled rank ends the job within the bound, and the failure names it, its host and where it
is (byoc.stall): 2 hosts x 1 rank, rank 1 (on algo-2) blocks before the first allreduce."""

from __future__ import annotations

import shutil

import pytest

from tests.container.support import HOSTS, SCRIPTS, logs

# Every test here depends on timing (docs/tests.md, "Tests that depend on timing").
pytestmark = pytest.mark.timing

BOUND = 30  # s: BYOC_STALL_TIMEOUT, set by the test
ONE_RANK_PER_HOST = {"sagemaker_program": "/opt/ml/code/stall.py"}


@pytest.mark.parametrize("launcher", ["horovod", "torchrun"])
def test_a_stalled_rank_ends_the_job_naming_its_rank_host_and_stack(job, tmp_path, launcher):
    hps = dict(ONE_RANK_PER_HOST)
    if launcher == "horovod":
        hps["sagemaker_mpi_num_of_processes_per_host"] = 1
    # BYOC_END_GRACE: the stalled rank never ends by itself, so its grace is only waited out.
    env = {"BYOC_STALL_TIMEOUT": str(BOUND), "BYOC_CPU_SLOTS_PER_HOST": "1", "BYOC_END_GRACE": "3"}
    roots = [tmp_path / host for host in HOSTS]  # each host's /opt/ml (the job fixture's)
    for root in roots:
        (root / "code").mkdir(parents=True)
        shutil.copy(SCRIPTS / "stall.py", root / "code" / "stall.py")
    started = [job.start(h, hps=hps, env=env, launcher=launcher)[0] for h in HOSTS]
    # Whichever finds the stall first ends the job. Horovod's inspector: its first report at
    # 15-30 s, its shutdown at 52-67 s (2 x 15 + stall.COLLECT_ROOM, plan.stall_env); our watch
    # of a silent job: 30 s of silence (60 s under Horovod), at most stall.GATHER_WAIT (17 s)
    # for the stacks, then the job is ended (under torchrun the worker within BYOC_END_GRACE).
    results = job.wait_all(timeout=240)
    out = "\n".join(logs(c) for c in started)
    assert all(code != 0 for code, _ in results.values()), (results, out)
    assert max(t for _, t in results.values()) < 180, (results, out)
    failure = (roots[0] / "output" / "failure").read_text()
    head = failure[:1024]  # SageMaker's FailureReason: who and where
    first = head.splitlines()[0]
    # Rank 1 on algo-2 is the one named stalled, whatever the words of the detector that fired.
    assert first.startswith("Training stalled: rank 1 on algo-2 "), failure
    assert "Rank 1 on algo-2, innermost first:" in head, failure
    frames = head.split("Rank 1 on algo-2, innermost first:", 1)[1]
    assert "in never_arrives" in frames and "stall.py" in frames, failure
    # Every host's full dumps, where SageMaker uploads them, each naming its own rank.
    for host, rank, root in zip(HOSTS, (0, 1), roots, strict=True):
        stacks = (root / "output" / "data" / f"stacks-{host}.txt").read_text()
        assert f"== rank {rank} (pid " in stacks, stacks
    worker = (roots[1] / "output" / "data" / "stacks-algo-2.txt").read_text()
    assert "never_arrives" in worker and "stall.py" in worker, worker
    assert "Training stalled" in out  # the job's log says it too
