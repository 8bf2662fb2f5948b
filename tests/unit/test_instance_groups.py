"""Heterogeneous clusters (SageMaker instance groups): the world is the distribution groups'
hosts, led by the first of them; a host outside them is an outsider that runs the program alone;
every host's per-host SM_* variables are its own, also on a rank the leader's launcher started
(byoc.rank). Malformed groups: tests/unit/hostile/test_job_inputs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from byoc import config, environment

from tests.unit.fakes import make_plan

HOSTS = ["algo-1", "algo-2", "algo-3"]
TYPES = {"data": "ml.c5.xlarge", "train": "ml.g5.12xlarge"}
GROUPS = {"data": ["algo-1"], "train": ["algo-2", "algo-3"]}
PROGRAM = ["/opt/venv/bin/python", "train.py"]


def job(tmp_path: Path, current: str, distributed=("train",), groups=GROUPS) -> Path:
    """One host's /opt/ml of a 3-host job: by default data [algo-1], train [algo-2, algo-3]."""
    root = tmp_path / current
    cfg = root / "input" / "config"
    cfg.mkdir(parents=True)
    mine = next(g for g, hs in groups.items() if current in hs)
    resource = {
        "current_host": current,
        "hosts": HOSTS,
        "current_group_name": mine,
        "current_instance_type": TYPES[mine],
        "network_interface_name": "eth0",
        "instance_groups": [
            {"instance_group_name": g, "instance_type": TYPES[g], "hosts": hs}
            for g, hs in groups.items()
        ],
    }
    (cfg / "resourceconfig.json").write_text(json.dumps(resource))
    hps = {"sagemaker_program": '"train.py"', "sagemaker_mpi_enabled": "true", "lr": "0.1"}
    if distributed is not None:
        hps["sagemaker_distribution_instance_groups"] = json.dumps(list(distributed))
    (cfg / "hyperparameters.json").write_text(json.dumps(hps))
    return root


def test_the_world_is_the_distribution_groups_hosts(tmp_path):
    cfg = config.load(job(tmp_path, "algo-1"))
    assert cfg.hosts == ["algo-2", "algo-3"] and cfg.leader == "algo-2"
    assert cfg.everyone == HOSTS and cfg.outsiders == ["algo-1"]
    assert cfg.others == ["algo-1", "algo-3"]
    assert (cfg.current_group, cfg.in_world) == ("data", False)
    assert cfg.groups == GROUPS


def test_without_distribution_groups_every_host_is_the_world(tmp_path):
    cfg = config.load(job(tmp_path, "algo-3", distributed=None))
    assert cfg.hosts == HOSTS and cfg.outsiders == [] and cfg.current_group == "train"


def test_an_outsider_runs_the_program_alone(tmp_path):
    cfg = config.load(job(tmp_path, "algo-1"))
    for launcher in ("horovod", "torchrun"):
        the_plan = make_plan(cfg, PROGRAM, num_gpus=0, launcher=launcher)
        assert (the_plan.role, the_plan.world_size) == ("outsider", 1)
        assert the_plan.command[-1] == "train.py" and "horovodrun" not in the_plan.command
        assert "torchrun" not in the_plan.command


def test_the_world_runs_across_its_own_hosts(tmp_path):
    leader = make_plan(config.load(job(tmp_path, "algo-2")), PROGRAM, num_gpus=4)
    assert leader.role == "leader" and leader.world_size == 8
    assert leader.command[leader.command.index("-H") + 1] == "algo-2:4,algo-3:4"
    worker = config.load(job(tmp_path, "algo-3"))
    ddp = make_plan(worker, PROGRAM, num_gpus=4, launcher="torchrun")
    assert ddp.role == "worker"
    assert {"--nnodes=2", "--node-rank=1", "--master-addr=algo-2"} <= set(ddp.command)


def test_a_world_of_one_host_still_leads_its_outsiders(tmp_path):
    groups = {"data": ["algo-1", "algo-2"], "train": ["algo-3"]}
    cfg = config.load(job(tmp_path, "algo-3", groups=groups))
    the_plan = make_plan(cfg, PROGRAM, num_gpus=1)
    assert cfg.hosts == ["algo-3"] and the_plan.role == "leader"
    assert the_plan.command == PROGRAM  # one process: no horovodrun


def sm(cfg: config.JobConfig, gpus: int) -> dict[str, str]:
    return environment.sm_variables(
        cfg, entry_point="train.py", module_dir="/opt/ml/code", num_gpus=gpus, num_cpus=4,
        user_args=["--lr", "0.1"],
    )  # fmt: skip


def test_the_jobs_variables_are_the_jobs_and_the_hosts_its_own(tmp_path):
    env = sm(config.load(job(tmp_path, "algo-1")), gpus=0)
    assert json.loads(env["SM_HOSTS"]) == HOSTS and env["SM_HOST_COUNT"] == "3"
    assert env["SM_MASTER_ADDR"] == "algo-2"  # the world's first host
    assert (env["SM_CURRENT_HOST"], env["SM_CURRENT_HOST_RANK"]) == ("algo-1", "0")
    assert env["SM_CURRENT_INSTANCE_GROUP"] == "data"
    assert json.loads(env["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == ["train"]
    assert env["SM_CURRENT_INSTANCE_TYPE"] == "ml.c5.xlarge"


@pytest.mark.parametrize("rank_host", ["algo-3", "algo-1"])
def test_a_rank_started_from_the_leader_sees_its_own_host(tmp_path, rank_host):
    """What horovodrun forwards from the leader (algo-2), fixed on the rank's host (byoc.rank)."""
    forwarded = {**sm(config.load(job(tmp_path, "algo-2")), gpus=4), "PATH": "/usr/bin"}
    here = config.load(job(tmp_path, rank_host))
    own = environment.for_this_host(forwarded, here, num_gpus=2, num_cpus=8)
    mine = next(g for g, hs in GROUPS.items() if rank_host in hs)
    assert own["SM_CURRENT_HOST"] == rank_host
    assert own["SM_CURRENT_HOST_RANK"] == str(HOSTS.index(rank_host))
    assert own["SM_CURRENT_INSTANCE_GROUP"] == mine
    assert json.loads(own["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == GROUPS[mine]
    assert own["SM_CURRENT_INSTANCE_TYPE"] == TYPES[mine]
    assert (own["SM_NUM_GPUS"], own["SM_NUM_CPUS"]) == ("2", "8")
    assert json.loads(own["SM_RESOURCE_CONFIG"])["current_host"] == rank_host
    training = json.loads(own["SM_TRAINING_ENV"])
    assert (training["current_host"], training["current_instance_type"]) == (rank_host, TYPES[mine])
    assert (training["num_gpus"], training["resource_config"]["current_host"]) == (2, rank_host)
    # The job's own stay as forwarded.
    for key in ("SM_HOSTS", "SM_MASTER_ADDR", "SM_HPS", "SM_HP_LR", "SM_USER_ARGS", "PATH"):
        assert own[key] == forwarded[key], key
    assert training["hosts"] == HOSTS and training["hyperparameters"] == {"lr": 0.1}
