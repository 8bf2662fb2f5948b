"""moto in server mode for the AWS tools' tests: a real HTTP endpoint, fake AWS behind it."""

from __future__ import annotations

import urllib.request

import pytest

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}
ACCOUNT = "123456789012"  # moto's default account


@pytest.fixture(scope="session")
def moto_endpoint():
    moto_server = pytest.importorskip(
        "moto.server", reason="moto is not installed (make test does)"
    )
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint, monkeypatch):
    """Fake credentials, every AWS call to moto, moto's state reset for this test."""
    urllib.request.urlopen(
        urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST"), timeout=10
    ).close()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    return moto_endpoint


def no_credentials(monkeypatch) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    # Nor an instance role: botocore's metadata lookup would otherwise try 169.254.169.254.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
