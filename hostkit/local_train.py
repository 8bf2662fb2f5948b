#!/usr/bin/env python3
"""Run the image's `train` the way SageMaker does, in N containers on a private Docker network.

Each container is one instance: reachable as algo-1 ... algo-N (network aliases; its hostname
is the container ID, as in the SageMaker SDK's local mode), with its own /opt/ml written as the
platform writes it. Shows the job's output; the model lands in OUT/JOB/algo-1/model.

    python3 -m hostkit.local_train --hosts 2 --image pytorch-horovod:cpu --hp epochs=3
    python3 -m hostkit.local_train --launcher torchrun --hosts 2 --slots 2   # DDP through torchrun
    python3 -m hostkit.local_train --instance-groups data:1,train:2 --distribution-groups train

Input is checked before anything is made, against SageMaker's own limits where it has them
(botocore's service model): bad input exits 2 naming the option. The job's trees go in a new
directory OUT/JOB; an existing one is never reused. Exit status: 0 when every host succeeded;
2 bad input; 127 no docker CLI (126: DOCKER is not executable), as a shell says it;
1 when Docker refuses a step; 124 past --timeout; 130 interrupted; else the hosts' own status.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

from hostkit import HostError, job
from hostkit.aws import limits
from hostkit.docker import TIMED_OUT, Docker

MAX_HOSTS = 64  # containers on one machine; SageMaker allows more, a laptop does not
DEFAULT_HOSTS = 2
DEFAULT_INSTANCE_TYPE = "ml.local"
HOMOGENEOUS = "homogeneousCluster"  # the one group SageMaker names in a job without groups
MAX_CHANNEL_ENTRIES = 1_000_000  # files and directories per channel (symlinks followed)
FREE_SPACE_MARGIN = 256 << 20  # bytes left free on --out's disk after the channel copies
SHM_SIZE = re.compile(r"[0-9]+(?:\.[0-9]+)?[bkmgBKMG]?")
UNSAFE_IN_MOUNT = re.compile(r"[:,\x00-\x1f\x7f]")  # `docker run -v SRC:DST[:ro]` splits on ':'
# How the options spell a job (hostkit.job); containers have no GPUs, so --slots counts without mpi;
# a channel is a directory, all of what follows NAME=.
TOOL = job.Tool(
    instance_count="--hosts",
    processes_per_host="--slots",
    distribution="--launcher",
    distributions={"mpi": "horovod", "torch_distributed": "torchrun"},
    max_instances=MAX_HOSTS,
    cpu_slots=True,
    environment={job.WARM_POOL_CACHE_ENV: "--warm-pool-cache"},
    warm_pool="--warm-pool-cache",
    channel_options=False,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="local_train.py",
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--hosts",
        type=int,
        help=f"instances, 1-{MAX_HOSTS} (default {DEFAULT_HOSTS}); with --instance-groups, "
        "their hosts in all if given",
    )
    p.add_argument("--image", default="pytorch-horovod:cpu")
    p.add_argument(
        "--launcher",
        choices=list(TOOL.distributions.values()),
        default="horovod",
        help="the distribution the SageMaker SDK would send: horovod (mpi, the default) or "
        "torchrun (torch_distributed); the image's matching example runs unless --entry-point",
    )
    p.add_argument(
        "--slots",
        type=int,
        default=None,
        help=f"processes per host, 1-{job.MAX_PROCESSES_PER_HOST} (horovod: "
        "sagemaker_mpi_num_of_processes_per_host; torchrun: BYOC_CPU_SLOTS_PER_HOST, as no SDK "
        "sends a count for torch_distributed)",
    )
    p.add_argument(
        "--warm-pool-cache",
        metavar="DIR",
        help=f"a directory (absolute; made if missing) mounted in every container at "
        f"{job.WARM_POOL_CACHE_DIR}, named by {job.WARM_POOL_CACHE_ENV}, as SageMaker gives a "
        "warm-pool job: give two jobs the same one to try a kept warm pool",
    )
    p.add_argument("--shm-size", default="1g")
    p.add_argument("--out", default="local/jobs", help="where each job's /opt/ml trees go")
    p.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help=f"seconds before the job is stopped (at most {limits.MAX_RUNTIME_S}, 28 days)",
    )
    job.add_job_arguments(
        p,
        TOOL,
        instance_type=f"default {DEFAULT_INSTANCE_TYPE}",
        job_name="byoc-local-<local time>-<4 hex digits>",
        source_dir="mounted at /opt/ml/code (local mode style)",
        channel_source="DIR",
        channel="a directory, copied to /opt/ml/input/data/NAME on every host (File mode)",
    )
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        validate(args)
    except HostError as exc:
        p.error(str(exc))
    return args


def default_name() -> str:
    return f"byoc-local-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def validate(args: argparse.Namespace) -> None:
    """Everything checked before anything is made; HostError names the option."""
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= limits.MAX_RUNTIME_S):
        raise HostError(
            f"--timeout must be more than 0 and at most {limits.MAX_RUNTIME_S} s (SageMaker's "
            f"28-day MaxRuntimeInSeconds), not {args.timeout:g}"
        )
    problem = limits.image_problem(args.image)
    if problem:
        raise HostError(f"--image {args.image!r} {problem}")
    if not SHM_SIZE.fullmatch(args.shm_size) or float(args.shm_size.rstrip("bkmgBKMG")) <= 0:
        raise HostError(f"--shm-size {args.shm_size!r}: a size such as 1g, 512m (docker run)")
    launcher = {word: name for name, word in TOOL.distributions.items()}
    fields = job.job_fields(args, TOOL)
    groups = fields["instance_groups"]
    instance_type = args.instance_type
    if instance_type is None and not (groups and all(g.instance_type for g in groups)):
        instance_type = DEFAULT_INSTANCE_TYPE
    args.job = job.Job(
        TOOL,
        name=default_name() if args.job_name is None else args.job_name,
        instance_type=instance_type,
        instance_count=None if groups else (DEFAULT_HOSTS if args.hosts is None else args.hosts),
        **fields,
        warm_pool=args.warm_pool_cache is not None,
        distribution=launcher[args.launcher],
        processes_per_host=args.slots,
    )
    if args.job.source_dir and UNSAFE_IN_MOUNT.search(str(args.job.source_dir)):
        raise HostError(
            f"--source-dir {args.job.source_dir}: a path with ':', ',' or a control character "
            "cannot be mounted with docker run -v"
        )
    if groups and args.hosts not in (None, args.job.host_count):
        raise HostError(
            f"--hosts {args.hosts} disagrees with --instance-groups ({args.job.host_count} "
            "hosts): give one or the other"
        )
    args.hosts = args.job.host_count
    args.hps = args.job.encoded_hyperparameters("/opt/ml/code", {})
    own = {"TRAINING_JOB_NAME": args.job.name}
    if args.warm_pool_cache is not None:
        own[job.WARM_POOL_CACHE_ENV] = job.WARM_POOL_CACHE_DIR
    args.environment = args.job.job_environment(own)
    args.copies = copies(args.job.channels)
    check_out(args)
    args.cache = warm_pool_cache(args.warm_pool_cache, args)


def warm_pool_cache(text: str | None, args: argparse.Namespace) -> Path | None:
    """--warm-pool-cache's directory: absolute once ~ is expanded, reached through no symlink,
    a directory or missing (made at start), and apart from the job's trees and its code."""
    if text is None:
        return None
    path = Path(os.path.expanduser(text))
    what = f"--warm-pool-cache {text}"
    if not path.is_absolute():
        raise HostError(f"{what}: an absolute path (~ expands), the same for every job using it")
    if UNSAFE_IN_MOUNT.search(str(path)):
        raise HostError(
            f"{what}: a path with ':', ',' or a control character cannot be mounted with "
            "docker run -v"
        )
    real = Path(os.path.realpath(path))
    if real != Path(os.path.normpath(path)):
        raise HostError(f"{what}: leads elsewhere through a symlink (to {real})")
    if path.exists() and not path.is_dir():
        raise HostError(f"{what}: exists and is not a directory")
    for other, flag in ((args.job_dir, "--out"), (args.job.source_dir, "--source-dir")):
        if other and (other.is_relative_to(real) or real.is_relative_to(other)):
            raise HostError(
                f"{what}: overlaps {flag}'s {other}: the cache outlives the job, apart from it"
            )
    return real


