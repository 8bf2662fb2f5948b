"""byoc.doctor: every check's ok, info, warn and FAIL on fake trees, with an injected Probe."""

from __future__ import annotations

import json
import os
import resource
import types
from pathlib import Path

import pytest
from byoc import doctor

from tests.unit.fakes import OPEN, PROPRIETARY, Host

OFI_SOURCE = "1.21.1"  # the plugin's version in its source record
UNLIMITED = resource.RLIM_INFINITY


def refuse(*args):
    raise AssertionError(f"no network here: called with {args}")


def limits(memlock=UNLIMITED, nofile=1048576):
    table = {resource.RLIMIT_MEMLOCK: memlock, resource.RLIMIT_NOFILE: nofile}
    return lambda which: table[which]


class Doctor(Host):
    """A fake container plus the Probe doctor reads it through; nothing real is loaded or dialed."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.calls: list[tuple] = []
        self.probe_args: dict = {
            "resolve": refuse,
            "connect": refuse,
            "nccl_version": self._version,
            "load": self._load,
            "linked_nccl": lambda: self.torch_nccl,
            "limits": limits(),
        }
        self.versions: dict[Path, str] = {}
        self.load_error: str | None = None

    @property
    def torch_nccl(self) -> Path:
        return self.root / doctor.TORCH_NCCL

    def _version(self, path: Path) -> str | None:
        self.calls.append(("version", path))
        return self.versions.get(path)

    def _load(self, path: Path) -> str | None:
        self.calls.append(("load", path))
        return self.load_error

    def probe(self, **overrides) -> doctor.Probe:
        return doctor.Probe(env=self.env, root=self.root, **{**self.probe_args, **overrides})

    def gpus(self, count: int) -> Doctor:
        dev = self.root / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        for n in range(count):
            (dev / f"nvidia{n}").write_bytes(b"")
        for other in ("nvidiactl", "nvidia-uvm", "nvidia-caps"):
            (dev / other).write_bytes(b"")  # not GPUs
        return self

    def driver(self, version: str, template: str = PROPRIETARY) -> Doctor:
        path = self.root / "proc/driver/nvidia/version"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(v=version))
        return self

    def compat(self, version: str = "580.95.05") -> Doctor:
        compat = self.root / "usr/local/cuda/compat"
        compat.mkdir(parents=True)
        (compat / f"libcuda.so.{version}").write_bytes(b"")
        (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
        return self

    def nccl(self, version: str = "2.27.7") -> Doctor:
        self.torch_nccl.parent.mkdir(parents=True, exist_ok=True)
        self.torch_nccl.write_bytes(b"")
        self.versions[self.torch_nccl] = version
        return self

    def efa_host(self, instance_type: str = "ml.p4d.24xlarge", devices: int = 4) -> Doctor:
        """EFA usable: devices, uverbs, the plugin, and a job on that instance type."""
        self.efa(devices).plugin(OFI_SOURCE).interfaces("eth0")
        self.job(current_instance_type=instance_type)
        return self


@pytest.fixture
def host(tmp_path) -> Doctor:
    return Doctor(tmp_path)


def _facts(probe: doctor.Probe) -> doctor.fabric.Facts:
    """What the container shows, as doctor.run reads it once for every check."""
    return doctor.fabric.look(probe.env, probe.root)


def _gpus(probe: doctor.Probe) -> list[doctor.Finding]:
    return doctor.check_gpus(probe, _facts(probe))


def by_check(findings: list[doctor.Finding]) -> dict[str, doctor.Finding]:
    out = {f.check: f for f in findings}
    assert len(out) == len(findings), findings  # one finding per check name
    return out


def run(host: Doctor, network: bool = False, **overrides) -> dict[str, doctor.Finding]:
    findings, _ = doctor.run(host.probe(**overrides), network=network)
    return by_check(findings)


# --- settings ---------------------------------------------------------------------------------


def test_settings_ok(host):
    assert doctor.check_settings(host.probe()) == [
        doctor.Finding("settings", doctor.OK, "every BYOC_* setting is valid")
    ]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("BYOC_SSH_PORT", "70000", "BYOC_SSH_PORT='70000': expected a whole number from 1 to"),
        ("BYOC_SSH_PORT", "ssh", "BYOC_SSH_PORT='ssh'"),
        ("BYOC_EFA", "maybe", "BYOC_EFA='maybe': expected one of auto, on, off"),
        ("BYOC_CUDA_COMPAT", "yes", "BYOC_CUDA_COMPAT='yes': expected one of auto, on, off"),
    ],
    ids=["ssh-port-range", "ssh-port-text", "efa", "cuda-compat"],
)
def test_a_bad_setting_fails_naming_it(host, name, value, expected):
    host.env[name] = value
    [finding] = doctor.check_settings(host.probe())
    assert finding.status == doctor.FAIL
    assert finding.detail.startswith(expected)
    assert finding.fix == "fix or unset that variable"


def test_a_bad_byoc_efa_is_reported_not_raised_on_an_efa_host(host):
    """The cpu flavor's byoc-init does not read BYOC_EFA, so doctor is where it surfaces."""
    host.efa(4, uverbs=0).job(current_instance_type="ml.p4d.24xlarge")
    host.env["BYOC_EFA"] = "bogus"
    checks = run(host)
    assert checks["settings"].status == doctor.FAIL
    assert "BYOC_EFA='bogus'" in checks["settings"].detail
    assert checks["efa"].status == doctor.FAIL  # decided as auto: EFA there, not usable


