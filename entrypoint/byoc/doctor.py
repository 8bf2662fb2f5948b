"""`doctor`: is this container set up to train fast, and if not, what to change.

    docker run --rm IMAGE doctor [--json]      (also `byoc doctor` inside a running container)

Reads the same facts byoc-init's decisions read (byoc.fabric, byoc.cuda_compat, byoc.settings)
and reports each check as ok, info, warn or FAIL with its fix. Exit status: 0 when nothing would
make training fail or crawl, 1 when something would (a FAIL), 2 for bad arguments. `train`
prints summary() (the local checks, one line) before it starts.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from byoc import config, cuda_compat, fabric, instances, plan, settings
from byoc import constants as C

OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"
# The oldest Linux driver each CUDA major runs on without forward compatibility (CUDA's release
# notes, "CUDA Toolkit and Corresponding Driver Versions").
MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}
NOFILE_LOW = 4096  # DataLoader workers share tensors through file descriptors
TORCH_NCCL = "opt/venv/nccl/lib/libnccl.so.2"  # docker/build/nccl-home.sh
# The plugin's source record (docker/build/source_record.py): its version.
PLUGIN_SOURCE = "opt/byoc/sources/aws-ofi-nccl.json"
SSH_PROBE_TIMEOUT = 3.0
SHM_FIX = (
    "docker run --shm-size=8g (compose: shm_size; Kubernetes: an emptyDir with medium: Memory "
    "at /dev/shm); SageMaker sizes it itself"
)


@dataclass
class Finding:
    check: str
    status: str
    detail: str
    fix: str = ""


def _resolves(host: str) -> bool:
    try:
        return bool(socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return False


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=SSH_PROBE_TIMEOUT):
            return True
    except OSError:
        return False


def _nccl_version(path: Path) -> str | None:
    try:
        lib = ctypes.CDLL(str(path))
        out = ctypes.c_int()
        if lib.ncclGetVersion(ctypes.byref(out)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    code = out.value  # NCCL >= 2.9: major*10000 + minor*100 + patch
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def _load_error(path: Path) -> str | None:
    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        return str(exc)
    return None


def _horovod_nccl() -> Path | None:
    """The libnccl Horovod's torch extension resolves to (ldd), None if it links none."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("horovod")
    except (ImportError, ValueError):
        return None
    if not spec or not spec.submodule_search_locations:
        return None
    libs = sorted(Path(spec.submodule_search_locations[0], "torch").glob("mpi_lib_v2*.so"))
    if not libs:
        return None
    try:
        out = subprocess.run(
            ["ldd", str(libs[0])], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name.startswith("libnccl.so") and rest.startswith("/"):
            return Path(rest.split(" (")[0])
    return None


def _soft_limit(which: int) -> int:
    return resource.getrlimit(which)[0]


@dataclass
class Probe:
    """Everything doctor touches outside pure logic, replaceable in tests."""

    env: dict[str, str]
    root: Path = Path("/")
    resolve: Callable[[str], bool] = _resolves
    connect: Callable[[str, int], bool] = _connects
    nccl_version: Callable[[Path], str | None] = _nccl_version
    load: Callable[[Path], str | None] = _load_error
    linked_nccl: Callable[[], Path | None] = _horovod_nccl
    limits: Callable[[int], int] = _soft_limit


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def check_settings(probe: Probe) -> list[Finding]:
    try:
        settings.load(probe.env)
        fabric.mode(probe.env)
        settings.choice(probe.env, C.CUDA_COMPAT_ENV, C.CUDA_COMPAT_MODES, "auto")
    except (settings.SettingsError, fabric.FabricError) as exc:
        return [Finding("settings", FAIL, str(exc), "fix or unset that variable")]
    return [Finding("settings", OK, "every BYOC_* setting is valid")]


def check_gpus(probe: Probe, facts: fabric.Facts) -> list[Finding]:
    seen = plan.count_gpus(probe.root / "dev", probe.root / "proc/driver/nvidia/gpus")
    itype, kind = facts.instance_type, instances.lookup(facts.instance_type)
    if probe.env.get("BYOC_FLAVOR") == "cpu":
        return [Finding("gpus", INFO, f"cpu flavor; {seen} GPU(s) visible, not used by Horovod")]
    fix = "docker run --gpus all (with the NVIDIA container toolkit on the host)"
    if kind and seen < kind.gpus:
        detail = f"{itype} has {kind.gpus} GPUs, this container sees {seen}"
        return [Finding("gpus", FAIL, detail, fix)]
    if seen == 0:
        return [Finding("gpus", WARN, "no GPU visible: training runs on the CPU", fix)]
    expect = f" ({itype} has {kind.gpus})" if kind else ""
    return [Finding("gpus", OK, f"{seen} GPU(s) visible{expect}")]


def check_driver(probe: Probe) -> list[Finding]:
    host = cuda_compat.host_driver(probe.root / "proc/driver/nvidia/version")
    cuda = probe.env.get("CUDA_VERSION", "")
    if host is None:
        return [Finding("driver", INFO, "no NVIDIA driver visible (no GPU in this container)")]
    major = _key(cuda)[0] if _key(cuda) else None
    need = MIN_DRIVER.get(major) if major else None
    compat_dir = probe.root / C.CUDA_COMPAT_DIR.lstrip("/")
    compat = cuda_compat.compat_driver(compat_dir)
    compat_on = C.CUDA_COMPAT_DIR in probe.env.get("LD_LIBRARY_PATH", "").split(":")
    if need is None or _key(host) >= _key(need):
        detail = f"host driver {host}" + (f", CUDA {cuda} needs >= {need}" if need else "")
        return [Finding("driver", OK, detail)]
    if compat_on and compat:
        return [
            Finding(
                "driver",
                OK,
                f"host driver {host} is older than CUDA {cuda} needs ({need}); forward "
                f"compatibility is on (driver {compat} from {C.CUDA_COMPAT_DIR}; datacenter "
                "GPUs only)",
            )
        ]
    fix = f"upgrade the host driver to >= {need}" + (
        f", or unset {C.CUDA_COMPAT_ENV}=off" if compat else ""
    )
    detail = f"host driver {host} is too old for CUDA {cuda} (needs >= {need})"
    return [Finding("driver", FAIL, detail, fix)]


def plugin_version(record: Path) -> str:
    try:
        return str(json.loads(record.read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown version"


def check_nccl(probe: Probe, facts: fabric.Facts, decision: fabric.Decision) -> list[Finding]:
    torch_nccl = probe.root / TORCH_NCCL
    if not torch_nccl.exists():
        return [Finding("nccl", INFO, "no NCCL in this image (cpu flavor): Gloo and MPI only")]
    findings = []
    torch_version = probe.nccl_version(torch_nccl)
    horovod = probe.linked_nccl()
    if horovod is None:
        detail = f"torch's NCCL {torch_version}; Horovod links no NCCL"
        findings.append(Finding("nccl", INFO, detail))
    elif os.path.realpath(horovod) != os.path.realpath(torch_nccl):
        other = probe.nccl_version(horovod)
        findings.append(
            Finding(
                "nccl",
                FAIL,
                f"two NCCLs: torch {torch_version} ({torch_nccl}), Horovod {other} ({horovod})",
                "rebuild the image: Horovod must link torch's NCCL (docker/build/nccl-home.sh)",
            )
        )
    else:
        detail = f"NCCL {torch_version}, one library for torch and Horovod"
        findings.append(Finding("nccl", OK, detail))
    plugin = probe.root / fabric.PLUGIN
    if plugin.is_file():
        version = plugin_version(probe.root / PLUGIN_SOURCE)
        error = probe.load(plugin)
        if error:
            status = FAIL if decision.transport == "efa" else WARN
            detail = f"aws-ofi-nccl {version} does not load: {error}"
            findings.append(Finding("plugin", status, detail, "rebuild the image"))
        else:
            findings.append(Finding("plugin", OK, f"aws-ofi-nccl {version} loads ({plugin})"))
    else:
        findings.append(Finding("plugin", INFO, f"no aws-ofi-nccl: {facts.plugin_missing}"))
    return findings


def check_efa(probe: Probe, facts: fabric.Facts, decision: fabric.Decision) -> list[Finding]:
    kind = instances.lookup(facts.instance_type)
    devices, itype = len(facts.efa_devices), facts.instance_type
    device_fix = (
        "SageMaker passes EFA devices itself; docker run: --device=/dev/infiniband/uverbs0 "
        "(one per device) and --ulimit memlock=-1"
    )
    try:
        efa_off = fabric.mode(probe.env) == "off"
    except fabric.FabricError:
        efa_off = False  # a bad BYOC_EFA is check_settings' FAIL; decided as auto, like _decision
    out = []
    forced = fabric.efa_forced(probe.env)
    if forced and decision.transport != "efa":
        out.append(
            Finding(
                "efa",
                FAIL,
                f"{' '.join(forced)} without a usable EFA device: NCCL fails "
                "('NET/OFI Only EFA provider is supported') or hangs",
                "unset them; byoc-init names the plugin itself where EFA is",
            )
        )
    if decision.transport == "efa":
        rdma = {**decision.kept, **decision.set}.get("FI_EFA_USE_DEVICE_RDMA") == "1"
        detail = f"EFA in use: {devices} device(s), plugin on, RDMA "
        detail += "on" if rdma else "as libfabric finds it"
        if kind and devices < kind.efa:
            out.append(Finding("efa", WARN, f"{detail}; {itype} has {kind.efa}", device_fix))
        else:
            out.append(Finding("efa", OK, detail))
    elif facts.efa_devices and not efa_off:
        fix = device_fix if not facts.uverbs else "build the image with EFA=on (docs/gpu-efa.md)"
        out.append(Finding("efa", FAIL, f"EFA not used: {decision.reason}", fix))
    elif kind and kind.efa and not efa_off:
        detail = f"{itype} has {kind.efa} EFA device(s), this container sees none"
        out.append(Finding("efa", FAIL, detail, device_fix))
    elif not out:
        out.append(Finding("efa", INFO, f"sockets: {decision.reason}"))
    return out


def check_shm(probe: Probe) -> list[Finding]:
    try:
        st = os.statvfs(probe.root / "dev/shm")
    except OSError:
        return [Finding("shm", WARN, "/dev/shm is missing", SHM_FIX)]
    size = st.f_blocks * st.f_frsize
    gib = size / (1 << 30)
    text = f"/dev/shm is {gib:.1f} GiB" if gib >= 1 else f"/dev/shm is {size >> 20} MiB"
    if size < C.SHM_MIN_BYTES:
        detail = f"{text}: NCCL and DataLoader workers hang or die ('Bus error')"
        return [Finding("shm", FAIL, detail, SHM_FIX)]
    return [Finding("shm", OK, text)]


def _limit(value: int, unit: str = "") -> str:
    if value == resource.RLIM_INFINITY:
        return "unlimited"
    return (
        f"{value >> 20} MiB"
        if unit == "bytes" and value >= 1 << 20
        else f"{value}{unit and ' ' + unit}"
    )


def check_limits(probe: Probe, decision: fabric.Decision) -> list[Finding]:
    memlock = probe.limits(resource.RLIMIT_MEMLOCK)
    nofile = probe.limits(resource.RLIMIT_NOFILE)
    out = []
    if memlock != resource.RLIM_INFINITY and decision.transport == "efa":
        out.append(
            Finding(
                "memlock",
                FAIL,
                f"memlock {_limit(memlock, 'bytes')}: EFA cannot pin the memory NCCL registers",
                "docker run --ulimit memlock=-1 (Kubernetes: the node's container runtime "
                "must allow it, as the EKS EFA AMIs do)",
            )
        )
    else:
        out.append(Finding("memlock", OK, f"memlock {_limit(memlock, 'bytes')}"))
    if nofile != resource.RLIM_INFINITY and nofile < NOFILE_LOW:
        out.append(
            Finding(
                "nofile",
                WARN,
                f"open files limited to {nofile}: DataLoader workers fail with 'Too many open "
                "files'",
                "docker run --ulimit nofile=65536:65536",
            )
        )
    else:
        out.append(Finding("nofile", OK, f"open files {_limit(nofile)}"))
    return out


def check_job(probe: Probe) -> list[Finding]:
    """DNS of every host of the job, and SSH reachability of the others (network: run last)."""
    job = fabric.resource_config(probe.env)
    hosts = job.get("hosts")
    if not isinstance(hosts, list) or not hosts:
        return [Finding("hosts", INFO, "not in a training job (no resourceconfig.json)")]
    hosts = [h for h in hosts if isinstance(h, str) and config.HOST_NAME.fullmatch(h)]
    missing = [h for h in hosts if not probe.resolve(h)]
    if missing:
        return [
            Finding(
                "hosts",
                FAIL,
                f"no address for {', '.join(missing)}",
                "the job's hosts must resolve (SageMaker: wait for DNS; Docker: one network "
                "with the host names as aliases)",
            )
        ]
    out = [Finding("hosts", OK, f"all {len(hosts)} host(s) resolve")]
    others = [h for h in hosts if h != job.get("current_host")]
    if others:
        try:
            port = settings.load(probe.env).ssh_port
        except settings.SettingsError:
            return out
        down = [h for h in others if not probe.connect(h, port)]
        if down:
            out.append(
                Finding(
                    "ssh",
                    FAIL,
                    f"port {port} unreachable on {', '.join(down)}",
                    "is the image running there, and the security group open between hosts?",
                )
            )
        else:
            out.append(Finding("ssh", OK, f"port {port} open on {len(others)} other host(s)"))
    return out


def _decision(probe: Probe) -> tuple[fabric.Facts, fabric.Decision]:
    """The decision byoc-init made (the variables it set removed first, so the user's stand out)."""
    env = dict(probe.env)
    for name in env.get(fabric.SET_ENV, "").split(","):
        env.pop(name, None)
    facts = fabric.look(env, probe.root)
    try:
        mode = fabric.mode(env)
    except fabric.FabricError:
        mode = "auto"
    try:
        return facts, fabric.decide(facts, env, mode)
    except fabric.FabricError as exc:
        return facts, fabric.Decision("socket", reason=str(exc))


def run(probe: Probe, network: bool = True) -> tuple[list[Finding], fabric.Decision]:
    facts, decision = _decision(probe)
    findings = [
        *check_settings(probe),
        *check_gpus(probe, facts),
        *check_driver(probe),
        *check_nccl(probe, facts, decision),
        *check_efa(probe, facts, decision),
        *check_shm(probe),
        *check_limits(probe, decision),
    ]
    if network:
        findings += check_job(probe)
    return findings, decision


def render(findings: list[Finding], decision: fabric.Decision) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.status:<5} {f.check:<{width}}  {f.detail}")
        if f.fix and f.status in (WARN, FAIL):
            lines.append(f"{'':<5} {'':<{width}}  fix: {f.fix}")
    fails = sum(f.status == FAIL for f in findings)
    lines.append(f"fabric: {decision.transport} ({decision.reason})")
    lines.append(
        f"doctor: {fails} problem(s) that make training fail or crawl" if fails else "doctor: ready"
    )
    return "\n".join(lines)


def summary(env: dict[str, str], root: Path = Path("/")) -> str:
    """One line for the start of `train`: the local checks' problems, or that there are none."""
    findings, decision = run(Probe(env=env, root=root), network=False)
    bad = [f for f in findings if f.status in (FAIL, WARN)]
    if not bad:
        return f"doctor: ready ({len(findings)} checks ok; NCCL over {decision.transport})"
    parts = [f"{f.check}: {f.detail}" + (f" (fix: {f.fix})" if f.fix else "") for f in bad]
    return f"doctor: {len(bad)} problem(s): {'; '.join(parts)} -- `byoc doctor` for all checks"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="doctor", description="Check this container for what makes training fail or crawl."
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--no-network", action="store_true", help="skip the DNS and SSH checks of the job's hosts"
    )
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    findings, decision = run(Probe(env=dict(os.environ)), network=not args.no_network)
    failed = any(f.status == FAIL for f in findings)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not failed,
                    "checks": [asdict(f) for f in findings],
                    "fabric": asdict(decision),
                },
                indent=2,
            )
        )
    else:
        print(render(findings, decision))
    return 1 if failed else 0


def byoc_command(argv: list[str] | None = None) -> int:
    """`byoc doctor [--json]`: the same, inside a running container."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "doctor":
        print("usage: byoc doctor [--json] [--no-network]", file=sys.stderr)
        return 2
    return main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
