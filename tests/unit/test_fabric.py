"""byoc.fabric: NCCL's network decided at start from fake /sys, /dev and /opt trees (EFA or TCP)."""

from __future__ import annotations

import json
import sys

import pytest
from byoc import config, fabric, init, instances

from tests.unit.fakes import Host

PLUGIN_VARS = ("NCCL_NET_PLUGIN", "FI_PROVIDER", "FI_EFA_FORK_SAFE", "RDMAV_FORK_SAFE")
NO_EFA_HERE = "fabric: WARNING: this host has EFA but NCCL will not use it"


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(tmp_path)


def ready(host: Host, instance_type: str | None = "ml.p4d.24xlarge", devices: int = 4) -> Host:
    """A host where EFA works: devices, their uverbs, the plugin, eth0 and a job on it."""
    host.efa(devices).plugin().interfaces("eth0", default_route="eth0")
    return host.job(current_instance_type=instance_type)


# --- reading the container --------------------------------------------------------------------


def test_only_devices_bound_to_the_efa_driver_count(host):
    host.efa(2).mlx("mlx5_0").mlx("mlx5_1")
    (host.root / "sys/class/infiniband/stray").mkdir()  # no device/driver link at all
    assert fabric.efa_devices(host.root) == ("rdmap0s0", "rdmap1s0")
    assert fabric.uverbs(host.root) == ("uverbs0", "uverbs1")


def test_nothing_there_reads_as_nothing(host):
    facts = host.look()
    assert facts == fabric.Facts(plugin_missing="this image has no aws-ofi-nccl plugin")


def test_a_non_efa_infiniband_device_is_not_efa(host):
    host.mlx().uverbs(1).plugin().job()
    decision = host.decide()
    assert decision.transport == "socket"
    assert decision.reason.startswith("no EFA device in this container")
    assert not set(PLUGIN_VARS) & set(decision.set)


# --- EFA in use -------------------------------------------------------------------------------


def test_efa_devices_verbs_and_plugin_name_the_plugin(host):
    ready(host)
    env = host.env
    lines = host.apply()
    assert {k: env.get(k) for k in (*PLUGIN_VARS, "FI_EFA_USE_DEVICE_RDMA")} == {
        "NCCL_NET_PLUGIN": "ofi",
        "FI_PROVIDER": "efa",
        "FI_EFA_FORK_SAFE": "1",
        "RDMAV_FORK_SAFE": "1",
        "FI_EFA_USE_DEVICE_RDMA": "1",
    }
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert lines == [
        "fabric: efa (4 EFA device(s): rdmap0s0, rdmap1s0, rdmap2s0, rdmap3s0); set "
        "NCCL_NET_PLUGIN=ofi FI_PROVIDER=efa FI_EFA_FORK_SAFE=1 RDMAV_FORK_SAFE=1 "
        "FI_EFA_USE_DEVICE_RDMA=1 NCCL_SOCKET_IFNAME=eth0"
    ]


def test_more_than_four_devices_are_abbreviated(host):
    ready(host, "ml.p5en.48xlarge", devices=16)
    decision = host.decide()
    assert decision.reason == "16 EFA device(s): rdmap0s0, rdmap10s0, rdmap11s0, rdmap12s0, ..."
    assert decision.warnings == []


RDMA = ["ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge"]
RDMA += ["ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.g6e.48xlarge"]
NO_RDMA = ["ml.g5.48xlarge", "ml.p3dn.24xlarge", "ml.g4dn.12xlarge"]


