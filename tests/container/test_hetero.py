"""A heterogeneous SageMaker job (instance groups), as the DLC's toolkit runs one: 3 hosts,
data [algo-1] and train [algo-2, algo-3], the distribution on train. The world is algo-2 and
algo-3 (led by algo-2) under either launcher; algo-1 runs the program alone; every rank sees its
own host's SM_* variables; a failure on either kind of host ends every host, naming its cause."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.container.support import SCRIPTS, logs, rank_text

# Every test here depends on timing (docs/tests.md, "Tests that depend on timing").
pytestmark = pytest.mark.timing

HOSTS = ["algo-1", "algo-2", "algo-3"]
GROUPS = {"data": ["algo-1"], "train": ["algo-2", "algo-3"]}
TYPES = {"data": "ml.c5.xlarge", "train": "ml.g5.12xlarge"}
# A program that lingers is ended BYOC_END_GRACE s after the job's end (default 20): 3 here, as
# nothing of what lingers has anything of its own to report.
ENV = {"BYOC_END_GRACE": "3"}
LINE = re.compile(
    r"HETERO rank=(\d+) size=(\d+) host=(\S+) group=(\S+) type=(\S+) "
    r"env_host=(\S+) env_type=(\S+) master=(\S+) hosts=(\S+) sum=([0-9.]+)"
)


def group_of(host: str) -> str:
    return next(g for g, hs in GROUPS.items() if host in hs)


def start_all(job, tmp_path, launcher: str, **args: str):
    """Every host of the job, with the program and its arguments; {host: (container, root)}."""
    hps = {"sagemaker_program": "/opt/ml/code/hetero.py",
           "sagemaker_distribution_instance_groups": ["train"], **args}  # fmt: skip
    groups = [
        {"instance_group_name": g, "instance_type": TYPES[g], "hosts": hs}
        for g, hs in GROUPS.items()
    ]
    started = {}
    for host in HOSTS:
        code = tmp_path / host / "code"
        code.mkdir(parents=True)
        shutil.copy(SCRIPTS / "hetero.py", code / "hetero.py")
        resource = {"instance_groups": groups, "current_group_name": group_of(host),
                    "current_instance_type": TYPES[group_of(host)]}  # fmt: skip
        started[host] = job.start(
            host, HOSTS, hps=hps, env=ENV, launcher=launcher, resource=resource
        )
    return started


@pytest.mark.parametrize("launcher", ["horovod", "torchrun"])
def test_the_world_is_the_train_group_and_the_data_host_runs_alone(job, tmp_path, launcher):
    # The data host lingers as a data server would: the world's end ends it, and it succeeds.
    started = start_all(job, tmp_path, launcher, **{"linger-outsider": "600"})
    results = job.wait_all(timeout=300)
    out = rank_text(*(logs(c) for c, _ in started.values()))
    assert all(code == 0 for code, _ in results.values()), (results, out)
    seen = {(int(m[0]), m[2]): m for m in LINE.findall(out)}
    world = {k: m for k, m in seen.items() if m[1] == "4"}
    # 2 slots on each trainer: ranks 0-1 on algo-2, 2-3 on algo-3; 0+1+2+3 allreduced.
    assert sorted(world) == [(0, "algo-2"), (1, "algo-2"), (2, "algo-3"), (3, "algo-3")], out
    assert {m[9] for m in world.values()} == {"6"}, out
    assert [k for k, m in seen.items() if m[1] == "1"] == [(0, "algo-1")], out
    for (_, host), m in seen.items():
        # Every rank's per-host variables are its own host's; the job's are the job's.
        assert (m[3], m[4]) == (group_of(host), TYPES[group_of(host)]), m
        assert (m[5], m[6]) == (host, TYPES[group_of(host)]), m
        assert (m[7], m[8]) == ("algo-2", ",".join(HOSTS)), m
    assert "the job's world is done" in logs(started["algo-1"][0])
    for _, root in started.values():
        assert (root / "output" / "success").exists()


def test_a_failure_on_a_trainer_ends_every_host_with_its_cause(job, tmp_path):
    started = start_all(job, tmp_path, "horovod", **{"fail-on": "algo-3", "linger-outsider": "600"})
    results = job.wait_all(timeout=180)
    assert all(code != 0 for code, _ in results.values()), results
    failure = (started["algo-2"][1] / "output" / "failure").read_text()
    assert failure.startswith("Training failed: rank 3 on algo-3 raised RuntimeError"), failure
    outsider = (started["algo-1"][1] / "output" / "failure").read_text()
    assert "The job failed on the leader algo-2" in outsider, outsider


def test_a_failure_on_the_data_host_ends_the_world_with_its_cause(job, tmp_path):
    args = {"fail-on": "algo-1", "linger-world": "600"}
    started = start_all(job, tmp_path, "torchrun", **args)
    results = job.wait_all(timeout=180)
    out = "\n".join(logs(c) for c, _ in started.values())
    assert all(code != 0 for code, _ in results.values()), (results, out)
    assert max(t for _, t in results.values()) < 150, results  # not the 600 s linger
    failure = (started["algo-2"][1] / "output" / "failure").read_text()
    assert "on algo-1 raised RuntimeError: deliberate on algo-1" in failure, failure
