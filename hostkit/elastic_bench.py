#!/usr/bin/env python3
"""The elastic part of `make bench`: join and recovery times of elastic Horovod, medians.

    python3 -m hostkit.elastic_bench [--repeats 3] [--out DIR] [--timeout 1800]

A local cluster of its own (scripts/cluster.sh, project pytorch-horovod-elastic-bench, one
process per node) runs train_elastic.py under elastic horovodrun with byoc-discover-hosts, on
node0 and node1. Each repeat adds a node (`cluster.sh scale`), waits until the larger world
trains, then kills that node (SIGKILL, a host that dies) and waits until the survivors train
again. horovodrun blacklists a failed host, so every repeat adds a new node: at most 6.
  join      from `scale` returning (node0 logs into the new node, so discovery lists it on its
            next call) to rank 0's first step in the larger world;
  recovery  from `kill` returning to rank 0's first step in the smaller world.
Times come from the job's `ELASTIC training ... t=` lines (containers share the host's clock).
Writes OUT/elastic.json and prints a table; the cluster and its scratch directory are removed
whatever happens.
BYOC_BENCH_DISCOVERY replaces the discovery command (to time an image without
byoc-discover-hosts, with --program and CLUSTER_WORKSPACE bringing the script).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostkit import Teller

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "cluster.sh"
PROJECT = "pytorch-horovod-elastic-bench"
MAX_REPEATS = 6  # node2..node7
TRAINING = re.compile(r"ELASTIC training size=(\d+) .*rank=0 t=([0-9.]+)")


say = Teller("elastic-bench")


def cluster(env: dict[str, str], *args: str, timeout: float = 300) -> None:
    result = subprocess.run(
        [str(CLUSTER), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"cluster.sh {' '.join(args)} failed: {result.stderr.strip()}")


def wait_training(log: Path, size: int, after: float, deadline: float, job) -> float:
    """The t= of rank 0's first step at this world size later than `after`."""
    while time.monotonic() < deadline:
        for m in TRAINING.finditer(log.read_text(errors="replace")):
            if int(m[1]) == size and float(m[2]) > after:
                return float(m[2])
        if job.poll() is not None:
            raise RuntimeError(f"the job ended ({job.returncode}) before size {size} trained")
        time.sleep(0.2)
    raise RuntimeError(f"no step at size {size} before the deadline")


def measure(env: dict[str, str], work: Path, repeats: int, timeout: float, program: str) -> dict:
    deadline = time.monotonic() + timeout
    discovery = env.get("BYOC_BENCH_DISCOVERY", "byoc-discover-hosts")
    cluster(env, "up", "2")
    # A discovery command that lists nothing would leave horovodrun waiting --elastic-timeout.
    listed = subprocess.run(
        [str(CLUSTER), "exec", "bash", "-c", discovery],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if listed.stdout.split() != ["node0:1", "node1:1"]:
        raise RuntimeError(
            f"discovery ({discovery}) listed {listed.stdout.split()}, not node0 and node1: "
            f"{listed.stderr.strip()}"
        )
    log = work / "job.log"
    with log.open("w") as out:
        job = subprocess.Popen(
            [
                str(CLUSTER),
                "exec",
                "horovodrun",
                "-np",
                "2",
                "--min-np",
                "1",
                "--max-np",
                "8",
                "--elastic-timeout",
                "120",
                "--host-discovery-script",
                discovery,
                "python",
                program,
                "--epochs=1000000",
                "--samples=4096",
                "--step-sleep=0.05",
                "--commit-every=1",
                "--checkpoint-dir=/tmp/elastic-bench",
                "--model-dir=/tmp/elastic-bench",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_training(log, 2, 0, deadline, job)
            joins, recoveries = [], []
            for k in range(2, 2 + repeats):
                cluster(env, "scale", str(k + 1))
                added = time.time()
                joined = wait_training(log, 3, added, deadline, job)
                joins.append(round(joined - added, 2))
                # The clock starts before the kill: under load the job has recovered and
                # trained its first step at size 2 before `cluster.sh kill` (docker compose)
                # returns, and that step is the one line a recovery prints (seen in a cold CI run).
                killed = time.time()
                cluster(env, "kill", f"node{k}")
                resumed = wait_training(log, 2, killed, deadline, job)
                recoveries.append(round(resumed - killed, 2))
                say(f"repeat {k - 1}: join {joins[-1]} s, recovery {recoveries[-1]} s")
        finally:
            if job.poll() is None:
                job.kill()
                job.wait(30)
    return {
        "join_s": joins,
        "recovery_s": recoveries,
        "join_median_s": statistics.median(joins),
        "recovery_median_s": statistics.median(recoveries),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help=f"1 to {MAX_REPEATS}")
    p.add_argument("--out", type=Path, default=None, help="write elastic.json here")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole run")
    p.add_argument(
        "--program",
        default="/opt/byoc/examples/train_elastic.py",
        help="the training script, as node0 sees it",
    )
    name = os.environ.get("IMAGE", "pytorch-horovod")
    p.add_argument(
        "--image",
        default=os.environ.get("BYOC_IMAGE") or f"{name}:{os.environ.get('TAG', 'cpu')}",
        help="the image (default: $BYOC_IMAGE, else $IMAGE:$TAG, else pytorch-horovod:cpu)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 1 <= args.repeats <= MAX_REPEATS:
        p.error(f"--repeats must be 1 to {MAX_REPEATS}, not {args.repeats}")
    if not 60 <= args.timeout <= 6 * 3600:
        p.error("--timeout must be 60 to 21600 seconds")
    image = args.image
    work = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    env = {
        **os.environ,
        "CLUSTER_PROJECT": os.environ.get("CLUSTER_PROJECT") or PROJECT,
        "CLUSTER_STATE": str(work / "state"),
        # A given workspace (CLUSTER_WORKSPACE) can bring its own --program.
        "CLUSTER_WORKSPACE": os.environ.get("CLUSTER_WORKSPACE") or str(work / "workspace"),
        "CLUSTER_SLOTS": "1",
        "CLUSTER_SHM_SIZE": "1g",
        "CLUSTER_BIND": "127.0.0.1",
        "BYOC_IMAGE": image,
    }
    Path(env["CLUSTER_WORKSPACE"]).mkdir(exist_ok=True)
    say(f"{image}: {args.repeats} join(s) and recover(ies), one process per node")
    try:
        result = {"image": image, **measure(env, work, args.repeats, args.timeout, args.program)}
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        say(f"failed: {exc}")
        log = work / "job.log"
        if log.exists():
            text = log.read_text(errors="replace")
            # What the job said of its membership (the lines waited for), then its tail.
            events = [line for line in text.splitlines() if "ELASTIC" in line]
            print("\n".join(["--- the job's ELASTIC lines ---", *events[-40:]]), file=sys.stderr)
            print("--- the job's output, last 4000 characters ---", file=sys.stderr)
            print(text[-4000:], file=sys.stderr)
        return 1
    finally:
        subprocess.run(
            [str(CLUSTER), "down"], env=env, capture_output=True, timeout=300, check=False
        )
        shutil.rmtree(work, ignore_errors=True)  # its state and job log (tail printed on failure)
    print(f"{'':12} {'median s':>9}  runs")
    print(f"{'join':12} {result['join_median_s']:>9.2f}  {result['join_s']}")
    print(f"{'recovery':12} {result['recovery_median_s']:>9.2f}  {result['recovery_s']}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "elastic.json").write_text(json.dumps(result, indent=2) + "\n")
        say(f"results: {args.out / 'elastic.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
