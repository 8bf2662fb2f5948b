"""Loopback SSH for upstream's test_static_run.py (make test-horovod), in the throwaway test
container only: root may log in to localhost / 127.0.0.1 on port 22 with a key made here, as
upstream's CI gives it (`/etc/init.d/ssh start`). Every file is written by byoc.ssh, the image's
one writer of SSH configuration; this only composes its functions."""

from byoc import ssh

PORT = 22

host_keys = ssh.generate_host_keys()
identity = ssh.home_ssh_dir() / "id_ed25519"
user_key = ssh.ensure_identity(identity)
me = ssh.Member("localhost", ["127.0.0.1", "::1"], user_key, ssh.host_public_keys(host_keys))
ssh.write_trust([me], allowed=["localhost"], me="localhost", port=PORT, identity=identity)
ssh.start_sshd(ssh.write_sshd_config(PORT, host_keys))
ssh.wait_for_login("127.0.0.1", timeout=30)
print("conformance-sshd: root logs in to localhost and 127.0.0.1 on port 22 with a key of its own")
