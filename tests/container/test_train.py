"""`train` across 2 hosts x 2 slots, as SageMaker runs it: success, failures, SIGTERM, resume;
with each launcher the SDKs ask for (horovodrun for "mpi", torchrun for "torch_distributed")."""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
import subprocess
import threading
import time

import pytest
from byoc.data.framing import recordio_frame

from tests.container.support import HOSTS, SCRIPTS, logs, rank_text, sdk_encode
from tests.helpers import wait_until
from tests.pipe_fake import FakePipe

# Every test here depends on timing (docs/tests.md, "Tests that depend on timing").
pytestmark = pytest.mark.timing

FAST = {"samples": "2048", "epochs": "2"}
LAUNCHERS = ["horovod", "torchrun"]
# The image's example for each: Horovod, DDP.
RANK_LINE = re.compile(r"rank (\d)/4 local_rank \d on \S+ host (\S+) device cpu")


def check_ranks(out: str) -> None:
    """World size 4, ranks 0-1 on algo-1 and 2-3 on algo-2, each seeing its own host: no
    silent collapse onto one node."""
    placed = {int(rank): host for rank, host in RANK_LINE.findall(out)}
    assert placed == {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}, out
    for rank in range(4):
        assert f"rank {rank}: done" in out, out


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_hosts_train_and_exit_together(job, launcher):
    """Under horovodrun the example runs as the Horovod + torch.compile example
    (train_synthetic.py --compile true): every rank compiles (inductor's C++ backend) and
    trains under DistributedOptimizer."""
    hps = {**FAST, "compile": "true"} if launcher == "horovod" else FAST
    leader, ml1 = job.start("algo-1", hps=hps, launcher=launcher)
    worker, ml2 = job.start("algo-2", hps=hps, launcher=launcher)
    results = job.wait_all(timeout=600)
    out = logs(leader)
    assert results["algo-1"][0] == 0, out + logs(worker)
    assert results["algo-2"][0] == 0, logs(worker)
    assert abs(results["algo-1"][1] - results["algo-2"][1]) < 10, results
    # horovodrun brings every rank's output to the leader; torchrun leaves it on each host.
    ranks = rank_text(out, logs(worker))
    check_ranks(ranks)
    if launcher == "horovod":
        assert "compiling the model with torch.compile" in ranks, out
        assert len(re.findall(r"rank \d: first step done in [\d.]+ s", ranks)) == 4, out
    assert f"launcher {launcher}" in out
    assert "byoc: doctor: " in out  # the local checks, one line, before the launch
    assert (ml1 / "model" / "model.pt").is_file()
    assert list((ml2 / "model").iterdir()) == []  # written once, by rank 0
    assert (ml1 / "output" / "success").exists() and (ml2 / "output" / "success").exists()
    assert '"epoch": 1' in out


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_exception_on_rank_3_fails_both_hosts_quickly_with_its_cause(job, launcher):
    hps = {**FAST, "epochs": "50", "fail_on_rank": "3"}
    leader, ml1 = job.start("algo-1", hps=hps, launcher=launcher)
    worker, ml2 = job.start("algo-2", hps=hps, launcher=launcher)
    results = job.wait_all(timeout=120)
    assert results["algo-1"][0] != 0 and results["algo-2"][0] != 0, results
    assert max(t for _, t in results.values()) < 90, results
    failure = (ml1 / "output" / "failure").read_text()
    assert failure.startswith(
        "Training failed: rank 3 on algo-2 raised RuntimeError: deliberate"
    ), failure
    assert (ml2 / "output" / "failure").exists()
    assert not (ml1 / "output" / "success").exists()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_worker_that_never_starts_fails_the_leader_naming_it(job, launcher):
    leader, ml1 = job.start("algo-1", env={"BYOC_PEER_TIMEOUT": "10"}, launcher=launcher)
    results = job.wait_all(timeout=90)
    code, took = results["algo-1"]
    assert code != 0 and took < 60, (results, logs(leader))
    failure = (ml1 / "output" / "failure").read_text()
    assert "algo-2 did not join the job within 10 s" in failure, failure


@pytest.mark.parametrize("given_key", [False, True], ids=["keys-made-at-start", "given-key"])
def test_worker_waits_for_a_leader_that_starts_late(job, tmp_path, given_key):
    """The leader may spend minutes downloading code or installing requirements: a worker waits
    for it up to BYOC_LEADER_TIMEOUT, far longer than BYOC_LEADER_LOST_AFTER, with a key handed
    in (make launch --ssh-key-in-environment) as without."""
    env = {"BYOC_LEADER_LOST_AFTER": "5"}
    if given_key:
        key = tmp_path / "job_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        env["BYOC_SSH_PRIVATE_KEY"] = key.read_text()
    hps = {"samples": "256", "epochs": "1"}
    worker, _ = job.start("algo-2", hps=hps, env=env)
    wait_until(lambda: "waiting for the leader algo-1" in logs(worker), 60, what="worker up")
    time.sleep(12)  # the point of the test: the leader comes well after LEADER_LOST_AFTER (5 s)
    leader, ml1 = job.start("algo-1", hps=hps, env=env)
    results = job.wait_all(timeout=240)
    assert results["algo-1"][0] == 0 and results["algo-2"][0] == 0, logs(leader) + logs(worker)
    assert (ml1 / "output" / "success").exists()