def test_a_bad_byoc_efa_on_an_efa_instance_type_without_devices_does_not_crash(host):
    host.job(current_instance_type="ml.p4d.24xlarge")
    host.env["BYOC_EFA"] = "bogus"
    checks = run(host)
    assert checks["settings"].status == doctor.FAIL
    assert checks["efa"].detail == "p4d.24xlarge has 4 EFA device(s), this container sees none"


# --- gpus -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "instance_type", "status", "detail"),
    [
        (4, "ml.p4d.24xlarge", doctor.FAIL, "p4d.24xlarge has 8 GPUs, this container sees 4"),
        (0, "ml.g5.12xlarge", doctor.FAIL, "g5.12xlarge has 4 GPUs, this container sees 0"),
        (8, "ml.p4d.24xlarge", doctor.OK, "8 GPU(s) visible (p4d.24xlarge has 8)"),
        (2, None, doctor.OK, "2 GPU(s) visible"),
        (0, None, doctor.WARN, "no GPU visible: training runs on the CPU"),
        (0, "ml.c5.xlarge", doctor.WARN, "no GPU visible: training runs on the CPU"),
    ],
    ids=["too-few", "none-of-4", "all", "no-type", "none", "unknown-type"],
)
def test_gpus(host, seen, instance_type, status, detail):
    host.gpus(seen)
    if instance_type:
        host.job(current_instance_type=instance_type)
    [finding] = _gpus(host.probe())
    assert (finding.status, finding.detail) == (status, detail)
    if status != doctor.OK:
        assert "--gpus all" in finding.fix


def test_the_drivers_gpu_list_wins_over_device_nodes(host):
    host.gpus(8)
    for n in range(2):
        (host.root / f"proc/driver/nvidia/gpus/0000:{n:02x}:00.0").mkdir(parents=True)
    [finding] = _gpus(host.probe())
    assert finding.detail == "2 GPU(s) visible"


def test_the_cpu_flavor_only_informs(host):
    host.job(current_instance_type="ml.p4d.24xlarge")
    host.env["BYOC_FLAVOR"] = "cpu"
    [finding] = _gpus(host.probe())
    assert finding.status == doctor.INFO
    assert finding.detail == "cpu flavor; 0 GPU(s) visible, not used by Horovod"


# --- driver -----------------------------------------------------------------------------------


def test_no_driver_visible_informs(host):
    host.env["CUDA_VERSION"] = "13.0.2"
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == doctor.INFO
    assert "no NVIDIA driver visible" in finding.detail


@pytest.mark.parametrize("template", [PROPRIETARY, OPEN], ids=["proprietary", "open"])
def test_a_driver_too_old_for_cuda_fails(host, template):
    host.driver("575.57.08", template).env["CUDA_VERSION"] = "13.0.2"
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == doctor.FAIL
    assert finding.detail == "host driver 575.57.08 is too old for CUDA 13.0.2 (needs >= 580.65.06)"
    assert finding.fix == "upgrade the host driver to >= 580.65.06"


