"""A real Slurm (scripts/slurm.sh: slurmctld and 2 slurmd in containers of the image, Debian's
Slurm and munge added in a test-only layer): the shipped sbatch scripts (deploy/slurm) run
Horovod with every rank started by srun through PMIx, horovodrun inside the allocation, and
torchrun under srun across both nodes; a failing rank fails the step with its cause; scancel
mid-job leaves the checkpoint a new submission resumes from; a node killed mid-job ends the
step. Bounds against hangs only: the times go to the note (docs/slurm.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.container.support import ROOT, RUN_ID, SCRIPTS, rank_text, run_script
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

SLURM = ROOT / "scripts" / "slurm.sh"
EXAMPLE = "/opt/byoc/examples/train_synthetic.py"


class Cluster:
    def __init__(self, env: dict[str, str], workspace: Path):
        self.env = env
        self.workspace = workspace

    def sh(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run_script(SLURM, self.env, *args, timeout=timeout)

    def login(self, *cmd: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """cmd on the login node (the controller), in /workspace."""
        return self.sh("exec", *cmd, timeout=timeout)

    def batch(self, *argv: str, env: str = "ALL", timeout: float = 400) -> tuple[int, str]:
        """sbatch, then wait for the job to end: (its exit code, its output file). Polled every
        second (sbatch --wait backs off to half a minute)."""
        done = self.login("sbatch", "--parsable", f"--export={env}", *argv)
        job = done.stdout.strip().split(";")[0]
        assert done.returncode == 0 and job.isdigit(), done.stdout + done.stderr
        wait_until(lambda: self.ended(job), timeout, interval=1, what=f"job {job} to end")
        info = self.login("scontrol", "show", "job", "-o", job).stdout
        m = re.search(r"ExitCode=(\d+):(\d+)", info)
        assert m, info
        return int(m.group(1)) or int(m.group(2)), self.output(job)

    def ended(self, job: str) -> bool:
        return self.login("squeue", "-h", "-j", job).stdout.strip() == ""

    def output(self, job: str) -> str:
        found = list(self.workspace.glob(f"*-{job}.out"))
        return found[0].read_text(errors="replace") if found else ""


@pytest.fixture(scope="module")
def slurm(image, tmp_path_factory):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("no ssh-keygen here: scripts/slurm.sh makes the cluster's key with it")
    state = tmp_path_factory.mktemp("slurm")
    workspace = state / "workspace"
    workspace.mkdir()
    (workspace / "tests").mkdir()
    for script in ("hvd_world.py", "ddp_world.py"):
        shutil.copy(SCRIPTS / script, workspace / "tests" / script)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        "SLURM_PROJECT": f"byoc-test-slurm-{RUN_ID}",
        "SLURM_STATE": str(state / "state"),
        "SLURM_WORKSPACE": str(workspace),
        "BYOC_IMAGE": image.tags[0] if image.tags else image.id,
    }
    cluster = Cluster(env, workspace)
    up = cluster.sh("up", "2", timeout=900)
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        yield cluster
    finally:
        cluster.sh("down", timeout=120)


def worlds(text: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r"WORLD (\{.*\})", rank_text(text))]


def spans_both_nodes(text: str, size: int) -> None:
    lines = worlds(text)
    assert sorted(w["rank"] for w in lines) == list(range(size)), text[-4000:]
    assert {w["size"] for w in lines} == {size}
    assert {w["sum"] for w in lines} == {size * (size + 1) / 2}  # exact: 1 + 2 + ... + size
    hosts = sorted(w["hostname"] for w in lines)
    assert hosts == sorted(["node0", "node1"] * (size // 2)), hosts


@pytest.mark.timing  # ranks' interleaved output
@pytest.mark.parametrize(
    "script",
    [
        "horovod.sbatch",  # every rank started by srun through PMIx
        "horovodrun.sbatch",  # horovodrun inside the allocation
    ],
)
def test_horovod_across_both_nodes(slurm, script):
    code, out = slurm.batch(
        "--nodes=2", "--ntasks-per-node=2", f"slurm/{script}",
        "python", "/workspace/tests/hvd_world.py",
    )  # fmt: skip
    assert code == 0, out[-4000:]
    spans_both_nodes(out, 4)


def test_torchrun_per_node_under_srun(slurm):
    code, out = slurm.batch(
        "--nodes=2", "slurm/ddp.sbatch", "/workspace/tests/ddp_world.py",
        env="ALL,PROCS_PER_NODE=2",
    )  # fmt: skip
    assert code == 0, out[-4000:]
    spans_both_nodes(out, 4)


@pytest.mark.timing  # the cause against its peers' echoes
def test_a_failing_rank_fails_the_step_with_its_cause(slurm):
    done = slurm.login(
        "srun", "--nodes=2", "--ntasks-per-node=1", "--mpi=pmix", "byoc-exec",
        "python", EXAMPLE, "--epochs=1", "--fail-on-rank=1",
        "--checkpoint-dir=/tmp/ckpt", "--model-dir=/tmp/model",
    )  # fmt: skip
    assert done.returncode != 0
    assert "deliberate failure on rank 1" in done.stdout + done.stderr, done.stderr[-4000:]


def test_scancel_leaves_a_checkpoint_that_a_new_submission_resumes_from(slurm):
    ckpt = "CHECKPOINT_DIR=/workspace/ckpt-scancel"
    sub = slurm.login(
        "sbatch", "--parsable", f"--export=ALL,{ckpt}", "slurm/horovod.sbatch",
        "python", EXAMPLE, "--epochs=1000", "--epoch-sleep=1", "--samples=512",
    )  # fmt: skip
    job = sub.stdout.strip().split(";")[0]
    assert sub.returncode == 0 and job.isdigit(), sub.stderr

    def two_epochs():
        return len(re.findall(r'\{"epoch": \d+', slurm.output(job))) >= 2

    wait_until(two_epochs, 300, interval=1, what="two epochs of the job")
    assert slurm.login("scancel", job).returncode == 0

    # SIGTERM, then SIGKILL after KillWait (10 s): bounded.
    wait_until(lambda: slurm.ended(job), 120, interval=1, what=f"job {job} to end after scancel")
    done_epochs = [int(e) for e in re.findall(r'\{"epoch": (\d+)', slurm.output(job))]
    assert (slurm.workspace / "ckpt-scancel" / "checkpoint.pt").is_file()
    last = max(done_epochs)
    code, out = slurm.batch(
        f"--export=ALL,{ckpt}", "slurm/horovod.sbatch",
        "python", EXAMPLE, f"--epochs={last + 2}", "--samples=512",
    )  # fmt: skip
    assert code == 0, out[-4000:]
    # The checkpoint may be one epoch past the last line seen: resumed at last+1 or last+2.
    m = re.search(r"resumed from \S+ at epoch (\d+)", out)
    assert m and int(m.group(1)) in (last + 1, last + 2), out[-4000:]
    assert "saved /workspace/ckpt-scancel/model/model.pt" in out, out[-4000:]


@pytest.mark.timing  # a lost node found in time
def test_a_node_killed_mid_job_ends_the_step(slurm):
    """Last: the cluster loses node1 for good."""
    log = slurm.workspace / "killed-step.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(SLURM), "exec", "srun", "--nodes=2", "--ntasks-per-node=1", "--mpi=pmix",
             "byoc-exec", "python", EXAMPLE, "--epochs=1000", "--epoch-sleep=1",
             "--samples=512", "--checkpoint-dir=/tmp/ckpt", "--model-dir=/tmp/model"],
            env=slurm.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(
                lambda: '{"epoch": 0' in log.read_text(errors="replace"),
                300,
                interval=1,
                what="the first epoch",
            )
            assert slurm.sh("kill", "node1").returncode == 0
            # Bounded: MPI sees the peer go, or slurmctld marks the node DOWN (SlurmdTimeout).
            code = proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert code != 0, log.read_text(errors="replace")[-4000:]