def copies(channels: list[job.Channel]) -> dict[str, tuple[Path, list, int]]:
    """name -> (directory, what to copy, bytes): local-train copies each channel's directory,
    every one scanned before anything is made."""
    out = {}
    for channel in channels:
        path = Path(channel.source)
        if not channel.source or not path.is_dir():
            raise HostError(f"--channel {channel.name}={channel.source}: not a directory")
        entries, size = scan_channel(channel.name, path)
        out[channel.name] = (path.resolve(), entries, size)
    return out


def scan_channel(name: str, root: Path) -> tuple[list[tuple[str, Path | None]], int]:
    """Every directory and regular file under root, symlinks followed: ([(relative path, file
    to copy or None for a directory)], bytes). Loops, FIFOs, sockets, devices, unreadable or
    dangling entries are refused: copying them would never end or fail halfway."""
    entries: list[tuple[str, Path | None]] = []
    size = 0
    what = f"--channel {name}"
    first = root.stat()
    stack = [(root, "", frozenset({(first.st_dev, first.st_ino)}))]
    while stack:
        path, rel, ancestors = stack.pop()
        try:
            with os.scandir(path) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            raise HostError(f"{what}: cannot read {path}: {exc.strerror}") from None
        for entry in children:
            child, crel = Path(entry.path), f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = child.stat()  # through symlinks
            except OSError as exc:
                raise HostError(f"{what}: {child}: {exc.strerror} (a dangling symlink?)") from None
            if len(entries) >= MAX_CHANNEL_ENTRIES:
                raise HostError(f"{what}: more than {MAX_CHANNEL_ENTRIES} files and directories")
            if stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in ancestors:
                    raise HostError(
                        f"{what}: {child} is a symlink loop (it leads to its own parent)"
                    )
                entries.append((crel, None))
                stack.append((child, crel, ancestors | {key}))
            elif stat.S_ISREG(st.st_mode):
                if not os.access(child, os.R_OK):
                    raise HostError(f"{what}: {child}: not readable")
                entries.append((crel, child))
                size += st.st_size
            else:
                raise HostError(
                    f"{what}: {child} is not a regular file or directory (a FIFO, socket or "
                    "device): a channel holds files"
                )
    return entries, size