def test_a_driver_too_old_with_compat_switched_off_names_the_setting(host):
    host.driver("575.57.08").compat()
    host.env.update({"CUDA_VERSION": "13.0.2", "BYOC_CUDA_COMPAT": "off"})
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == doctor.FAIL
    assert "580.65.06" in finding.fix and "BYOC_CUDA_COMPAT" in finding.fix


def test_forward_compatibility_on_makes_an_old_driver_ok(host):
    host.driver("575.57.08").compat()
    host.env.update(
        {"CUDA_VERSION": "13.0.2", "LD_LIBRARY_PATH": "/usr/local/cuda/compat:/usr/local/lib"}
    )
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == doctor.OK
    assert "forward compatibility is on (driver 580.95.05 from /usr/local/cuda/compat" in (
        finding.detail
    )


def test_compat_on_the_path_without_the_library_does_not_count(host):
    host.driver("575.57.08")
    host.env.update({"CUDA_VERSION": "13.0.2", "LD_LIBRARY_PATH": "/usr/local/cuda/compat"})
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == doctor.FAIL


@pytest.mark.parametrize(
    ("driver", "cuda", "status", "detail"),
    [
        ("580.95.05", "13.0.2", doctor.OK, "host driver 580.95.05, CUDA 13.0.2 needs >= 580.65.06"),
        ("580.65.06", "13.0.0", doctor.OK, "host driver 580.65.06, CUDA 13.0.0 needs >= 580.65.06"),
        (
            "535.104.12",
            "12.8.1",
            doctor.OK,
            "host driver 535.104.12, CUDA 12.8.1 needs >= 525.60.13",
        ),
        ("470.82.01", "12.4.1", doctor.FAIL, "host driver 470.82.01 is too old for CUDA 12.4.1"),
        ("470.82.01", "", doctor.OK, "host driver 470.82.01"),
        ("470.82.01", "11.8.0", doctor.OK, "host driver 470.82.01"),
    ],
    ids=["580.95", "580.65-exact", "cuda12", "cuda12-old", "no-cuda", "cuda11-unknown"],
)
def test_driver_versions(host, driver, cuda, status, detail):
    host.driver(driver).env["CUDA_VERSION"] = cuda
    [finding] = doctor.check_driver(host.probe())
    assert finding.status == status
    assert finding.detail.startswith(detail)


# --- nccl and the plugin ----------------------------------------------------------------------


def _nccl(host: Doctor, transport: str = "socket") -> dict[str, doctor.Finding]:
    return by_check(
        doctor.check_nccl(probe := host.probe(), _facts(probe), doctor.fabric.Decision(transport))
    )


def test_no_nccl_is_the_cpu_flavor(host):
    host.plugin(OFI_SOURCE)
    assert _nccl(host) == {
        "nccl": doctor.Finding(
            "nccl", doctor.INFO, "no NCCL in this image (cpu flavor): Gloo and MPI only"
        )
    }
    assert host.calls == []


def test_one_nccl_for_torch_and_horovod(host):
    host.nccl("2.27.7")
    checks = _nccl(host)
    assert checks["nccl"].status == doctor.OK
    assert checks["nccl"].detail == "NCCL 2.27.7, one library for torch and Horovod"
    assert host.calls == [("version", host.torch_nccl)]


def test_horovod_linking_torchs_nccl_through_a_symlink_is_one_nccl(host):
    host.nccl()
    link = host.root / "usr/lib/libnccl.so.2"
    link.parent.mkdir(parents=True)
    link.symlink_to(host.torch_nccl)
    host.probe_args["linked_nccl"] = lambda: link
    assert _nccl(host)["nccl"].status == doctor.OK


def test_two_nccls_fail(host):
    host.nccl("2.27.7")
    other = host.root / "usr/lib/x86_64-linux-gnu/libnccl.so.2"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    host.versions[other] = "2.21.5"
    host.probe_args["linked_nccl"] = lambda: other
    finding = _nccl(host)["nccl"]
    assert finding.status == doctor.FAIL
    assert finding.detail == (
        f"two NCCLs: torch 2.27.7 ({host.torch_nccl}), Horovod 2.21.5 ({other})"
    )
    assert "nccl-home.sh" in finding.fix


def test_horovod_without_nccl_informs(host):
    host.nccl("2.27.7")
    host.probe_args["linked_nccl"] = lambda: None
    finding = _nccl(host)["nccl"]
    assert (finding.status, finding.detail) == (
        doctor.INFO,
        "torch's NCCL 2.27.7; Horovod links no NCCL",
    )


