"""Development mode without Docker: settings, key handling, generated configs, the service loop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from byoc import constants as C
from byoc import dev

ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMnF8X0i4p2rZ4sH6qvS5c1kXzq0m5Vv2nL3yJ8eTz0a alice@laptop"
)
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 bob@desk"


def test_defaults_generate_a_token_and_run_as_root():
    cfg = dev.load({})
    assert cfg.jupyter and cfg.sshd and cfg.root
    assert cfg.token_generated and len(cfg.token) >= 32
    assert dev.load({}).token != cfg.token  # a new one per start
    assert (cfg.jupyter_port, cfg.ssh_port) == (8888, 22)
    assert cfg.notebook_dir == Path("/workspace")


def test_a_given_token_is_used_and_an_empty_one_refused():
    cfg = dev.load({C.JUPYTER_TOKEN_ENV: "s3cret"})
    assert (cfg.token, cfg.token_generated) == ("s3cret", False)
    for empty in ("", "  "):
        with pytest.raises(dev.DevError, match="without a token is refused"):
            dev.load({C.JUPYTER_TOKEN_ENV: empty})
    # ... unless Jupyter is off altogether.
    assert not dev.load({C.JUPYTER_TOKEN_ENV: "", C.JUPYTER_ENABLED_ENV: "0"}).jupyter


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({C.JUPYTER_PORT_ENV: "http"}, "not a number"),
        ({C.DEV_SSH_PORT_ENV: "70000"}, "out of range"),
        ({C.JUPYTER_PORT_ENV: "2222", C.DEV_SSH_PORT_ENV: "2222"}, "both 2222"),
        ({C.DEV_USER_ENV: "Bad User"}, "not a valid user name"),
        ({C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: "0"}, "out of range"),
        ({C.SSHD_ENABLED_ENV: "maybe"}, "use 1 or 0"),
        ({C.SSH_PEERS_ENV: "node*;rm -rf /"}, "not a host name"),
    ],
)
def test_bad_settings_name_the_variable(env, message):
    with pytest.raises(dev.DevError, match=message):
        dev.load(env)


def test_non_root_user_ids_default_to_1000_and_gid_to_uid():
    cfg = dev.load({C.DEV_USER_ENV: "dev"})
    assert (cfg.user, cfg.uid, cfg.gid, cfg.root) == ("dev", 1000, 1000, False)
    cfg = dev.load({C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: "1234"})
    assert (cfg.uid, cfg.gid) == (1234, 1234)
    assert dev.load({C.DEV_USER_ENV: "root"}).root


def test_keys_are_parsed_with_options_and_comments():
    text = f'# mine\n\n{ED25519}\nfrom="10.0.0.0/8" {RSA}\n'
    assert dev.parse_keys(text, "x") == [ED25519, f'from="10.0.0.0/8" {RSA}']


def test_a_private_key_or_junk_is_refused_with_its_source():
    with pytest.raises(dev.DevError, match="private key.*public half"):
        dev.parse_keys("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "SSH_AUTHORIZED_KEYS")
    with pytest.raises(dev.DevError, match=r"keys.txt, line 2: not an SSH public key"):
        dev.parse_keys(f"{ED25519}\nhunter2\n", "keys.txt")


def test_keys_merge_from_env_file_and_home_once_each(tmp_path):
    keyfile = tmp_path / "authorized_keys"
    keyfile.write_text(f"{ED25519}\n{RSA}\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text(RSA + "\n")
    cfg = dev.load({C.AUTHORIZED_KEYS_ENV: ED25519, C.AUTHORIZED_KEYS_FILE_ENV: str(keyfile)})
    assert dev.collect_keys(cfg, home) == [ED25519, RSA]


def test_a_named_key_file_must_exist_the_default_may_not(tmp_path, monkeypatch):
    cfg = dev.load({C.AUTHORIZED_KEYS_FILE_ENV: str(tmp_path / "missing")})
    with pytest.raises(dev.DevError, match="does not exist"):
        dev.collect_keys(cfg, tmp_path)
    (tmp_path / "dir").mkdir()
    cfg = dev.load({C.AUTHORIZED_KEYS_FILE_ENV: str(tmp_path / "dir")})
    with pytest.raises(dev.DevError, match="is a directory"):
        dev.collect_keys(cfg, tmp_path)
    monkeypatch.setattr(C, "DEFAULT_AUTHORIZED_KEYS_FILE", str(tmp_path / "absent"))
    assert dev.collect_keys(dev.load({}), tmp_path / "nobody") == []


def test_sshd_config_allows_public_keys_only_and_passes_the_path():
    env = {"PATH": "/opt/venv/bin:/usr/bin", "AWS_SECRET_ACCESS_KEY": "x", "JUPYTER_TOKEN": "t"}
    text = dev.sshd_config_text(
        dev.load({C.DEV_SSH_PORT_ENV: "2022"}), [Path("/etc/ssh/k")], Path("/run/ak"), env
    )
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
    ):
        assert expected in lines
    assert "AWS_SECRET" not in text and "JUPYTER_TOKEN" not in text
    non_root = dev.sshd_config_text(dev.load({C.DEV_USER_ENV: "dev"}), [], Path("/a"), {})
    assert "PermitRootLogin no" in non_root and "AllowUsers dev" in non_root


def test_profile_snippet_is_shell_quoted_and_keeps_secrets_out():
    env = {"PATH": "/opt/venv/bin:/usr/bin", "NCCL_DEBUG": "INFO it's", "AWS_ACCESS_KEY_ID": "x"}
    text = dev.profile_text(env)
    assert "export PATH=/opt/venv/bin:/usr/bin\n" in text
    assert "export NCCL_DEBUG='INFO it'\"'\"'s'\n" in text
    assert "AWS" not in text
    out = subprocess.run(
        ["bash", "-c", f'{text}\necho "$NCCL_DEBUG"'], capture_output=True, text=True, check=True
    )
    assert out.stdout == "INFO it's\n"


def test_peer_client_config_has_no_prompts():
    text = dev.peers_config_text(dev.load({C.SSH_PEERS_ENV: "node*, gpu-?"}))
    assert text.startswith("Host node* gpu-?\n")
    assert "BatchMode yes" in text and "StrictHostKeyChecking accept-new" in text
    assert "IdentityFile ~/.ssh/byoc_peer_key" in text


def test_jupyter_command_keeps_the_token_out_of_argv():
    cmd = dev.jupyter_command(dev.load({C.JUPYTER_TOKEN_ENV: "s3cret"}))
    assert "--ServerApp.port=8888" in cmd and "--ServerApp.port_retries=0" in cmd
    assert "--allow-root" in cmd
    assert not any("s3cret" in a for a in cmd)
    assert "--allow-root" not in dev.jupyter_command(dev.load({C.DEV_USER_ENV: "dev"}))


def test_notebook_dir_warning_names_the_uid_to_use(tmp_path):
    d = tmp_path / "nb"
    d.mkdir()
    (d / "data.txt").write_text("x")  # not empty: a user's volume, never chowned
    d.chmod(0o755)
    uid = d.stat().st_uid + 1
    cfg = dev.load({C.DEV_USER_ENV: "dev", C.DEV_UID_ENV: str(uid), C.NOTEBOOK_DIR_ENV: str(d)})
    warning = dev.prepare_notebook_dir(cfg)
    assert warning and f"{C.DEV_UID_ENV}={d.stat().st_uid}" in warning


def test_first_service_to_end_ends_the_others_with_its_code():
    services = dev.Services()
    services.start("quick", [sys.executable, "-c", "import sys; sys.exit(3)"])
    services.start("long", ["sleep", "300"])
    start = time.monotonic()
    assert services.wait() == 3
    assert time.monotonic() - start < 5
    assert services.procs["long"].returncode == -15


def test_a_service_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch):
    monkeypatch.setattr(C, "DEV_STOP_GRACE", 0.5)
    services = dev.Services()
    services.start("stubborn", ["bash", "-c", "trap '' TERM; sleep 300"])
    time.sleep(0.3)
    start = time.monotonic()
    services.stop()
    assert 0.4 < time.monotonic() - start < 3
    assert services.procs["stubborn"].returncode == -9


def test_main_exits_2_on_an_empty_token_and_on_nothing_to_run(capsys):
    assert dev.main({C.JUPYTER_TOKEN_ENV: ""}) == 2
    assert "without a token is refused" in capsys.readouterr().err
    assert dev.main({C.JUPYTER_ENABLED_ENV: "0", C.SSHD_ENABLED_ENV: "0"}) == 2
    assert "nothing to run" in capsys.readouterr().err


def test_profile_snippet_survives_a_login_shell_path_reset():
    # Debian's /etc/profile sets PATH; the snippet, sourced after it, restores ours.
    text = dev.profile_text({"PATH": "/opt/venv/bin:/usr/bin:/bin"})
    out = subprocess.run(
        ["bash", "-c", f'PATH=/usr/bin:/bin; {text}\necho "$PATH"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "/opt/venv/bin:/usr/bin:/bin"
