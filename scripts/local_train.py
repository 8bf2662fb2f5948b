#!/usr/bin/env python3
"""Run the image's `train` the way SageMaker does, in N containers on a private Docker network.

Each container is one instance: reachable as algo-1 ... algo-N (network aliases; its hostname
is the container ID, as in the SageMaker SDK's local mode), with its own /opt/ml written as the
platform writes it. Shows the job's output; the model lands in OUT/algo-1/model.

    scripts/local_train.py --hosts 2 --image pytorch-horovod:cpu --hp epochs=3
    scripts/local_train.py --launcher torchrun --hosts 2 --slots 2   # DDP through torchrun
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

DOCKER = os.environ.get("DOCKER", "docker")


def docker(*args: str, check: bool = True, capture: bool = True) -> str:
    result = subprocess.run([DOCKER, *args], capture_output=capture, text=True, check=False)
    if check and result.returncode != 0:
        raise SystemExit(f"local-train: {DOCKER} {args[0]} failed: {result.stderr.strip()}")
    return result.stdout.strip() if capture else ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=2, help="instances (default 2)")
    p.add_argument("--image", default="pytorch-horovod:cpu")
    p.add_argument(
        "--launcher",
        choices=["horovod", "torchrun"],
        default="horovod",
        help="the distribution the SageMaker SDK would send: horovod (mpi, the default) or "
        "torchrun (torch_distributed); the image's matching example runs unless --entry-point",
    )
    p.add_argument(
        "--slots",
        type=int,
        default=None,
        help="processes per host (horovod: sagemaker_mpi_num_of_processes_per_host; torchrun: "
        "BYOC_CPU_SLOTS_PER_HOST, as no SDK sends a count for torch_distributed)",
    )
    p.add_argument(
        "--hp",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter (repeatable); encoded as the SageMaker SDK does",
    )
    p.add_argument("--source-dir", help="your code, mounted at /opt/ml/code (local mode style)")
    p.add_argument("--entry-point", help="script in --source-dir (sagemaker_program)")
    p.add_argument(
        "--channel",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="an input channel in File mode, copied to /opt/ml/input/data/NAME",
    )
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--instance-type", default="ml.local")
    p.add_argument("--shm-size", default="1g")
    p.add_argument("--out", default="local/jobs", help="where each job's /opt/ml trees go")
    p.add_argument("--job-name", default=None)
    p.add_argument("--timeout", type=float, default=3600, help="seconds before the job is stopped")
    args = p.parse_args(argv)
    if args.hosts < 1:
        p.error("--hosts must be at least 1")
    if args.slots is not None and args.slots < 1:
        p.error("--slots must be at least 1")
    for item in [*args.hp, *args.channel, *args.env]:
        if "=" not in item:
            p.error(f"{item!r} is not NAME=VALUE")
    if args.source_dir and not Path(args.source_dir).is_dir():
        p.error(f"--source-dir {args.source_dir} is not a directory")
    if args.entry_point and not args.source_dir:
        p.error("--entry-point needs --source-dir")
    for item in args.channel:
        if not Path(item.split("=", 1)[1]).is_dir():
            p.error(f"--channel {item}: not a directory")
    return args


def hyperparameters(args: argparse.Namespace) -> dict[str, str]:
    """Every value JSON-encoded, as the SageMaker Python SDK sends them."""
    hps: dict[str, object] = {}
    for item in args.hp:
        key, value = item.split("=", 1)
        try:
            hps[key] = json.loads(value)
        except json.JSONDecodeError:
            hps[key] = value
    if args.entry_point:
        hps["sagemaker_program"] = args.entry_point
        hps["sagemaker_submit_directory"] = "/opt/ml/code"
    if args.launcher == "torchrun":
        hps["sagemaker_torch_distributed_enabled"] = True
        hps["sagemaker_instance_type"] = args.instance_type
    else:
        hps["sagemaker_mpi_enabled"] = True
        if args.slots is not None:
            hps["sagemaker_mpi_num_of_processes_per_host"] = args.slots
    return {k: json.dumps(v) for k, v in hps.items()}


def write_tree(root: Path, host: str, hosts: list[str], args, hps: dict[str, str]) -> None:
    config = root / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    for d in ("model", "output/data", "checkpoints", "input/data"):
        (root / d).mkdir(parents=True, exist_ok=True)
    resource = {
        "current_host": host,
        "current_instance_type": args.instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": args.instance_type,
                "hosts": hosts,
            }
        ],
        "network_interface_name": "eth0",
    }
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    channels = {}
    for item in args.channel:
        name, src = item.split("=", 1)
        shutil.copytree(src, root / "input" / "data" / name, dirs_exist_ok=True)
        channels[name] = {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
    (config / "inputdataconfig.json").write_text(json.dumps(channels))


def stream(name: str, prefix: str) -> threading.Thread:
    def pump():
        proc = subprocess.Popen(
            [DOCKER, "logs", "-f", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(f"{prefix} | {line}")
            sys.stdout.flush()
        proc.wait()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    job = args.job_name or f"byoc-local-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    hosts = [f"algo-{i}" for i in range(1, args.hosts + 1)]
    out = Path(args.out).resolve() / job
    hps = hyperparameters(args)
    docker("image", "inspect", args.image)
    network = job
    names = [f"{job}-{h}" for h in hosts]
    print(
        f"local-train: job {job}, {args.hosts} host(s), image {args.image}, /opt/ml trees in {out}"
    )
    docker("network", "create", "--driver", "bridge", "--internal", network)
    start = time.monotonic()
    codes: dict[str, int] = {}
    try:
        for host, name in zip(hosts, names, strict=False):
            root = out / host
            write_tree(root, host, hosts, args, hps)
            run = [
                "run",
                "-d",
                "--name",
                name,
                "--network",
                network,
                "--network-alias",
                host,
                "--shm-size",
                args.shm_size,
                "-v",
                f"{root}:/opt/ml",
                "-e",
                f"TRAINING_JOB_NAME={job}",
            ]
            if args.source_dir:
                run += ["-v", f"{Path(args.source_dir).resolve()}:/opt/ml/code:ro"]
            if args.launcher == "torchrun" and args.slots is not None:
                run += ["-e", f"BYOC_CPU_SLOTS_PER_HOST={args.slots}"]
            for item in args.env:
                run += ["-e", item]
            docker(*run, args.image, "train")
        threads = [stream(n, h) for n, h in zip(names, hosts, strict=False)]
        deadline = start + args.timeout
        for host, name in zip(hosts, names, strict=False):
            left = max(1, int(deadline - time.monotonic()))
            result = subprocess.run(
                [DOCKER, "wait", name], capture_output=True, text=True, timeout=left, check=False
            )
            codes[host] = int(result.stdout.strip() or 1)
            print(
                f"local-train: {host} exited {codes[host]} after {time.monotonic() - start:.1f} s"
            )
        for t in threads:
            t.join(timeout=5)
    except subprocess.TimeoutExpired:
        print(f"local-train: job exceeded --timeout {args.timeout:.0f} s; stopping it")
        for name in names:
            docker("stop", "-t", "120", name, check=False)
        return 124
    except KeyboardInterrupt:
        print("local-train: interrupted; stopping the containers (SIGTERM, 120 s grace)")
        for name in names:
            docker("stop", "-t", "120", name, check=False)
        return 130
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)
    failure = out / hosts[0] / "output" / "failure"
    model = out / hosts[0] / "model"
    if all(c == 0 for c in codes.values()):
        print(f"local-train: success; model in {model}: {sorted(p.name for p in model.iterdir())}")
        return 0
    if failure.exists():
        print(f"local-train: FAILED: {failure.read_text()[:1024]}")
    return max(codes.values()) or 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
