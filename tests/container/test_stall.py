"""A stalled rank ends the job within the bound, and the failure names it, its host and where it
is (byoc.stall): 2 hosts x 1 rank, rank 1 (on algo-2) blocks before the first allreduce."""

from __future__ import annotations

import shutil

import pytest

from tests.container.support import HOSTS, SCRIPTS, logs

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
    # Horovod: its inspector's first report at 15-30 s, its shutdown at 30-45 s; torchrun: 30 s
    # of silence, the stacks, then the worker is ended within BYOC_END_GRACE (3 s) and reports.
    results = job.wait_all(timeout=240)
    out = "\n".join(logs(c) for c in started)
    assert all(code != 0 for code, _ in results.values()), (results, out)
    assert max(t for _, t in results.values()) < 180, (results, out)
    failure = (roots[0] / "output" / "failure").read_text()
    head = failure[:1024]
    assert head.startswith("Training stalled: rank 1 on algo-2 "), failure
    if launcher == "horovod":
        assert "did not submit allreduce" in head and "rank 0 on algo-1 waited" in head, failure
    else:
        assert "outside any collective, while rank 0 on algo-1 waited in one" in head, failure
    assert "Rank 1 on algo-2, innermost first:" in head, failure
    assert "in never_arrives" in head and "stall.py" in head, failure
    # Every host's full dumps, where SageMaker uploads them.
    for host, root in zip(HOSTS, roots, strict=True):
        stacks = (root / "output" / "data" / f"stacks-{host}.txt").read_text()
        assert "== rank " in stacks and "stall.py" in stacks, stacks
    worker = (roots[1] / "output" / "data" / "stacks-algo-2.txt").read_text()
    assert "never_arrives" in worker, worker
    assert "Training stalled" in out  # the job's log says it too
