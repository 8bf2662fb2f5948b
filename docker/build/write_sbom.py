"""The image's SBOM (CycloneDX 1.6 JSON), written by CycloneDX's own Python library from what the
runtime holds, read from its file system mounted at --rootfs:

- every dpkg package dpkg's status file lists as installed (name, version, architecture, source);
- every Python distribution in the venv (name, version; as hash, the sha256 of its installed
  RECORD, which itself lists the sha256 of every file the distribution installed);
- every source built from a tarball, sdist or patched wheel, as the build script that verified it
  recorded it in /opt/byoc/sources (source_record.py: URL, sha256, the patches applied, each by
  name and sha256, or why the flavor did not build it);
- the base images (BYOC_BASE_IMAGES, which the flavor's builder base sets).

Runs in the sbom stage, which holds the library; the runtime gets the document only
(docs/building.md, "SBOM"). No list of sources or pins here: a new source records itself.
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
from fetch_verified import sha256  # these two beside this file, in the image too
from packageurl import PackageURL
from source_record import FIELDS, IMAGE_DIR

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


RECORDS = IMAGE_DIR.lstrip("/")  # source_record.py's records, which the runtime carries
RECORD_FIELDS = set(FIELDS)


def read_records(rootfs: Path) -> list[dict]:
    """Every source the build scripts recorded (docker/build/source_record.py)."""
    found = []
    for path in sorted((rootfs / RECORDS).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except ValueError as e:
            raise SystemExit(f"sbom: {path}: not JSON ({e})") from None
        if not isinstance(record, dict) or set(record) != RECORD_FIELDS:
            raise SystemExit(
                f"sbom: {path}: not a source record ({', '.join(sorted(RECORD_FIELDS))})"
            )
        found.append(record)
    if not found:
        raise SystemExit(f"sbom: no source records under {rootfs / RECORDS}")
    return found


def source_component(record: dict) -> Component:
    """A source the build compiled (or, where not_built says why, did not), with its patches."""
    name, version, url = record["name"], record["version"], record["url"]
    properties = [Property(name=f"{PROPERTY}:origin", value="source")]
    if record["not_built"]:
        properties.append(Property(name=f"{PROPERTY}:not-built", value=record["not_built"]))
    properties += [
        Property(name=f"{PROPERTY}:patch", value=f"{p['file']} sha256:{p['sha256']}")
        for p in record["patches"]
    ]
    applied = [
        Patch(
            type=PatchClassification.UNOFFICIAL, diff=Diff(url=XsUri(f"docker/patches/{p['file']}"))
        )
        for p in record["patches"]
    ]
    if record["kind"].startswith("pypi-"):
        purl = PackageURL(
            type="pypi",
            name=name,
            version=version,
            qualifiers={"type": record["kind"].removeprefix("pypi-")},
        )
    else:
        purl = PackageURL(
            type="generic", name=name, version=version, qualifiers={"download_url": url}
        )
    return Component(
        type=ComponentType.LIBRARY,
        name=name,
        version=version,
        purl=purl,
        bom_ref=f"source:{name}@{version}",
        external_references=[
            ExternalReference(
                type=ExternalReferenceType.DISTRIBUTION,
                url=XsUri(url),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=record["sha256"])],
            )
        ],
        pedigree=Pedigree(patches=applied) if applied else None,
        properties=properties,
    )  # fmt: skip


def base_images(env: dict[str, str]) -> list[Component]:
    """BYOC_BASE_IMAGES, which the flavor's builder base sets (the Dockerfile's flavor block):
    "builder=IMAGE runtime=IMAGE wheels=IMAGE" (wheels: the plain OS the runtime's other wheels
    are built on)."""
    text = env.get("BYOC_BASE_IMAGES", "")
    roles = dict(item.partition("=")[::2] for item in text.split())
    if set(roles) != {"builder", "runtime", "wheels"} or not all(roles.values()):
        raise SystemExit(
            f"sbom: BYOC_BASE_IMAGES={text!r} is not 'builder=IMAGE runtime=IMAGE wheels=IMAGE'"
        )
    return [
        Component(
            type=ComponentType.CONTAINER,
            name=ref,
            bom_ref=f"image:{role}",
            properties=[Property(name=f"{PROPERTY}:base-image", value=role)],
        )
        for role, ref in sorted(roles.items())
    ]


def build(rootfs: Path, venv: Path, env: dict[str, str]) -> Bom:
    release = os_release(rootfs)
    python = python_components(venv)
    records = read_records(rootfs)
    versions = {c.name.lower(): c.version for c in python} | {
        r["name"]: r["version"] for r in records
    }
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
            Property(name=f"{PROPERTY}:torch", value=versions.get("torch", "")),
            Property(name=f"{PROPERTY}:horovod", value=versions.get("horovod", "")),
            Property(name=f"{PROPERTY}:os", value=release.get("PRETTY_NAME", distro)),
        ],
    )
    components = [
        *[deb_component(f, distro) for f in dpkg_packages(rootfs)],
        *python,
        *[source_component(r) for r in records],
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
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    bom = build(args.rootfs, args.rootfs / args.venv.lstrip("/"), dict(os.environ))
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
