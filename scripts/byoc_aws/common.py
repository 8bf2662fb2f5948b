"""What push and launch share: the AWS session, errors that end the tool, progress output."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import boto3
import botocore.exceptions


class ToolError(Exception):
    """Ends the tool with this message and exit code 2 (bad input) or 1 (AWS/Docker refused)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Aws:
    session: boto3.Session
    region: str
    account: str | None

    def client(self, name: str):
        return self.session.client(name, region_name=self.region)


def connect(region: str | None = None, need_account: bool = True) -> Aws:
    """A session from the usual AWS configuration; ToolError when there is none to use."""
    try:
        session = boto3.Session(region_name=region) if region else boto3.Session()
    except botocore.exceptions.ProfileNotFound as exc:
        raise ToolError(f"{exc}: check AWS_PROFILE and ~/.aws/config") from None
    region = session.region_name
    if not region:
        raise ToolError(
            "no AWS region: pass --region, set AWS_REGION, or `aws configure set region ...`"
        )
    if session.get_credentials() is None:
        if not need_account:
            return Aws(session, region, None)
        raise ToolError(
            "no AWS credentials found: set AWS_PROFILE (after `aws configure` or "
            "`aws sso login`), or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run where an "
            "instance role is attached"
        )
    account = None
    if need_account:
        try:
            account = session.client("sts", region_name=region).get_caller_identity()["Account"]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise ToolError(
                f"the AWS credentials do not work (sts:GetCallerIdentity): {exc}", 1
            ) from None
    return Aws(session, region, account)


def aws_error(action: str, exc: Exception) -> ToolError:
    """A ToolError naming the call, the error code and AWS's message."""
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        return ToolError(f"{action} failed: {err.get('Code')}: {err.get('Message')}", 1)
    return ToolError(f"{action} failed: {exc}", 1)


def run(main, argv=None) -> int:
    try:
        return main(argv)
    except ToolError as exc:
        say(f"error: {exc}")
        return exc.code
    except KeyboardInterrupt:
        say("interrupted")
        return 130
