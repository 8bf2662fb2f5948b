"""What several unit suites fake: /opt/ml trees as SageMaker writes them, the plan made from
them, a host's /sys, /dev and /opt as fabric and doctor read them, NVIDIA's driver version files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from byoc import fabric, plan, settings

ROOT = Path(__file__).resolve().parents[2]


def make_tree(root: Path, hosts=("algo-1", "algo-2"), current="algo-1", hps=None, channels=None):
    cfg = root / "input" / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "resourceconfig.json").write_text(
        json.dumps(
            {
                "current_host": current,
                "hosts": list(hosts),
                "network_interface_name": "eth0",
                "current_instance_type": "ml.p4d.24xlarge",
            }
        )
    )
    (cfg / "hyperparameters.json").write_text(json.dumps(hps or {}))
    (cfg / "inputdataconfig.json").write_text(json.dumps(channels or {}))
    return root


def make_plan(cfg, program, num_gpus, env=None, launcher="horovod", interface=None):
    return plan.make_plan(
        cfg,
        program,
        launcher=launcher,
        num_gpus=num_gpus,
        settings=settings.load(env or {}),
        interface=interface,
    )


# /proc/driver/nvidia/version of the proprietary and the open kernel module.
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Wed Jul 26 23:20:55 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  (dvs)\n"


class Host:
    """A container's view of its host under a tmp root: what fabric.look() and doctor read."""

    def __init__(self, root: Path):
        self.root = root
        self.ml = root / "opt/ml"
        self.env: dict[str, str] = {"SAGEMAKER_BASE_DIR": str(self.ml)}

    def _ib(self, name: str, driver: str) -> None:
        drivers = self.root / "sys/bus/pci/drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        device = self.root / "sys/class/infiniband" / name / "device"
        device.mkdir(parents=True)
        (device / "driver").symlink_to(drivers)

    def efa(self, count: int, uverbs: int | None = None) -> Host:
        """count EFA devices (rdmap<N>s0 bound to efa) and as many uverbs nodes unless told."""
        for n in range(count):
            self._ib(f"rdmap{n}s0", "efa")
        return self.uverbs(count if uverbs is None else uverbs)

    def mlx(self, name: str = "mlx5_0") -> Host:
        """An InfiniBand device of another driver: not EFA."""
        self._ib(name, "mlx5_core")
        return self

    def uverbs(self, count: int) -> Host:
        dev = self.root / "dev/infiniband"
        dev.mkdir(parents=True, exist_ok=True)
        for n in range(count):
            (dev / f"uverbs{n}").write_bytes(b"")
        return self

    def plugin(self, version: str | None = None) -> Host:
        """The plugin's library, and with a version its source record as the build writes it."""
        lib = self.root / fabric.PLUGIN
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"")
        if version is not None:
            record = self.root / "opt/byoc/sources/aws-ofi-nccl.json"
            record.parent.mkdir(parents=True, exist_ok=True)
            url = "https://github.com/aws/aws-ofi-nccl/x.tar.gz"
            record.write_text(json.dumps({"name": "aws-ofi-nccl", "version": version, "url": url,
                                          "sha256": "ab" * 32, "kind": "tarball", "patches": [],
                                          "not_built": None}))  # fmt: skip
        return self

    def not_built(self, reason: str) -> Host:
        note = self.root / fabric.PLUGIN_NOT_BUILT
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(reason + "\n")
        return self

    def interfaces(self, *names: str, default_route: str | None = None) -> Host:
        net = self.root / "sys/class/net"
        for name in ("lo", *names):
            (net / name).mkdir(parents=True, exist_ok=True)
        route = self.root / "proc/net/route"
        route.parent.mkdir(parents=True, exist_ok=True)
        lines = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask"]
        if default_route:
            lines.append(f"{default_route}\t00000000\t0100A8C0\t0003\t0\t0\t0\t00000000")
        route.write_text("\n".join(lines) + "\n")
        return self

    def job(self, **resource) -> Host:
        """resourceconfig.json with SageMaker's fields, overridden by resource."""
        data = {
            "current_host": "algo-1",
            "hosts": ["algo-1", "algo-2"],
            "current_instance_type": "ml.p4d.24xlarge",
            "network_interface_name": "eth0",
            **resource,
        }
        return self.resource_text(json.dumps({k: v for k, v in data.items() if v is not None}))

    def resource_text(self, text: str | bytes) -> Host:
        path = self.ml / "input/config/resourceconfig.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return self

    def look(self) -> fabric.Facts:
        return fabric.look(self.env, self.root)

    def decide(self) -> fabric.Decision:
        return fabric.decide(self.look(), self.env, fabric.mode(self.env))

    def apply(self) -> list[str]:
        return fabric.apply(self.env, self.root)


def script(bin_dir: Path, name: str, text: str) -> None:
    """A fake program: text as bin_dir/name, executable (tool_env puts bin_dir first on PATH)."""
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)


def tool_env(tmp_path: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    """The environment make and the shell tools run in under test: the fakes in bin_dir first on
    PATH, every state directory in tmp_path, nothing of a calling make."""
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CLUSTER_STATE": str(tmp_path / "cluster"),
        "SLURM_STATE": str(tmp_path / "slurm"),
        "DOCKERD_PIDFILE": str(tmp_path / "dockerd.pid"),
        **extra,
    }
    for name in ("MAKEFLAGS", "MAKELEVEL"):
        env.pop(name, None)
    return env


def run_train(
    ml: Path, timeout: float = 60, base: dict[str, str] | None = None, **env_more: str
) -> subprocess.CompletedProcess:
    """`train` on the /opt/ml tree ml (this checkout's byoc, this python), in this process's
    environment or only base, env_more added."""
    env = dict(os.environ if base is None else base)
    env |= {"PYTHONPATH": str(ROOT / "entrypoint"), "SAGEMAKER_BASE_DIR": str(ml)}
    env.pop("SM_MODEL_DIR", None)
    env |= env_more
    return subprocess.run(
        [sys.executable, "-m", "byoc.train"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def with_program(ml: Path, body: str, hps=None) -> Path:
    """A one-host /opt/ml tree at ml whose code is train.py with body."""
    code = ml / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text(body)
    all_hps = {"sagemaker_program": json.dumps("train.py"), **(hps or {})}
    return make_tree(ml, hosts=["algo-1"], hps=all_hps)
