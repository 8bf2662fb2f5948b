"""Push the built image to ECR and print the image_uri to give SageMaker.

    make push FLAVOR=gpu [ECR_REPOSITORY=pytorch-horovod] [PUSH_ARGS=--immutable]
    PYTHONPATH=scripts python -m byoc_aws.push --image pytorch-horovod:gpu --repository NAME

Steps: check the local image and the repository name; create the ECR repository when missing
(scan on push; --immutable for immutable tags); log Docker in with an ECR authorization token;
tag the image <flavor>-torch<v>[-cuda<v>]-hvd<v>-<git revision> (from the image's labels) plus
the moving <flavor> tag (not with --immutable); push with progress; print the image_uri.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
import time

import botocore.exceptions

from byoc_aws import limits
from byoc_aws.common import ToolError, aws_error, check_region, connect, run, say

LABEL = "io.github.pytorch-horovod."
OCI = "org.opencontainers.image."
# ECR's repository name rule (2-256 characters).
REPOSITORY_RE = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A registry is a host (DNS name, IPv4 or [IPv6]) with an optional port: no scheme, path or user.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
REGISTRY_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::([0-9]{{1,5}}))?")


def check_repository_name(name: str) -> None:
    if not 2 <= len(name) <= 256 or not REPOSITORY_RE.fullmatch(name):
        raise ToolError(
            f"--repository {name!r} is not a valid ECR repository name: lower-case letters, "
            "digits and . _ - / separators, 2-256 characters (e.g. ml/pytorch-horovod)"
        )


def check_registry(registry: str) -> None:
    match = REGISTRY_RE.fullmatch(registry)
    if not match or len(registry) > 255 or not 1 <= int(match.group(1) or 443) <= 65535:
        raise ToolError(
            f"--registry {registry!r}: a registry HOST[:PORT], without scheme, path or user "
            "(e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com, localhost:5000)"
        )


def _version(value: str) -> str:
    return value.split("+", 1)[0]  # torch's local version (+cu132) is not allowed in a tag


def version_tag(labels: dict[str, str], image_id: str) -> str:
    """<flavor>-torch<v>[-cuda<v>]-hvd<v>-<revision> from the image's labels."""
    flavor = labels.get(LABEL + "flavor")
    torch = labels.get(LABEL + "torch")
    horovod = labels.get(LABEL + "horovod")
    if not (flavor and torch and horovod):
        raise ToolError(
            "the image has no pytorch-horovod labels (flavor, torch, horovod): build it with "
            "`make build`"
        )
    parts = [flavor, f"torch{_version(torch)}"]
    cuda = labels.get(LABEL + "cuda")
    if flavor == "gpu" and cuda:
        parts.append(f"cuda{cuda}")
    parts.append(f"hvd{_version(horovod)}")
    revision = labels.get(OCI + "revision", "")
    if revision and revision != "unknown":
        parts.append(f"g{revision[:12]}")
    else:
        parts.append(f"img{image_id.rsplit(':', maxsplit=1)[-1][:12]}")
    tag = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts))
    if not TAG_RE.fullmatch(tag):
        raise ToolError(f"could not make a valid tag from the labels: {tag!r}")
    return tag


def ensure_repository(ecr, name: str, immutable: bool) -> tuple[dict, bool]:
    """(repository, created); creates it with scan on push when missing."""
    try:
        repo = ecr.describe_repositories(repositoryNames=[name])["repositories"][0]
        mutability = repo.get("imageTagMutability")
        if immutable and mutability != "IMMUTABLE":
            say(f"note: repository {name} exists with {mutability} tags; --immutable not applied")
        return repo, False
    except botocore.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] != "RepositoryNotFoundException":
            raise aws_error("ecr:DescribeRepositories", exc) from None
    try:
        repo = ecr.create_repository(
            repositoryName=name,
            imageScanningConfiguration={"scanOnPush": True},
            imageTagMutability="IMMUTABLE" if immutable else "MUTABLE",
            tags=[{"Key": "created-by", "Value": "pytorch-horovod push"}],
        )["repository"]
    except botocore.exceptions.ClientError as exc:
        raise aws_error("ecr:CreateRepository", exc) from None
    return repo, True


def login(ecr, docker_client, registry: str | None) -> tuple[str, dict]:
    """(registry host, auth config) from an ECR authorization token; Docker logged in."""
    try:
        data = ecr.get_authorization_token()["authorizationData"][0]
    except botocore.exceptions.ClientError as exc:
        raise aws_error("ecr:GetAuthorizationToken", exc) from None
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    host = registry or re.sub(r"^https?://", "", data["proxyEndpoint"]).rstrip("/")
    auth = {"username": user, "password": password, "serveraddress": host}
    try:
        docker_client.login(username=user, password=password, registry=host, reauth=True)
    except Exception as exc:  # noqa: BLE001 - docker.errors.APIError and connection errors
        raise ToolError(f"docker login to {host} failed: {exc}", 1) from None
    return host, auth


