"""User code from S3 (sagemaker_submit_directory = s3://...tar.gz) with a requirements.txt.

The S3 server is moto's, in a container of the image on the job's private network (moto and its
dependencies come from PyPI as wheels, installed into that container only), so boto3 in `train`
talks real S3 HTTP, and nothing leaves the machine.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import uuid
import zipfile

import pytest

from tests.container.support import sdk_encode
from tests.helpers import wait_until

MOTO = "moto[server]==5.2.5"  # the version requirements-dev.txt pins
BUCKET = "byoc-code"
KEY = "job/source/sourcedir.tar.gz"
ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
SERVE = f"""
import boto3, sys, time
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="0.0.0.0", port=5000)
server.start()
s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:5000")
s3.create_bucket(Bucket="{BUCKET}")
s3.upload_file("/src/sourcedir.tar.gz", "{BUCKET}", "{KEY}")
print("S3 READY", flush=True)
while True:
    time.sleep(60)
"""


def tiny_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel a requirements.txt can name by path: pip installs it offline."""
    name = "byoc_tiny-1.0-py3-none-any.whl"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("byoc_tiny/__init__.py", "VALUE = 42\n")
        info = "byoc_tiny-1.0.dist-info"
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: byoc-tiny\nVersion: 1.0\n")
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr(
            f"{info}/RECORD",
            f"byoc_tiny/__init__.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n",
        )
    return name, buf.getvalue()


def source_tarball(path) -> None:
    wheel, data = tiny_wheel()
    files = {
        "train.py": b"import sys, byoc_tiny\nprint('TINY', byoc_tiny.VALUE, sys.argv[1:])\n",
        "requirements.txt": f"./{wheel}\n".encode(),
        wheel: data,
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))


@pytest.fixture(scope="session")
def moto_wheels(tmp_path_factory, client, image):
    """moto and what it needs, as wheels for the image's Python (downloaded once a session)."""
    version = client.containers.run(
        image.id,
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        remove=True,
    )
    dest = tmp_path_factory.mktemp("moto-wheels")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(dest)]
    cmd += ["--python-version", version.decode().strip(), "--platform", "manylinux2014_x86_64"]
    result = subprocess.run([*cmd, MOTO], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.fail(f"pip download {MOTO} failed (PyPI reachable?): {result.stderr[-2000:]}")
    return dest


def test_code_from_s3_with_requirements_runs(client, containers, tmp_path, moto_wheels):
    source_tarball(tmp_path / "sourcedir.tar.gz")
    (tmp_path / "serve.py").write_text(SERVE)
    network = client.networks.create(f"byoc-s3-{uuid.uuid4().hex[:8]}", internal=True)
    try:
        s3 = containers.start(
            [
                "bash",
                "-c",
                f"pip install -q --no-index --find-links /wheels --target /tmp/moto '{MOTO}' "
                "&& PYTHONPATH=/tmp/moto exec python3 /src/serve.py",
            ],
            volumes={
                str(moto_wheels): {"bind": "/wheels", "mode": "ro"},
                str(tmp_path): {"bind": "/src", "mode": "ro"},
            },
            environment=ENV,
            network=network.name,
        )

        def ready():
            s3.reload()
            if s3.status == "exited":
                raise AssertionError("the S3 server exited:\n" + s3.logs().decode()[-3000:])
            return b"S3 READY" in s3.logs()

        try:
            wait_until(ready, 180, what="moto S3 server")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{s3.logs().decode()[-3000:]}") from exc
        address = s3.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        root = tmp_path / "ml"
        config = root / "input" / "config"
        config.mkdir(parents=True)
        (config / "resourceconfig.json").write_text(
            json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]})
        )
        hps = {
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": f"s3://{BUCKET}/{KEY}",
            "answer": "yes",
        }

        def train():
            (config / "hyperparameters.json").write_text(json.dumps(sdk_encode(hps)))
            return containers.run(
                ["train"],
                timeout=240,
                volumes={str(root): {"bind": "/opt/ml", "mode": "rw"}},
                # By address: moto's server takes a host name for a bucket (virtual-hosted style).
                environment={**ENV, "AWS_ENDPOINT_URL_S3": f"http://{address}:5000"},
                network=network.name,
            )

        code, out = train()
        assert code == 0, out
        assert "byoc: installing /opt/ml/code/requirements.txt" in out, out
        assert "TINY 42 ['--answer', 'yes']" in out, out
        assert (root / "code" / "train.py").is_file() and (root / "output" / "success").exists()

        # A key that is not there: a clear failure naming the URI, exit 2.
        hps["sagemaker_submit_directory"] = f"s3://{BUCKET}/missing.tar.gz"
        code, out = train()
        failure = (root / "output" / "failure").read_text()
        assert code == 2 and f"cannot download s3://{BUCKET}/missing.tar.gz" in failure, out
    finally:
        containers.remove_all()
        network.remove()
