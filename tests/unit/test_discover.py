"""byoc-discover-hosts: candidates parsed and refused, hosts probed over loopback, bounded; a
known host that misses probes kept for the grace, its memory between calls and the log."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest
from byoc import discover

ENV = {"BYOC_DISCOVER_HOSTS": "node{0..2}"}


def run(capsys, argv=(), env=None):
    rc = discover.main(list(argv), dict(env or {}))
    out, err = capsys.readouterr()
    return rc, out, err


class Listener:
    """A TCP server on a loopback address: `banner` bytes to each client, or silence."""

    def __init__(self, host: str, port: int, banner: bytes | None):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(16)
        self.banner = banner
        self.held: list[socket.socket] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.banner is not None:
                conn.sendall(self.banner)
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    """Every call's memory and log in this test's directory, not the machine's /tmp."""
    where = tmp_path / "state"
    monkeypatch.setattr(discover.S, "default_state_dir", lambda env, uid: str(where))
    return where


@pytest.fixture
def port():
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("node{0..2}", ["node0:1", "node1:1", "node2:1"]),
        ("a, b:4\nc", ["a:1", "b:4", "c:1"]),
        ("gpu{08..10}:8", ["gpu08:8", "gpu09:8", "gpu10:8"]),
        ("n{1..2}.cluster.local", ["n1.cluster.local:1", "n2.cluster.local:1"]),
        ("a,a:3", ["a:1"]),  # first mention wins
    ],
)
def test_candidates_from_the_variable(spec, expected):
    cfg = discover.S.load_discovery({"BYOC_DISCOVER_HOSTS": spec})
    got = [f"{c.host}:{c.slots}" for c in discover.candidates(cfg, 1)]
    assert got == expected


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "no candidates: set BYOC_DISCOVER_HOSTS"),
        ({"BYOC_DISCOVER_HOSTS": "node{3..1}"}, "a range from low to high"),
        ({"BYOC_DISCOVER_HOSTS": "n{0..5000}"}, "at most 1024"),
        ({"BYOC_DISCOVER_HOSTS": "n{0..2}{0..2}"}, "the only range form"),
        ({"BYOC_DISCOVER_HOSTS": "a:0"}, "slots must be a whole number"),
        ({"BYOC_DISCOVER_HOSTS": "a:x"}, "slots must be a whole number"),
        ({"BYOC_DISCOVER_HOSTS": "root@a"}, "'root@a' is not a host name"),
        ({"BYOC_DISCOVER_HOSTS": "a;reboot"}, "is not a host name"),
        ({"BYOC_DISCOVER_HOSTS": "-oProxyCommand=x"}, "is not a host name"),
        ({"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_SLOTS": "0"}, "BYOC_DISCOVER_SLOTS='0'"),
        ({"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_PORT": "70000"}, "BYOC_DISCOVER_PORT"),
        ({"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_TIMEOUT": "nan"}, "BYOC_DISCOVER_TIMEOUT"),
        ({"BYOC_DISCOVER_FILE": "/nonexistent/hosts"}, "BYOC_DISCOVER_FILE=/nonexistent/hosts"),
    ],
)
def test_bad_candidates_exit_2_naming_the_variable(capsys, env, message):
    rc, out, err = run(capsys, env=env)
    assert rc == 2
    assert out == ""
    assert message in err, err


@pytest.mark.parametrize(
    "env, argv, expected",
    [
        ({}, [], 22),
        ({"SSH_PORT": "2222"}, [], 2222),  # the container's own sshd (development mode)
        ({"SSH_PORT": " 2022 "}, [], 2022),
        ({"SSH_PORT": ""}, [], 22),  # set but empty: as unset
        ({"SSH_PORT": "2222", "BYOC_DISCOVER_PORT": "2200"}, [], 2200),  # said outright: it wins
        ({"SSH_PORT": "2222", "BYOC_DISCOVER_PORT": " "}, [], 2222),
        ({"SSH_PORT": "2222"}, ["--port", "23"], 23),  # the option over both
        # train's own sshd (BYOC_SSH_PORT) is not followed: train never runs discovery
        ({"BYOC_SSH_PORT": "2222"}, [], 22),
    ],
)
def test_the_port_follows_the_containers_sshd_unless_given(env, argv, expected):
    cfg = discover.parse_args(["--hosts", "a", *argv], discover.S.load_discovery(env))
    assert cfg.port == expected


