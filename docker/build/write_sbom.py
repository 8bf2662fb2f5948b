"""The image's SBOM (CycloneDX 1.6 JSON), written by CycloneDX's own Python library from what the
runtime holds, read from its file system mounted at --rootfs:

- every dpkg package dpkg's status file lists as installed (name, version, architecture, source);
- every Python distribution in the venv (name, version; as hash, the sha256 of its installed
  RECORD, which itself lists the sha256 of every file the distribution installed);
- every source built from a tarball or sdist (URL, sha256 from the Dockerfile's ARGs), with the
  patches applied to it (each by name and sha256), or a note where the flavor did not build it;
- the base images (the build's BUILDER_IMAGE and RUNTIME_IMAGE).

Inputs beyond --rootfs come from the environment (the Dockerfile's ARGs). Runs in the sbom stage,
which holds the library; the runtime gets the document only (docs/building.md, "SBOM").
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

from cyclonedx.model import (
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import (
    Component,
    ComponentType,
    Diff,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.output.json import JsonV1Dot6
from fetch_verified import sha256  # beside this file, in the image too
from packageurl import PackageURL

PROPERTY = "io.github.pytorch-horovod"


def os_release(rootfs: Path) -> dict[str, str]:
    values = {}
    for line in (rootfs / "etc/os-release").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value.strip().strip('"')
    return values


def dpkg_packages(rootfs: Path) -> list[dict[str, str]]:
    """dpkg's status file: the stanzas whose Status is "install ok installed"."""
    text = (rootfs / "var/lib/dpkg/status").read_text(encoding="utf-8", errors="replace")
    packages = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                continue  # a continuation (Description, Conffiles): not needed
            key, sep, value = line.partition(":")
            if sep:
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages.append(fields)
    return packages


def deb_component(fields: dict[str, str], distro: str) -> Component:
    name, version, arch = fields["Package"], fields["Version"], fields.get("Architecture", "")
    qualifiers = {"arch": arch} if arch else {}
    properties = [Property(name=f"{PROPERTY}:origin", value="dpkg")]
    source = fields.get("Source")
    if source:
        properties.append(Property(name=f"{PROPERTY}:dpkg-source", value=source))
    return Component(
        type=ComponentType.LIBRARY if name.startswith("lib") else ComponentType.APPLICATION,
        name=name,
        version=version,
        purl=PackageURL(type="deb", namespace=distro, name=name, version=version,
                        qualifiers=qualifiers),
        bom_ref=f"deb:{name}:{arch}@{version}",
        properties=properties,
    )  # fmt: skip


def site_packages(venv: Path) -> list[Path]:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise SystemExit(f"sbom: no site-packages under {venv}")
    return found


def python_components(venv: Path) -> list[Component]:
    components = {}
    for dist in importlib.metadata.distributions(path=[str(p) for p in site_packages(venv)]):
        name, version = dist.metadata["Name"], dist.version
        record = Path(str(dist._path)) / "RECORD"  # noqa: SLF001 - the dist-info directory
        hashes = [HashType(alg=HashAlgorithm.SHA_256, content=sha256(record))]
        key = re.sub(r"[-_.]+", "-", name).lower()
        components[key] = Component(
            type=ComponentType.LIBRARY,
            name=name,
            version=version,
            purl=PackageURL(type="pypi", name=key, version=version),
            bom_ref=f"pypi:{key}@{version}",
            hashes=hashes,
            properties=[
                Property(name=f"{PROPERTY}:origin", value="python"),
                Property(name=f"{PROPERTY}:hash-of", value="installed RECORD"),
            ],
        )
    return [components[k] for k in sorted(components)]


def patches(patch_dir: Path, prefix: str | None) -> tuple[list[Patch], list[Property]]:
    """The patches applied to a source (docker/patches/<prefix>-*.patch): as CycloneDX pedigree
    patches, and as properties with each file's sha256."""
    files = sorted(patch_dir.glob(f"{prefix}-*.patch")) if prefix else []
    pedigree = [
        Patch(type=PatchClassification.UNOFFICIAL, diff=Diff(url=XsUri(f"docker/patches/{p.name}")))
        for p in files
    ]
    props = [
        Property(name=f"{PROPERTY}:patch", value=f"{p.name} sha256:{sha256(p)}") for p in files
    ]
    return pedigree, props


