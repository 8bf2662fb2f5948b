"""Development mode without Docker: settings, key handling, generated configs, the service loop."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from byoc import constants as C
from byoc import settings as byoc_settings
from byoc import ssh
from byoc.dev import files, keys, main, notebook, services, settings, user
from byoc.dev.settings import DevError

from tests.helpers import wait_until

ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMnF8X0i4p2rZ4sH6qvS5c1kXzq0m5Vv2nL3yJ8eTz0a alice@laptop"
)
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 bob@desk"


def test_defaults_generate_a_token_and_run_as_root():
    cfg = settings.load({})
    assert cfg.jupyter and cfg.sshd and cfg.root
    assert cfg.token_generated and len(cfg.token) >= 32
    assert settings.load({}).token != cfg.token  # a new one per start
    assert (cfg.jupyter_port, cfg.ssh_port) == (8888, 22)
    assert cfg.notebook_dir == Path("/workspace")


def test_a_given_token_is_used_and_an_empty_one_refused():
    cfg = settings.load({C.JUPYTER_TOKEN_ENV: "s3cret"})
    assert (cfg.token, cfg.token_generated) == ("s3cret", False)
    for empty in ("", "  "):
        with pytest.raises(DevError, match="without a token is refused"):
            settings.load({C.JUPYTER_TOKEN_ENV: empty})
    # ... unless Jupyter is off altogether.
    assert not settings.load({C.JUPYTER_TOKEN_ENV: "", C.JUPYTER_ENABLED_ENV: "0"}).jupyter


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {C.JUPYTER_PORT_ENV: "http"},
            "JUPYTER_PORT='http': expected a whole number from 1 to 65535",
        ),
        (
            {C.DEV_SSH_PORT_ENV: "70000"},
            "SSH_PORT='70000': expected a whole number from 1 to 65535",
        ),
        ({C.JUPYTER_PORT_ENV: "2222", C.DEV_SSH_PORT_ENV: "2222"}, "both 2222"),
        (
            {C.TENSORBOARD_PORT_ENV: "8888"},
            "JUPYTER_PORT and BYOC_TENSORBOARD_PORT are both 8888",
        ),
        ({C.TENSORBOARD_PORT_ENV: "-1"}, "BYOC_TENSORBOARD_PORT='-1': expected a whole number"),
        ({C.TENSORBOARD_ENABLED_ENV: "maybe"}, "BYOC_TENSORBOARD='maybe': expected one of"),
        ({C.NOTEBOOK_ENABLED_ENV: "2"}, "BYOC_NOTEBOOK='2': expected one of"),
        ({C.DEV_USER_ENV: "Bad User"}, "not a valid user name"),
        (
            {C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: "0"},
            "BYOC_UID='0': expected a whole number from 1 to 2147483646",
        ),
        (
            {C.DEV_USER_ENV: "dev", C.DEV_GID_ENV: "x"},
            "BYOC_GID='x': expected a whole number from 1 to 2147483646",
        ),
        ({C.SSHD_ENABLED_ENV: "maybe"}, "BYOC_SSHD='maybe': expected one of 1, true, yes, on, 0,"),
        ({C.JUPYTER_ENABLED_ENV: "2"}, "BYOC_JUPYTER='2': expected one of"),
        ({C.SSH_PEERS_ENV: "node*;rm -rf /"}, "not a host name"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(DevError, match=re.escape(message)):
        settings.load(env)


def test_flags_take_the_usual_spellings_and_default_to_on():
    for on in ("", " ", "1", "true", "Yes", " ON "):
        assert settings.load({C.SSHD_ENABLED_ENV: on}).sshd
    for off in ("0", "false", "No", "off"):
        assert not settings.load({C.SSHD_ENABLED_ENV: off, C.JUPYTER_ENABLED_ENV: off}).jupyter


def test_a_dev_error_is_a_settings_error():
    assert issubclass(DevError, byoc_settings.SettingsError)


def test_non_root_user_ids_default_to_1000_and_gid_to_uid():
    cfg = settings.load({C.DEV_USER_ENV: "dev"})
    assert (cfg.user, cfg.uid, cfg.gid, cfg.root) == ("dev", 1000, 1000, False)
    cfg = settings.load({C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: "1234"})
    assert (cfg.uid, cfg.gid) == (1234, 1234)
    assert settings.load({C.DEV_USER_ENV: "root"}).root


def test_keys_are_parsed_with_options_and_comments():
    text = f'# mine\n\n{ED25519}\nfrom="10.0.0.0/8" {RSA}\n'
    assert keys.parse_keys(text, "x") == [ED25519, f'from="10.0.0.0/8" {RSA}']


def test_a_private_key_or_junk_is_refused_with_its_source():
    with pytest.raises(DevError, match="private key.*public half"):
        keys.parse_keys("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "SSH_AUTHORIZED_KEYS")
    with pytest.raises(DevError, match=r"keys.txt, line 2: not an SSH public key"):
        keys.parse_keys(f"{ED25519}\nhunter2\n", "keys.txt")


def test_keys_merge_from_env_file_and_home_once_each(tmp_path):
    keyfile = tmp_path / "authorized_keys"
    keyfile.write_text(f"{ED25519}\n{RSA}\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text(RSA + "\n")
    cfg = settings.load({C.AUTHORIZED_KEYS_ENV: ED25519, C.AUTHORIZED_KEYS_FILE_ENV: str(keyfile)})
    assert keys.collect_keys(cfg, home) == [ED25519, RSA]


def test_a_named_key_file_must_exist_the_default_may_not(tmp_path, monkeypatch):
    cfg = settings.load({C.AUTHORIZED_KEYS_FILE_ENV: str(tmp_path / "missing")})
    with pytest.raises(DevError, match="does not exist"):
        keys.collect_keys(cfg, tmp_path)
    (tmp_path / "dir").mkdir()
    cfg = settings.load({C.AUTHORIZED_KEYS_FILE_ENV: str(tmp_path / "dir")})
    with pytest.raises(DevError, match="is a directory"):
        keys.collect_keys(cfg, tmp_path)
    monkeypatch.setattr(C, "DEFAULT_AUTHORIZED_KEYS_FILE", str(tmp_path / "absent"))
    assert keys.collect_keys(settings.load({}), tmp_path / "nobody") == []


def test_sshd_config_allows_public_keys_only_and_passes_the_path(tmp_path):
    env = {"PATH": "/opt/venv/bin:/usr/bin", "AWS_SECRET_ACCESS_KEY": "x", "JUPYTER_TOKEN": "t"}
    cfg = settings.load({C.DEV_SSH_PORT_ENV: "2022"})
    path = files.write_sshd_config(
        cfg, [Path("/etc/ssh/k")], Path("/run/ak"), env, tmp_path / "sshd_config"
    )
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    lines = text.splitlines()
    for expected in (
        "Port 2022",
        "HostKey /etc/ssh/k",
        "AuthorizedKeysFile /run/ak",
        "AuthenticationMethods publickey",
        "PasswordAuthentication no",
        "PermitEmptyPasswords no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AllowUsers root",
        'SetEnv "PATH=/opt/venv/bin:/usr/bin"',
        # Development mode's own: a person's editor and tunnels, a foreground sshd, who logs in.
        "AllowTcpForwarding yes",
        "AllowAgentForwarding yes",
        "Subsystem sftp internal-sftp",
        "UsePAM no",
        "PidFile none",
        "LogLevel INFO",
    ):
        assert expected in lines
    assert "AWS_SECRET" not in text and "JUPYTER_TOKEN" not in text
    cfg = settings.load({C.DEV_USER_ENV: "dev"})
    non_root = files.write_sshd_config(cfg, [], Path("/a"), {}, tmp_path / "b").read_text()
    assert "PermitRootLogin no" in non_root and "AllowUsers dev" in non_root
    assert "SetEnv" not in non_root


def test_profile_snippet_is_shell_quoted_and_keeps_secrets_out():
    env = {"PATH": "/opt/venv/bin:/usr/bin", "NCCL_DEBUG": "INFO it's", "AWS_ACCESS_KEY_ID": "x"}
    text = files.profile_text(env)
    assert "export PATH=/opt/venv/bin:/usr/bin\n" in text
    assert "export NCCL_DEBUG='INFO it'\"'\"'s'\n" in text
    assert "AWS" not in text
    out = subprocess.run(
        ["bash", "-c", f'{text}\necho "$NCCL_DEBUG"'], capture_output=True, text=True, check=True
    )
    assert out.stdout == "INFO it's\n"


def test_ssh_sessions_get_sshds_port_for_discovery(tmp_path):
    """byoc-discover-hosts in an SSH session probes SSH_PORT as in the container's shell."""
    env = {"PATH": "/opt/venv/bin:/usr/bin", C.DEV_SSH_PORT_ENV: "2222"}
    cfg = settings.load(env)
    text = files.write_sshd_config(cfg, [], Path("/a"), env, tmp_path / "c").read_text()
    assert 'SetEnv "PATH=/opt/venv/bin:/usr/bin" "SSH_PORT=2222"' in text.splitlines()
    assert "export SSH_PORT=2222\n" in files.profile_text(env)
    assert "SSH_PORT" not in files.profile_text({"PATH": "/usr/bin"})