@pytest.mark.parametrize(
    "env, message",
    [
        ({"SSH_PORT": "70000"}, "SSH_PORT='70000': expected a whole number from 1 to 65535"),
        ({"SSH_PORT": "tcp://10.0.0.1:22"}, "SSH_PORT='tcp://10.0.0.1:22'"),
        ({"SSH_PORT": "0", "BYOC_DISCOVER_PORT": ""}, "SSH_PORT='0'"),
        ({"SSH_PORT": "2222", "BYOC_DISCOVER_PORT": "x"}, "BYOC_DISCOVER_PORT='x'"),
    ],
)
def test_a_bad_port_exits_2_naming_its_variable(capsys, env, message):
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_HOSTS": "a", **env})
    assert rc == 2 and out == ""
    assert message in err, err
    if "BYOC_DISCOVER_PORT=" not in message:
        assert "unless BYOC_DISCOVER_PORT is set" in err, err


def test_probes_the_port_ssh_port_names(capsys, port):
    """End to end: with only SSH_PORT set, the host whose sshd listens there is listed."""
    server = Listener("127.0.0.2", port, b"SSH-2.0-OpenSSH_9.6\r\n")
    try:
        rc, out, _ = run(capsys, env={"BYOC_DISCOVER_HOSTS": "127.0.0.2", "SSH_PORT": str(port)})
    finally:
        server.close()
    assert rc == 0 and out == "127.0.0.2:1\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--hosts", "a", "--slots", "-1"], "--slots='-1'"),
        (["--hosts", "a", "--port", "0"], "--port='0'"),
        (["--hosts", "a", "--timeout", "0"], "--timeout='0'"),
    ],
)
def test_bad_options_exit_2_naming_the_option(capsys, argv, message):
    rc, out, err = run(capsys, argv)
    assert rc == 2 and out == ""
    assert message in err, err


def test_file_lines_comments_and_bad_line(tmp_path, capsys):
    hosts = tmp_path / "hosts"
    hosts.write_text("# the job's hosts\nnode0:2\n\nnode{1..2}   # added later\n")
    cfg = discover.S.load_discovery({"BYOC_DISCOVER_FILE": str(hosts)})
    assert [(c.host, c.slots) for c in discover.candidates(cfg, 3)] == [
        ("node0", 2),
        ("node1", 3),
        ("node2", 3),
    ]
    hosts.write_text("node0:2\nnode1 node2\n")
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_FILE": str(hosts)})
    assert rc == 2 and f"{hosts}, line 2" in err
    hosts.write_bytes(b"node0\n\xff\n")
    rc, _, err = run(capsys, env={"BYOC_DISCOVER_FILE": str(hosts)})
    assert rc == 2 and "not UTF-8" in err
    hosts.write_text("node0:9999\n")
    rc, _, err = run(capsys, env={"BYOC_DISCOVER_FILE": str(hosts)})
    assert rc == 2 and f"{hosts}, line 1" in err and "slots" in err


def test_lists_only_the_hosts_whose_ssh_port_answers(port, capsys):
    alive = Listener("127.0.0.2", port, b"SSH-2.0-OpenSSH_9.2\r\n")
    mute = Listener("127.0.0.3", port, None)  # accepts, never speaks: sshd not ready, or a trap
    other = Listener("127.0.0.4", port, b"HTTP/1.1 400\r\n")  # something else on the port
    try:
        start = time.monotonic()
        rc, out, err = run(
            capsys,
            ["--port", str(port), "--timeout", "1", "--slots", "2"],
            {"BYOC_DISCOVER_HOSTS": "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,no-such-host.invalid"},
        )
        elapsed = time.monotonic() - start
    finally:
        for server in (alive, mute, other):
            server.close()
    assert rc == 0, err
    assert out == "127.0.0.2:2\n"
    # Bounded by the timeout, with room for a loaded machine (horovodrun asks every second).
    assert elapsed < 10, elapsed


def test_a_stalled_name_lookup_does_not_outlast_the_timeout(monkeypatch, capsys):
    def slow(*args, **kwargs):
        time.sleep(30)
        raise socket.gaierror("late")

    monkeypatch.setattr(discover.socket, "getaddrinfo", slow)
    start = time.monotonic()
    rc, out, _ = run(capsys, ["--timeout", "0.3"], {"BYOC_DISCOVER_HOSTS": "node{0..3}"})
    assert rc == 0 and out == ""
    assert time.monotonic() - start < 10