def test_the_plugin_loads(host):
    host.nccl().plugin(OFI_SOURCE)
    finding = _nccl(host, "efa")["plugin"]
    assert finding.status == doctor.OK
    assert finding.detail == f"aws-ofi-nccl 1.21.1 loads ({host.root / doctor.fabric.PLUGIN})"
    assert ("load", host.root / doctor.fabric.PLUGIN) in host.calls


def test_a_plugin_without_its_source_note_has_an_unknown_version(host):
    host.nccl().plugin()
    assert _nccl(host)["plugin"].detail.startswith("aws-ofi-nccl unknown version loads")


@pytest.mark.parametrize(
    ("transport", "status"), [("efa", doctor.FAIL), ("socket", doctor.WARN)], ids=["efa", "socket"]
)
def test_a_plugin_that_does_not_load(host, transport, status):
    host.nccl().plugin(OFI_SOURCE)
    host.load_error = "libfabric.so.1: cannot open shared object file"
    finding = _nccl(host, transport)["plugin"]
    assert finding.status == status
    assert finding.detail == (
        "aws-ofi-nccl 1.21.1 does not load: libfabric.so.1: cannot open shared object file"
    )
    assert finding.fix == "rebuild the image"


def test_no_plugin_informs_with_the_not_built_reason(host):
    host.nccl().not_built("aws-ofi-nccl not built: EFA=off")
    finding = _nccl(host)["plugin"]
    assert (finding.status, finding.detail) == (
        doctor.INFO,
        "no aws-ofi-nccl: aws-ofi-nccl not built: EFA=off",
    )
    assert not any(call[0] == "load" for call in host.calls)


# --- efa --------------------------------------------------------------------------------------

DEVICE_FIX = "--device=/dev/infiniband/uverbs0"


def _efa(host: Doctor) -> list[doctor.Finding]:
    findings, _ = doctor.run(host.probe(), network=False)
    return [f for f in findings if f.check == "efa"]


@pytest.mark.parametrize(
    ("instance_type", "detail"),
    [
        ("ml.p4d.24xlarge", "EFA in use: 4 device(s), plugin on, RDMA on"),
        ("ml.g5.48xlarge", "EFA in use: 1 device(s), plugin on, RDMA as libfabric finds it"),
    ],
    ids=["rdma", "no-rdma"],
)
def test_efa_in_use(host, instance_type, detail):
    host.efa_host(instance_type, devices=4 if "p4d" in instance_type else 1)
    assert _efa(host) == [doctor.Finding("efa", doctor.OK, detail)]


def test_fewer_efa_devices_than_the_type_warns(host):
    host.efa_host("ml.p5.48xlarge", devices=4)
    [finding] = _efa(host)
    assert finding.status == doctor.WARN
    assert finding.detail.endswith("; p5.48xlarge has 32")
    assert DEVICE_FIX in finding.fix


def test_an_efa_type_without_devices_fails(host):
    host.plugin(OFI_SOURCE).job(current_instance_type="ml.p4d.24xlarge")
    [finding] = _efa(host)
    assert finding.status == doctor.FAIL
    assert finding.detail == "p4d.24xlarge has 4 EFA device(s), this container sees none"
    assert DEVICE_FIX in finding.fix and "memlock=-1" in finding.fix


def test_efa_devices_without_uverbs_fail(host):
    host.efa(4, uverbs=0).plugin(OFI_SOURCE).job()
    [finding] = _efa(host)
    assert finding.status == doctor.FAIL
    assert finding.detail.startswith("EFA not used: 4 EFA device(s) on the host but no /dev/")
    assert DEVICE_FIX in finding.fix


def test_efa_devices_without_the_plugin_fail_with_the_build_fix(host):
    host.efa(4).not_built("aws-ofi-nccl not built: EFA=off").job()
    [finding] = _efa(host)
    assert finding.status == doctor.FAIL
    assert "aws-ofi-nccl not built: EFA=off" in finding.detail
    assert finding.fix == "build the image with EFA=on (docs/gpu-efa.md)"


def test_byoc_efa_off_on_an_efa_host_only_informs(host):
    host.efa_host()
    host.env["BYOC_EFA"] = "off"
    [finding] = _efa(host)
    assert (finding.status, finding.detail) == (
        doctor.INFO,
        "sockets: BYOC_EFA=off; NCCL uses its socket transport",
    )


