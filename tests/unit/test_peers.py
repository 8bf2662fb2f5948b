"""The hosts' meeting (coordinator over loopback), the SSH trust they write, the BASH_ENV hook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from byoc import config, coordinator, peers, session, settings, ssh
from byoc import constants as C
from byoc.errors import JobError
from byoc.launch import sdk

from tests.helpers import free_port
from tests.unit.fakes import make_tree

ROOT = Path(__file__).resolve().parents[2]
ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMnF8X0i4p2rZ4sH6qvS5c1kXzq0m5Vv2nL3yJ8eTz0a"


@pytest.fixture
def leader():
    """A coordinator on loopback for hosts algo-1..3, all of which "resolve" to 127.0.0.1."""
    addresses = {"algo-1": {"127.0.0.1"}, "algo-2": {"127.0.0.1"}, "algo-3": set()}
    state = coordinator.JobState(
        ["algo-1", "algo-2", "algo-3"], lambda h: set(addresses.get(h, ()))
    )
    port = free_port()
    server = coordinator.serve(state, port)
    yield state, port, addresses
    server.shutdown()


def member(host):
    return {"host": host, "user_key": f"{ED} {host}", "host_keys": [ED]}


def test_join_is_refused_for_strangers_and_impostors(leader):
    state, port, addresses = leader
    with pytest.raises(coordinator.Refused, match="not a host of this job"):
        coordinator.request("127.0.0.1", port, "/join", member("evil"))
    addresses["algo-2"] = {"10.9.9.9"}  # algo-2 is somewhere else: this caller is not algo-2
    with pytest.raises(coordinator.Refused, match=r"resolves to \['10.9.9.9'\]"):
        coordinator.request("127.0.0.1", port, "/join", member("algo-2"))
    # A name that does not resolve yet is "try again" (HTTP 503), never a final refusal.
    with pytest.raises(ConnectionError, match="503"):
        coordinator.request("127.0.0.1", port, "/join", member("algo-3"))
    for bad in (
        {"user_key": 5},
        {"user_key": f"{ED}\nssh-rsa AAAA evil"},  # a second authorized_keys line, no from=
        {"user_key": f'command="sh" {ED}'},  # options smuggled in
        {"host_keys": [f"{ED}\n@cert-authority * {ED}"]},  # any host key trusted
    ):
        with pytest.raises(coordinator.Refused, match="must be OpenSSH public keys, one line"):
            coordinator.request("127.0.0.1", port, "/join", {"host": "algo-1", **bad})
    assert state.members == {}


@pytest.mark.parametrize("body", [b"[1]", b"{", b"x" * (coordinator.MAX_BODY + 1)])
def test_malformed_requests_get_400(leader, body):
    import urllib.error
    import urllib.request

    _, port, _ = leader
    req = urllib.request.Request(f"http://127.0.0.1:{port}/join", data=body)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400


def test_peers_are_complete_only_when_every_host_joined(leader):
    state, port, addresses = leader
    addresses["algo-3"] = {"127.0.0.1"}
    state.join(member("algo-1"), None)
    coordinator.request("127.0.0.1", port, "/join", member("algo-2"))
    assert coordinator.request("127.0.0.1", port, "/peers?host=algo-2")["complete"] is False
    coordinator.request("127.0.0.1", port, "/join", member("algo-3"))
    answer = coordinator.request("127.0.0.1", port, "/peers?host=algo-2")
    assert answer["complete"] and set(answer["hosts"]) == {"algo-1", "algo-2", "algo-3"}
    assert answer["hosts"]["algo-2"]["addresses"] == ["127.0.0.1"]
    assert state.wait_for(state.missing_peers_seen(["algo-2", "algo-3"]), 0.1) == {"algo-3"}


def test_the_client_asks_the_routes_the_leader_serves(leader):
    """coordinator.Client, the one client of the wire: join, peers, status and report land in
    the leader's state, as that host (which is what the leader counts as seen)."""
    state, port, addresses = leader
    addresses["algo-3"] = {"127.0.0.1"}
    state.join(member("algo-1"), None)
    clients = {
        h: coordinator.Client("127.0.0.1", port, h, appear=5, lost_after=5)
        for h in ("algo-2", "algo-3")
    }
    for host, client in clients.items():
        assert client.join(member(host)) == {}
    answer = clients["algo-2"].peers(lambda a: a["complete"])
    assert set(answer["hosts"]) == {"algo-1", "algo-2", "algo-3"}
    assert state.wait_for(state.missing_peers_seen(["algo-2"]), 0.1) == set()
    state.set("done", 3)
    assert clients["algo-3"].status(lambda a: a["state"] == "done")["exit_code"] == 3
    assert state.wait_for(state.missing_done_seen(["algo-2", "algo-3"]), 0.1) == {"algo-2"}
    assert state.missing_done_seen(["algo-2", "algo-9"])() == {"algo-2"}  # algo-9 never joined
    clients["algo-2"].report({"host": "algo-2", "exit_code": 0, "failure": None})
    clients["algo-3"].report({"host": "algo-3", "exit_code": 1, "failure": None})
    assert set(state.reported()) == {"algo-2", "algo-3"} and state.failed_hosts() == ["algo-3"]
    with pytest.raises(coordinator.Refused, match="not a host of this job"):
        coordinator.Client("127.0.0.1", port, "evil", appear=5, lost_after=5).report(
            {"host": "evil", "exit_code": 0}
        )