def test_default_slots_are_this_hosts_gpus(monkeypatch, port, capsys):
    alive = Listener("127.0.0.2", port, b"SSH-2.0-x\r\n")
    monkeypatch.setattr(discover, "count_gpus", lambda: 4)
    try:
        rc, out, _ = run(capsys, ["--port", str(port)], {"BYOC_DISCOVER_HOSTS": "127.0.0.2"})
    finally:
        alive.close()
    assert (rc, out) == (0, "127.0.0.2:4\n")


def script(tmp_path, body: str, name: str = "discover_hosts.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o555)
    return path


def test_command_output_as_the_mpi_operator_writes_it(tmp_path, port, capsys):
    """The operator's discover_hosts.sh: `echo <pod>.<job>.<ns>.svc` per Running worker, no
    slots; BYOC_DISCOVER_SLOTS gives them, and only the pods whose sshd answers are listed."""
    cmd = script(tmp_path, "echo 127.0.0.2\necho 127.0.0.3\n")
    alive = Listener("127.0.0.2", port, b"SSH-2.0-x\r\n")
    try:
        env = {"BYOC_DISCOVER_COMMAND": str(cmd), "BYOC_DISCOVER_SLOTS": "4"}
        rc, out, err = run(capsys, ["--port", str(port)], env)
    finally:
        alive.close()
    assert (rc, out) == (0, "127.0.0.2:4\n"), err
    cfg = discover.S.load_discovery({"BYOC_DISCOVER_COMMAND": str(cmd)})
    assert [c.host for c in discover.candidates(cfg, 1)] == ["127.0.0.2", "127.0.0.3"]


@pytest.mark.parametrize(
    "body, message",
    [
        ("echo starting >&2\nexit 3\n", "exited 3: starting"),
        ("echo 'a b'\n", "'s output, line 1"),
        ("echo 'bad_host!'\n", "not a host name"),
        ("exec sleep 60\n", "no answer within 0.5 s"),
        ("sleep 60\n", "no answer within 0.5 s"),  # not exec'd: its child goes too
        ("head -c 3000000 /dev/zero | tr '\\0' a\n", "larger than"),
    ],
)
def test_a_failing_or_hostile_command_exits_2_naming_it(
    tmp_path, capsys, monkeypatch, body, message
):
    monkeypatch.setattr(discover.C, "DISCOVER_COMMAND_TIMEOUT", 0.5)
    cmd = script(tmp_path, body)
    start = time.monotonic()
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_COMMAND": str(cmd)})
    assert rc == 2 and out == ""
    assert f"BYOC_DISCOVER_COMMAND={cmd}" in err or f"{cmd}'s output" in err, err
    assert message in err, err
    assert time.monotonic() - start < 20


def test_a_command_leaves_nothing_running_and_its_output_is_whole(tmp_path, capsys):
    """A background child holding the output is ended with the program (its own session), and
    what the program printed before it exited is all read."""
    marker = tmp_path / "child-alive"
    cmd = script(tmp_path, f"echo node0\n(sleep 5; touch {marker}) &\necho node1:3\n")
    cfg = discover.S.load_discovery({"BYOC_DISCOVER_COMMAND": str(cmd)})
    start = time.monotonic()
    found = [(c.host, c.slots) for c in discover.candidates(cfg, 2)]
    assert found == [("node0", 2), ("node1", 3)]
    assert time.monotonic() - start < 4, "waited for the background child"
    time.sleep(6)
    assert not marker.exists(), "the program's background child outlived it"


def test_too_many_hosts_in_a_file_exit_2(tmp_path, capsys):
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"h{i}\n" for i in range(1100)))
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_FILE": str(hosts)})
    assert rc == 2 and out == "" and "more than 1024 hosts" in err, err


@pytest.mark.parametrize(
    "value", ["discover_hosts.sh", "/nonexistent/discover_hosts.sh", "/bin/echo node0"]
)
def test_command_must_be_an_absolute_path_that_runs(capsys, value):
    rc, out, err = run(capsys, ["--command", value])
    assert rc == 2 and out == ""
    assert f"BYOC_DISCOVER_COMMAND={value}" in err, err


# --- patience: a known host that misses probes --------------------------------------------------
BUSY = discover.Answer("no answer while waiting for the SSH banner")
REFUSED = discover.Answer("Connection refused while connecting", gone=True)
UNKNOWN = discover.Answer("unknown name ([Errno -2] Name or service not known)", gone=True)
OK = discover.Answer()


