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
