"""The Kubernetes manifests run as their engines run them (hostkit/k8s_sim.py): the MPI
Operator's MPIJob, Kubeflow Trainer's TrainJob and Volcano's Job, each on 2 workers of the cpu
image with the engine's keys, files, names and variables, the commands read from the YAML. Each
job must really span both workers (world size 2, one rank on each: no silent collapse onto one
node), a failing rank must fail the launcher with its cause, and a worker killed mid-job must
end the job within a bound."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.container.support import ROOT, RUN_ID, rank_text
from tests.helpers import elastic_coverage

ENGINES = ("mpijob", "trainer", "volcano")
# The job's own bound; a lost node must end it long before.
TIMEOUT = 240
KILL_BOUND = 60


@pytest.fixture
def sim(client, image, tmp_path):
    label = f"test-{RUN_ID}-{os.getpid()}"

    def run(
        engine: str, *extra: str, overlay: str | None = None, timeout: int = TIMEOUT
    ) -> tuple[int, dict]:
        out = tmp_path / f"{engine}.json"
        cmd = [
            sys.executable,
            "-m",
            "hostkit.k8s_sim",
            "--engine",
            engine,
            "--label",
            label,
            "--json",
            str(out),
        ]
        cmd += ["--image", image.tags[0] if image.tags else image.id, "--timeout", str(timeout)]
        if overlay:
            cmd += ["--overlay", str(ROOT / "deploy" / "kubernetes" / "overlays" / overlay)]
        done = subprocess.run(
            [*cmd, *extra],
            capture_output=True,
            text=True,
            timeout=timeout + 120,
            check=False,
            cwd=ROOT,
        )
        assert out.exists(), f"no result: {done.stderr[-2000:]}"
        return done.returncode, json.loads(out.read_text())

    yield run
    # Whatever happened, nothing of the simulation is left (the script removes it too).
    flt = {"label": f"k8s-sim={label}"}
    leftover = client.containers.list(all=True, filters=flt)
    for c in leftover:
        c.remove(force=True)
    for n in client.networks.list(filters=flt):
        n.remove()
    assert not leftover, f"k8s_sim.py left containers: {[c.name for c in leftover]}"


def spans_both_workers(result: dict) -> None:
    assert result["world_sizes"] == [2], result["launcher_output"][-3000:]
    assert sorted(result["rank_hosts"].values()) == sorted(result["workers"]), result["rank_hosts"]


@pytest.mark.timing  # ranks' interleaved output
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_runs_the_example_across_both_workers(sim, engine):
    code, result = sim(engine)
    assert code == 0 == result["exit_code"], result["launcher_output"][-3000:]
    spans_both_workers(result)
    assert "saved /opt/ml/checkpoints/model/model.pt" in result["launcher_output"]


def test_mpijob_as_uid_1000_on_port_2222(sim):
    code, result = sim("mpijob", overlay="mpijob-cpu-nonroot")
    assert code == 0, result["launcher_output"][-3000:]
    spans_both_workers(result)


@pytest.mark.timing  # the cause against its peers' echoes
@pytest.mark.parametrize("engine", ENGINES)
def test_a_failing_rank_fails_the_launcher_with_its_cause(sim, engine):
    code, result = sim(engine, "--extra-arg=--fail-on-rank=1")
    assert code != 0 and code == result["exit_code"]
    assert "deliberate failure on rank 1" in result["launcher_output"]


@pytest.mark.timing  # a lost worker found in time
@pytest.mark.parametrize("engine", ENGINES)
def test_a_killed_worker_ends_the_job(sim, engine):
    # Long enough to be running when the worker goes: 100 epochs, a second's pause each.
    code, result = sim(engine, "--extra-arg=--epochs=100", "--extra-arg=--epoch-sleep=1",
                       "--kill-worker", "1")  # fmt: skip
    assert code not in (0, 124), result["launcher_output"][-3000:]
    assert result["seconds_after_kill"] < KILL_BOUND


@pytest.mark.timing  # workers added and killed mid-job
@pytest.mark.slow
def test_elastic_mpijob_takes_a_worker_added_and_survives_one_killed(sim):
    """overlays/mpijob-elastic-cpu: horovodrun with byoc-discover-hosts over the operator's
    discover_hosts.sh. Worker.replicas 2 -> 3 mid-job; once the third trains, worker 1 is
    killed (restartPolicy Never: not recreated). The job finishes on the two left, every sample
    of every epoch trained once, the weights equal."""
    epochs = 20  # ~60 s of training here: room for the add (~20 s) and the kill
    code, result = sim(
        "mpijob",
        *(f"--extra-arg={a}" for a in (f"--epochs={epochs}", "--samples=1024",
                                       "--step-sleep=0.2", "--commit-every=1",
                                       "--check-coverage=true")),
        "--add-workers", "1",
        "--kill-worker", "1", "--kill-when", r"ELASTIC training size=3 .*rank=0",
        overlay="mpijob-elastic-cpu", timeout=600,
    )  # fmt: skip
    out = rank_text(result["launcher_output"])
    assert code == 0 == result["exit_code"], out[-6000:]
    assert result["workers"][-1] == "pytorch-horovod-worker-2"
    # The added worker trained: a rank ran there, in a world of 3.
    assert "pytorch-horovod-worker-2" in result["rank_hosts"].values(), result["rank_hosts"]
    assert {2, 3} <= set(result["world_sizes"]), result["world_sizes"]
    epochs_seen = elastic_coverage(out)
    assert [e for e, *_ in epochs_seen] == list(range(epochs)), out[-6000:]
    for epoch, missing, extra, padding in epochs_seen:
        assert missing == 0, f"epoch {epoch}: {missing} samples never trained"
        assert extra == padding, f"epoch {epoch}: {extra} repeats, {padding} of them padding"
    assert "WEIGHTS equal on 2 ranks" in out, out[-6000:]


def test_engine_ssh_settings_apply_only_under_a_read_only_key_mount(containers, tmp_path):
    """The image's client drop-in trusts the mounted job key as every worker's host key only
    where an engine mounted it (read-only); a person's own ~/.ssh keeps ssh's usual checks.
    The baked sshd configuration is valid for root and for uid 1000."""
    keys = tmp_path / "keys"
    keys.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-f", str(keys / "id_rsa")],
        check=True,
    )
    probe = ["-c", "ssh -G worker-0 | grep -i '^knownhostscommand' || echo none"]

    def engine_settings(mode: str) -> bool:
        mount = {str(keys): {"bind": "/root/.ssh", "mode": mode}}
        code, out = containers.run(probe, entrypoint="/bin/bash", volumes=mount, timeout=60)
        assert code == 0, out
        return "id_rsa.pub" in out

    # A person's own keys mounted read-only: no authorized_keys that is the key itself.
    assert not engine_settings("ro")
    shutil.copy(keys / "id_rsa.pub", keys / "authorized_keys")  # as every engine lays it out
    assert engine_settings("ro")
    assert not engine_settings("rw")
    # sshd as the engines start it, with the job key as its only host key.
    theirs = tmp_path / "mpiuser"
    shutil.copytree(keys, theirs)
    for f in [theirs, *theirs.iterdir()]:
        os.chown(f, 1000, 1000)
    for user, home, key_dir in (("root", "/root", keys), ("mpiuser", "/home/mpiuser", theirs)):
        mount = {str(key_dir): {"bind": f"{home}/.ssh", "mode": "ro"}}
        code, out = containers.run(
            ["-t"], entrypoint="/usr/sbin/sshd", user=user, volumes=mount, timeout=60
        )
        assert code == 0, f"{user}: {out}"
