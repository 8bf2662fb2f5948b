"""`make k8s-overlay`: your overlay of a shipped deploy/kubernetes overlay, for `kubectl apply -k`.

    python3 -m hostkit.k8s_overlay --overlay mpijob-gpu \\
        --image-uri 123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-horovod:gpu-... \\
        [--storage-class efs-sc] [--out local/k8s]

The shipped overlays name the image `pytorch-horovod:<flavor>`, with no registry: applied as they
are, a pod starts only on a node that already has that image. This writes
OUT/OVERLAY/kustomization.yaml, which takes the shipped overlay as its resource and sets
kustomize's `images:` from --image-uri (the image_uri `make push` prints: a registry is required)
and, with --storage-class, the checkpoint claim's storageClassName (a class that provides
ReadWriteMany, where the cluster's default does not). It is rendered and validated
(hostkit.k8s_validate) before it takes the place of the last one this tool wrote there; a file
this tool did not write is never replaced. Prints the command that applies it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from hostkit import HostError, Teller, k8s_validate, run
from hostkit.aws import limits

say = Teller("k8s-overlay")
IMAGE_NAME = "pytorch-horovod"  # the image as the shipped bases name it
CLAIM = "pytorch-horovod-checkpoints"  # base/checkpoints/pvc.yaml, in every overlay
# The first line of every file this tool writes: the mark that lets it replace its own.
HEADER = "# Written by make k8s-overlay (hostkit/k8s_overlay.py), which replaces it when run again."


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the patch) as literal blocks, as a person writes them."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar(
        "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None
    ),
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--overlay", required=True, help="a shipped overlay: a name in deploy/kubernetes/overlays"
    )
    p.add_argument(
        "--image-uri",
        required=True,
        metavar="REGISTRY/NAME[:TAG][@DIGEST]",
        help="the image in a registry the nodes pull from (make push prints it as image_uri)",
    )
    p.add_argument(
        "--storage-class",
        metavar="NAME",
        help=f"the storage class of the checkpoint claim {CLAIM} (ReadWriteMany; default: the "
        "cluster's default class)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("local/k8s"),
        help="the overlay goes in OUT/OVERLAY/ (default local/k8s, which git ignores)",
    )
    return p


def shipped_overlay(name: str) -> Path:
    names = [d.name for d in k8s_validate.overlays()]
    if name not in names:
        given = f"{name} is not" if name.strip() else "(OVERLAY) is empty: give"
        raise HostError(f"--overlay {given} one of deploy/kubernetes/overlays: {', '.join(names)}")
    return k8s_validate.OVERLAYS_DIR / name


def image_entry(uri: str) -> dict[str, str]:
    """kustomize's images entry that turns the bases' image into uri."""
    if not uri.strip():
        raise HostError("--image-uri (IMAGE_URI) is empty: give the image_uri make push printed")
    problem = limits.image_problem(uri)
    if problem:
        raise HostError(f"--image-uri {uri!r} {problem}")
    if limits.image_registry(uri) is None:
        raise HostError(
            f"--image-uri {uri}: names no registry, so the nodes cannot pull it: "
            "REGISTRY/NAME[:TAG], as make push prints it (image_uri: ...)"
        )
    name, _, digest = uri.partition("@")
    head, sep, tail = name.rpartition(":")
    tag = None
    if sep and "/" not in tail:  # a tag; a ':' before a '/' is the registry's port
        name, tag = head, tail
    entry = {"name": IMAGE_NAME, "newName": name}
    if digest:
        entry["digest"] = digest
    elif tag:
        entry["newTag"] = tag
    return entry


def kustomization(resource: str, image: dict[str, str], storage_class: str | None) -> dict:
    kust: dict = {
        "apiVersion": k8s_validate.KUSTOMIZE_API,
        "kind": "Kustomization",
        "resources": [resource],
        "images": [image],
    }
    if storage_class is not None:
        if len(storage_class) > 253 or not k8s_validate.DNS1123_SUBDOMAIN.match(storage_class):
            raise HostError(
                f"--storage-class {storage_class!r}: not a storage class name (lower-case "
                "letters, digits, '-' and '.', at most 253)"
            )
        operation = {"op": "add", "path": "/spec/storageClassName", "value": storage_class}
        kust["patches"] = [
            {
                "target": {"kind": "PersistentVolumeClaim", "name": CLAIM},
                "patch": yaml.safe_dump([operation], sort_keys=False),
            }
        ]
    return kust


def check_replaceable(directory: Path) -> None:
    """Only a kustomization this tool wrote may be replaced, and only a plain file."""
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise HostError(f"{directory}: exists and is not a directory")
    for name in k8s_validate.KUSTOMIZATION_FILES:
        path = directory / name
        if not (path.exists() or path.is_symlink()):
            continue
        if name != "kustomization.yaml" or path.is_symlink() or not path.is_file():
            raise HostError(f"{path}: exists (kustomize would read it): remove it or use --out")
        with path.open(encoding="utf-8", errors="replace") as f:
            if f.readline().rstrip("\n") != HEADER:
                raise HostError(
                    f"{path}: exists and was not written by make k8s-overlay: remove it or "
                    "choose another --out"
                )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shipped = shipped_overlay(args.overlay)
    image = image_entry(args.image_uri)
    target = args.out / args.overlay
    # Relative, as written from the target directory: the checkout may move with it.
    resource = os.path.relpath(shipped, target.resolve())
    kust = kustomization(resource, image, args.storage_class)
    check_replaceable(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        # Rendered where it will lie (a sibling of the same depth: the same relative resource).
        trial = Path(tempfile.mkdtemp(prefix=f".{args.overlay}-", dir=target.parent))
    except OSError as exc:
        raise HostError(f"--out {args.out}: cannot make {target}: {exc.strerror}") from None
    try:
        text = HEADER + "\n" + yaml.dump(kust, Dumper=_Dumper, sort_keys=False)
        (trial / "kustomization.yaml").write_text(text, encoding="utf-8")
        try:
            objects = k8s_validate.render(trial)
        except k8s_validate.RenderError as exc:
            raise HostError(f"the overlay does not render: {exc}", 1) from None
        errors = k8s_validate.validate_objects(objects)
        if errors:
            raise HostError("the overlay does not validate: " + "; ".join(errors[:5]), 1)
        os.replace(trial / "kustomization.yaml", target / "kustomization.yaml")
    finally:
        shutil.rmtree(trial, ignore_errors=True)
    images = sorted(set(k8s_validate.container_images(objects)))
    where = os.path.relpath(target) if target.resolve().is_relative_to(Path.cwd()) else target
    say(
        f"wrote {where}/kustomization.yaml: {args.overlay} with image {', '.join(images)}, "
        + (
            f"storage class {args.storage_class}"
            if args.storage_class
            else "the cluster's default storage class"
        )
    )
    print(f"kubectl apply -k {where}")
    return 0


if __name__ == "__main__":
    sys.exit(run("k8s-overlay", main))
