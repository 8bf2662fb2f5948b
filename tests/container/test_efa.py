"""EFA for NCCL in the gpu flavor, checked without EFA or a GPU (marker gpu_flavor).

What the image ships (libfabric with the efa provider, the aws-ofi-nccl plugin, rdma-core's
user-space libraries) and what byoc-init decides from what a container sees: nothing here on a
machine without EFA, a stand-in EFA host (a fake /sys/class/infiniband tree and verbs nodes
bind-mounted in) otherwise. EFA traffic itself needs two EFA instances: docs/gpu-efa.md, "EFA and
multi-node NCCL", says how to check it there.
"""

from __future__ import annotations

import json
import re

import pytest

from hostkit import dockerfile
from tests.container.support import image_output

pytestmark = pytest.mark.gpu_flavor


@pytest.fixture(scope="module")
def efa_built(gpu_image):
    """Skips (with the build's own reason) where the image was built without the sources."""
    script = (
        "for f in /opt/amazon/efa/NOT-BUILT /opt/amazon/ofi-nccl/NOT-BUILT; do "
        '[ -f "$f" ] && echo "NOTE $(cat "$f")"; done; true'
    )
    out = image_output(gpu_image, ["bash", "-c", script])
    out = "\n".join(line[5:] for line in out.splitlines() if line.startswith("NOTE "))
    if out.strip():
        pytest.skip(
            f"{out.strip()} -- the image was built without the libfabric/aws-ofi-nccl sources "
            "(GitHub cannot be reached here): give LIBFABRIC_TARBALL and AWS_OFI_NCCL_TARBALL "
            "(scripts/git-archive.sh makes them from clones) to run these checks"
        )


def test_built_from_the_pinned_sources(gpu_image, efa_built):
    for pkg, var in (("libfabric", "LIBFABRIC"), ("aws-ofi-nccl", "AWS_OFI_NCCL")):
        # The file's text alone: the container's log also has byoc-init's EFA decision, on
        # stderr, before or after it.
        record = json.loads(image_output(gpu_image, ["cat", f"/opt/byoc/sources/{pkg}.json"]))
        version, sha = dockerfile.arg(f"{var}_VERSION"), dockerfile.arg(f"{var}_SHA256")
        assert (record["version"], record["sha256"], record["not_built"]) == (version, sha, None)


def test_fi_info_lists_the_efa_provider(gpu, efa_built):
    status, out = gpu.run(["bash", "-c", "command -v fi_info && fi_info --version && fi_info -l"])
    assert status == 0, out
    assert "/opt/amazon/efa/bin/fi_info" in out
    assert f"libfabric: {dockerfile.arg('LIBFABRIC_VERSION')}" in out, out
    assert re.search(r"^efa:", out, re.M), out
    assert re.search(r"^shm:", out, re.M), out  # what efa uses within a host


def test_plugin_resolves_to_the_images_libfabric_and_rdma_core(gpu, efa_built):
    script = r"""
set -e
plugin=/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so
ldd "$plugin"
echo "FABRIC $(readlink -f "$(ldd "$plugin" | awk '/libfabric.so/ {print $3}')")"
ldd /opt/amazon/efa/lib/libfabric.so.1 | awk '/libefa|libibverbs/ {print "VERBS", $1, $3}'
echo "EFA-DRIVER $(ls /etc/libibverbs.d/ | grep -c '^efa.driver$')"
"""
    status, out = gpu.run(["bash", "-c", script])
    assert status == 0, out
    assert "not found" not in out, out
    assert re.search(r"^FABRIC /opt/amazon/efa/lib/libfabric\.so\.1\.\d+\.\d+$", out, re.M), out
    assert re.search(r"^VERBS libefa\.so\.1 /\S+", out, re.M), out  # rdma-core's efa provider
    assert re.search(r"^VERBS libibverbs\.so\.1 /\S+", out, re.M), out
    assert "EFA-DRIVER 1" in out, out


def test_nccl_finds_the_plugin_by_name_and_nothing_loads_it_unasked(gpu, efa_built):
    # NCCL dlopens libnccl-net-<NCCL_NET_PLUGIN>.so by name, else libnccl-net.so: the first must
    # load from the linker path, the second must not exist (it would load on every host).
    code = r"""
import ctypes
lib = ctypes.CDLL("libnccl-net-ofi.so")
print("LOADED", [l for l in open("/proc/self/maps").read().split() if "libnccl-net-ofi" in l][0])
names = [f"ncclNetPlugin_v{v}" for v in range(1, 30)]
print("SYMBOLS", [n for n in names if hasattr(lib, n)])
try:
    ctypes.CDLL("libnccl-net.so")
    print("PLAIN loads")
except OSError:
    print("PLAIN absent")
"""
    status, out = gpu.run(["python", "-c", code], timeout=120)
    assert status == 0, out
    assert "LOADED /opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so" in out, out
    versions = [int(v) for v in re.findall(r"ncclNetPlugin_v(\d+)", out)]
    assert versions and max(versions) >= 8, out  # NCCL >= 2.19 takes v8 and later
    assert "PLAIN absent" in out, out


