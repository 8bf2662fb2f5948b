"""The image as SageMaker Python SDK v3 (`ModelTrainer`) runs it, in its local container mode.

Done here as the SDK's local mode does it (sagemaker/train/local/local_container.py), with the
SDK's own files from the pinned sagemaker-train (tests/requirements-sdk.txt): its entrypoint
`bash -c "chmod +x .../sm_train.sh && .../sm_train.sh"` in place of the image's, its `sm_drivers`
channel (the real drivers, sm_train.sh from its template, sourcecode.json, distributed.json), the
user's code as channel `code`, hosts as network aliases algo-N with container IDs as hostnames,
and one model directory shared by all hosts. Two faults of the SDK's local mode, not of the
platform, are patched and nothing else: resourceconfig.json names "eth0" where local mode writes
"ethwe" (no such interface), and the MPI driver's -np is the total, not the per-host count.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import uuid
from pathlib import Path

import pytest

from tests import helpers
from tests.container import support
from tests.container.support import SCRIPTS, rank_text

HOSTS = ["algo-1", "algo-2"]
PER_HOST = 2


def sdk_path(relative: str) -> Path:
    try:
        dist = importlib.metadata.distribution("sagemaker-train")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("sagemaker-train is not installed (make test installs it into .venv)")
    return Path(str(dist.locate_file(f"sagemaker/train/{relative}")))


def sdk_module(relative: str) -> dict:
    """A module of the SDK that imports nothing of its own, read as it is."""
    path = sdk_path(relative)
    namespace: dict = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def sm_drivers(dest: Path, driver: str, distributed: dict, entry_script: str) -> None:
    """The sm_drivers channel as ModelTrainer._prepare_train_script and friends write it."""
    shutil.copytree(sdk_path("container_drivers"), dest)
    templates = sdk_module("templates.py")
    script = templates["TRAIN_SCRIPT_TEMPLATE"].format(
        working_dir="cd /opt/ml/input/data/code \n",
        install_requirements="",
        execute_driver=templates["EXEUCTE_DISTRIBUTED_DRIVER"].format(
            driver_name="MPI" if driver == "mpi_driver.py" else "Torchrun", driver_script=driver
        ),
    )
    (dest / "sm_train.sh").write_text(script)
    (dest / "sourcecode.json").write_text(
        json.dumps({"source_dir": "code", "entry_script": entry_script, "command": None})
    )
    (dest / "distributed.json").write_text(json.dumps(distributed))
    mpi = dest / "distributed_drivers" / "mpi_driver.py"
    text = mpi.read_text()
    # Local-mode fault 2: -np is the per-host count (only that many ranks, on the first host).
    wrong = "num_processes=process_count,"
    assert text.count(wrong) == 1, "the SDK's MPI driver changed: review the -np patch"
    mpi.write_text(text.replace(wrong, "num_processes=process_count * host_count,"))


@pytest.fixture
def sdk_job(client, containers, tmp_path):
    """Start the job's hosts as SDK v3's local mode does; removed afterwards."""
    constants = sdk_module("constants.py")
    entrypoint = (
        constants["DEFAULT_CONTAINER_ENTRYPOINT"] + constants["DEFAULT_CONTAINER_ARGUMENTS"]
    )
    network = client.networks.create(f"byoc-sdk-{uuid.uuid4().hex[:8]}", internal=True)
    code = tmp_path / "code"
    shutil.copytree(SCRIPTS, code)
    model = tmp_path / "model"
    model.mkdir()

    def start(driver, entry_script, hps: dict, hosts=HOSTS, env=None):
        """driver None: ModelTrainer without source_code (no entrypoint, no command)."""
        source_code = driver is not None
        drivers = tmp_path / "sm_drivers"
        if source_code:
            # What MPI(...) / Torchrun(...).model_dump() give for process_count_per_node=2.
            other = "mpi_additional_options" if driver == "mpi_driver.py" else "smp"
            distributed = {"process_count_per_node": PER_HOST, other: None}
            sm_drivers(drivers, driver, distributed, entry_script)
        started = {}
        for host in hosts:
            root = tmp_path / host
            config = root / "input" / "config"
            config.mkdir(parents=True)
            (root / "output" / "data").mkdir(parents=True)
            resource = {
                "current_host": host,
                "hosts": hosts,
                "network_interface_name": "eth0",  # local-mode fault 1: it writes "ethwe"
                "current_instance_type": "local",
            }
            (config / "resourceconfig.json").write_text(json.dumps(resource))
            (config / "hyperparameters.json").write_text(json.dumps(hps))
            channels = {"code": {"TrainingInputMode": "File"}}
            volumes = {
                str(model): {"bind": "/opt/ml/model", "mode": "rw"},
                str(root / "output"): {"bind": "/opt/ml/output", "mode": "rw"},
                str(root / "output" / "data"): {"bind": "/opt/ml/output/data", "mode": "rw"},
                str(root / "input"): {"bind": "/opt/ml/input", "mode": "rw"},
                str(code): {"bind": "/opt/ml/input/data/code", "mode": "rw"},
            }
            if source_code:
                channels["sm_drivers"] = {"TrainingInputMode": "File"}
                volumes[str(drivers)] = {"bind": "/opt/ml/input/data/sm_drivers", "mode": "rw"}
            (config / "inputdataconfig.json").write_text(json.dumps(channels))
            started[host] = containers.start(
                None,
                entrypoint=entrypoint if source_code else None,
                volumes=volumes,
                environment={
                    "TRAINING_JOB_NAME": "byoc-sdk-test",
                    "AWS_REGION": "us-west-2",
                    **(env or {}),
                },
                network=network.name,
                networking_config={network.name: client.api.create_endpoint_config(aliases=[host])},
            )
        return started

    def wait_all(started, timeout):
        return {h: code for h, (code, _) in helpers.wait_all(started, timeout).items()}

    class Job:
        pass

    job = Job()
    job.start, job.wait_all, job.model, job.root = start, wait_all, model, tmp_path
    try:
        yield job
    finally:
        containers.remove_all()
        network.remove()


def world(text: str) -> list[dict]:
    found = [json.loads(m) for m in re.findall(r"WORLD (\{[^{}]*\})", text)]
    return sorted(found, key=lambda w: w["rank"])


def check_world(ranks: list[dict], started: dict, args: list[str]) -> None:
    hosts = sorted(started)
    size = len(hosts) * PER_HOST
    assert [w["rank"] for w in ranks] == list(range(size)), ranks
    assert all(w["size"] == size for w in ranks), ranks
    assert all(w["sum"] == size * (size + 1) / 2 for w in ranks), ranks  # exact: 1+2+...+size
    # Ranks on both hosts, host by host: the hostname is the container ID, as in local mode.
    ids = {c.id[:12]: host for host, c in started.items()}
    assert [ids.get(w["hostname"]) for w in ranks] == [h for h in hosts for _ in range(PER_HOST)]
    assert all(w["args"] == args for w in ranks), ranks


def logs(started) -> str:
    return "\n".join(f"--- {h}\n" + c.logs().decode(errors="replace") for h, c in started.items())


@pytest.mark.timing  # ranks' interleaved output (mpirun)
@pytest.mark.parametrize(
    ("driver", "script", "hosts"),
    [
        ("mpi_driver.py", "hvd_world.py", HOSTS),
        ("torchrun_driver.py", "ddp_world.py", HOSTS),
        ("mpi_driver.py", "hvd_world.py", HOSTS[:1]),
    ],
    ids=["mpi-horovod", "torchrun-ddp", "mpi-horovod-1-instance"],
)
def test_sdk_driver_runs_across_the_hosts(sdk_job, driver, script, hosts):
    started = sdk_job.start(driver, script, {"epochs": "2"}, hosts=hosts)
    results = sdk_job.wait_all(started, timeout=420)
    out = logs(started)
    assert results == dict.fromkeys(hosts, 0), out
    check_world(world(rank_text(*map(support.logs, started.values()))), started, ["--epochs", "2"])
    assert [p.name for p in sdk_job.model.iterdir()] == ["model.pt"], out  # written once
    assert not (sdk_job.root / "algo-1" / "output" / "failure").exists()
    if driver == "mpi_driver.py":
        # byoc-init came back as PID 1 and made the job's SSH trust; nothing was baked in.
        assert f"byoc-init: SSH trust for mpi across {len(hosts)} host(s)" in out, out
    else:
        assert "SSH trust" not in out  # torchrun needs none


def test_without_source_code_the_image_trains_instead_of_opening_jupyter(sdk_job):
    hps = {"epochs": "1", "samples": "512"}
    started = sdk_job.start(None, None, hps, hosts=HOSTS[:1])
    results = sdk_job.wait_all(started, timeout=180)
    out = logs(started)
    assert results == {"algo-1": 0}, out
    assert "in a training job (resourceconfig.json) with no command: train" in out, out
    assert "byoc: training succeeded" in out and "Jupyter" not in out, out
    assert (sdk_job.model / "model.pt").is_file()