def test_peer_client_config_has_no_prompts(tmp_path):
    cfg = settings.load({C.SSH_PEERS_ENV: "node*, gpu-?", C.DEV_SSH_PORT_ENV: "2022"})
    path = files.write_peers_config(cfg, tmp_path / "byoc-peers.conf")
    assert path.stat().st_mode & 0o777 == 0o644
    text = path.read_text()
    assert text.startswith("Host node* gpu-?\n    Port 2022\n")
    assert "BatchMode yes" in text and "StrictHostKeyChecking accept-new" in text
    assert "IdentityFile ~/.ssh/byoc_peer_key" in text
    assert "UserKnownHostsFile ~/.ssh/known_hosts_byoc_peers" in text


def test_the_host_key_fingerprint_is_ssh_keygens(tmp_path):
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
    )
    assert ssh.fingerprint(key.with_suffix(".pub").read_text()) == listed.stdout.split()[1]
    assert ssh.fingerprint("ssh-ed25519 !!") == "?"


def test_jupyter_command_keeps_the_token_out_of_argv():
    cmd = main.jupyter_command(settings.load({C.JUPYTER_TOKEN_ENV: "s3cret"}))
    assert "--ServerApp.port=8888" in cmd and "--ServerApp.port_retries=0" in cmd
    assert "--allow-root" in cmd
    assert not any("s3cret" in a for a in cmd)
    assert "--allow-root" not in main.jupyter_command(settings.load({C.DEV_USER_ENV: "dev"}))