def test_no_efa_device_means_sockets_and_no_plugin(gpu):
    status, out = gpu.run(["bash", "-c", "env | grep -E '^(NCCL_|FI_|RDMAV_)' | sort"])
    assert status == 0, out
    assert re.search(r"fabric: socket \(no EFA device in this container", out), out
    assert "NCCL_SOCKET_IFNAME=^lo,docker0" in out, out
    assert "NCCL_NET_PLUGIN" not in out and "FI_PROVIDER" not in out, out


@pytest.fixture
def efa_host(tmp_path):
    """A stand-in p4d: /sys/class with one EFA device (bound to the efa driver) and its verbs
    node, bind-mounted over the container's."""
    cls = tmp_path / "class"
    device = cls / "infiniband" / "rdmap16s27" / "device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to("/sys/bus/pci/drivers/efa")
    (cls / "net" / "eth0").mkdir(parents=True)
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "uverbs0").write_text("")
    return {
        "volumes": {
            str(cls): {"bind": "/sys/class", "mode": "ro"},
            str(dev): {"bind": "/dev/infiniband", "mode": "ro"},
        },
        "environment": {"BYOC_INSTANCE_TYPE": "ml.p4d.24xlarge"},
    }


def test_efa_devices_turn_the_plugin_on_and_user_values_win(gpu, efa_built, efa_host):
    show = "env | grep -E '^(NCCL_|FI_|RDMAV_)' | sort"
    status, out = gpu.run(["bash", "-c", show], **efa_host)
    assert status == 0, out
    assert re.search(r"fabric: efa \(1 EFA device\(s\): rdmap16s27\)", out), out
    for line in (
        "NCCL_NET_PLUGIN=ofi",
        "FI_PROVIDER=efa",
        "FI_EFA_FORK_SAFE=1",
        "RDMAV_FORK_SAFE=1",
        "FI_EFA_USE_DEVICE_RDMA=1",  # p4d has RDMA
    ):
        assert re.search(rf"^{re.escape(line)}$", out, re.M), out
    assert "p4d.24xlarge has 4 EFA devices, this container sees 1" in out, out

    efa_host["environment"]["FI_EFA_USE_DEVICE_RDMA"] = "0"
    status, out = gpu.run(["bash", "-c", show], **efa_host)
    assert re.search(r"^FI_EFA_USE_DEVICE_RDMA=0$", out, re.M), out  # the user's value kept
    assert "yours kept: FI_EFA_USE_DEVICE_RDMA=0" in out, out

    efa_host["environment"]["BYOC_EFA"] = "off"
    status, out = gpu.run(["bash", "-c", show], **efa_host)
    assert "BYOC_EFA=off" in out and "NCCL_NET_PLUGIN" not in out, out


def test_efa_required_but_absent_stops_the_container(gpu):
    status, out = gpu.run(["true"], environment={"BYOC_EFA": "on"}, timeout=60)
    assert status == 2, out
    assert "BYOC_EFA=on but EFA cannot be used: no EFA device in this container" in out, out


def _doctor(pool, **kw) -> tuple[int, dict]:
    status, out = pool.run(["doctor", "--json"], timeout=120, stderr=False, **kw)
    report = json.loads(out)
    return status, {c["check"]: c for c in report["checks"]} | {"": report}


def test_doctor_on_the_stand_in_efa_host(gpu, efa_built, efa_host):
    status, checks = _doctor(gpu, **efa_host)
    assert status == 1, checks  # Docker's default memlock cannot pin EFA's memory
    assert checks["memlock"]["status"] == "FAIL" and "memlock=-1" in checks["memlock"]["fix"]
    assert checks["efa"]["status"] == "warn", checks["efa"]  # 1 of p4d's 4 devices
    assert checks["plugin"]["status"] == "ok", checks["plugin"]
    assert checks[""]["fabric"]["transport"] == "efa"
    assert checks["gpus"]["status"] == "FAIL"  # p4d has 8 GPUs, this container none

    # (--ulimit memlock=-1, the fix, cannot be tried here: this machine's engine may not raise
    # the limit; tests/unit/test_doctor.py checks the unlimited case.)
    status, checks = _doctor(gpu, shm_size="2g", **efa_host)
    assert checks["shm"]["status"] == "ok", checks["shm"]


def test_doctor_in_the_gpu_flavor_without_a_gpu(gpu):
    status, out = gpu.run(["doctor"], shm_size="64m", timeout=120)
    assert status == 1, out  # 64 MiB of /dev/shm makes training fail
    assert re.search(r"^FAIL\s+shm\s+/dev/shm is 64 MiB", out, re.M), out
    assert "fix: docker run --shm-size=8g" in out, out
    assert re.search(r"^warn\s+gpus\s+no GPU visible", out, re.M), out
    assert re.search(
        r"^ok\s+nccl\s+NCCL \d+\.\d+\.\d+, one library for torch and Horovod", out, re.M
    )
    status, out = gpu.run(["doctor"], shm_size="2g", timeout=120)
    assert status == 0, out
    assert "doctor: ready" in out, out