@pytest.mark.parametrize(
    "launcher, program",
    [("horovod", None), ("torchrun", None), ("horovod", "/opt/byoc/examples/train_elastic.py")],
    ids=["horovod", "torchrun", "horovod-elastic-example"],
)
def test_sigterm_mid_training_stops_fast_and_rerun_resumes(job, launcher, program):
    """A lost instance on SageMaker ends the job; the rerun (RetryStrategy, cluster repair)
    resumes from /opt/ml/checkpoints, the elastic example too (docs/elastic.md, SageMaker)."""
    hps = {**FAST, "epochs": "30", "epoch_sleep": "1"}
    if program:
        hps["sagemaker_program"] = program
    leader, ml1 = job.start("algo-1", hps=hps, launcher=launcher)
    worker, ml2 = job.start("algo-2", hps=hps, launcher=launcher)
    checkpoint = ml1 / "checkpoints" / "checkpoint.pt"
    wait_until(checkpoint.exists, timeout=240, what="first checkpoint")
    t0 = time.monotonic()
    stoppers = [threading.Thread(target=c.stop, kwargs={"timeout": 120}) for c in (leader, worker)]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(130)
    took = time.monotonic() - t0
    assert took < 60, f"docker stop took {took:.0f} s"
    for c in (leader, worker):
        c.reload()
        assert c.attrs["State"]["ExitCode"] != 0
    assert "Stopped by SIGTERM" in (ml1 / "output" / "failure").read_text()
    assert checkpoint.exists()

    # The same job again (a new container per host, the same /opt/ml): it resumes.
    for c in list(job.started.values()):
        c.remove(force=True)
    job.started.clear()
    rerun = {**FAST, "epochs": "30", **({"sagemaker_program": program} if program else {})}
    leader, _ = job.start("algo-1", hps=rerun, launcher=launcher)
    job.start("algo-2", hps=rerun, launcher=launcher)
    results = job.wait_all(timeout=300)
    out = logs(leader)
    assert results["algo-1"][0] == 0 and results["algo-2"][0] == 0, out
    assert "resumed from /opt/ml/checkpoints/checkpoint.pt at epoch" in out, out


def test_example_trains_from_a_pipe_mode_channel(job, tmp_path):
    """`train` on 2 hosts x 2 ranks, each with 2 DataLoader workers, from per-epoch FIFOs."""
    features, per_host, epochs = 8, 300, 2
    rng = random.Random(3)
    hps = sdk_encode(
        {
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "data_channel": "train",
            "features": features,
            "epochs": epochs,
            "data_workers": 2,
            "shuffle_buffer": 64,
            # Well under wait_all's 300 s: a FIFO, writer or consumer that never comes fails
            # with the reader's error naming it, not as a job still running at the deadline.
            "fifo_timeout": 60,
        }
    )
    pipes = []
    for host in HOSTS:
        root = job.write(host, HOSTS, hps)
        (root / "input" / "config" / "inputdataconfig.json").write_text(
            json.dumps(
                {
                    "train": {
                        "TrainingInputMode": "Pipe",
                        "S3DistributionType": "ShardedByS3Key",
                        "RecordWrapperType": "RecordIO",
                    }
                }
            )
        )
        streams = []
        for _ in range(epochs):
            rows = [[rng.gauss(0, 1) for _ in range(features + 1)] for _ in range(per_host)]
            streams.append(
                b"".join(recordio_frame(struct.pack(f"<{features + 1}f", *r)) for r in rows)
            )
        # As on the platform, epoch 1's FIFO appears only after epoch 0 was read to its end,
        # here 2 s later. The fan-out reader takes all of epoch 0 at its start (it fits the
        # consumers' queues), so epoch 1's reader waits for the FIFO if epoch 0 trains in < 2 s.
        pipe = FakePipe(root / "input" / "data", "train", streams, [0, 2.0])
        pipe.start()
        pipes.append(pipe)
    try:
        leader, _ = job.start("algo-1", hps=None, write_config=False)
        worker, _ = job.start("algo-2", hps=None, write_config=False)
        try:
            results = job.wait_all(timeout=300)
        except AssertionError as exc:
            # Which side stopped: a writer that failed or never saw its reader, or the readers.
            states = [
                f"{h}: fake pipe's epochs read to their end {p.finished}, error {p.error!r}, "
                f"alive {p.is_alive()}, FIFOs {sorted(f.name for f in p.data_dir.iterdir())}"
                for h, p in zip(HOSTS, pipes, strict=True)
            ]
            raise AssertionError("\n".join([str(exc), *states])) from None
        out = logs(leader)
        assert results["algo-1"][0] == 0 and results["algo-2"][0] == 0, out + logs(worker)
        for p in pipes:
            p.wait_done(10)
            assert p.finished == [0, 1]
    finally:
        for p in pipes:
            p.stop()
    for epoch in range(epochs):
        counts = re.findall(rf"rank (\d): epoch {epoch} read (\d+) records", rank_text(out))
        assert sorted(r for r, _ in counts) == ["0", "1", "2", "3"], out
        # Each host's stream is read once in all, its records dealt over 2 ranks x 2 workers.
        assert sum(int(n) for _, n in counts) == 2 * per_host, counts
    assert '"epoch": 1' in out