@pytest.mark.parametrize(
    ("instance_type", "rdma"),
    [(t, True) for t in RDMA]
    + [(t, False) for t in NO_RDMA]
    + [("ml.x9z.48xlarge", False), (None, False)],
    ids=[*RDMA, *NO_RDMA, "unknown-type", "no-type"],
)
def test_device_rdma_exactly_on_the_types_that_have_it(host, instance_type, rdma):
    kind = instances.lookup(instance_type)
    ready(host, instance_type, devices=kind.efa if kind else 1)
    decision = host.decide()
    assert decision.transport == "efa"
    assert ("FI_EFA_USE_DEVICE_RDMA" in decision.set) is rdma
    if rdma:
        assert decision.set["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "FI_EFA_USE_DEVICE_RDMA" not in decision.kept
    assert decision.warnings == []  # as many devices as the type has: no shortfall


def test_instance_type_from_byoc_instance_type_outside_a_job(host):
    host.efa(4).plugin()
    host.env["BYOC_INSTANCE_TYPE"] = " ML.P4D.24xlarge "
    assert host.look().instance_type == "p4d.24xlarge"
    assert host.decide().set["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_the_jobs_instance_type_wins_over_byoc_instance_type(host):
    ready(host, "ml.g5.48xlarge", devices=1)
    host.env["BYOC_INSTANCE_TYPE"] = "p4d.24xlarge"
    assert host.look().instance_type == "g5.48xlarge"
    assert "FI_EFA_USE_DEVICE_RDMA" not in host.decide().set


@pytest.mark.parametrize(
    ("instance_type", "devices", "expected"),
    [
        ("ml.p5.48xlarge", 4, "p5.48xlarge has 32 EFA devices, this container sees 4"),
        ("ml.p4d.24xlarge", 1, "p4d.24xlarge has 4 EFA devices, this container sees 1"),
        ("ml.g6e.48xlarge", 2, "g6e.48xlarge has 4 EFA devices, this container sees 2"),
    ],
    ids=["p5-4-of-32", "p4d-1-of-4", "g6e-2-of-4"],
)
def test_fewer_devices_than_the_type_has_warns(host, instance_type, devices, expected):
    ready(host, instance_type, devices=devices)
    lines = host.apply()
    assert host.env["NCCL_NET_PLUGIN"] == "ofi"  # still EFA, at a share of the bandwidth
    assert lines[1:] == [f"fabric: WARNING: {expected}: bandwidth is capped at that share"]


# --- sockets, and why -------------------------------------------------------------------------


def test_no_efa_device_uses_sockets_and_says_so(host):
    host.plugin().interfaces("eth0").job(current_instance_type="ml.g5.2xlarge")
    lines = host.apply()
    assert not set(PLUGIN_VARS) & set(host.env)
    assert "FI_EFA_USE_DEVICE_RDMA" not in host.env
    assert host.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert lines == [
        "fabric: socket (no EFA device in this container; NCCL uses its socket transport); "
        "set NCCL_SOCKET_IFNAME=eth0"
    ]


def test_efa_without_uverbs_uses_sockets_with_the_device_hint(host):
    ready(host)
    for node in (host.root / "dev/infiniband").iterdir():
        node.unlink()
    decision = host.decide()
    assert decision.transport == "socket"
    assert decision.reason.startswith("4 EFA device(s) on the host but no /dev/infiniband/uverbs*")
    assert "--device=/dev/infiniband/uverbs0" in decision.reason
    assert "NCCL_NET_PLUGIN" not in decision.set
    assert [w.split(";")[0] for w in decision.warnings] == [NO_EFA_HERE]


def test_efa_without_the_plugin_names_the_not_built_reason(host):
    host.efa(4).not_built("aws-ofi-nccl not built: EFA=off").interfaces("eth0").job()
    decision = host.decide()
    assert decision.transport == "socket"
    assert decision.reason == (
        "EFA devices present but aws-ofi-nccl not built: EFA=off; NCCL uses its socket transport"
    )
    assert set(decision.set) == {"NCCL_SOCKET_IFNAME"}
    assert decision.warnings == [
        f"{NO_EFA_HERE}; multi-node training runs on TCP at a fraction of the speed "
        "(run `byoc doctor`)"
    ]


def test_efa_with_neither_plugin_nor_note_says_the_image_has_none(host):
    host.efa(1).job()
    assert host.decide().reason.startswith(
        "EFA devices present but this image has no aws-ofi-nccl plugin"
    )


def test_an_overlong_not_built_note_is_cut(host):
    host.efa(1).not_built("x" * 5000).job()
    assert host.look().plugin_missing == "x" * 300


# --- the user's settings ----------------------------------------------------------------------


def test_values_the_user_set_are_kept_and_reported(host):
    ready(host)
    user = {
        "NCCL_NET_PLUGIN": "/opt/custom/libnccl-net.so",
        "FI_PROVIDER": "efa;ofi_rxm",
        "FI_EFA_USE_DEVICE_RDMA": "0",
        "NCCL_SOCKET_IFNAME": "ens5",
    }
    host.env.update(user)
    assert host.decide().kept == user
    lines = host.apply()
    assert {k: host.env[k] for k in user} == user
    assert host.env["BYOC_FABRIC_SET"] == "FI_EFA_FORK_SAFE,RDMAV_FORK_SAFE"
    assert lines[0].endswith(
        "; set FI_EFA_FORK_SAFE=1 RDMAV_FORK_SAFE=1; yours kept: "
        "NCCL_NET_PLUGIN=/opt/custom/libnccl-net.so FI_PROVIDER=efa;ofi_rxm "
        "FI_EFA_USE_DEVICE_RDMA=0 NCCL_SOCKET_IFNAME=ens5"
    )


def test_the_users_rdma_setting_is_kept_where_the_type_has_none(host):
    ready(host, "ml.g5.48xlarge", devices=1)
    host.env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    decision = host.decide()
    assert decision.kept == {"FI_EFA_USE_DEVICE_RDMA": "1"}
    assert "FI_EFA_USE_DEVICE_RDMA" not in decision.set


@pytest.mark.parametrize(
    ("user", "named"),
    [
        ({"NCCL_NET_PLUGIN": "ofi"}, "NCCL_NET_PLUGIN=ofi"),
        ({"NCCL_NET_PLUGIN": "aws-ofi"}, "NCCL_NET_PLUGIN=aws-ofi"),
        ({"FI_PROVIDER": " EFA"}, "FI_PROVIDER= EFA"),
        ({"NCCL_NET_PLUGIN": "ofi", "FI_PROVIDER": "efa"}, "NCCL_NET_PLUGIN=ofi FI_PROVIDER=efa"),
    ],
    ids=["plugin", "plugin-alias", "provider", "both"],
)
def test_forcing_efa_without_efa_warns_and_is_kept(host, user, named):
    host.plugin().interfaces("eth0").job()
    host.env.update(user)
    lines = host.apply()
    assert {k: host.env[k] for k in user} == user
    assert lines[1:] == [
        f"fabric: WARNING: {named} set without an EFA device in the container: NCCL fails "
        "('NET/OFI Only EFA provider is supported') or hangs; unset them"
    ]


@pytest.mark.parametrize(
    "user", [{"FI_PROVIDER": "tcp"}, {"NCCL_NET_PLUGIN": "none"}], ids=["tcp", "none"]
)
def test_settings_that_do_not_force_efa_do_not_warn(host, user):
    host.job().env.update(user)
    assert host.decide().warnings == []


# --- BYOC_EFA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["off", "OFF", " off "], ids=["off", "upper", "spaces"])
def test_byoc_efa_off_never_names_the_plugin(host, value):
    ready(host)
    host.env["BYOC_EFA"] = value
    lines = host.apply()
    assert not set(PLUGIN_VARS) & set(host.env)
    assert "FI_EFA_USE_DEVICE_RDMA" not in host.env
    assert lines == [
        "fabric: socket (BYOC_EFA=off; NCCL uses its socket transport); set NCCL_SOCKET_IFNAME=eth0"
    ]


def test_byoc_efa_on_with_usable_efa_names_the_plugin(host):
    ready(host).env["BYOC_EFA"] = "on"
    assert host.decide().set["NCCL_NET_PLUGIN"] == "ofi"


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (lambda h: h.plugin(), "no EFA device in this container"),
        (lambda h: h.efa(2, uverbs=0).plugin(), "no /dev/infiniband/uverbs*"),
        (lambda h: h.efa(2).not_built("aws-ofi-nccl not built: EFA=off"), "EFA=off"),
    ],
    ids=["no-device", "no-uverbs", "no-plugin"],
)
def test_byoc_efa_on_without_usable_efa_stops(host, build, why):
    build(host).job()
    host.env["BYOC_EFA"] = "on"
    before = dict(host.env)
    with pytest.raises(fabric.FabricError, match=r"^BYOC_EFA=on but EFA cannot be used: ") as exc:
        host.apply()
    assert why in str(exc.value)
    assert host.env == before  # nothing applied


