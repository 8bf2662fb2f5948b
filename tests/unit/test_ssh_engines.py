"""byoc.ssh's settings for the sshd and ssh that Kubernetes engines start (written into the image
at build time). Their effect, with the engines' mounted keys, is tests/container/test_k8s_sim.py."""

from __future__ import annotations

from byoc import ssh


def test_engine_sshd_takes_the_mounted_job_key_as_host_key_and_only_public_keys():
    lines = ssh.engine_sshd_settings(
        {"PATH": "/opt/venv/bin:/usr/bin", "AWS_SECRET_ACCESS_KEY": "x"}
    )
    assert "HostKey ~/.ssh/id_rsa" in lines
    assert "StrictModes no" in lines  # a Secret volume is a world-writable directory
    for line in ("AuthenticationMethods publickey", "PasswordAuthentication no", "PidFile none"):
        assert line in lines
    setenv = [line for line in lines if line.startswith("SetEnv")]
    assert setenv == ['SetEnv "PATH=/opt/venv/bin:/usr/bin"']  # never secrets


def test_our_own_sshds_keep_strict_modes_whatever_the_engines_drop_in_says():
    # Our drop-in is read first (first value wins), train's and dev's configs are complete.
    assert "StrictModes yes" in ssh.sshd_settings(22, [])


def test_engine_client_checks_host_keys_strictly_against_the_mounted_key_only_there():
    text = ssh.engine_client_text()
    first = text.splitlines()[0]
    # Only under a read-only ~/.ssh holding the job's key: a person's own ~/.ssh is left alone.
    assert first == (
        'Match exec "test -r %d/.ssh/id_rsa.pub -a ! -w %d/.ssh'
        ' && cmp -s %d/.ssh/id_rsa.pub %d/.ssh/authorized_keys"'
    )
    assert "KnownHostsCommand /usr/bin/awk -v h=%H '{print h, $1, $2}' %d/.ssh/id_rsa.pub" in text
    assert "StrictHostKeyChecking yes" in text
    assert "StrictHostKeyChecking no" not in text and "/dev/null" not in text


def test_write_engine_config_writes_both_drop_ins(tmp_path, monkeypatch):
    monkeypatch.setattr(ssh, "ENGINE_SSHD_DROPIN", tmp_path / "sshd.conf")
    monkeypatch.setattr(ssh, "ENGINE_CLIENT_DROPIN", tmp_path / "ssh.conf")
    ssh.write_engine_config({"PATH": "/usr/bin"})
    assert (tmp_path / "sshd.conf").read_text().startswith("HostKey ~/.ssh/id_rsa\n")
    assert (tmp_path / "ssh.conf").read_text() == ssh.engine_client_text()
    assert (tmp_path / "sshd.conf").stat().st_mode & 0o777 == 0o644


def test_a_job_running_the_distributions_sshd_drops_the_engines_settings(tmp_path, monkeypatch):
    """SageMaker SDK v3's driver starts /usr/sbin/sshd itself: the engines' drop-in (baked in
    for Kubernetes) would add its SetEnv and HostKey to ours there, so it goes."""
    monkeypatch.setattr(ssh, "ENGINE_SSHD_DROPIN", tmp_path / "50-byoc-engines.conf")
    monkeypatch.setattr(ssh, "_run", lambda cmd: "")
    monkeypatch.setattr(ssh.Path, "mkdir", lambda *a, **k: None)
    ssh.ENGINE_SSHD_DROPIN.write_text("SetEnv PATH=/x\n")
    ssh.write_sshd_dropin(2222, [tmp_path / "key"], tmp_path / "00-byoc-job.conf")
    assert not ssh.ENGINE_SSHD_DROPIN.exists()
    text = (tmp_path / "00-byoc-job.conf").read_text()
    assert "StrictModes yes" in text and "SetEnv" not in text
