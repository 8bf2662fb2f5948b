"""What push and launch share: the AWS session, errors that end the tool, progress output."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import boto3
import botocore.config
import botocore.exceptions

import hostkit
from hostkit import HostError

# botocore's rule for a region name (botocore/utils.py validate_region_name: a host label),
# not empty.
REGION_RE = re.compile(r"^(?![0-9]+$)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)$")
# An endpoint that does not answer fails in seconds, not botocore's default 60 s per attempt.
CLIENT_CONFIG = botocore.config.Config(connect_timeout=10, read_timeout=60)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Aws:
    session: boto3.Session
    region: str
    account: str | None

    def client(self, name: str):
        return self.session.client(name, region_name=self.region, config=CLIENT_CONFIG)


def check_region(region: str | None, what: str = "--region") -> None:
    if region is not None and not REGION_RE.fullmatch(region):
        raise HostError(f"{what} {region!r} is not an AWS region name (e.g. us-east-1)")


def connect(region: str | None = None, need_account: bool = True) -> Aws:
    """A session from the usual AWS configuration; HostError when there is none to use."""
    check_region(region)
    try:
        session = boto3.Session(region_name=region) if region else boto3.Session()
    except botocore.exceptions.ProfileNotFound as exc:
        raise HostError(f"{exc}: check AWS_PROFILE and ~/.aws/config") from None
    region = session.region_name
    if not region:
        raise HostError(
            "no AWS region: pass --region, set AWS_REGION, or `aws configure set region ...`"
        )
    check_region(region, "the AWS configuration's region")
    if session.get_credentials() is None:
        if not need_account:
            return Aws(session, region, None)
        raise HostError(
            "no AWS credentials found: set AWS_PROFILE (after `aws configure` or "
            "`aws sso login`), or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run where an "
            "instance role is attached"
        )
    account = None
    if need_account:
        try:
            sts = session.client("sts", region_name=region, config=CLIENT_CONFIG)
            account = sts.get_caller_identity()["Account"]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise HostError(
                f"the AWS credentials do not work (sts:GetCallerIdentity): {exc}", 1
            ) from None
    return Aws(session, region, account)


def aws_error(action: str, exc: Exception) -> HostError:
    """A HostError naming the call, the error code and AWS's message."""
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        return HostError(f"{action} failed: {err.get('Code')}: {err.get('Message')}", 1)
    return HostError(f"{action} failed: {exc}", 1)


def run(main, argv=None, tool: str | None = None) -> int:
    """main(argv)'s exit status, as hostkit.run ends a tool ("<tool>: error: ..."; the tool's
    name defaults to main's module's); an AWS error that no call named where it was made is
    one too."""

    def guarded(args):
        try:
            return main(args)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            # Every AWS call names itself where it is made; this is the net under the rest.
            raise aws_error("an AWS call", exc) from None

    return hostkit.run(tool or main.__module__.rsplit(".", 1)[-1], guarded, argv)