def test_a_failure_report_ends_the_wait_for_one(leader):
    state = leader[0]
    stop = threading.Event()
    t0 = time.monotonic()
    threading.Timer(0.3, stop.set).start()
    assert state.wait_for_failure(stop.is_set) == []  # stopped: nothing failed
    assert 0.2 < time.monotonic() - t0 < 5
    threading.Timer(0.3, lambda: state.report({"host": "algo-2", "exit_code": 137}, None)).start()
    assert state.wait_for_failure(lambda: False) == ["algo-2"]


def test_waits_end_at_their_bound_or_when_stopped(leader):
    state = leader[0]
    t0 = time.monotonic()
    assert state.wait_for(state.missing_members(["algo-2"]), 0.5) == {"algo-2"}
    assert 0.4 < time.monotonic() - t0 < 5
    stop = threading.Event()
    stop.set()
    t0 = time.monotonic()
    assert state.wait_for(state.missing_members(["algo-2"]), 60, stop) == {"algo-2"}
    assert time.monotonic() - t0 < 5


def test_a_leader_that_never_answers_is_given_up_on_in_time():
    t0 = time.monotonic()
    with pytest.raises(coordinator.LeaderLost, match="did not answer on port"):
        coordinator.poll("127.0.0.1", free_port(), "/status", bool, appear=1, lost_after=1)
    assert time.monotonic() - t0 < 10


def test_a_worker_joins_a_leader_that_starts_late(tmp_path):
    """However late the leader comes (within BYOC_LEADER_TIMEOUT), the worker waits for it."""
    port = free_port()
    # The leader is 127.0.0.1 (it sorts first): a name this machine resolves.
    cfg = config.load(make_tree(tmp_path, hosts=("127.0.0.1", "algo-2"), current="algo-2"))
    the_settings = settings.load(
        {C.COORD_PORT_ENV: str(port), C.LEADER_TIMEOUT_ENV: "30", C.LEADER_LOST_ENV: "2"}
    )
    state = coordinator.JobState(cfg.hosts, lambda h: {"127.0.0.1"})
    servers = []

    def late_leader():
        time.sleep(3)  # the worker starts polling before the leader exists
        servers.append(coordinator.serve(state, port))
        state.join(member("127.0.0.1"), None)

    threading.Thread(target=late_leader, daemon=True).start()
    try:
        members = peers.follow(cfg, member("algo-2"), the_settings)
    finally:
        for s in servers:
            s.shutdown()
    assert sorted(m.host for m in members) == ["127.0.0.1", "algo-2"]


