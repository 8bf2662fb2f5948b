"""Push the built image to ECR and print the image_uri to give SageMaker.

    make push FLAVOR=gpu [ECR_REPOSITORY=pytorch-horovod] [PUSH_ARGS=--immutable]
    python -m hostkit.aws.push --image pytorch-horovod:gpu --repository NAME

Steps: check the local image and the repository name; create the ECR repository when missing
(scan on push; --immutable for immutable tags); log Docker in with an ECR authorization token;
tag the image <flavor>-torch<v>[-cuda<v>]-hvd<v>-<git revision> (from the image's labels) plus
the moving <flavor> tag (not with --immutable); push with progress; print the image_uri.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import botocore.exceptions

from hostkit import HostError
from hostkit.aws import limits
from hostkit.aws.common import aws_error, check_region, connect, run, say
from hostkit.docker import Docker

LABEL = "io.github.pytorch-horovod."
OCI = "org.opencontainers.image."
# ECR's repository name rule (2-256 characters).
REPOSITORY_RE = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A registry is a host (DNS name, IPv4 or [IPv6]) with an optional port: no scheme, path or user.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DIGEST_RE = re.compile(r"digest: (sha256:[0-9a-f]{64})")  # docker push's last line
REGISTRY_RE = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::([0-9]{{1,5}}))?")


def check_repository_name(name: str) -> None:
    if not 2 <= len(name) <= 256 or not REPOSITORY_RE.fullmatch(name):
        raise HostError(
            f"--repository {name!r} is not a valid ECR repository name: lower-case letters, "
            "digits and . _ - / separators, 2-256 characters (e.g. ml/pytorch-horovod)"
        )


def check_registry(registry: str) -> None:
    match = REGISTRY_RE.fullmatch(registry)
    if not match or len(registry) > 255 or not 1 <= int(match.group(1) or 443) <= 65535:
        raise HostError(
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
        raise HostError(
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
        raise HostError(f"could not make a valid tag from the labels: {tag!r}")
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


def session_config(ecr, docker: Docker, registry: str | None, config: Path) -> tuple[str, Docker]:
    """(registry host, a client that pushes there): a Docker config of the push's own in
    config holds the ECR authorization token, so it lands neither in your ~/.docker nor in a
    credential helper (no `docker login`: with no logins in its config the CLI would look for
    one). Your current context (`docker context use`) is carried over into it."""
    try:
        data = ecr.get_authorization_token()["authorizationData"][0]
    except botocore.exceptions.ClientError as exc:
        raise aws_error("ecr:GetAuthorizationToken", exc) from None
    token = data["authorizationToken"]  # base64 of "AWS:<password>": the config's auth field
    try:
        base64.b64decode(token, validate=True)
    except ValueError:
        raise HostError("ecr:GetAuthorizationToken returned a token that is no base64", 1) from None
    host = registry or re.sub(r"^https?://", "", data["proxyEndpoint"]).rstrip("/")
    auth = config / "config.json"
    auth.touch(mode=0o600)
    auth.write_text(json.dumps({"auths": {host: {"auth": token}}}))
    pushing = docker.with_options("--config", str(config))
    shown = docker("context", "inspect", "--format", "{{.Name}}", check=False, timeout=60)
    context = shown.stdout.strip() if shown.returncode == 0 else ""
    if context and context != "default":
        exported = config / "context.tar"
        docker("context", "export", context, str(exported), timeout=60)
        # --context default: the one a new config has (DOCKER_CONTEXT or a --context in DOCKER
        # would name one it has not imported yet); the last --context given wins.
        importer = pushing.with_options("--context", "default")
        importer("context", "import", context, str(exported), timeout=60)
        pushing = pushing.with_options("--context", context)
    return host, pushing


def push_tag(docker: Docker, repository: str, tag: str) -> str:
    """Push one tag, each layer's state as docker says it; the pushed digest."""
    start = time.monotonic()
    proc = docker.output("push", f"{repository}:{tag}")
    assert proc.stdout is not None
    digest, lines = None, []
    for raw in proc.stdout:
        line = raw.rstrip()
        lines.append(line)
        say(f"  {line}")
        found = DIGEST_RE.search(line)
        digest = found.group(1) if found else digest
    if proc.wait() != 0:
        raise HostError(f"push of {repository}:{tag} failed: {' / '.join(lines[-3:])}", 1)
    if not digest:
        raise HostError(f"push of {repository}:{tag} reported no digest", 1)
    say(f"  pushed {repository}:{tag} in {time.monotonic() - start:.0f} s")
    return digest


def build_parser() -> argparse.ArgumentParser:
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    # Everything checked before Docker or AWS is asked anything.
    check_repository_name(args.repository)
    for extra in args.tag:
        if not TAG_RE.fullmatch(extra):
            raise HostError(
                f"--tag {extra!r} is not a valid Docker tag (letters, digits, _ . -; at most 128; "
                "not starting with . or -)"
            )
    if args.registry is not None:
        check_registry(args.registry)
    check_region(args.region)
    problem = limits.image_problem(args.image)
    if problem:
        raise HostError(f"--image {args.image!r} {problem}")
    docker = Docker()
    inspect = docker(
        "image", "inspect", "--format", "{{json .Config.Labels}} {{.Id}}", args.image, check=False
    )
    if inspect.returncode != 0:
        raise HostError(
            f"image {args.image} not found locally ({inspect.stderr.strip()}): `make build` first"
        )
    labels_json, _, image_id = inspect.stdout.strip().rpartition(" ")
    labels = json.loads(labels_json) or {}
    tag = version_tag(labels, image_id)
    flavor = labels.get(LABEL + "flavor", "")

    aws = connect(args.region)
    ecr = aws.client("ecr")
    repo, created = ensure_repository(ecr, args.repository, args.immutable)
    say(("created" if created else "using") + f" ECR repository {repo['repositoryUri']}")
    immutable = repo.get("imageTagMutability") == "IMMUTABLE"
    with tempfile.TemporaryDirectory(prefix="byoc-push-") as config:
        host, docker = session_config(ecr, docker, args.registry, Path(config))
        target = f"{host}/{args.repository}"
        tags = [tag, *args.tag]
        if flavor and not immutable:
            tags.append(flavor)  # the moving tag: the newest image of that flavor
        elif flavor:
            say(f"note: immutable tags: no moving '{flavor}' tag")
        digest = None
        for t in dict.fromkeys(tags):  # each once: an immutable repository refuses a second push
            say(f"pushing {target}:{t}")
            docker("tag", image_id, f"{target}:{t}")
            digest = push_tag(docker, target, t)
    print(f"image_uri: {target}:{tag}")
    print(f"digest:    {target}@{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main, tool="push"))
