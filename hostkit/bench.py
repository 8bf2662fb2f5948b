#!/usr/bin/env python3
"""`make bench`: measure the image on a local cluster, side by side, in one run.

    python3 -m hostkit.bench [--nodes 2] [--cpus-per-node K] [--quick] [--parts ...]
                             [--timeout 3600] [--elastic-repeats 3]

Starts NODES development containers of $IMAGE:$TAG (scripts/cluster.sh, project
pytorch-horovod-bench, each pinned to its own cores so hosts do not share them), runs the
in-image driver (`python -m byoc.bench.run`, see entrypoint/byoc/bench/run.py) on node0, and
leaves bench/<timestamp>/results.json, bench.png and the printed table; the cluster is removed
whatever happens. Runnable by hand inside any cluster of the image too: see docs/performance.md.
Then, in a cluster of its own, the elastic part (hostkit/elastic_bench.py): join and recovery
times of elastic Horovod, into the same directory (--parts elastic: only that).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostkit import HostError, Teller, elastic_bench
from hostkit.docker import Docker

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "scripts" / "cluster.sh"
PROJECT = "pytorch-horovod-bench"
MAX_NODES = 8


say = Teller("bench")


def pick_image() -> str | None:
    """$BYOC_IMAGE, else $IMAGE:$TAG; where that is the default gpu image and only the cpu one
    was built (`make build FLAVOR=cpu`, then `make bench`), the cpu one, said so."""
    try:
        exists = Docker().exists
    except HostError as exc:
        say(f"error: {exc}")
        return None
    name = os.environ.get("IMAGE", "pytorch-horovod")
    wanted = os.environ.get("BYOC_IMAGE") or f"{name}:{os.environ.get('TAG', 'gpu')}"

    if exists(wanted):
        return wanted
    if not os.environ.get("BYOC_IMAGE") and wanted.endswith(":gpu") and exists(f"{name}:cpu"):
        say(f"{wanted} is not built; using {name}:cpu")
        return f"{name}:cpu"
    say(f"image {wanted} not found: make bench builds it when missing (BYOC_IMAGE: build or pull)")
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=int(os.environ.get("NODES") or 2))
    p.add_argument(
        "--cpus-per-node",
        type=int,
        default=None,
        help="cores pinned to each node (default: this host's cores / nodes; 0: no pinning)",
    )
    p.add_argument("--quick", action="store_true", help="one size, one repeat (the test's smoke)")
    p.add_argument("--parts", default=None, help="what to measure, e.g. link,allreduce")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole run")
    p.add_argument("--out", type=Path, default=ROOT / "bench", help="results go to OUT/<stamp>/")
    p.add_argument(
        "--elastic-repeats",
        type=int,
        default=None,
        help="joins and recoveries of elastic Horovod to time (default 3, 1 with --quick; 0: "
        "none); with --parts, only where it names elastic",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()] if args.parts else None
    elastic = args.elastic_repeats
    if elastic is None:
        elastic = 1 if args.quick else 3
    if parts is not None and "elastic" not in parts:
        elastic = 0
    if not 0 <= elastic <= elastic_bench.MAX_REPEATS:
        p.error(f"--elastic-repeats must be 0 to {elastic_bench.MAX_REPEATS}, not {elastic}")
    in_image = [x for x in parts if x != "elastic"] if parts is not None else None
    if not 1 <= args.nodes <= MAX_NODES:
        p.error(f"--nodes (NODES) must be 1 to {MAX_NODES}, not {args.nodes}")
    if not 60 <= args.timeout <= 6 * 3600:
        p.error("--timeout must be 60 to 21600 seconds")
    cores = os.cpu_count() or 1
    cpus = args.cpus_per_node if args.cpus_per_node is not None else cores // args.nodes
    if cpus < 0 or cpus * args.nodes > cores:
        p.error(f"--cpus-per-node {cpus} x {args.nodes} nodes needs more than this host's {cores}")
    image = pick_image()
    if image is None:
        return 2
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = args.out / stamp
    if target.exists():
        p.error(f"{target} exists already")
    args.out.mkdir(parents=True, exist_ok=True)
    if in_image == []:  # --parts elastic: no in-image driver, no cluster of this script's
        return elastic_part(image, elastic, target, args.timeout)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=args.out))
    env = {
        **os.environ,
        "CLUSTER_PROJECT": os.environ.get("CLUSTER_PROJECT") or PROJECT,
        "CLUSTER_WORKSPACE": str(work),
        "CLUSTER_CPUS_PER_NODE": str(cpus),
        # node0's published SSH and Jupyter ports on loopback only.
        "CLUSTER_BIND": "127.0.0.1",
        "BYOC_IMAGE": image,
    }
    hosts = ",".join(f"node{i}" for i in range(args.nodes))
    driver = ["python", "-m", "byoc.bench.run", "--hosts", hosts, "--out", f"/workspace/{stamp}"]
    if args.quick:
        driver.append("--quick")
    if in_image:
        driver += ["--parts", ",".join(in_image)]
    start = time.monotonic()
    code = 1
    try:
        say(f"{args.nodes} node(s), {cpus or 'all'} core(s) each; results in {target}")
        subprocess.run([str(CLUSTER), "up", str(args.nodes)], env=env, check=True, timeout=300)
        left = args.timeout - (time.monotonic() - start)
        try:
            code = subprocess.run(
                [str(CLUSTER), "exec", *driver], env=env, timeout=left, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            say(f"the run passed --timeout {args.timeout:.0f} s: stopped")
            code = 124
    except subprocess.CalledProcessError as exc:
        say(f"could not start the cluster (exit {exc.returncode}); see above")
    except subprocess.TimeoutExpired:
        say("the cluster did not come up within 300 s")
    finally:
        subprocess.run([str(CLUSTER), "down"], env=env, check=False, timeout=300)
        produced = work / stamp
        if produced.is_dir():
            shutil.move(str(produced), str(target))
            say(f"results: {target} ({time.monotonic() - start:.0f} s)")
        shutil.rmtree(work, ignore_errors=True)
    left = args.timeout - (time.monotonic() - start)
    if code == 0 and elastic:
        code = elastic_part(image, elastic, target, max(left, 60))
    return code


def elastic_part(image: str, repeats: int, target: Path, timeout: float) -> int:
    """hostkit/elastic_bench.py on the same image, its elastic.json beside the other results."""
    say(f"elastic part: {repeats} join(s) and recovery(ies)")
    return elastic_bench.main(
        [
            *("--image", image, "--repeats", str(repeats), "--out", str(target)),
            *("--timeout", str(min(timeout, 21600))),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