def test_a_worker_stops_waiting_when_the_leader_gave_up(tmp_path):
    port = free_port()
    cfg = config.load(make_tree(tmp_path, hosts=("127.0.0.1", "algo-2"), current="algo-2"))
    state = coordinator.JobState(cfg.hosts, lambda h: {"127.0.0.1"})
    server = coordinator.serve(state, port)
    state.set("done", 1)
    try:
        with pytest.raises(JobError, match="gave up before all hosts joined"):
            peers.follow(cfg, member("algo-2"), settings.load({C.COORD_PORT_ENV: str(port)}))
    finally:
        server.shutdown()


def test_the_leader_names_the_hosts_that_never_joined(tmp_path):
    cfg = config.load(make_tree(tmp_path))
    state = coordinator.JobState(cfg.hosts, lambda h: {"127.0.0.1"})
    with pytest.raises(JobError, match="algo-2 did not join the job within 1 s"):
        peers.lead(state, cfg, member("algo-1"), settings.load({C.PEER_TIMEOUT_ENV: "1"}))


def test_one_lifecycle_leads_and_follows_over_the_wire(tmp_path):
    """byoc.session, as every launcher uses it: the worker meets the leader, sees "running",
    reports; the leader ends with the result and leaves once the worker has seen it."""
    port = free_port()
    the_settings = settings.load(
        {C.COORD_PORT_ENV: str(port), C.LEADER_TIMEOUT_ENV: "30", C.LEADER_LOST_ENV: "5"}
    )
    hosts = ("127.0.0.1", "localhost")  # both resolve to loopback here; the first leads
    lead_cfg = config.load(make_tree(tmp_path / "a", hosts=hosts, current="127.0.0.1"))
    work_cfg = config.load(make_tree(tmp_path / "b", hosts=hosts, current="localhost"))
    seen: dict = {}

    def worker():
        follow = session.Following(work_cfg, the_settings)
        seen["members"] = sorted(m.host for m in follow.meet(member("localhost")))
        seen["state"] = follow.status(lambda a: a["state"] != "starting")["state"]
        follow.report({"host": "localhost", "exit_code": 0, "failure": None})
        seen["result"] = follow.status(lambda a: a["state"] == "done")["exit_code"]

    lead = session.Leading(lead_cfg, the_settings)
    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        assert sorted(m.host for m in lead.meet(member("127.0.0.1"))) == list(hosts)
        lead.running()
        assert lead.wait_for(lead.state.missing_reports(["localhost"]), 30) == set()
    finally:
        late = lead.end(7)
    t.join(30)
    assert late == set() and seen == {"members": list(hosts), "state": "running", "result": 7}


def test_a_leader_that_ends_early_does_not_wait_when_told(tmp_path):
    the_settings = settings.load({C.COORD_PORT_ENV: str(free_port())})
    cfg = config.load(make_tree(tmp_path, hosts=("127.0.0.1", "localhost"), current="127.0.0.1"))
    lead = session.Leading(cfg, the_settings)
    t0 = time.monotonic()
    assert lead.end(1, wait_seen=False) == set()
    assert time.monotonic() - t0 < session.DONE_SEEN_WAIT / 2


# --- what the hosts write -----------------------------------------------------------------------
MEMBERS = [
    ssh.Member("algo-1", ["10.0.0.1"], f"{ED} one", ["ssh-ed25519 HOSTKEY1"]),
    ssh.Member("algo-2", ["10.0.0.2"], f"{ED} two", ["ssh-ed25519 HOSTKEY2"]),
]


@pytest.fixture
def trust_paths(tmp_path, monkeypatch):
    for name in ("AUTHORIZED_KEYS", "KNOWN_HOSTS", "CLIENT_DROPIN"):
        monkeypatch.setattr(ssh, name, tmp_path / name.lower())
    return tmp_path