def test_byoc_efa_bogus_is_an_error_naming_the_variable(host):
    ready(host).env["BYOC_EFA"] = "bogus"
    with pytest.raises(fabric.FabricError, match=r"BYOC_EFA='bogus': expected one of auto, on"):
        host.apply()
    assert "BYOC_FABRIC_SET" not in host.env


# --- NCCL_SOCKET_IFNAME -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "interfaces", "route", "expected"),
    [
        ("eth0", ("eth0", "eth1"), "eth1", "eth0"),
        ("ethwe", ("eth0", "eth1"), "eth1", "eth1"),
        ("ethwe", ("eth0",), None, "eth0"),
        ("ethwe", ("eth0", "eth1"), None, fabric.EXCLUDE_IFNAMES),
        (None, ("eth0",), "eth0", fabric.EXCLUDE_IFNAMES),
        ("../../etc", ("eth0",), "eth0", "eth0"),
    ],
    ids=["named", "default-route", "only-one", "no-fallback", "none-named", "hostile-name"],
)
def test_socket_interface(host, requested, interfaces, route, expected):
    host.interfaces(*interfaces, default_route=route)
    host.job(network_interface_name=requested)
    host.apply()
    assert host.env["NCCL_SOCKET_IFNAME"] == expected


def test_no_job_leaves_the_interface_to_nccl_minus_lo_and_docker(host):
    host.interfaces("eth0", default_route="eth0")
    host.apply()
    assert host.env["NCCL_SOCKET_IFNAME"] == "^lo,docker0"