def source_component(
    name: str, version: str, url: str, digest: str, *, built: str | None, patch_dir: Path,
    patch_prefix: str | None = None, purl: PackageURL | None = None,
) -> Component:  # fmt: skip
    """A source the build compiled (or, where built says why, did not)."""
    properties = [Property(name=f"{PROPERTY}:origin", value="source")]
    if built:
        properties.append(Property(name=f"{PROPERTY}:not-built", value=built))
    applied, patch_props = patches(patch_dir, patch_prefix)
    properties += patch_props
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version,
        purl=purl or PackageURL(type="generic", name=name, version=version,
                                qualifiers={"download_url": url}),
        bom_ref=f"source:{name}@{version}",
        external_references=[
            ExternalReference(
                type=ExternalReferenceType.DISTRIBUTION,
                url=XsUri(url),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
            )
        ],
        pedigree=Pedigree(patches=applied) if applied else None,
        properties=properties,
    )  # fmt: skip


def not_built(rootfs: Path, directory: str) -> str | None:
    marker = rootfs / directory.lstrip("/") / "NOT-BUILT"
    if not marker.exists():
        return None
    return marker.read_text().strip() or "not built"


def arg(env: dict[str, str], name: str) -> str:
    """A build argument the Dockerfile declares in this stage; its absence stops the build."""
    value = env.get(name, "")
    if not value:
        raise SystemExit(f"sbom: build argument {name} is not set in this stage")
    return value


def sources(env: dict[str, str], rootfs: Path, patch_dir: Path) -> list[Component]:
    found = []
    for name, prefix in (("horovod", "HOROVOD"), ("smdebug", "SMDEBUG")):  # PyPI sdists
        version = arg(env, f"{prefix}_VERSION")
        found.append(
            source_component(
                name, version, f"https://pypi.org/project/{name}/{version}/#files",
                arg(env, f"{prefix}_SHA256"), built=None, patch_dir=patch_dir,
                patch_prefix=f"{name}-{version}",
                purl=PackageURL(type="pypi", name=name, version=version,
                                qualifiers={"type": "sdist"}),
            )
        )  # fmt: skip
    for name, prefix, directory in (
        ("nccl-tests", "NCCL_TESTS", "/opt/nccl-tests"),
        ("libfabric", "LIBFABRIC", "/opt/amazon/efa"),
        ("aws-ofi-nccl", "AWS_OFI_NCCL", "/opt/amazon/ofi-nccl"),
    ):
        found.append(
            source_component(
                name, arg(env, f"{prefix}_VERSION"), arg(env, f"{prefix}_URL"),
                arg(env, f"{prefix}_SHA256"), built=not_built(rootfs, directory),
                patch_dir=patch_dir,
            )
        )  # fmt: skip
    return found


def base_images(env: dict[str, str]) -> list[Component]:
    images = []
    for role in ("BUILDER_IMAGE", "RUNTIME_IMAGE"):
        ref = arg(env, role)
        images.append(
            Component(
                type=ComponentType.CONTAINER,
                name=ref,
                bom_ref=f"image:{role.lower()}",
                properties=[Property(name=f"{PROPERTY}:base-image", value=role)],
            )
        )
    return images


def build(rootfs: Path, venv: Path, patch_dir: Path, env: dict[str, str]) -> Bom:
    release = os_release(rootfs)
    distro = release.get("ID", "debian")
    bom = Bom()
    bom.metadata.component = Component(
        type=ComponentType.CONTAINER,
        name="pytorch-horovod",
        bom_ref="image",
        # No version or revision: they change with every commit, the files this describes need
        # not (the image's labels carry them).
        properties=[
            Property(name=f"{PROPERTY}:flavor", value=env.get("FLAVOR", "")),
            Property(name=f"{PROPERTY}:torch", value=env.get("TORCH_VERSION", "")),
            Property(name=f"{PROPERTY}:horovod", value=env.get("HOROVOD_VERSION", "")),
            Property(name=f"{PROPERTY}:os", value=release.get("PRETTY_NAME", distro)),
        ],
    )
    components = [
        *[deb_component(f, distro) for f in dpkg_packages(rootfs)],
        *python_components(venv),
        *sources(env, rootfs, patch_dir),
        *base_images(env),
    ]
    for component in components:
        bom.components.add(component)
    # The image holds (depends on) each of them; nothing finer is claimed.
    bom.register_dependency(bom.metadata.component, components)
    return bom


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rootfs", type=Path, required=True, help="the runtime's file system")
    p.add_argument("--venv", default="/opt/venv", help="the venv's path inside --rootfs")
    p.add_argument("--patches", type=Path, required=True, help="docker/patches as copied")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    bom = build(args.rootfs, args.rootfs / args.venv.lstrip("/"), args.patches, dict(os.environ))
    text = JsonV1Dot6(bom).output_as_string(indent=1)
    json.loads(text)  # well-formed, or fail the build here
    args.out.write_text(text + "\n")
    kinds = collections.Counter(
        next((q.value for q in c.properties if q.name.endswith(":origin")), "image")
        for c in bom.components
    )
    print(f"sbom: {args.out}: {dict(kinds)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