def test_one_way_trust_accepts_only_the_leaders_key_from_job_addresses(trust_paths):
    ssh.write_trust(MEMBERS, ["algo-1"], "algo-2", 2222, Path("/run/byoc/ssh/id_job"))
    keys = (trust_paths / "authorized_keys").read_text().splitlines()
    assert keys == [
        f'from="10.0.0.1,10.0.0.2,127.0.0.1",no-agent-forwarding,no-X11-forwarding {ED} one'
    ]
    assert oct((trust_paths / "authorized_keys").stat().st_mode & 0o777) == "0o600"
    known = (trust_paths / "known_hosts").read_text().splitlines()
    assert known == [
        "algo-1,10.0.0.1 ssh-ed25519 HOSTKEY1",
        "algo-2,10.0.0.2,localhost,127.0.0.1 ssh-ed25519 HOSTKEY2",
    ]
    client = (trust_paths / "client_dropin").read_text()
    assert client.startswith("Host 10.0.0.1 10.0.0.2 algo-1 algo-2\n")  # job hosts only
    for line in ("Port 2222", "StrictHostKeyChecking yes", "BatchMode yes", "IdentitiesOnly yes"):
        assert f"    {line}\n" in client


def test_both_ways_trust_accepts_every_hosts_key(trust_paths):
    ssh.write_trust(MEMBERS, ["algo-1", "algo-2"], "algo-1", 22, Path("/root/.ssh/id_ed25519"))
    assert len((trust_paths / "authorized_keys").read_text().splitlines()) == 2


def test_sshd_takes_keys_only_from_the_jobs_file():
    lines = ssh.sshd_settings(22, [Path("/etc/ssh/ssh_host_ed25519_key")])
    for line in (
        f"AuthorizedKeysFile {ssh.AUTHORIZED_KEYS}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowAgentForwarding no",
    ):
        assert line in lines


@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="no sshd on this machine")
def test_sshd_accepts_the_configuration(tmp_path):
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    config_file = ssh.write_sshd_config(2222, [key], tmp_path / "sshd_config")
    subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(config_file)], check=True)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="no ssh-keygen on this machine")
def test_identity_is_made_once_and_an_existing_one_is_kept(tmp_path):
    path = tmp_path / ".ssh" / "id_ed25519"
    first = ssh.ensure_identity(path)
    before = path.read_bytes()
    assert ssh.ensure_identity(path) == first and path.read_bytes() == before
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    path.write_text("not a key\n")
    with pytest.raises(ssh.SSHError, match="not a usable unencrypted private key"):
        ssh.ensure_identity(path)


def test_an_unreadable_key_file_is_an_error_naming_the_variable(tmp_path):
    env = {C.SSH_KEY_FILE_ENV: str(tmp_path / "missing")}
    with pytest.raises(ssh.SSHError, match="BYOC_SSH_PRIVATE_KEY_FILE=.*cannot be read"):
        ssh.given_private_key(env)


# --- SageMaker SDK v3 ---------------------------------------------------------------------------
def test_sdk_driver_is_recognised_from_its_script(tmp_path):
    drivers = tmp_path / "input" / "data" / "sm_drivers"
    drivers.mkdir(parents=True)
    argv = ["/bin/bash", "-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh && x"]
    (drivers / "sm_train.sh").write_text("$SM_PYTHON_CMD .../distributed_drivers/mpi_driver.py\n")
    assert sdk.sdk_driver(argv, tmp_path) == "mpi"
    (drivers / "sm_train.sh").write_text("... distributed_drivers/torchrun_driver.py\n")
    assert sdk.sdk_driver(argv, tmp_path) == "torchrun"
    assert sdk.sdk_driver(["python", "x.py"], tmp_path) is None


def test_sdk_set_up_is_skipped_outside_a_job_and_where_not_asked(tmp_path):
    argv = ["/bin/bash", "-c", "/opt/ml/input/data/sm_drivers/sm_train.sh"]
    assert sdk.prepare(argv, {C.ML_ROOT_ENV: str(tmp_path / "nothing")}) is None
    root = make_tree(tmp_path)
    assert sdk.prepare(argv, {C.ML_ROOT_ENV: str(root), C.SSH_TRUST_ENV: "off"}) is None
    assert not (root / "output" / "failure").exists()