class Cluster:
    """A fake clock and a fake probe: `answers[host]` is what the next call's probe of host
    says (a host left out answers)."""

    def __init__(self, monkeypatch):
        self.now = 5000.0
        self.answers: dict[str, discover.Answer] = {}
        clock = type("Clock", (), {"monotonic": lambda _: self.now, "time": time.time})()
        monkeypatch.setattr(discover, "time", clock)
        monkeypatch.setattr(discover, "probe", self.probe)

    def probe(self, cands, port, timeout):
        return {c.host: self.answers.get(c.host, OK) for c in cands}

    def call(self, capsys, at: float, argv=(), **env):
        self.now = 5000.0 + at
        rc, out, err = run(capsys, argv, {"BYOC_DISCOVER_HOSTS": "node{0..1}", **env})
        assert rc == 0, err
        return out.split(), err


@pytest.fixture
def fake(monkeypatch):
    return Cluster(monkeypatch)


def test_a_known_host_missing_probes_stays_listed_for_the_grace_then_drops(fake, capsys):
    assert fake.call(capsys, 0) == (["node0:1", "node1:1"], "")
    fake.answers["node1"] = BUSY
    listed, err = fake.call(capsys, 2)
    assert listed == ["node0:1", "node1:1"]
    assert "node1 missed a probe (no answer while waiting for the SSH banner)" in err, err
    assert "silent 15 s (BYOC_DISCOVER_GRACE)" in err
    listed, err = fake.call(capsys, 14.9)
    assert (listed, err) == (["node0:1", "node1:1"], ""), "one line for the first miss only"
    listed, err = fake.call(capsys, 15.0)
    assert listed == ["node0:1"]
    assert "node1 dropped: silent 15.0 s, 15 s allowed" in err, err
    listed, err = fake.call(capsys, 17)
    assert (listed, err) == (["node0:1"], ""), "dropped stays dropped, without a second line"
    fake.answers["node1"] = OK  # back: listed at once, as any host that answers
    assert fake.call(capsys, 18) == (["node0:1", "node1:1"], "")


def test_a_host_that_answers_again_within_the_grace_never_leaves(fake, capsys):
    fake.call(capsys, 0)
    fake.answers["node1"] = BUSY
    fake.call(capsys, 1)
    fake.answers["node1"] = OK
    listed, err = fake.call(capsys, 9)
    assert listed == ["node0:1", "node1:1"]
    assert "node1 answers again, after 1 missed probe(s) and 9.0 s" in err, err
    fake.answers["node1"] = BUSY  # the silence counts from its last answer, not the first
    listed, err = fake.call(capsys, 23)
    assert listed == ["node0:1", "node1:1"] and "node1 missed a probe" in err


def test_a_new_host_is_listed_only_once_it_answers(fake, capsys):
    fake.answers["node1"] = BUSY  # a host that never answered gets no patience
    assert fake.call(capsys, 0) == (["node0:1"], "")
    assert fake.call(capsys, 1) == (["node0:1"], "")
    fake.answers["node1"] = OK
    assert fake.call(capsys, 2) == (["node0:1", "node1:1"], ""), "no wait for a join"


@pytest.mark.parametrize("answer", [REFUSED, UNKNOWN], ids=["refused", "unknown-name"])
def test_a_definite_no_drops_a_known_host_at_once(fake, capsys, answer):
    fake.call(capsys, 0)
    fake.answers["node1"] = answer
    listed, err = fake.call(capsys, 1)
    assert listed == ["node0:1"]
    assert f"node1 dropped: {answer.why}" in err, err


def test_a_host_taken_out_of_the_candidates_drops_at_once(fake, capsys):
    fake.call(capsys, 0)
    fake.answers["node1"] = BUSY
    listed, _ = fake.call(capsys, 1, BYOC_DISCOVER_HOSTS="node0")
    assert listed == ["node0:1"]
    # Other candidates are another memory: back to node{0..1}, node1 is still known there.
    assert fake.call(capsys, 2)[0] == ["node0:1", "node1:1"]


def test_grace_0_drops_at_the_first_missed_probe(fake, capsys):
    fake.call(capsys, 0, BYOC_DISCOVER_GRACE="0")
    fake.answers["node1"] = BUSY
    listed, err = fake.call(capsys, 1, BYOC_DISCOVER_GRACE="0")
    assert listed == ["node0:1"] and "node1 dropped: silent 1.0 s, 0 s allowed" in err
    fake.answers["node1"] = OK
    fake.call(capsys, 2)
    fake.answers["node1"] = BUSY
    assert fake.call(capsys, 3, ["--grace", "0.5"])[0] == ["node0:1"], "--grace overrides"


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "601", "1e9", "15s", "0x10"])
def test_hostile_grace_is_refused_naming_it(capsys, value):
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_GRACE": value})
    assert rc == 2 and out == ""
    assert f"BYOC_DISCOVER_GRACE={value!r}: expected a number of seconds, 0 or more" in err, err
    rc, out, err = run(capsys, ["--hosts", "a", "--grace", value])
    assert rc == 2 and f"--grace={value!r}" in err, err