def test_tensorboard_comes_with_jupyter_unless_asked():
    assert settings.load({}).tensorboard
    assert settings.load({}).tensorboard_port == 6006
    assert not settings.load({C.JUPYTER_ENABLED_ENV: "0"}).tensorboard
    alone = settings.load({C.JUPYTER_ENABLED_ENV: "0", C.TENSORBOARD_ENABLED_ENV: "1"})
    assert alone.tensorboard and not alone.jupyter
    assert not settings.load({C.TENSORBOARD_ENABLED_ENV: "off"}).tensorboard
    # A port clash only counts between services that run.
    off = {C.TENSORBOARD_ENABLED_ENV: "0", C.TENSORBOARD_PORT_ENV: "8888"}
    assert settings.load(off).tensorboard_port == 8888
    cmd = main.tensorboard_command(settings.load({C.NOTEBOOK_DIR_ENV: "/nb"}))
    assert "--logdir=/nb/runs" in cmd and "--port=6006" in cmd


def test_jupyter_makes_no_calls_out_and_opens_the_notebook_given():
    cfg = settings.load({})
    cmd = main.jupyter_command(cfg)
    assert "--LabApp.news_url=None" in cmd
    assert "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate" in cmd
    assert not any("default_url" in a for a in cmd)
    cmd = main.jupyter_command(cfg, "getting-started.ipynb")
    assert "--LabApp.default_url=/lab/tree/getting-started.ipynb" in cmd


def nb_config(tmp_path, **env):
    d = tmp_path / "nb"
    d.mkdir(exist_ok=True)
    return settings.load({C.NOTEBOOK_DIR_ENV: str(d), **env}), d


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "image" / "getting-started.ipynb"
    src.parent.mkdir()
    src.write_text('{"cells": []}\n')
    return src


def test_the_notebook_is_copied_where_absent(tmp_path, source):
    cfg, d = nb_config(tmp_path)
    opened, warning = notebook.install(cfg, source)
    assert (opened, warning) == (d / source.name, "")
    assert opened.read_text() == source.read_text()
    assert opened.stat().st_mode & 0o777 == 0o644


def test_a_users_file_of_that_name_is_never_replaced_and_is_opened(tmp_path, source):
    cfg, d = nb_config(tmp_path)
    mine = d / source.name
    mine.write_text("my edits")
    assert notebook.install(cfg, source) == (mine, "")
    assert mine.read_text() == "my edits"


def test_a_link_of_that_name_is_never_written_through(tmp_path, source):
    cfg, d = nb_config(tmp_path)
    target = tmp_path / "elsewhere.txt"
    (d / source.name).symlink_to(target)  # dangling: a copy would create the target
    assert notebook.install(cfg, source) == (None, "")
    assert not target.exists()
    target.write_text("theirs")  # a link to a file: opened, not written
    assert notebook.install(cfg, source) == (d / source.name, "")
    assert target.read_text() == "theirs"


def test_no_notebook_when_turned_off_or_not_in_the_image(tmp_path, source):
    cfg, d = nb_config(tmp_path, **{C.NOTEBOOK_ENABLED_ENV: "0"})
    assert notebook.install(cfg, source) == (None, "")
    assert notebook.install(nb_config(tmp_path)[0], tmp_path / "missing.ipynb") == (None, "")
    assert list(d.iterdir()) == []