def test_a_fallback_interface_is_noted(host):
    host.interfaces("eth1", default_route="eth1").job(network_interface_name="ethwe")
    facts = host.look()
    assert (facts.requested_interface, facts.interface) == ("ethwe", "eth1")
    assert "'ethwe' is not an interface of this container; using eth1" in facts.interface_note
    lines = host.apply()
    assert host.env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert any(line.startswith("fabric: network_interface_name 'ethwe'") for line in lines), lines


# --- apply ------------------------------------------------------------------------------------


def test_apply_records_exactly_what_it_set(host):
    ready(host, "ml.g5.48xlarge", devices=1)
    host.env["FI_PROVIDER"] = "efa"
    lines = host.apply()
    assert host.env["BYOC_FABRIC_SET"].split(",") == [
        "NCCL_NET_PLUGIN",
        "FI_EFA_FORK_SAFE",
        "RDMAV_FORK_SAFE",
        "NCCL_SOCKET_IFNAME",
    ]
    assert lines[0].startswith("fabric: efa (1 EFA device(s): rdmap0s0); set NCCL_NET_PLUGIN=ofi")
    assert lines[0].endswith("; yours kept: FI_PROVIDER=efa")


def test_apply_that_sets_nothing_records_nothing(host):
    host.env["NCCL_SOCKET_IFNAME"] = "eth0"
    lines = host.apply()
    assert host.env["BYOC_FABRIC_SET"] == ""
    assert lines == [
        "fabric: socket (no EFA device in this container; NCCL uses its socket transport); "
        "yours kept: NCCL_SOCKET_IFNAME=eth0"
    ]


def test_decide_is_pure(host):
    ready(host)
    env = dict(host.env)
    fabric.decide(host.look(), env)
    assert env == host.env
    assert "BYOC_FABRIC_SET" not in env


# --- a hostile resourceconfig.json ------------------------------------------------------------


def _huge(kind: str) -> bytes:
    text = json.dumps({"current_instance_type": "ml.g5.48xlarge", "network_interface_name": kind})
    return text.encode() + b" " * config.MAX_CONFIG_BYTES


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'["ml.g5.48xlarge"]',
        b'"ml.g5.48xlarge"',
        _huge("eth1"),
        b'{"current_instance_type": 5, "network_interface_name": ["eth1"]}',
        b'{"current_instance_type": {"x": 1}, "network_interface_name": null}',
        b'{"current_instance_type": "   ", "network_interface_name": ""}',
        b"\xff\xfe{\x00}",
        b"",
    ],
    ids=[
        "not-json",
        "list",
        "string",
        "huge",
        "number-type",
        "object-type",
        "blank-type",
        "binary",
        "empty",
    ],
)
def test_a_hostile_resourceconfig_is_ignored(host, content):
    host.efa(4).plugin().interfaces("eth0", "eth1", default_route="eth0")
    host.resource_text(content)
    host.env["BYOC_INSTANCE_TYPE"] = "p4d.24xlarge"
    facts = host.look()
    assert facts.instance_type == "p4d.24xlarge"  # from BYOC_INSTANCE_TYPE, not the file
    assert facts.requested_interface is None
    host.apply()
    assert host.env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert host.env["NCCL_SOCKET_IFNAME"] == "^lo,docker0"


def test_a_resourceconfig_that_is_a_directory_is_ignored(host):
    (host.ml / "input/config/resourceconfig.json").mkdir(parents=True)
    assert fabric.resource_config(host.env) == {}
    assert host.look().instance_type is None


# --- the instance table and byoc-init ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ml.p4d.24xlarge", instances.Instance(8, 4, True)),
        ("p5.48xlarge", instances.Instance(8, 32, True)),
        ("ML.G5.48XLARGE", instances.Instance(8, 1, False)),
        ("ml.g6e.24xlarge", instances.Instance(4, 2, True)),
        ("ml.g6e.2xlarge", instances.Instance(1, 0, False)),
        ("ml.p3.16xlarge", instances.Instance(8, 0, False)),
        ("ml.g4dn.metal", instances.Instance(8, 1, False)),
        ("ml.c5.18xlarge", None),
        ("", None),
        (None, None),
    ],
    ids=[
        "p4d",
        "p5-no-prefix",
        "upper",
        "g6e-24",
        "g6e-small",
        "p3",
        "g4dn-metal",
        "cpu",
        "empty",
        "none",
    ],
)
def test_instance_table(name, expected):
    assert instances.lookup(name) == expected


def test_byoc_init_runs_doctor_as_a_module():
    assert init.command_for(["doctor", "--json"], env={}) == [
        sys.executable,
        "-m",
        "byoc.doctor",
        "--json",
    ]
    assert init.command_for(["doctor"], env={}) == [sys.executable, "-m", "byoc.doctor"]