def test_byoc_efa_on_without_efa_fails(host):
    host.efa(2, uverbs=0).plugin().job()
    host.env["BYOC_EFA"] = "on"
    [finding] = _efa(host)
    assert finding.status == doctor.FAIL
    assert "BYOC_EFA=on but EFA cannot be used" in finding.detail


def test_no_efa_anywhere_informs(host):
    host.job(current_instance_type="ml.g5.2xlarge")
    [finding] = _efa(host)
    assert (finding.status, finding.detail) == (
        doctor.INFO,
        "sockets: no EFA device in this container; NCCL uses its socket transport",
    )


@pytest.mark.parametrize(
    "user",
    [{"NCCL_NET_PLUGIN": "ofi"}, {"FI_PROVIDER": "efa"}],
    ids=["plugin", "provider"],
)
def test_forcing_efa_without_efa_fails(host, user):
    host.job(current_instance_type="ml.g5.2xlarge")
    host.env.update(user)
    [finding] = _efa(host)
    assert finding.status == doctor.FAIL
    assert finding.detail.startswith(f"{next(iter(user))}=")
    assert "without a usable EFA device" in finding.detail
    assert finding.fix.startswith("unset them")


ON_EFA = {
    "NCCL_NET_PLUGIN": "ofi",
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "RDMAV_FORK_SAFE": "1",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "NCCL_SOCKET_IFNAME": "eth0",
}


def test_what_byoc_init_set_is_not_the_users(host):
    host.efa_host()
    host.env.update(ON_EFA)
    host.env["BYOC_FABRIC_SET"] = ",".join(ON_EFA)
    _, decision = doctor.run(host.probe(), network=False)
    assert (decision.set, decision.kept) == (ON_EFA, {})


def test_what_byoc_init_did_not_set_is_the_users(host):
    host.efa_host()
    host.env.update(ON_EFA)
    host.env["BYOC_FABRIC_SET"] = "FI_EFA_FORK_SAFE,RDMAV_FORK_SAFE,NCCL_SOCKET_IFNAME"
    _, decision = doctor.run(host.probe(), network=False)
    assert decision.kept == {
        "NCCL_NET_PLUGIN": "ofi",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
    }
    assert list(decision.set) == ["FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE", "NCCL_SOCKET_IFNAME"]


def test_doctor_agrees_with_byoc_init(host):
    """apply()'s environment, read back by doctor: the same decision, nothing the user's."""
    host.efa_host()
    lines = doctor.fabric.apply(host.env, host.root)
    _, decision = doctor.run(host.probe(), network=False)
    assert decision.kept == {}
    assert decision.lines() == lines


# --- shm --------------------------------------------------------------------------------------