def test_sdk_set_up_with_a_bad_setting_fails_the_job_saying_why(tmp_path):
    root = make_tree(tmp_path)
    code, message = sdk.prepare(["x"], {C.ML_ROOT_ENV: str(root), C.SSH_TRUST_ENV: "maybe"})
    assert code == 2 and "BYOC_SSH_TRUST='maybe'" in message
    assert "BYOC_SSH_TRUST" in (root / "output" / "failure").read_text()


# --- docker/bash-env.sh ---------------------------------------------------------------------------
def pid1_bash(tmp_path: Path, script: str, env: dict[str, str], options=()):
    """Run `bash [options] -c script` as PID 1 of a new PID namespace, BASH_ENV = the image's
    hook with byoc-init replaced by a recorder of its arguments."""
    recorder = tmp_path / "byoc-init"
    recorder.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\necho recorded\n')
    recorder.chmod(0o755)
    hook = tmp_path / "bash-env.sh"
    hook.write_text(
        (ROOT / "docker" / "bash-env.sh")
        .read_text()
        .replace("/opt/venv/bin/byoc-init", str(recorder))
    )
    full = {
        "PATH": os.environ["PATH"],
        "BASH_ENV": str(hook),
        "RECORD": str(tmp_path / "rec"),
        **env,
    }
    return subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "/bin/bash", *options, "-c", script]
        + ["arg0", "a b"],
        env=full,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _can_unshare() -> bool:
    try:
        probe = ["unshare", "--pid", "--fork", "true"]
        return subprocess.run(probe, check=False, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(
    not _can_unshare(), reason="cannot make a PID namespace here (unshare needs root)"
)


@needs_unshare
def test_bash_as_pid_1_hands_its_command_to_byoc_init(tmp_path):
    result = pid1_bash(tmp_path, 'echo "direct $$"', {})
    assert result.stdout == "recorded\n", result.stderr
    recorded = (tmp_path / "rec").read_text().splitlines()
    assert recorded == ["/bin/bash", "-c", 'echo "direct $$"', "arg0", "a b"]


@needs_unshare
def test_bash_options_survive_the_hand_over(tmp_path):
    """`bash -euo pipefail -c CMD` (a Kubernetes command:) keeps its options under byoc-init."""
    pid1_bash(tmp_path, "x", {}, options=["-eu", "-o", "pipefail"])
    recorded = (tmp_path / "rec").read_text().splitlines()
    assert recorded[:8] == ["/bin/bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail", "-c"]


@needs_unshare
def test_bash_under_byoc_init_runs_its_command_itself(tmp_path):
    result = pid1_bash(tmp_path, 'echo "direct $0 $1"', {C.INIT_MARKER_ENV: "1"})
    assert result.stdout == "direct arg0 a b\n" and not (tmp_path / "rec").exists()


def test_bash_that_is_not_pid_1_runs_its_command_itself(tmp_path):
    hook = tmp_path / "bash-env.sh"
    shutil.copy(ROOT / "docker" / "bash-env.sh", hook)
    result = subprocess.run(
        ["/bin/bash", "-c", "echo fine"],
        env={"PATH": os.environ["PATH"], "BASH_ENV": str(hook)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout == "fine\n" and result.returncode == 0


def test_member_lists_from_the_leader_are_checked():
    with pytest.raises(JobError, match="malformed list"):
        peers._members({"algo-1": {"addresses": ["x"]}})
    assert json.loads(json.dumps(peers.own_keys("algo-1", None)))["user_key"] == ""


@pytest.mark.parametrize("body", [b"[1]", b"{not json", b"partial"])
def test_an_answer_that_is_no_json_object_counts_as_no_answer(body):
    """Retried like silence (ConnectionError), never a traceback in a worker's wait."""
    import http.server

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + (50 if body == b"partial" else 0)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConnectionError):
            coordinator.request("127.0.0.1", server.server_port, "/status", timeout=5)
    finally:
        server.shutdown()