def check_out(args: argparse.Namespace) -> None:
    if not args.out.strip():
        raise HostError("--out is empty: give a directory (default local/jobs)")
    args.job_dir = Path(args.out).resolve() / args.job.name
    existing = next(p for p in args.job_dir.parents if p.exists())
    if not existing.is_dir():
        raise HostError(f"--out {args.out}: {existing} exists and is not a directory")
    if UNSAFE_IN_MOUNT.search(str(args.job_dir)):
        raise HostError(
            f"--out {args.job_dir}: a path with ':', ',' or a control character cannot be "
            "mounted with docker run -v"
        )
    if args.job_dir.exists() or args.job_dir.is_symlink():
        raise HostError(
            f"--out: {args.job_dir} already exists; a job's trees are never reused or mixed "
            "with another's: choose another --job-name or --out"
        )
    for name, (src, _, _) in args.copies.items():
        if args.job_dir.is_relative_to(src):
            raise HostError(
                f"--out {args.out}: the job's trees would be inside --channel {name}'s directory "
                f"{src}, copying it into itself: choose --out elsewhere"
            )
    need = args.hosts * sum(size for _, _, size in args.copies.values())
    if need:
        free = shutil.disk_usage(existing).free
        if need + FREE_SPACE_MARGIN > free:
            raise HostError(
                f"--channel: {args.hosts} copies of the channels need {need / 1e9:.2f} GB; "
                f"{free / 1e9:.2f} GB are free under --out {existing}"
            )


def resource_configs(spec: job.Job) -> dict[str, dict]:
    """Each host's resourceconfig.json as SageMaker writes it: hosts algo-1 ... algo-N in the
    groups' order; a job without groups is one group, homogeneousCluster."""
    groups = spec.instance_groups or [
        job.InstanceGroup(HOMOGENEOUS, spec.instance_count, spec.instance_type)
    ]
    members, first = [], 1
    for group in groups:
        members.append((group, [f"algo-{i}" for i in range(first, first + group.count)]))
        first += group.count
    hosts = [host for _, names in members for host in names]
    listed = [
        {"instance_group_name": g.name, "instance_type": g.instance_type, "hosts": names}
        for g, names in members
    ]
    return {
        host: {
            "current_host": host,
            "current_instance_type": group.instance_type,
            "current_group_name": group.name,
            "hosts": hosts,
            "instance_groups": listed,
            "network_interface_name": "eth0",
        }
        for group, names in members
        for host in names
    }


def write_tree(root: Path, resource: dict, args) -> None:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    for d in ("model", "output/data", "checkpoints", "input/data"):
        (root / d).mkdir(parents=True, exist_ok=True)
    if args.cache:  # the mount point, made by us rather than as root by Docker
        (root / job.WARM_POOL_CACHE_DIR.removeprefix("/opt/ml/")).mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(args.hps))
    specs = {}
    for channel in args.job.channels:
        dest = root / "input" / "data" / channel.name
        dest.mkdir()
        for rel, src in args.copies[channel.name][1]:
            if src is None:
                (dest / rel).mkdir()
            else:
                shutil.copy2(src, dest / rel)
        specs[channel.name] = {
            "TrainingInputMode": channel.mode or args.job.input_mode,
            "S3DistributionType": channel.distribution,
            "RecordWrapperType": channel.wrap or "None",
        }
    (config / "inputdataconfig.json").write_text(json.dumps(specs))