def sagemaker_checkpoint_sync(roots) -> None:
    """What checkpoint_s3_uri does between two runs of a job: every host's files to S3, then
    all of them back onto every host."""
    union = {}
    for root in roots:
        base = root / "checkpoints"
        for f in base.rglob("*"):
            if f.is_file():
                union[f.relative_to(base)] = f.read_bytes()
    for root in roots:
        for rel, data in union.items():
            (root / "checkpoints" / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / "checkpoints" / rel).write_bytes(data)


def test_fsdp2_example_on_two_hosts_resumes_from_its_sharded_checkpoint(job):
    """train_fsdp.py under torch_distributed: 4 ranks sharding one model (fully_shard), DCP
    checkpoints each rank writes its part of; a second job on hosts that do not share them is
    refused on every rank, a third, after SageMaker's checkpoint sync, resumes."""
    program = {"sagemaker_program": "/opt/byoc/examples/train_fsdp.py"}
    hps = {**FAST, **program}
    leader, ml1 = job.start("algo-1", hps=hps, launcher="torchrun")
    worker, ml2 = job.start("algo-2", hps=hps, launcher="torchrun")
    results = job.wait_all(timeout=400)
    out = rank_text(logs(leader), logs(worker))
    assert results["algo-1"][0] == 0 and results["algo-2"][0] == 0, out
    check_ranks(out)
    newest = "checkpoints/fsdp/epoch-00001"
    assert (ml1 / newest / ".metadata").is_file(), out  # rank 0 writes DCP's metadata
    assert list((ml2 / newest).glob("*.distcp")), out  # the other host's ranks their shards
    assert (ml1 / "model" / "model.pt").is_file()

    def rerun(hps):
        for c in list(job.started.values()):
            c.remove(force=True)
        job.started.clear()
        started = [job.start(host, hps=hps, launcher="torchrun")[0] for host in HOSTS]
        return job.wait_all(timeout=400), started

    # Each host sees only its own files (no shared checkpoint directory): no rank resumes alone.
    more = {**FAST, "epochs": "3", **program}
    results, started = rerun(more)
    out = "".join(logs(c) for c in started)
    assert all(code != 0 for code, _ in results.values()), out
    assert "no checkpoint under /opt/ml/checkpoints/fsdp is complete on every rank" in out, out

    sagemaker_checkpoint_sync([ml1, ml2])
    results, (leader, worker) = rerun(more)
    out = logs(leader)
    assert results["algo-1"][0] == 0 and results["algo-2"][0] == 0, out + logs(worker)
    assert "resumed from /opt/ml/checkpoints/fsdp/epoch-00001 at epoch 2" in out, out
    assert '"epoch": 2' in out and '"epoch": 0' not in out, out
    assert not (ml1 / "checkpoints/fsdp/epoch-00000").exists()  # the two newest are kept


def test_users_ddp_script_ends_with_its_atexit_handlers_on_every_host(job, tmp_path):
    """A DDP script of the user's own, compiled with torch.compile and not calling the image's
    helpers, under torchrun: it goes through the launcher's byoc.clean_exit, ends (inductor's
    compile workers do not hold it), every rank's atexit handler runs and every host exits 0."""
    hps = {"sagemaker_program": "/opt/ml/code/user_ddp.py", "compile": "true"}
    roots = [tmp_path / host for host in HOSTS]  # each host's /opt/ml (the job fixture's)
    for root in roots:
        (root / "code").mkdir(parents=True)
        shutil.copy(SCRIPTS / "user_ddp.py", root / "code" / "user_ddp.py")
    started = [job.start(h, hps=hps, launcher="torchrun")[0] for h in HOSTS]
    results = job.wait_all(timeout=300)
    out = "".join(logs(c) for c in started)
    assert all(code == 0 for code, _ in results.values()), out
    assert "byoc.clean_exit" in out, out  # the launch line shows the program goes through it
    written = sorted(f.name for root in roots for f in (root / "output" / "data").glob("atexit-*"))
    assert written == ["atexit-0", "atexit-1", "atexit-2", "atexit-3"], out