def test_grace_default_and_bounds():
    load = discover.S.load_discovery
    assert load({}).grace == 15.0
    assert load({"BYOC_DISCOVER_GRACE": "0"}).grace == 0.0
    assert load({"BYOC_DISCOVER_GRACE": " 600 "}).grace == 600.0


@pytest.mark.parametrize("value", ["state", "./state", "~/state", "/tmp/a\0b"])
def test_a_state_dir_that_is_not_absolute_is_refused_naming_it(capsys, value):
    rc, out, err = run(capsys, env={"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_STATE_DIR": value})
    assert rc == 2 and out == ""
    assert f"BYOC_DISCOVER_STATE_DIR={value!r}: expected an absolute path" in err, err


@pytest.mark.parametrize("kind", ["file", "link", "group-writable", "other-user"])
def test_a_state_dir_not_ours_alone_is_refused_naming_it(tmp_path, capsys, kind):
    where = tmp_path / "d"
    if kind == "file":
        where.write_text("")
    elif kind == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        where.symlink_to(tmp_path / "real")
    else:
        where.mkdir(mode=0o700)
        if kind == "group-writable":
            where.chmod(0o770)
        elif os.geteuid() == 0:
            os.chown(where, 12345, 12345)
        else:
            pytest.skip("only root can give a directory away")
    env = {"BYOC_DISCOVER_HOSTS": "a", "BYOC_DISCOVER_STATE_DIR": str(where)}
    rc, out, err = run(capsys, env=env)
    assert rc == 2 and out == ""
    assert f"BYOC_DISCOVER_STATE_DIR={where}: " in err, err


def only_file(directory, suffix):
    found = [p for p in directory.iterdir() if p.name.endswith(suffix)]
    assert len(found) == 1, found
    return found[0]


def test_the_memory_and_log_stay_in_the_state_dir_and_are_private(fake, capsys, state_dir):
    (state_dir.parent / "sub").mkdir()
    (state_dir.parent / "hosts").write_text("node0\n")
    outside = sorted([p.name for p in state_dir.parent.iterdir()] + ["state"])
    for at in range(3):
        fake.call(capsys, at)
    # A path in the candidates' source names no file: the names are a hash of the sources.
    hosts = str(state_dir.parent / "sub" / ".." / "hosts")
    assert fake.call(capsys, 3, BYOC_DISCOVER_HOSTS="", BYOC_DISCOVER_FILE=hosts)[0] == ["node0:1"]
    assert sorted(p.name for p in state_dir.parent.iterdir()) == outside
    names = sorted(p.name for p in state_dir.iterdir())
    assert len(names) == 4 and all(n.startswith("discover-") for n in names), names
    assert not [n for n in names if n.endswith(".tmp")], "a temporary file was left"
    assert oct(state_dir.stat().st_mode & 0o777) == "0o700"
    for p in state_dir.iterdir():
        assert oct(p.stat().st_mode & 0o777) == "0o600", p
    fake.call(capsys, 4)
    doc = json.loads(max(state_dir.glob("*.json"), key=os.path.getmtime).read_text())
    assert sorted(doc["hosts"]) == ["node0", "node1"] and doc["version"] == 1


def corrupt(path):
    path.write_bytes(b"\x00\xff{not json")


def foreign_scope(path):
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, scope='["node{0..9}", "", "", 22]')))


def other_boot(path):
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, boot="another-boot")))


def future_time(path):
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, hosts={"node1": {"at": 1e12, "missed": 0}})))


def bad_host(path):
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(dict(doc, hosts={"-oProxyCommand=x": {"at": 1.0, "missed": 0}})))


def not_an_object(path):
    path.write_text("[1, 2, 3]")


def huge(path):
    path.write_text(" " * (2 << 20) + "{}")


def a_link(path):
    target = path.with_name("elsewhere")
    os.replace(path, target)
    path.symlink_to(target)


