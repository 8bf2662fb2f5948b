"""The push tool: AWS calls against moto (server mode), the image into a real OCI registry.

The registry is Debian's docker-registry (distribution 2.8) on loopback, started here. The image
pushed is a small one carrying the pytorch-horovod labels: the tool is under test, not the
training image (whose 6 GB would only make the test slow).
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import urllib.request

import boto3
import pytest

from hostkit.aws import common, push
from tests.aws_fake import no_credentials
from tests.container.support import RUN_ID
from tests.helpers import free_port, wait_until

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
LABELS = {
    "io.github.pytorch-horovod.flavor": "gpu",
    "io.github.pytorch-horovod.torch": "2.15.0",
    "io.github.pytorch-horovod.horovod": "0.28.1",
    "io.github.pytorch-horovod.cuda": "13.2.1",
    "org.opencontainers.image.revision": "0123456789abcdef0123",
}
EXPECTED_TAG = "gpu-torch2.15.0-cuda13.2.1-hvd0.28.1-g0123456789ab"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    if not shutil.which(REGISTRY_BIN):
        pytest.skip(
            "docker-registry is not installed: `make test-container` installs it (root on "
            "Debian/Ubuntu), or apt-get install docker-registry"
        )
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        "log:\n  level: warn\n"
    )
    proc = subprocess.Popen(
        [REGISTRY_BIN, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    host = f"127.0.0.1:{port}"
    try:
        wait_until(
            lambda: urllib.request.urlopen(f"http://{host}/v2/", timeout=2).status == 200,
            timeout=30,
            what="the registry answers",
        )
        yield host
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def small_image(client):
    """A tiny image with the labels push reads; removed afterwards."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        labels = " ".join(f'"{k}"="{v}"' for k, v in LABELS.items())
        dockerfile = f"FROM scratch\nCOPY hello /hello\nLABEL {labels}\n".encode()
        for name, data in (("Dockerfile", dockerfile), ("hello", RUN_ID.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    name = f"byoc-push-test:{RUN_ID}"
    image, _ = client.images.build(fileobj=buf, custom_context=True, tag=name, rm=True)
    yield name, image
    for img in client.images.list(name="*/team/pytorch-horovod"):
        for tag in img.tags:
            client.images.remove(tag, force=True)
    client.images.remove(image.id, force=True)


def registry_tags(host: str, repository: str) -> list[str]:
    with urllib.request.urlopen(f"http://{host}/v2/{repository}/tags/list", timeout=10) as r:
        return sorted(json.load(r)["tags"] or [])


def test_push_creates_the_repository_once_tags_and_pulls_back_by_digest(
    aws_env, registry, small_image, client, capsys
):
    name, image = small_image
    args = ["--image", name, "--repository", "team/pytorch-horovod", "--registry", registry]
    assert common.run(push.main, args) == 0
    out = capsys.readouterr()
    target = f"{registry}/team/pytorch-horovod"
    assert f"image_uri: {target}:{EXPECTED_TAG}" in out.out
    digest = out.out.split(f"digest:    {target}@", 1)[1].split()[0]
    assert digest.startswith("sha256:")
    assert "created ECR repository" in out.err
    assert registry_tags(registry, "team/pytorch-horovod") == sorted([EXPECTED_TAG, "gpu"])

    ecr = boto3.client("ecr")
    repos = ecr.describe_repositories()["repositories"]
    assert [r["repositoryName"] for r in repos] == ["team/pytorch-horovod"]
    assert repos[0]["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repos[0]["imageTagMutability"] == "MUTABLE"

    # Again: the repository is used, not made twice.
    assert common.run(push.main, args) == 0
    assert "using ECR repository" in capsys.readouterr().err
    assert len(ecr.describe_repositories()["repositories"]) == 1

    # Pulled back by digest, it is the image we built.
    for tag in (EXPECTED_TAG, "gpu"):
        client.images.remove(f"{target}:{tag}")
    pulled = client.images.pull(f"{target}@{digest}")
    assert pulled.id == image.id


def test_immutable_repository_gets_no_moving_tag(aws_env, registry, small_image, capsys):
    name, _ = small_image
    args = ["--image", name, "--repository", "team/immutable", "--registry", registry]
    assert common.run(push.main, [*args, "--immutable"]) == 0
    assert "no moving 'gpu' tag" in capsys.readouterr().err
    repo = boto3.client("ecr").describe_repositories()["repositories"][0]
    assert repo["imageTagMutability"] == "IMMUTABLE"
    assert registry_tags(registry, "team/immutable") == [EXPECTED_TAG]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repository", "Team/PyTorch"], "is not a valid ECR repository name"),
        (["--repository", "x"], "is not a valid ECR repository name"),
        (["--image", "no-such-image:anywhere"], "not found locally"),
        (["--tag", "bad tag"], "is not a valid Docker tag"),
    ],
)
def test_bad_input_fails_clearly_and_creates_nothing(
    aws_env, registry, small_image, capsys, args, message
):
    name, _ = small_image
    opts = {"--image": name, "--repository": "team/bad", "--registry": registry}
    opts.update(zip(args[::2], args[1::2], strict=True))
    assert common.run(push.main, [x for pair in opts.items() for x in pair]) == 2
    assert message in capsys.readouterr().err
    assert boto3.client("ecr").describe_repositories()["repositories"] == []


def test_no_credentials_fails_clearly_and_creates_nothing(
    aws_env, registry, small_image, capsys, monkeypatch
):
    name, _ = small_image
    with monkeypatch.context() as m:
        no_credentials(m)
        code = common.run(push.main, ["--image", name, "--registry", registry])
    assert code == 2
    assert "no AWS credentials found" in capsys.readouterr().err
    assert boto3.client("ecr").describe_repositories()["repositories"] == []
