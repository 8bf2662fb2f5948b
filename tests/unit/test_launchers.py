"""Which launcher runs, its command line, the interface and the settings it uses (no Docker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from byoc import config, init, netif, plan, report, settings
from byoc import constants as C

from tests.unit.fakes import make_plan, make_tree


def hps(**kw) -> dict:
    return {k: v for k, v in kw.items()}


@pytest.mark.parametrize(
    ("given", "forced", "launcher"),
    [
        (hps(sagemaker_mpi_enabled=True), None, "horovod"),
        (hps(sagemaker_mpi_enabled="true"), None, "horovod"),
        (hps(sagemaker_torch_distributed_enabled=True), None, "torchrun"),
        (hps(sagemaker_torch_distributed_enabled="True"), None, "torchrun"),
        (
            hps(sagemaker_torch_distributed_enabled=False, sagemaker_mpi_enabled=True),
            None,
            "horovod",
        ),
        ({}, None, "horovod"),
        (hps(sagemaker_torch_distributed_enabled=True), "none", "none"),
        ({}, "torchrun", "torchrun"),
    ],
)
def test_launcher_follows_what_the_sdk_sent_unless_forced(given, forced, launcher):
    assert plan.choose_launcher(given, forced)[0] == launcher


@pytest.mark.parametrize("name", C.HP_SMDISTRIBUTED)
def test_smdistributed_is_refused_with_what_to_use_instead(name):
    with pytest.raises(config.ConfigError, match=f"{name}.*smdistributed.*torch_distributed"):
        plan.choose_launcher({name: True}, None)


def test_two_distributions_at_once_are_refused():
    both = {C.HP_MPI_ENABLED: True, C.HP_TORCH_DISTRIBUTED_ENABLED: True}
    with pytest.raises(config.ConfigError, match="choose one"):
        plan.choose_launcher(both, None)


def test_a_flag_that_is_no_boolean_is_refused():
    with pytest.raises(config.ConfigError, match="sagemaker_mpi_enabled: must be true or false"):
        plan.choose_launcher({C.HP_MPI_ENABLED: "perhaps"}, None)


def test_bad_launcher_setting_names_the_variable():
    with pytest.raises(settings.SettingsError, match="BYOC_LAUNCHER='mpi': expected one of"):
        settings.load({C.LAUNCHER_ENV: "mpi"})


def torchrun_plan(tmp_path, current="algo-2", hosts=("algo-1", "algo-2"), env=None, iface="eth0"):
    cfg = config.load(make_tree(tmp_path, hosts=hosts, current=current))
    program = [sys.executable, "/opt/ml/code/train.py", "--epochs", "2"]
    env = env or {C.CPU_SLOTS_ENV: "2"}
    return make_plan(cfg, program, 0, env=env, launcher="torchrun", interface=iface)


def test_torchrun_on_each_host_with_its_node_rank(tmp_path):
    p = torchrun_plan(tmp_path)
    assert p.role == "worker" and p.slots == 2 and p.world_size == 4
    assert p.command == [
        "torchrun",
        "--nproc-per-node=2",
        "--max-restarts=0",
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=algo-1",
        "--master-port=29500",
        "--rdzv-conf=timeout=600",
        "-m",
        "byoc.clean_exit",
        "/opt/ml/code/train.py",
        "--epochs",
        "2",
    ]
    # Gloo and NCCL use the job's interface; the program needs no byoc.rank wrapper.
    assert p.env | {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"} == p.env


def test_torchrun_port_and_timeout_come_from_the_settings(tmp_path):
    env = {C.TORCHRUN_PORT_ENV: "29999", C.PEER_TIMEOUT_ENV: "42"}
    p = torchrun_plan(tmp_path, current="algo-1", env=env)
    assert "--master-port=29999" in p.command and "--rdzv-conf=timeout=42" in p.command
    assert p.role == "leader" and p.slots == 1


def test_single_host_torchrun_is_standalone(tmp_path):
    p = torchrun_plan(tmp_path, current="algo-1", hosts=("algo-1",))
    assert p.role == "single" and "--standalone" in p.command
    assert set(p.env) == {C.STACKS_DIR_ENV}  # no interface to name
    assert not any(a.startswith("--master-addr") for a in p.command)


def test_clean_exit_can_be_turned_off(tmp_path):
    p = torchrun_plan(tmp_path, env={C.CLEAN_EXIT_ENV: "off"})
    # Still armed for stacks (byoc.stall), ended by Python itself.
    assert p.command[-6:] == [
        "--rdzv-conf=timeout=600",
        "-m",
        "byoc.armed",
        "/opt/ml/code/train.py",
        "--epochs",
        "2",
    ]
    with pytest.raises(settings.SettingsError, match="BYOC_CLEAN_EXIT='maybe': expected one of"):
        torchrun_plan(tmp_path, env={C.CLEAN_EXIT_ENV: "maybe"})


@pytest.mark.parametrize(
    ("program", "wrapped"),
    [
        (
            [sys.executable, "/c/t.py", "-x"],
            [sys.executable, "-m", "byoc.clean_exit", "/c/t.py", "-x"],
        ),
        ([sys.executable, "-m", "pkg.t"], [sys.executable, "-m", "byoc.clean_exit", "-m", "pkg.t"]),
        (["/bin/bash", "/c/run.sh"], ["/bin/bash", "/c/run.sh"]),
    ],
)
def test_only_python_programs_go_through_clean_exit(program, wrapped):
    assert plan.wrapped_program(program, "clean_exit") == wrapped


@pytest.mark.parametrize(
    ("program", "as_torchrun"),
    [
        ([sys.executable, "/c/t.py"], ["/c/t.py"]),
        ([sys.executable, "-m", "pkg.train"], ["-m", "pkg.train"]),
        (["/bin/bash", "/c/run.sh"], ["--no-python", "/bin/bash", "/c/run.sh"]),
        (["/c/trainer"], ["--no-python", "/c/trainer"]),
    ],
)
def test_every_kind_of_entry_point_runs_under_torchrun(program, as_torchrun):
    assert plan.torchrun_program(program) == as_torchrun


def test_none_runs_the_program_once_per_host(tmp_path):
    cfg = config.load(make_tree(tmp_path))
    p = make_plan(cfg, ["python", "t.py"], 8, launcher="none")
    assert p.command == ["python", "t.py"] and p.slots == 1 and p.world_size == 2


def test_processes_per_host_are_bounded(tmp_path):
    cfg = config.load(make_tree(tmp_path, hps={C.HP_PROCESSES_PER_HOST: "1000000000"}))
    with pytest.raises(config.ConfigError, match="from 1 to 256"):
        make_plan(cfg, ["x"], 0)


def test_default_program_follows_the_launcher():
    assert plan.default_program("torchrun").endswith("train_ddp.py")
    assert plan.default_program("horovod").endswith("train_synthetic.py")


# --- the network interface -------------------------------------------------------------------
def fake_net(tmp_path: Path, interfaces, default=None) -> tuple[Path, Path]:
    net = tmp_path / "net"
    for name in interfaces:
        (net / name).mkdir(parents=True)
    route = tmp_path / "route"
    lines = ["Iface\tDestination\tGateway\tFlags"]
    for name in interfaces:
        lines.append(f"{name}\t0011A8C0\t00000000\t0001")
    if default:
        lines.append(f"{default}\t00000000\t0111A8C0\t0003")
    route.write_text("\n".join(lines) + "\n")
    return net, route


def test_interface_the_container_has_is_used_as_is(tmp_path):
    net, route = fake_net(tmp_path, ["lo", "eth0", "eth1"], default="eth1")
    assert netif.choose("eth0", net, route) == ("eth0", None)


def test_missing_interface_falls_back_to_the_default_route(tmp_path):
    net, route = fake_net(tmp_path, ["lo", "eth0", "eth1"], default="eth1")
    chosen, note = netif.choose("ethwe", net, route)
    assert chosen == "eth1" and "'ethwe' is not an interface" in note and "default route" in note


def test_no_default_route_uses_the_only_interface(tmp_path):
    net, route = fake_net(tmp_path, ["lo", "eth0"])
    chosen, note = netif.choose("ethwe", net, route)
    assert chosen == "eth0" and "only interface" in note


def test_no_way_to_tell_leaves_the_choice_to_the_libraries(tmp_path):
    net, route = fake_net(tmp_path, ["lo", "eth0", "eth1"])
    chosen, note = netif.choose("ethwe", net, route)
    assert chosen is None and "leaving the choice" in note


@pytest.mark.parametrize("hostile", ["eth0;reboot", "-x", "a b", "../eth0", "x" * 16])
def test_interface_names_that_are_no_names_are_never_used(tmp_path, hostile):
    net, route = fake_net(tmp_path, ["lo", "eth0"])
    chosen, note = netif.choose(hostile, net, route)
    assert chosen == "eth0" and note


# --- settings ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [
        (C.PEER_TIMEOUT_ENV, "nan"),
        (C.PEER_TIMEOUT_ENV, "inf"),
        (C.LEADER_LOST_ENV, "-1"),
        (C.LEADER_TIMEOUT_ENV, "0"),
        (C.TERM_GRACE_ENV, "abc"),
        (C.END_GRACE_ENV, "-3"),
        (C.COORD_PORT_ENV, "abc"),
        (C.SSH_PORT_ENV, "70000"),
        (C.TORCHRUN_PORT_ENV, "0"),
        (C.START_TIMEOUT_ENV, "1.5"),
        (C.CPU_SLOTS_ENV, "1000"),
        (C.SSH_TRUST_ENV, "yes"),
    ],
)
def test_bad_settings_name_variable_and_value(name, value):
    with pytest.raises(settings.SettingsError) as err:
        settings.load({name: value})
    assert f"{name}={value!r}" in str(err.value)


def test_settings_defaults():
    s = settings.load({})
    assert (s.ssh_port, s.coordinator_port, s.torchrun_port) == (2222, 2223, 29500)
    assert s.launcher is None and s.ssh_trust == "auto" and s.cpu_slots is None


# --- failures across hosts ----------------------------------------------------------------------
def test_torchrun_rank_prefixes_name_the_global_rank():
    w = report.OutputWatcher()
    for line in [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/c/t.py", line 8, in <module>',
        "[rank3]: RuntimeError: deliberate failure on rank 3 (--fail-on-rank)",
    ]:
        w.feed(line)
    assert w.failures[0].rank == 3 and w.failures[0].exception.startswith("RuntimeError")


def failure(rank, exception, at, host=None):
    return report.RankFailure(rank, exception, ["Traceback ..."], at, host)


def test_root_cause_is_the_earliest_that_is_not_a_peers_echo():
    echo = failure(0, "RuntimeError: [pair.cc:561] Connection closed by peer [10.0.0.3]:1", 1.0)
    real = failure(3, "RuntimeError: deliberate failure", 2.0, "algo-2")
    later = failure(2, "ValueError: also bad", 3.0, "algo-2")
    assert report.root_cause([echo, later, real]) is real
    assert report.root_cause([echo]) is echo
    assert report.root_cause([]) is None


@pytest.mark.parametrize(
    "junk", [None, "x", {}, {"rank": "a", "exception": "E", "traceback": []}, {"rank": 1}]
)
def test_a_malformed_report_from_a_worker_is_ignored(junk):
    assert report.RankFailure.from_dict(junk) is None


# --- byoc-init's mode switch ----------------------------------------------------------------------
def test_no_command_in_a_training_job_runs_train(tmp_path):
    env = {C.ML_ROOT_ENV: str(make_tree(tmp_path))}
    assert init.command_for([], env) == init.TRAIN
    assert init.command_for(["dev"], env) == init.TRAIN
    assert init.command_for(["bash", "-c", "x"], env) == ["bash", "-c", "x"]


def test_no_command_outside_a_job_is_development_mode(tmp_path):
    env = {C.ML_ROOT_ENV: str(tmp_path / "none")}
    assert init.command_for([], env)[-2:] == ["-m", "byoc.dev"]


# --- SIGTERM once the result is known -------------------------------------------------------------
def test_sigterm_stops_the_job_until_its_result_is_known():
    from byoc.errors import Terminated
    from byoc.launch import Shutdown

    shutdown = Shutdown()
    with pytest.raises(Terminated):
        shutdown.on_sigterm(15, None)
    shutdown = Shutdown()
    shutdown.result_known = True
    shutdown.on_sigterm(15, None)  # no exception: the known result stands
    assert shutdown.requested.is_set()  # and the leader's last waits end now


# --- a host that failed ends the others' ranks (torchrun; horovodrun with outsiders) -----------
def test_a_worker_that_failed_ends_the_leaders_work_after_a_grace(monkeypatch, capsys):
    import subprocess
    import threading
    import time

    from byoc import coordinator, session

    state = coordinator.JobState(["algo-1", "algo-2"], lambda h: {"127.0.0.1"})
    proc = subprocess.Popen(["sleep", "60"])
    try:
        t0 = time.monotonic()
        guard = threading.Thread(target=session.failure_guard(state, 0.5), args=(proc,))
        guard.start()
        state.report({"host": "algo-2", "exit_code": 0}, None)  # a success ends nothing
        time.sleep(1.0)  # the deliberate delay under test: the guard must not act on it
        assert proc.poll() is None
        state.report({"host": "algo-2", "exit_code": 1}, None)
        guard.join(30)
        assert proc.poll() is not None and time.monotonic() - t0 < 20
        assert "algo-2 failed; this host's ranks still run" in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()
