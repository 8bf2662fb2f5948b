"""Fixtures shared by every suite: moto in server mode (tests/aws_fake.py)."""

from tests.aws_fake import aws_env, moto_endpoint  # noqa: F401 - fixtures, by name