def a_directory(path):
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "spoil, message",
    [
        (corrupt, "not a state file of byoc-discover-hosts; ignored"),
        (not_an_object, "not a state file of byoc-discover-hosts; ignored"),
        (huge, "not a state file of byoc-discover-hosts; ignored"),
        (foreign_scope, "written for other candidates or another version; ignored"),
        (other_boot, "written before this machine restarted; ignored"),
        (future_time, "its hosts are malformed; ignored"),
        (bad_host, "its hosts are malformed; ignored"),
        (a_link, "cannot be read"),
        (a_directory, "not a file of this user's; ignored"),
    ],
)
def test_a_corrupt_or_foreign_memory_is_ignored_with_a_message(
    fake, capsys, state_dir, spoil, message
):
    fake.call(capsys, 0)
    state = only_file(state_dir, ".json")
    spoil(state)
    fake.answers["node1"] = BUSY
    listed, err = fake.call(capsys, 1)
    # Ignored: node1 is not known any more, so its missed probe drops it (afresh, as a new job).
    assert listed == ["node0:1"]
    assert f"byoc-discover-hosts: {state}: " in err and message in err, err
    if spoil is not a_directory:
        fake.answers["node1"] = OK
        fake.call(capsys, 2)
        assert json.loads(state.read_text())["hosts"].keys() == {"node0", "node1"}


def test_every_answer_is_logged_and_the_log_is_bounded(fake, capsys, state_dir, monkeypatch):
    fake.call(capsys, 0)
    fake.answers["node1"] = BUSY
    fake.call(capsys, 1)
    fake.answers["node1"] = REFUSED
    fake.call(capsys, 2)
    lines = only_file(state_dir, ".log").read_text().splitlines()
    assert len(lines) == 3, lines
    assert "listed=2 node0:1 new 0.000s node1:1 new 0.000s" in lines[0]
    assert "listed=2 node0:1 ok 0.000s node1:1 kept silent=1.0s (no answer while" in lines[1]
    assert "listed=1 node0:1 ok 0.000s node1:1 dropped (Connection refused" in lines[2]
    assert lines[0][:4].isdigit() and "T" in lines[0].split()[0], "a wall-clock time first"

    monkeypatch.setattr(discover.C, "DISCOVER_LOG_MAX_BYTES", 1000)
    for at in range(3, 100):
        fake.call(capsys, at)
    logs = sorted(p.name for p in state_dir.iterdir() if ".log" in p.name)
    assert len(logs) == 2 and logs[1].endswith(".log.1"), logs
    for name in logs:
        assert (state_dir / name).stat().st_size < 1000 + 200


def test_probe_tells_a_definite_no_from_a_busy_host(port):
    """Over loopback: nothing listening (refused) and an unknown name are definite; a silent
    sshd and one that closes before its banner (past MaxStartups) are busy."""
    mute = Listener("127.0.0.3", port, None)
    closing = socket.socket()
    closing.bind(("127.0.0.4", port))
    closing.listen(4)

    def close_each():
        while True:
            try:
                conn, _ = closing.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=close_each, daemon=True).start()
    alive = Listener("127.0.0.5", port, b"SSH-2.0-x\r\n")
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "no-such-host.invalid"]
    try:
        found = discover.probe([discover.Candidate(h, 1) for h in hosts], port, 1.0)
    finally:
        for server in (mute, closing, alive):
            server.close()
    assert found["127.0.0.5"].ok
    assert found["127.0.0.2"].gone and "refused" in found["127.0.0.2"].why
    assert (
        found["no-such-host.invalid"].gone and "unknown name" in found["no-such-host.invalid"].why
    )
    assert not found["127.0.0.3"].gone and "waiting for the SSH banner" in found["127.0.0.3"].why
    assert not found["127.0.0.4"].gone and "closed before the SSH banner" in found["127.0.0.4"].why


def test_a_name_that_does_not_resolve_in_time_is_a_definite_no(monkeypatch):
    """No sign of life: a stopped container's name can fail slowly where the resolver forwards
    unknown names to a slow DNS server, so a stalled lookup gets no patience."""
    release = threading.Event()

    def stalled(*args, **kwargs):
        release.wait(30)
        raise socket.gaierror("late")

    monkeypatch.setattr(discover.socket, "getaddrinfo", stalled)
    try:
        found = discover.probe([discover.Candidate("node1", 1)], 22, 0.2)
    finally:
        release.set()
    assert found["node1"].gone
    assert found["node1"].why == "no answer within 0.2 s while resolving its name"
