"""Development mode (`docker run IMAGE`, no command): JupyterLab and sshd, run the way users do.

Ports are published on loopback only, at ports the engine picks.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.container.support import api_status, host_port, logs
from tests.helpers import wait_until

paramiko = pytest.importorskip("paramiko", reason="paramiko is not installed (make test does)")

LOOPBACK_PORTS = {"8888/tcp": ("127.0.0.1", None), "22/tcp": ("127.0.0.1", None)}


def new_key() -> tuple[paramiko.PKey, str]:
    key = paramiko.RSAKey.generate(2048)
    return key, f"{key.get_name()} {key.get_base64()} test@host"


def ssh_client(port: int, user: str = "root", **auth) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # new container, new host key
    client.connect(
        "127.0.0.1",
        port=port,
        username=user,
        allow_agent=False,
        look_for_keys=False,
        timeout=10,
        banner_timeout=10,
        auth_timeout=10,
        **auth,
    )
    return client


def ssh_run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, stderr = client.exec_command(command, timeout=60)
    out = stdout.read().decode() + stderr.read().decode()
    return stdout.channel.recv_exit_status(), out


def wait_for_ssh(port: int, key: paramiko.PKey, user: str = "root") -> paramiko.SSHClient:
    return wait_until(
        lambda: ssh_client(port, user, pkey=key), timeout=60, interval=0.5, what="SSH login"
    )


@pytest.fixture
def key_pair():
    return new_key()


def start_dev(containers, environment=None, **kw):
    return containers.start(None, environment=environment or {}, ports=LOOPBACK_PORTS, **kw)


def test_no_command_starts_jupyter_that_answers_only_with_the_token(containers):
    started = time.monotonic()
    c = start_dev(containers)
    port = host_port(c, "8888/tcp")
    token = wait_until(
        # The URL opens the getting-started notebook the container copied into /workspace.
        lambda: (
            (m := re.search(r"/lab/tree/getting-started\.ipynb\?token=([0-9a-f]{32,})", logs(c)))
            and m.group(1)
        ),
        timeout=60,
        what="the token in the log",
    )
    assert wait_until(lambda: api_status(port, token) == 200, timeout=90, what="Jupyter up")
    print(f"\ndocker run -> Jupyter API 200: {time.monotonic() - started:.1f} s")
    assert api_status(port, None) == 403
    assert api_status(port, "0" * len(token)) == 403
    # The token is passed in the environment, never on a command line others can read.
    code, out = c.exec_run(["bash", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])
    assert token not in out.decode(errors="replace")


def test_a_given_token_is_used_and_not_printed(containers):
    c = start_dev(containers, {"JUPYTER_TOKEN": "given-token-123"})
    port = host_port(c, "8888/tcp")
    wait_until(lambda: api_status(port, "given-token-123") == 200, timeout=90, what="Jupyter up")
    assert "given-token-123" not in logs(c)


def test_an_empty_token_is_refused(containers):
    code, out = containers.run(None, environment={"JUPYTER_TOKEN": ""}, timeout=60)
    assert code == 2, out
    assert "Jupyter without a token is refused" in out


def test_ssh_takes_the_right_key_only_and_no_password(containers, key_pair):
    key, public = key_pair
    c = start_dev(containers, {"SSH_AUTHORIZED_KEYS": public, "BYOC_JUPYTER": "0"})
    port = host_port(c, "22/tcp")
    client = wait_for_ssh(port, key)
    try:
        # A plain `ssh host cmd` gets the image's PATH: horovodrun and the venv's python.
        code, out = ssh_run(client, "command -v horovodrun && python -c 'import horovod.torch'")
        assert (code, out.strip()) == (0, "/opt/venv/bin/horovodrun"), out
    finally:
        client.close()
    with pytest.raises(paramiko.AuthenticationException):
        ssh_client(port, pkey=new_key()[0])
    # The server offers public keys only: a password is not even asked for.
    with pytest.raises(paramiko.BadAuthenticationType) as excinfo:
        ssh_client(port, password="root")
    assert excinfo.value.allowed_types == ["publickey"]


def test_authorized_keys_from_a_mounted_file(containers, key_pair, tmp_path):
    key, public = key_pair
    keys = tmp_path / "authorized_keys"
    keys.write_text(public + "\n")
    keys.chmod(0o644)
    c = start_dev(
        containers,
        {"BYOC_JUPYTER": "0"},
        volumes={str(keys): {"bind": "/etc/byoc/authorized_keys", "mode": "ro"}},
    )
    client = wait_for_ssh(host_port(c, "22/tcp"), key)
    try:
        assert ssh_run(client, "echo ok") == (0, "ok\n")
    finally:
        client.close()


def test_two_containers_never_share_host_keys(containers, key_pair):
    _, public = key_pair
    env = {"SSH_AUTHORIZED_KEYS": public, "BYOC_JUPYTER": "0"}
    fingerprints = []
    for c in (start_dev(containers, env), start_dev(containers, env)):
        port = host_port(c, "22/tcp")

        def host_key(port=port):
            transport = paramiko.Transport(("127.0.0.1", port))
            try:
                transport.start_client(timeout=10)
                return transport.get_remote_server_key().get_fingerprint()
            finally:
                transport.close()

        fingerprints.append(wait_until(host_key, timeout=60, what="sshd answers"))
    assert fingerprints[0] != fingerprints[1]


def test_no_keys_means_no_sshd_and_a_message(containers):
    c = start_dev(containers)
    # The warnings come after every service has started (Jupyter's banner first, TensorBoard
    # next), so wait for the warning itself, not for the banner before it.
    wait_until(
        lambda: "sshd not started: no authorized keys" in logs(c),
        timeout=90,
        what="the no-keys warning",
    )
    assert "JupyterLab on port" in logs(c)
    code, out = c.exec_run(["bash", "-c", "pgrep -x sshd || echo none"])
    assert out.decode().strip() == "none"


def test_a_non_root_user_for_jupyter_and_ssh(containers, key_pair):
    key, public = key_pair
    c = start_dev(
        containers,
        {
            "BYOC_USER": "dev",
            "BYOC_UID": "1234",
            "SSH_AUTHORIZED_KEYS": public,
            "JUPYTER_TOKEN": "t0ken",
        },
    )
    client = wait_for_ssh(host_port(c, "22/tcp"), key, user="dev")
    try:
        code, out = ssh_run(
            client, "id -u; echo $HOME; touch /workspace/f && stat -c %u /workspace/f"
        )
        assert (code, out.split()) == (0, ["1234", "/home/dev", "1234"]), out
    finally:
        client.close()
    with pytest.raises(paramiko.AuthenticationException):
        ssh_client(host_port(c, "22/tcp"), "root", pkey=key)
    port = host_port(c, "8888/tcp")
    wait_until(lambda: api_status(port, "t0ken") == 200, timeout=90, what="Jupyter up")
    code, out = c.exec_run(["bash", "-c", "ps -o uid= -p $(pgrep -f jupyter-lab | head -1)"])
    assert out.decode().strip() == "1234"


@pytest.mark.timing  # a time bound
def test_docker_stop_of_the_dev_container_is_prompt(containers, key_pair):
    _, public = key_pair
    c = start_dev(containers, {"SSH_AUTHORIZED_KEYS": public, "JUPYTER_TOKEN": "t"})
    port = host_port(c, "8888/tcp")
    wait_until(lambda: api_status(port, "t") == 200, timeout=90, what="Jupyter up")
    started = time.monotonic()
    c.stop(timeout=10)
    took = time.monotonic() - started
    c.reload()
    assert took < 5, f"docker stop took {took:.1f} s (killed at the timeout?)"
    assert c.attrs["State"]["ExitCode"] == 0, logs(c)


def test_bad_dev_settings_exit_2_with_the_reason(containers):
    code, out = containers.run(None, environment={"BYOC_USER": "Not Valid"}, timeout=60)
    assert code == 2 and "BYOC_USER='Not Valid' is not a valid user name" in out, out
    code, out = containers.run(
        None, environment={"SSH_AUTHORIZED_KEYS": "-----BEGIN OPENSSH PRIVATE KEY-----"}, timeout=60
    )
    assert code == 2 and "public half" in out, out


def test_image_cmd_is_dev_and_bash_still_runs(image, containers):
    assert image.attrs["Config"]["Cmd"] == ["dev"]
    assert containers.run(["bash", "-c", "echo ok"], timeout=60) == (0, "ok\n")
