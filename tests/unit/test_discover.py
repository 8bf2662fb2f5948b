"""byoc-discover-hosts: candidates parsed and refused, hosts probed over loopback, bounded."""

from __future__ import annotations

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
