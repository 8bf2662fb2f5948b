"""`make bench`'s driver, run on the first host of any cluster of the image (the local one that
hostkit/bench.py starts, a dev-mode pair, a user's p4d pair over SSH):

    python -m byoc.bench.run --hosts node0,node1 --out /workspace/bench/<stamp> [--quick]

Side by side, in one run: the link (iperf3 one way and both ways at once), allreduce bus
bandwidth per size for Horovod over each controller it has and torch.distributed (gloo; NCCL
where there are GPUs), nccl-tests where there are GPUs, training throughput of the example
(Horovod vs DDP, same model, batch and data), weak scaling (1 host vs all), horovodrun's launch
overhead, and the Pipe-mode reader against a raw FIFO read. Writes results.json, bench.png and
prints a table with ratios. Every step is bounded in time; a step that fails is recorded with its
error and the run goes on. The other hosts are reached with `ssh HOST` (the cluster's trust).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from byoc.bench import stats

EXAMPLES = Path("/opt/byoc/examples")
FULL_SIZES = "64K,256K,1M,4M,16M,64M,256M"
QUICK_SIZES = "1M"
# Ports of its own (a user's job on 29500 is not disturbed), a new one for every torchrun: an
# agent of the previous run still leaving cannot meet the next one.
TORCH_PORTS = itertools.count(29533)
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")


def say(msg: str) -> None:
    print(f"bench: {msg}", flush=True)


class StepError(RuntimeError):
    pass


def _tail(path: Path, limit: int = 1500) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
        return f.read().decode(errors="replace")


# Seconds a process group has to end after SIGTERM before SIGKILL. torchrun, on SIGTERM, stops
# its workers itself: they run in sessions of their own, where a signal to its group cannot reach.
GRACE_S = 15


def _exit_code(proc: subprocess.Popen) -> int | None:
    """proc's exit code (-N: killed by signal N) once it has ended, else None, without reaping
    it: until _stop reaps it, its pid, and so its group's id, cannot pass to another process."""
    info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _stop(proc: subprocess.Popen) -> None:
    """End proc's process group (SIGTERM, then SIGKILL after GRACE_S) and reap proc."""

    def signal_group(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left of it
            os.killpg(proc.pid, sig)

    if _exit_code(proc) is None:
        signal_group(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while _exit_code(proc) is None and time.monotonic() < deadline:
            time.sleep(0.1)
    signal_group(signal.SIGKILL)  # what is left of the group, the leader's zombie included
    proc.wait()


def _start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    # Output to a file, not a pipe: nobody reads a pipe while we wait, and a full one stalls
    # the writer.
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """Run cmd to the end within timeout; its output, or StepError with the output's tail
    (what it printed before a timeout too)."""
    return run_with(cmd, [], timeout, env)


def run_with(
    cmd: list[str], others: list[list[str]], timeout: float, env: dict[str, str] | None = None
) -> str:
    """Run cmd, and `others` beside it (the other hosts' halves of the same job), each with env
    added to this environment, to the end within timeout: cmd's output, or StepError naming the
    one that failed first or the timeout, with what each printed last. One that fails ends them
    all at once: the rest would wait for it until the timeout."""
    cmds = [cmd, *others]

    def name(i: int) -> str:
        return shlex.join(cmd)[:200] if i == 0 else f"beside it, {shlex.join(cmds[i])[:200]}"

    def tails(logs: list[Path], first: int) -> str:
        order = [first] + [i for i in range(len(logs)) if i != first]
        return "".join(
            f"\n--- {'it' if i == 0 else shlex.join(cmds[i])[:80]}, last output:\n"
            f"{_tail(logs[i], 1500 if i == first else 800)}"
            for i in order
        )

    with tempfile.TemporaryDirectory(prefix="byoc-bench-") as tmp:
        logs = [Path(tmp) / f"{i}.log" for i in range(len(cmds))]
        procs: list[subprocess.Popen] = []
        try:
            for c, log in zip(cmds, logs, strict=True):
                procs.append(_start(c, log, env))  # one by one: a failed start leaves none
            deadline = time.monotonic() + timeout
            while True:
                codes = [_exit_code(p) for p in procs]
                bad = [i for i, code in enumerate(codes) if code not in (None, 0)]
                if bad:
                    i = bad[0]
                    raise StepError(f"{name(i)} exited {codes[i]}{tails(logs, i)}")
                if None not in codes:
                    return logs[0].read_text(errors="replace")
                if time.monotonic() > deadline:
                    raise StepError(f"{name(0)} ran past {timeout:.0f} s{tails(logs, 0)}")
                time.sleep(0.1)
        finally:
            for p in procs:
                _stop(p)


def ssh(host: str, command: str) -> list[str]:
    # BatchMode: a missing key fails at once instead of asking for a password.
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host, command]


def hostfile(hosts: list[str], slots: int) -> str:
    return ",".join(f"{h}:{slots}" for h in hosts)


# --- the link --------------------------------------------------------------------------------


def iperf_client(server: str, seconds: int, bidir: bool) -> dict:
    """One iperf3 run against a one-off server started now on `server`. `iperf3 -D` returns
    before the server listens: the client is retried while it cannot connect, up to 15 s."""
    run(ssh(server, "iperf3 -s -1 -D"), timeout=30)
    args = ["iperf3", "-c", server, "-t", str(seconds), "-J", *(["--bidir"] if bidir else [])]
    deadline = time.monotonic() + 15
    while True:
        try:
            return json.loads(run(args, timeout=seconds + 30))["end"]
        except StepError as exc:
            if "unable to connect" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def iperf(server: str, seconds: int, repeats: int) -> dict:
    """iperf3 to `server`: one way, and both ways at once (per direction), in GB/s."""
    one, both = [], []
    for _ in range(repeats):
        end = iperf_client(server, seconds, bidir=False)
        one.append(end["sum_received"]["bits_per_second"] / 8e9)
        end = iperf_client(server, seconds, bidir=True)
        forward = end["sum_received"]["bits_per_second"]
        reverse = end["sum_received_bidir_reverse"]["bits_per_second"]
        both.append((forward + reverse) / 2 / 8e9)
    return {
        "one_way_gbps": stats.summary(one),
        "bidir_per_direction_gbps": stats.summary(both),
    }


# --- allreduce -------------------------------------------------------------------------------


def horovodrun(hosts: list[str], slots: int, args: list[str], controller: str | None) -> list[str]:
    cmd = ["horovodrun", "-np", str(len(hosts) * slots), "-H", hostfile(hosts, slots)]
    if controller:
        cmd.append(f"--{controller}")
    return [*cmd, *args]


def torchrun_everywhere(
    hosts: list[str], slots: int, module_args: list[str], timeout: float
) -> str:
    """torchrun on every host (one agent each): the others over ssh, this one here."""
    port = next(TORCH_PORTS)

    def command(rank: int) -> list[str]:
        return [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(len(hosts)), "--nproc-per-node", str(slots),
            "--node-rank", str(rank), "--master-addr", hosts[0],
            "--master-port", str(port), "--max-restarts", "0",
            *module_args,
        ]  # fmt: skip

    # Bounded there too: a killed ssh client leaves the command it started running. timeout's
    # SIGTERM lets torchrun stop its workers.
    limit = f"timeout -k 10 {timeout + 30:.0f}"
    others = [
        ssh(h, f"cd /tmp && exec {limit} {shlex.join(command(i))}")
        for i, h in enumerate(hosts[1:], start=1)
    ]
    return run_with(command(0), others, timeout)


def allreduce_runs(hosts, slots, gpus, sizes, repeats, out_dir: Path) -> list[tuple[str, list]]:
    """(name, command maker) for every library and controller this image has."""
    backend = "nccl" if gpus else "gloo"
    common = ["--sizes", sizes, "--repeats", str(repeats)]
    runs = []
    for controller in ("gloo", "mpi"):
        for compression in ("none", "fp16"):
            name = f"horovod-{controller}-{compression}"
            args = [
                sys.executable, "-m", "byoc.bench.allreduce", "--lib", "horovod",
                "--backend", backend, "--compression", compression, *common,
                "--out", str(out_dir / f"{name}.json"),
            ]  # fmt: skip
            runs.append((name, ("horovod", controller, args)))
    for tb in ["gloo"] + (["nccl"] if gpus else []):
        name = f"torch-{tb}"
        args = [
            "-m", "byoc.bench.allreduce", "--lib", "torch", "--backend", tb, *common,
            "--out", str(out_dir / f"{name}.json"),
        ]  # fmt: skip
        runs.append((name, ("torch", None, args)))
    return runs


def nccl_tests(hosts: list[str], slots: int, timeout: float) -> dict:
    args = ["all_reduce_perf", "-b", "64K", "-e", "256M", "-f", "4", "-g", "1"]
    out = run(
        ["mpirun", "-np", str(len(hosts) * slots), "-H", hostfile(hosts, slots), *args],
        timeout=timeout,
    )
    rows = []
    for line in out.splitlines():
        fields = line.split()
        # size count type redop root time algbw busbw #wrong (out of place) ...
        if len(fields) >= 8 and fields[0].isdigit():
            rows.append({"bytes": int(fields[0]), "busbw_gbps": float(fields[7])})
    if not rows:
        raise StepError(f"no result rows in all_reduce_perf's output: {out[-800:]}")
    return {"rows": rows}


# --- training --------------------------------------------------------------------------------

# Anywhere in a line: horovodrun prefixes lines with the rank ("[1,0]<stdout>:") and, as ranks
# interleave, may run the next prefix on.
EPOCH = re.compile(r'\{"epoch": (\d+), "loss": [^,]+, "samples_per_s": ([0-9.]+)\}')


def samples_per_s(out: str) -> float:
    """The last epoch's samples/s (the first epoch pays start-up costs)."""
    found = EPOCH.findall(out)
    if not found:
        raise StepError(f"no per-epoch line in the example's output: {out[-800:]}")
    return float(found[-1][1])


def train_args(quick: bool) -> list[str]:
    """The example's options for one timed run: a fresh model and checkpoint directory each time
    (a checkpoint left by the previous run would be resumed, and nothing trained). A batch of
    2048 and 1024 hidden units: enough computation per step that the figures say something
    about the framework, not only about the ~1 ms an allreduce of a toy model costs."""
    samples = "8192" if quick else "65536"
    fresh = f"/tmp/byoc-bench-{os.getpid()}-{time.monotonic_ns()}"
    return [
        "--epochs", "2", "--samples", samples, "--batch-size", "2048", "--hidden", "1024",
        "--model-dir", f"{fresh}/model", "--checkpoint-dir", f"{fresh}/checkpoints",
    ]  # fmt: skip


# --- the driver ------------------------------------------------------------------------------


def count_gpus() -> int:
    from byoc import plan

    return plan.count_gpus()


def step(results: dict, name: str, fn, *args):
    start = time.monotonic()
    say(f"{name} ...")
    try:
        results[name] = fn(*args)
        say(f"{name} done in {time.monotonic() - start:.0f} s")
    except (StepError, OSError, ValueError, KeyError) as exc:
        results.setdefault("errors", {})[name] = str(exc)[-2000:]
        say(f"{name} FAILED: {str(exc)[-400:]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="byoc.bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", required=True, help="comma list; the first is this host")
    p.add_argument("--slots", type=int, default=1, help="processes per host")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--sizes", default=None, help=f"allreduce sizes (default {FULL_SIZES})")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="one size, one repeat: a smoke run")
    p.add_argument(
        "--parts",
        default="link,allreduce,nccl-tests,train,scaling,launch,pipe",
        help="what to measure (comma list)",
    )
    args = p.parse_args(argv)
    hosts = args.hosts.split(",")
    bad = [h for h in hosts if not HOST.fullmatch(h)]
    parts = set(args.parts.split(","))
    known = {"link", "allreduce", "nccl-tests", "train", "scaling", "launch", "pipe"}
    if bad or len(set(hosts)) != len(hosts) or not 1 <= args.slots <= 64 or parts - known:
        p.error(f"bad --hosts {bad or hosts}, --slots {args.slots} or --parts {parts - known}")
    repeats = 1 if args.quick else args.repeats
    if not 1 <= repeats <= 20:
        p.error("--repeats must be 1 to 20")
    try:
        sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
        stats.parse_sizes(sizes)
    except ValueError as exc:
        p.error(f"--sizes: {exc}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    def leave(signum: int, _frame) -> None:
        raise SystemExit(128 + signum)  # so that every step's `finally` stops what it started

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)
    gpus = count_gpus()
    slots = args.slots
    results: dict = {
        "hosts": hosts,
        "slots": slots,
        "gpus_per_host": gpus,
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "image": {k: os.environ.get(k, "") for k in ("BYOC_FLAVOR",)},
        "this_host": socket.gethostname(),
    }
    long = 120 if args.quick else 900
    if "link" in parts and len(hosts) > 1:
        step(results, "link", iperf, hosts[1], 2 if args.quick else 5, 1 if args.quick else 3)
    if "allreduce" in parts:
        docs = []
        for name, (lib, controller, cmd) in allreduce_runs(hosts, slots, gpus, sizes, repeats, out):

            def one(lib=lib, controller=controller, cmd=cmd, name=name):
                if lib == "horovod":
                    text = run(horovodrun(hosts, slots, cmd, controller), timeout=long)
                else:
                    text = torchrun_everywhere(hosts, slots, cmd, timeout=long)
                say(text.strip().splitlines()[-1] if text.strip() else f"{name}: no output")
                return json.loads((out / f"{name}.json").read_text())

            step(results, f"allreduce:{name}", one)
            if f"allreduce:{name}" in results:
                docs.append(results.pop(f"allreduce:{name}"))
        results["allreduce"] = docs
    if "nccl-tests" in parts:
        if gpus:
            step(results, "nccl_tests", nccl_tests, hosts, slots, long)
        else:
            results["nccl_tests"] = {"skipped": "no GPU on this host"}
    if "train" in parts:
        step(results, "throughput", throughput, hosts, slots, args.quick, repeats, long)
    if "scaling" in parts and len(hosts) > 1:
        measured = (results.get("throughput") or [{}])[0].get("samples_per_s", {}).get("values")
        step(results, "scaling", scaling, hosts, slots, args.quick, repeats, long, measured)
    if "launch" in parts and len(hosts) > 1:
        step(results, "launch", launch_overhead, hosts, slots, 1 if args.quick else 3)
    if "pipe" in parts:
        step(results, "pipe", pipe, out, args.quick, long)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    from byoc.bench import plot

    try:
        plot.plot(results, out / "bench.png")
    except Exception as exc:  # noqa: BLE001 - the numbers are worth keeping without the figure
        results.setdefault("errors", {})["plot"] = repr(exc)
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(plot.table(results), flush=True)
    say(f"results: {out / 'results.json'}, figure: {out / 'bench.png'}")
    return 1 if results.get("errors") else 0


def horovod_example(hosts, slots, quick, timeout) -> float:
    """samples/s of one run of the Horovod example on `hosts`, with the controller `train` uses
    (horovodrun's default)."""
    script = [sys.executable, str(EXAMPLES / "train_synthetic.py"), *train_args(quick)]
    return samples_per_s(run(horovodrun(hosts, slots, script, None), timeout=timeout))


def throughput(hosts, slots, quick, repeats, timeout) -> list[dict]:
    """The example, Horovod vs DDP: same model, batch and data."""
    hvd, ddp = [], []
    for _ in range(repeats):
        hvd.append(horovod_example(hosts, slots, quick, timeout))
        script = [str(EXAMPLES / "train_ddp.py"), *train_args(quick)]
        ddp.append(samples_per_s(torchrun_everywhere(hosts, slots, script, timeout=timeout)))
    return [
        {"label": "Horovod", "samples_per_s": {"values": hvd, "summary": stats.summary(hvd)}},
        {"label": "DDP", "samples_per_s": {"values": ddp, "summary": stats.summary(ddp)}},
    ]


def scaling(hosts, slots, quick, repeats, timeout, all_hosts=None) -> dict:
    """Weak scaling of the Horovod example: samples/s on 1 host vs all, efficiency. The
    all-hosts runs are the throughput step's Horovod runs when it made them (the same command)."""
    one = [horovod_example(hosts[:1], slots, quick, timeout) for _ in range(repeats)]
    all_ = all_hosts or [horovod_example(hosts, slots, quick, timeout) for _ in range(repeats)]
    n = len(hosts)
    return {
        "one_host": stats.summary(one),
        "all_hosts": stats.summary(all_),
        "hosts": n,
        "efficiency": statistics.median(all_) / (n * statistics.median(one)),
    }


def launch_overhead(hosts, slots, repeats) -> dict:
    """Seconds horovodrun across the hosts takes over one bare process, for a program that does
    nothing."""
    bare, hvd = [], []
    nothing = [sys.executable, "-c", "pass"]
    for _ in range(repeats):
        t = time.monotonic()
        run(nothing, timeout=60)
        bare.append(time.monotonic() - t)
        t = time.monotonic()
        run(horovodrun(hosts, slots, nothing, None), timeout=120)
        hvd.append(time.monotonic() - t)
    return {
        "bare_s": stats.summary(bare),
        "horovodrun_s": stats.summary(hvd),
        "overhead_s": statistics.median(hvd) - statistics.median(bare),
    }


def pipe(out: Path, quick: bool, timeout: float) -> dict:
    target = out / "pipe.json"
    run(
        [
            sys.executable,
            "-m",
            "byoc.bench.pipe",
            "--record-bytes",
            "1024,1048576",
            "--framing",
            "recordio,tfrecord",
            "--megabytes",
            "32" if quick else "256",
            "--out",
            str(target),
        ],  # fmt: skip
        timeout=timeout,
    )
    return json.loads(target.read_text())


if __name__ == "__main__":
    sys.exit(main())