def exit_code(result: subprocess.CompletedProcess, name: str) -> int:
    try:
        return int(result.stdout.strip())
    except ValueError:
        print(f"local-train: docker wait {name} said {result.stdout.strip()!r}: counted as 1")
        print(f"local-train: {result.stderr.strip()}")
        return 1


def run_job(argv: list[str]) -> int:
    args = parse_args(argv)
    docker = Docker()
    job_name, out = args.job.name, args.job_dir
    resources = resource_configs(args.job)
    hosts = list(resources)
    inspect = docker("image", "inspect", args.image, check=False)
    if inspect.returncode != 0:
        if "no such image" in inspect.stderr.lower():
            raise HostError(f"--image {args.image}: not found locally (`make build`, or pull it)")
        raise HostError(f"docker image inspect {args.image} failed: {inspect.stderr.strip()}", 1)
    groups = ", ".join(f"{r['current_group_name']} {h}" for h, r in resources.items())
    print(
        f"local-train: job {job_name}, {args.hosts} host(s)"
        + (f" ({groups})" if args.job.instance_groups else "")
        + f", image {args.image}, /opt/ml trees in {out}"
    )
    if args.cache:
        print(f"local-train: warm-pool cache {args.cache} (kept after the job)")
        try:
            args.cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HostError(
                f"--warm-pool-cache {args.cache}: cannot make it: {exc.strerror}"
            ) from None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.mkdir()  # never an existing one: the trees of two jobs are not mixed
    except FileExistsError:
        raise HostError(f"--out: {out} already exists; choose another --job-name") from None
    except OSError as exc:
        raise HostError(f"--out: cannot make {out}: {exc.strerror}") from None
    network, names, started = job_name, [f"{job_name}-{h}" for h in hosts], []
    try:
        docker("network", "create", "--driver", "bridge", "--internal", network)
    except HostError:
        out.rmdir()  # made just now, still empty
        raise
    start = time.monotonic()
    codes: dict[str, int] = {}
    try:
        for host in hosts:
            try:
                write_tree(out / host, resources[host], args)
            except OSError as exc:
                raise HostError(f"writing the job's trees in {out} failed: {exc}", 1) from None
        for host, name in zip(hosts, names, strict=True):
            cmd = ["run", "-d", "--name", name, "--network", network, "--network-alias", host]
            cmd += ["--shm-size", args.shm_size, "-v", f"{out / host}:/opt/ml"]
            if args.job.source_dir:
                cmd += ["-v", f"{args.job.source_dir}:/opt/ml/code:ro"]
            if args.cache:
                cmd += ["-v", f"{args.cache}:{job.WARM_POOL_CACHE_DIR}"]
            for key, value in args.environment.items():
                cmd += ["-e", f"{key}={value}"]
            docker(*cmd, args.image, "train")
            started.append(name)  # only these are removed: a name taken by another stays its own
        threads = [docker.stream(n, h) for n, h in zip(names, hosts, strict=True)]
        deadline = start + args.timeout
        for host, name in zip(hosts, names, strict=True):
            left = max(1, int(deadline - time.monotonic()))
            codes[host] = exit_code(docker("wait", name, check=False, timeout=left), name)
            print(
                f"local-train: {host} exited {codes[host]} after {time.monotonic() - start:.1f} s"
            )
        for t in threads:
            t.join(timeout=5)
    except HostError as exc:
        if exc.code != TIMED_OUT:
            raise
        print(f"local-train: job exceeded --timeout {args.timeout:g} s; stopping it")
        for name in started:
            docker("stop", "-t", "120", name, check=False)
        return 124
    except KeyboardInterrupt:
        print("local-train: interrupted; stopping the containers (SIGTERM, 120 s grace)")
        for name in started:
            docker("stop", "-t", "120", name, check=False)
        return 130
    finally:
        for name in started:
            docker("rm", "-f", name, check=False)
        docker("network", "rm", network, check=False)
    failure = out / hosts[0] / "output" / "failure"
    model = out / hosts[0] / "model"
    if all(c == 0 for c in codes.values()):
        files = sorted(p.name for p in model.iterdir()) if model.is_dir() else []
        print(f"local-train: success; model in {model}: {files}")
        return 0
    if failure.is_file():
        print(f"local-train: FAILED: {failure.read_text(errors='replace')[:1024]}")
    return max(codes.values()) or 1


def main(argv: list[str]) -> int:
    try:
        return run_job(argv)
    except HostError as exc:
        print(f"local-train: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("local-train: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