def test_a_notebook_root_it_cannot_write_gives_a_warning_not_an_error(tmp_path, source):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    cfg = settings.load({C.NOTEBOOK_DIR_ENV: str(not_a_dir)})
    opened, warning = notebook.install(cfg, source)
    assert opened is None
    assert f"not copied to {not_a_dir / source.name}" in warning


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_the_copy_belongs_to_the_dev_user(tmp_path, source):
    cfg, d = nb_config(tmp_path, **{C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: "4321"})
    opened, _ = notebook.install(cfg, source)
    assert (opened.stat().st_uid, opened.stat().st_gid) == (4321, 4321)


def test_notebook_dir_warning_names_the_uid_to_use(tmp_path):
    d = tmp_path / "nb"
    d.mkdir()
    (d / "data.txt").write_text("x")  # not empty: a user's volume, never chowned
    d.chmod(0o755)
    uid = d.stat().st_uid + 1
    cfg = settings.load(
        {C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: str(uid), C.NOTEBOOK_DIR_ENV: str(d)}
    )
    warning = user.prepare_notebook_dir(cfg)
    assert warning and f"{C.DEV_UID_ENV}={d.stat().st_uid}" in warning


def test_first_service_to_end_ends_the_others_with_its_code():
    svc = services.Services()
    svc.start("quick", [sys.executable, "-c", "import sys; sys.exit(3)"])
    svc.start("long", ["sleep", "300"])
    start = time.monotonic()
    assert svc.wait() == 3
    assert time.monotonic() - start < 5
    assert svc.procs["long"].returncode == -15


def test_a_service_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch, tmp_path):
    monkeypatch.setattr(C, "DEV_STOP_GRACE", 0.5)
    ready = tmp_path / "ready"
    svc = services.Services()
    # exec: the ignored TERM carries over to sleep, and no orphan outlives the test.
    svc.start("stubborn", ["bash", "-c", f"trap '' TERM; touch {ready}; exec sleep 300"])
    wait_until(ready.exists, timeout=10, interval=0.02, what="TERM ignored")
    start = time.monotonic()
    svc.stop()
    assert 0.4 < time.monotonic() - start < 3
    assert svc.procs["stubborn"].returncode == -9


@pytest.fixture
def signal_handlers():
    """main() installs its handlers in this process: put pytest's back afterwards."""
    caught = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    saved = {s: signal.getsignal(s) for s in caught}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


@pytest.mark.usefixtures("signal_handlers")
def test_main_exits_2_on_an_empty_token_and_on_nothing_to_run(capsys):
    assert main.main({C.JUPYTER_TOKEN_ENV: ""}) == 2
    assert "without a token is refused" in capsys.readouterr().err
    assert main.main({C.JUPYTER_PORT_ENV: "0"}) == 2
    assert "byoc-dev: error: JUPYTER_PORT='0': expected a whole number" in capsys.readouterr().err
    assert main.main({C.JUPYTER_ENABLED_ENV: "0", C.SSHD_ENABLED_ENV: "0"}) == 2
    assert "nothing to run" in capsys.readouterr().err


def test_profile_snippet_survives_a_login_shell_path_reset():
    # Debian's /etc/profile sets PATH; the snippet, sourced after it, restores ours.
    text = files.profile_text({"PATH": "/opt/venv/bin:/usr/bin:/bin"})
    out = subprocess.run(
        ["bash", "-c", f'PATH=/usr/bin:/bin; {text}\necho "$PATH"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "/opt/venv/bin:/usr/bin:/bin"


def test_the_peer_key_is_installed_private_and_checked(tmp_path):
    key = tmp_path / "given"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    env = {C.SSH_PEERS_ENV: "node*", C.SSH_PEER_KEY_FILE_ENV: str(key)}
    ids = {"uid": os.getuid(), "gid": os.getgid()}
    cfg = dataclasses.replace(settings.load(env), **ids)
    home = tmp_path / "home"
    home.mkdir()
    installed = keys.install_peer_key(cfg, home)
    assert installed == home / ".ssh" / "byoc_peer_key"
    assert installed.read_text() == key.read_text().strip() + "\n"
    assert installed.stat().st_mode & 0o777 == 0o600
    # The public half by mistake: refused, naming the variable.
    cfg = dataclasses.replace(cfg, peer_key_file=key.with_suffix(".pub"))
    with pytest.raises(DevError, match=f"{C.SSH_PEER_KEY_FILE_ENV}=.*not a usable unencrypted"):
        keys.install_peer_key(cfg, home)