class PushProgress:
    """One line per layer state, and the share of bytes sent every ~10 %."""

    def __init__(self) -> None:
        self.layers: dict[str, tuple[int, int]] = {}
        self.states: dict[str, str] = {}
        self.shown = -10
        self.start = time.monotonic()

    def feed(self, event: dict) -> None:
        layer, status = event.get("id"), event.get("status", "")
        detail = event.get("progressDetail") or {}
        if layer and detail.get("total"):
            self.layers[layer] = (detail.get("current", 0), detail["total"])
        if (
            layer
            and status
            and not status.startswith("Pushing")
            and self.states.get(layer) != status
        ):
            self.states[layer] = status
            say(f"  {layer}: {status}")
        sent = sum(c for c, _ in self.layers.values())
        total = sum(t for _, t in self.layers.values())
        if total:
            percent = int(100 * sent / total)
            if percent >= self.shown + 10:
                self.shown = percent - percent % 10
                say(
                    f"  pushed {sent / 1e6:.0f} of {total / 1e6:.0f} MB ({percent} %) "
                    f"in {time.monotonic() - self.start:.0f} s"
                )


def push_tag(docker_client, repository: str, tag: str, auth: dict) -> str:
    """Push one tag with progress; its digest."""
    progress = PushProgress()
    digest = None
    for event in docker_client.api.push(
        repository, tag=tag, stream=True, decode=True, auth_config=auth
    ):
        if "error" in event:
            raise ToolError(f"push of {repository}:{tag} failed: {event['error']}", 1)
        aux = event.get("aux") or {}
        digest = aux.get("Digest", digest)
        progress.feed(event)
    if not digest:
        raise ToolError(f"push of {repository}:{tag} reported no digest", 1)
    return digest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="push", description=__doc__.splitlines()[0])
    p.add_argument("--image", default="pytorch-horovod:gpu", help="local image to push")
    p.add_argument("--repository", default="pytorch-horovod", help="ECR repository name")
    p.add_argument("--region", help="AWS region (default: the AWS configuration's)")
    p.add_argument("--immutable", action="store_true", help="create with immutable tags")
    p.add_argument("--tag", action="append", default=[], help="an extra tag (repeatable)")
    p.add_argument(
        "--registry",
        help="push to this registry host instead of the token's endpoint (tests, mirrors)",
    )
    args = p.parse_args(argv)

    # Everything checked before Docker or AWS is asked anything.
    check_repository_name(args.repository)
    for extra in args.tag:
        if not TAG_RE.fullmatch(extra):
            raise ToolError(
                f"--tag {extra!r} is not a valid Docker tag (letters, digits, _ . -; at most 128; "
                "not starting with . or -)"
            )
    if args.registry is not None:
        check_registry(args.registry)
    check_region(args.region)
    problem = limits.image_problem(args.image)
    if problem:
        raise ToolError(f"--image {args.image!r} {problem}")
    try:
        import docker

        docker_client = docker.from_env()
        image = docker_client.images.get(args.image)
    except ImportError:
        raise ToolError("the Docker SDK is missing: run this through `make push`") from None
    except Exception as exc:  # noqa: BLE001 - docker.errors.ImageNotFound, engine down
        raise ToolError(
            f"image {args.image} not found locally ({exc}): `make build` first"
        ) from None
    labels = image.labels or {}
    tag = version_tag(labels, image.id)
    flavor = labels.get(LABEL + "flavor", "")

    aws = connect(args.region)
    ecr = aws.client("ecr")
    repo, created = ensure_repository(ecr, args.repository, args.immutable)
    say(("created" if created else "using") + f" ECR repository {repo['repositoryUri']}")
    immutable = repo.get("imageTagMutability") == "IMMUTABLE"
    host, auth = login(ecr, docker_client, args.registry)
    target = f"{host}/{args.repository}"
    tags = [tag, *args.tag]
    if flavor and not immutable:
        tags.append(flavor)  # the moving tag: the newest image of that flavor
    elif flavor:
        say(f"note: immutable tags: no moving '{flavor}' tag")
    digest = None
    for t in dict.fromkeys(tags):  # each once: an immutable repository refuses a second push
        say(f"pushing {target}:{t}")
        try:
            image.tag(target, tag=t)
            digest = push_tag(docker_client, target, t, auth)
        except ToolError:
            raise
        except Exception as exc:  # noqa: BLE001 - docker.errors.APIError, connection errors
            raise ToolError(f"push of {target}:{t} failed: {exc}", 1) from None
    print(f"image_uri: {target}:{tag}")
    print(f"digest:    {target}@{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