def fake_statvfs(monkeypatch, size: int) -> list[str]:
    seen = []

    def statvfs(path):
        seen.append(str(path))
        return types.SimpleNamespace(f_blocks=size // 4096, f_frsize=4096)

    monkeypatch.setattr(doctor.os, "statvfs", statvfs)
    return seen


def test_a_small_shm_fails(host, monkeypatch):
    seen = fake_statvfs(monkeypatch, 64 << 20)
    [finding] = doctor.check_shm(host.probe())
    assert seen == [str(host.root / "dev/shm")]
    assert finding.status == doctor.FAIL
    assert finding.detail.startswith("/dev/shm is 64 MiB: NCCL and DataLoader workers hang")
    assert "--shm-size" in finding.fix


@pytest.mark.parametrize(
    ("size", "detail"),
    [(8 << 30, "/dev/shm is 8.0 GiB"), (1 << 30, "/dev/shm is 1.0 GiB")],
    ids=["8g", "1g-minimum"],
)
def test_a_large_shm_is_ok(host, monkeypatch, size, detail):
    fake_statvfs(monkeypatch, size)
    assert doctor.check_shm(host.probe()) == [doctor.Finding("shm", doctor.OK, detail)]


def test_a_missing_shm_warns(host):
    [finding] = doctor.check_shm(host.probe())  # tmp root has no dev/shm: real statvfs fails
    assert (finding.status, finding.detail) == (doctor.WARN, "/dev/shm is missing")
    assert "--shm-size" in finding.fix


# --- limits -----------------------------------------------------------------------------------


def _limits(transport: str, **values) -> dict[str, doctor.Finding]:
    probe = doctor.Probe(env={}, limits=limits(**values))
    return by_check(doctor.check_limits(probe, doctor.fabric.Decision(transport)))


def test_locked_memory_limited_with_efa_fails():
    finding = _limits("efa", memlock=65536)["memlock"]
    assert finding.status == doctor.FAIL
    assert finding.detail.startswith("memlock 65536 bytes: EFA cannot pin")
    assert "--ulimit memlock=-1" in finding.fix


@pytest.mark.parametrize(
    ("transport", "memlock", "detail"),
    [
        ("socket", 65536, "memlock 65536 bytes"),
        ("socket", 8 << 20, "memlock 8 MiB"),
        ("efa", UNLIMITED, "memlock unlimited"),
        ("socket", UNLIMITED, "memlock unlimited"),
    ],
    ids=["limited-no-efa", "mib-no-efa", "unlimited-efa", "unlimited-no-efa"],
)
def test_locked_memory_ok(transport, memlock, detail):
    assert _limits(transport, memlock=memlock)["memlock"] == doctor.Finding(
        "memlock", doctor.OK, detail
    )


@pytest.mark.parametrize(
    ("nofile", "status", "detail"),
    [
        (1024, doctor.WARN, "open files limited to 1024"),
        (4095, doctor.WARN, "open files limited to 4095"),
        (4096, doctor.OK, "open files 4096"),
        (UNLIMITED, doctor.OK, "open files unlimited"),
    ],
    ids=["1024", "just-below", "threshold", "unlimited"],
)
def test_open_files(nofile, status, detail):
    finding = _limits("socket", nofile=nofile)["nofile"]
    assert finding.status == status
    assert finding.detail.startswith(detail)
    if status == doctor.WARN:
        assert finding.fix == "docker run --ulimit nofile=65536:65536"


# --- job: DNS and SSH -------------------------------------------------------------------------


class Network:
    def __init__(self, unresolved=(), closed=()):
        self.unresolved, self.closed = set(unresolved), set(closed)
        self.resolved: list[str] = []
        self.dialed: list[tuple[str, int]] = []

    def resolve(self, name: str) -> bool:
        self.resolved.append(name)
        return name not in self.unresolved

    def connect(self, name: str, port: int) -> bool:
        self.dialed.append((name, port))
        return name not in self.closed


def _job(host: Doctor, net: Network) -> dict[str, doctor.Finding]:
    return by_check(doctor.check_job(host.probe(resolve=net.resolve, connect=net.connect)))


HOSTS = ["algo-1", "algo-2", "algo-3"]


def test_not_in_a_job_informs(host):
    net = Network()
    assert _job(host, net) == {
        "hosts": doctor.Finding(
            "hosts", doctor.INFO, "not in a training job (no resourceconfig.json)"
        )
    }
    assert net.resolved == net.dialed == []


def test_a_host_that_does_not_resolve_fails(host):
    host.job(hosts=HOSTS, current_host="algo-1")
    net = Network(unresolved={"algo-3"})
    finding = _job(host, net)["hosts"]
    assert finding.status == doctor.FAIL
    assert finding.detail == "no address for algo-3"
    assert "resolve" in finding.fix
    assert net.dialed == []


def test_a_closed_ssh_port_fails_naming_it(host):
    host.job(hosts=HOSTS, current_host="algo-1")
    host.env["BYOC_SSH_PORT"] = "2022"
    net = Network(closed={"algo-2"})
    checks = _job(host, net)
    assert checks["hosts"] == doctor.Finding("hosts", doctor.OK, "all 3 host(s) resolve")
    assert checks["ssh"].status == doctor.FAIL
    assert checks["ssh"].detail == "port 2022 unreachable on algo-2"
    assert "security group" in checks["ssh"].fix
    assert net.dialed == [("algo-2", 2022), ("algo-3", 2022)]


def test_a_reachable_job_is_ok_and_skips_its_own_host(host):
    host.job(hosts=HOSTS, current_host="algo-2")
    net = Network()
    checks = _job(host, net)
    assert checks["ssh"] == doctor.Finding("ssh", doctor.OK, "port 2222 open on 2 other host(s)")
    assert net.resolved == HOSTS
    assert net.dialed == [("algo-1", 2222), ("algo-3", 2222)]


def test_a_single_host_job_dials_nobody(host):
    host.job(hosts=["algo-1"], current_host="algo-1")
    net = Network()
    assert list(_job(host, net)) == ["hosts"]
    assert net.dialed == []


def test_hostile_host_names_are_never_looked_up(host):
    host.job(
        hosts=["algo-1", "algo-2", "x; rm -rf /", "-oProxyCommand=x", 7], current_host="algo-1"
    )
    net = Network()
    checks = _job(host, net)
    assert net.resolved == ["algo-1", "algo-2"]
    assert net.dialed == [("algo-2", 2222)]
    assert checks["hosts"].detail == "all 2 host(s) resolve"


def test_a_bad_ssh_port_skips_the_ssh_probe(host):
    host.job(hosts=HOSTS)
    host.env["BYOC_SSH_PORT"] = "0"
    net = Network()
    assert list(_job(host, net)) == ["hosts"]  # check_settings reports the port
    assert net.dialed == []


@pytest.mark.parametrize(
    "hosts", [None, [], "algo-1", {"a": 1}], ids=["none", "empty", "str", "obj"]
)
def test_a_job_without_a_host_list_informs(host, hosts):
    host.job(hosts=hosts)
    assert _job(host, Network())["hosts"].status == doctor.INFO


def test_run_without_network_dials_nothing(host):
    host.job(hosts=HOSTS)
    checks = run(host, network=False)  # resolve and connect raise if called
    assert "hosts" not in checks and "ssh" not in checks


def test_run_with_network_ends_with_the_job(host):
    host.job(hosts=HOSTS)
    net = Network()
    findings, _ = doctor.run(host.probe(resolve=net.resolve, connect=net.connect))
    assert [f.check for f in findings] == [
        "settings",
        "gpus",
        "driver",
        "nccl",
        "efa",
        "shm",
        "memlock",
        "nofile",
        "hosts",
        "ssh",
    ]


# --- main, byoc doctor, summary ---------------------------------------------------------------

GOOD = [doctor.Finding("settings", doctor.OK, "every BYOC_* setting is valid")]
BAD = [
    *GOOD,
    doctor.Finding("shm", doctor.WARN, "/dev/shm is 64 MiB", "docker run --shm-size=8g"),
    doctor.Finding("gpus", doctor.FAIL, "p4d.24xlarge has 8 GPUs, this container sees 4", "--gpus"),
]
SOCKET = doctor.fabric.Decision("socket", {"NCCL_SOCKET_IFNAME": "eth0"}, reason="no EFA")


@pytest.fixture
def canned(monkeypatch):
    """doctor.run replaced: main's own logic (arguments, output, exit status) on set findings."""
    calls = []

    def use(findings):
        def fake_run(probe, network=True):
            calls.append((probe, network))
            return list(findings), SOCKET

        monkeypatch.setattr(doctor, "run", fake_run)
        return calls

    return use


@pytest.mark.parametrize(("findings", "code"), [(GOOD, 0), (BAD, 1)], ids=["ready", "a-fail"])
def test_main_exit_status_and_text(canned, capsys, findings, code):
    calls = canned(findings)
    assert doctor.main([]) == code
    out = capsys.readouterr().out
    assert calls[0][1] is True
    assert isinstance(calls[0][0], doctor.Probe) and calls[0][0].root == Path("/")
    assert "fabric: socket (no EFA)" in out
    if code:
        assert "FAIL  gpus      p4d.24xlarge has 8 GPUs, this container sees 4" in out
        assert "fix: docker run --shm-size=8g" in out
        assert out.rstrip().endswith("doctor: 1 problem(s) that make training fail or crawl")
    else:
        assert out.rstrip().endswith("doctor: ready")


def test_main_json(canned, capsys):
    canned(BAD)
    assert doctor.main(["--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"ok", "checks", "fabric"}
    assert report["ok"] is False
    assert [c["status"] for c in report["checks"]] == ["ok", "warn", "FAIL"]
    assert report["checks"][2] == {
        "check": "gpus",
        "status": "FAIL",
        "detail": "p4d.24xlarge has 8 GPUs, this container sees 4",
        "fix": "--gpus",
    }
    assert report["fabric"]["transport"] == "socket"
    assert report["fabric"]["set"] == {"NCCL_SOCKET_IFNAME": "eth0"}


def test_main_json_ready(canned, capsys):
    canned(GOOD)
    assert doctor.main(["--json", "--no-network"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_main_no_network(canned):
    calls = canned(GOOD)
    doctor.main(["--no-network"])
    assert calls[0][1] is False


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["--bogus"], 2), (["extra"], 2), (["--help"], 0)],
    ids=["flag", "arg", "help"],
)
def test_main_arguments(canned, capsys, argv, code):
    calls = canned(GOOD)
    assert doctor.main(argv) == code
    assert calls == []
    if code == 2:
        assert "usage: doctor" in capsys.readouterr().err


def test_byoc_doctor_delegates(canned, capsys):
    calls = canned(BAD)
    assert doctor.byoc_command(["doctor", "--json", "--no-network"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert calls[0][1] is False


@pytest.mark.parametrize("argv", [[], ["train"], ["--json"]], ids=["none", "other", "no-verb"])
def test_byoc_without_doctor_is_a_usage_error(canned, capsys, argv):
    calls = canned(GOOD)
    assert doctor.byoc_command(argv) == 2
    assert "usage: byoc doctor" in capsys.readouterr().err
    assert calls == []


@pytest.fixture
def injected(monkeypatch, host):
    """doctor.Probe built by summary() and main() gets the fake root and injected probes."""
    real = doctor.Probe

    def probe(env, root=Path("/")):
        return real(env=env, root=host.root, **host.probe_args)

    monkeypatch.setattr(doctor, "Probe", probe)
    return host


def test_main_end_to_end_on_a_fake_container(injected, capsys, monkeypatch):
    host = injected
    host.gpus(8).efa_host().nccl()
    fake_statvfs(monkeypatch, 8 << 30)
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", host.env["SAGEMAKER_BASE_DIR"])
    for name in list(os.environ):  # this machine's own settings stay out of the fake container
        if name.startswith(("BYOC_", "NCCL_", "FI_", "CUDA_", "LD_LIBRARY_PATH")):
            monkeypatch.delenv(name)
    assert doctor.main(["--no-network"]) == 0
    out = capsys.readouterr().out
    assert "ok    efa       EFA in use: 4 device(s), plugin on, RDMA on" in out
    assert out.rstrip().endswith("doctor: ready")


def test_summary_ready(injected, monkeypatch):
    host = injected
    host.gpus(8).efa_host().nccl()
    fake_statvfs(monkeypatch, 8 << 30)
    line = doctor.summary(host.env, host.root)
    assert line == "doctor: ready (9 checks ok; NCCL over efa)"


def test_summary_lists_problems_with_fixes(injected, monkeypatch):
    host = injected
    host.gpus(4).efa_host().nccl()
    host.probe_args["limits"] = limits(memlock=65536)
    fake_statvfs(monkeypatch, 64 << 20)
    line = doctor.summary(host.env, host.root)
    assert line.startswith("doctor: 3 problem(s): gpus: p4d.24xlarge has 8 GPUs, this ")
    assert "(fix: docker run --gpus all" in line
    assert "shm: /dev/shm is 64 MiB" in line and "--shm-size=8g" in line
    assert "memlock: memlock 65536 bytes" in line and "--ulimit memlock=-1" in line
    assert line.endswith(" -- `byoc doctor` for all checks")


def test_summary_never_touches_the_network(injected, monkeypatch):
    host = injected
    # a job with hosts to dial, but resolve and connect are `refuse`: they raise if called
    host.gpus(8).nccl().job(hosts=HOSTS, current_instance_type=None)
    fake_statvfs(monkeypatch, 8 << 30)
    assert doctor.summary(host.env, host.root).startswith("doctor: ready (")


def test_render_shows_fixes_only_for_problems():
    findings = [
        doctor.Finding("gpus", doctor.OK, "8 GPU(s) visible", "never shown"),
        doctor.Finding("plugin", doctor.INFO, "no aws-ofi-nccl", "not shown either"),
        doctor.Finding("shm", doctor.WARN, "/dev/shm is missing", "docker run --shm-size=8g"),
    ]
    text = doctor.render(findings, SOCKET)
    assert text.splitlines() == [
        "ok    gpus    8 GPU(s) visible",
        "info  plugin  no aws-ofi-nccl",
        "warn  shm     /dev/shm is missing",
        "              fix: docker run --shm-size=8g",
        "fabric: socket (no EFA)",
        "doctor: ready",
    ]
