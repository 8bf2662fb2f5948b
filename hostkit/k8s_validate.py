#!/usr/bin/env python3
"""Offline checks of deploy/kubernetes: render every kustomize overlay, validate every object.

    python3 -m hostkit.k8s_validate [--kustomize] [OVERLAY_DIR ...]     (default: every overlay)

Rendering. `render()` is a small kustomize in Python for the subset the overlays use, and refuses
anything else: `resources` (files inside the kustomization's directory, or other kustomization
directories), `images` (name, newName, newTag, digest: applied to `containers[].image` and
`initContainers[].image` at any depth, as kustomize does for custom resources) and `patches` of
JSON6902 operations (inline or from a file) with a target of group, version, kind, name and
namespace (regular expressions matched whole, as kustomize does), applied with the `jsonpatch`
library. Stricter than kustomize where that catches mistakes: a patch that matches nothing is an
error. `render_kustomize()` runs a real kustomize (`kustomize build` or `kubectl kustomize`) when
one is on PATH; the tests check that both give the same objects. (`kubectl apply --dry-run=client`
needs an API server for its type discovery, so that is as far as kubectl goes offline.)

Validation. Objects of the engines' kinds against the openAPIV3Schema of the pinned CRDs in
deploy/kubernetes/crds (SOURCES.md: where they come from, their sha256), turned into JSON Schema
(draft 4, which OpenAPI 3.0's schema objects follow) and checked with the `jsonschema` library:
  - unknown fields are errors (additionalProperties: false wherever a schema lists properties and
    does not say x-kubernetes-preserve-unknown-fields), as `kubectl apply`'s default server-side
    field validation (--validate=strict) reports them;
  - x-kubernetes-int-or-string, nullable, format int32/int64 ranges, x-kubernetes-list-type
    map/set (unique keys or items) are checked; x-kubernetes-validations (CEL) rules are not
    evaluated, and nor are the engines' admission webhooks;
  - built-in kinds: apiVersion, kind and metadata (DNS names, labels); a PersistentVolumeClaim's
    spec against the PersistentVolumeClaimSpec schema the Volcano Job CRD embeds
    (spec.volumes[].volumeClaim), so no Kubernetes OpenAPI document needs to be pinned;
  - a few cross-object and engine rules no schema says (a claimName that no object defines, a
    TrainJob's runtime, Volcano's mpi plugin tasks, duplicate policy events, minAvailable).
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import yaml

from hostkit import HostError

ROOT = Path(__file__).resolve().parents[1]
K8S_DIR = ROOT / "deploy" / "kubernetes"
CRD_DIR = K8S_DIR / "crds"
OVERLAYS_DIR = K8S_DIR / "overlays"
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "patches"}
PATCH_KEYS = {"target", "patch", "path"}
TARGET_KEYS = {"group", "version", "kind", "name", "namespace"}
IMAGE_KEYS = {"name", "newName", "newTag", "digest"}

# Built-in kinds the overlays may hold: (group, version, kind) -> namespaced.
BUILTIN_KINDS = {
    ("", "v1", "ConfigMap"): True,
    ("", "v1", "Secret"): True,
    ("", "v1", "Service"): True,
    ("", "v1", "ServiceAccount"): True,
    ("", "v1", "PersistentVolumeClaim"): True,
    ("", "v1", "Namespace"): False,
}
OBJECT_META_FIELDS = {
    "name",
    "generateName",
    "namespace",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
}
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# The policy actions Volcano's admission webhook accepts (pkg/webhooks/admission/jobs/validate).
VOLCANO_ACTIONS = {
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
}
# libyaml's loader where PyYAML has it: the CRDs are 2.4 MB of YAML.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderError(HostError):
    """A kustomization this renderer cannot, or must not, render."""


# --------------------------------------------------------------------------------- rendering


def load_documents(path: Path) -> list[dict]:
    """The YAML documents of a file, empty ones left out; each must be a mapping."""
    docs = []
    with path.open(encoding="utf-8") as f:
        for doc in yaml.load_all(f, Loader=SAFE_LOADER):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise RenderError(f"{path}: a document is not a mapping")
            docs.append(doc)
    return docs


def kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    raise RenderError(f"{directory}: no kustomization file")


def object_id(obj: dict) -> tuple[str, str, str, str]:
    """apiVersion, kind, namespace, name: what kustomize keeps unique."""
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
    )


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _file_in_root(directory: Path, name: str, what: str) -> Path:
    if "://" in name or name.startswith("github.com/"):
        raise RenderError(f"{directory}: remote {what} {name!r}: not offline")
    path = directory / name
    if not _inside(path, directory):
        # kustomize's default load restrictor (LoadRestrictionsRootOnly) refuses these too.
        raise RenderError(f"{directory}: {what} {name!r} is outside the kustomization's directory")
    if not path.is_file():
        raise RenderError(f"{directory}: {what} {name!r} does not exist")
    return path


def render(directory: Path, _stack: tuple[Path, ...] = ()) -> list[dict]:
    """The objects `kustomize build DIRECTORY` makes, for the subset in the module's docstring."""
    directory = Path(directory).resolve()
    if directory in _stack:
        raise RenderError(f"{directory}: cycle of kustomizations")
    path = kustomization_file(directory)
    docs = load_documents(path)
    if len(docs) != 1:
        raise RenderError(f"{path}: expected one document")
    kust = docs[0]
    unknown = set(kust) - KUSTOMIZATION_KEYS
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not apply: {sorted(unknown)}")
    if kust.get("apiVersion") != KUSTOMIZE_API or kust.get("kind") != "Kustomization":
        raise RenderError(f"{path}: not a {KUSTOMIZE_API} Kustomization")

    objects: list[dict] = []
    seen: set[tuple[str, str, str, str]] = set()
    for entry in kust.get("resources") or []:
        if not isinstance(entry, str):
            raise RenderError(f"{path}: a resource is not a path: {entry!r}")
        target = directory / entry
        if target.is_dir():
            added = render(target, (*_stack, directory))
        else:
            added = load_documents(_file_in_root(directory, entry, "resource"))
        for obj in added:
            oid = object_id(obj)
            if oid in seen:
                raise RenderError(f"{path}: {oid} added twice (from {entry})")
            seen.add(oid)
            objects.append(obj)

    # kustomize's order of built-in transformers: patches first, images last.
    for index, patch in enumerate(kust.get("patches") or []):
        apply_patch(directory, path, index, patch, objects)
    for image in kust.get("images") or []:
        if not isinstance(image, dict) or set(image) - IMAGE_KEYS or "name" not in image:
            raise RenderError(f"{path}: images entry {image!r}: only {sorted(IMAGE_KEYS)}")
        for obj in objects:
            set_images(obj, image)
    return objects


def _target_matches(target: dict, obj: dict) -> bool:
    group, version = split_api_version(str(obj.get("apiVersion", "")))
    meta = obj.get("metadata") or {}
    have = {
        "group": group,
        "version": version,
        "kind": str(obj.get("kind", "")),
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace", "")),
    }
    return all(re.fullmatch(str(pattern), have[key]) for key, pattern in target.items())


def apply_patch(directory: Path, path: Path, index: int, patch: Any, objects: list[dict]) -> None:
    where = f"{path}: patches[{index}]"
    if not isinstance(patch, dict) or set(patch) - PATCH_KEYS:
        raise RenderError(f"{where}: only {sorted(PATCH_KEYS)} are applied")
    if ("patch" in patch) == ("path" in patch):
        raise RenderError(f"{where}: give one of patch or path")
    target = patch.get("target")
    if not isinstance(target, dict) or not target or set(target) - TARGET_KEYS:
        raise RenderError(f"{where}: a target of {sorted(TARGET_KEYS)} is required")
    text = patch.get("patch")
    if text is None:
        text = _file_in_root(directory, patch["path"], "patch").read_text(encoding="utf-8")
    ops = yaml.load(text, Loader=SAFE_LOADER)
    if not isinstance(ops, list):
        raise RenderError(
            f"{where}: not a list of JSON6902 operations (strategic merge patches "
            "are not applied by this renderer)"
        )
    try:
        json_patch = jsonpatch.JsonPatch(ops)
    except (jsonpatch.JsonPatchException, TypeError, KeyError) as e:
        raise RenderError(f"{where}: {e}") from e
    matched = 0
    for i, obj in enumerate(objects):
        if _target_matches(target, obj):
            try:
                objects[i] = json_patch.apply(obj)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise RenderError(f"{where}: {object_id(obj)}: {e}") from e
            matched += 1
    if not matched:
        raise RenderError(f"{where}: target {target} matches no object")


def _split_image(image: str) -> tuple[str, str]:
    """("name", ":tag" or "@digest" or "") of an image reference."""
    if "@" in image:
        name, _, digest = image.partition("@")
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def set_images(node: Any, image: dict) -> None:
    """kustomize's images transformer: containers[].image and initContainers[].image anywhere."""
    if isinstance(node, list):
        for item in node:
            set_images(item, image)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                if isinstance(container, dict) and isinstance(container.get("image"), str):
                    name, suffix = _split_image(container["image"])
                    if name != image["name"]:
                        continue
                    if "digest" in image:
                        suffix = "@" + str(image["digest"])
                    elif "newTag" in image:
                        suffix = ":" + str(image["newTag"])
                    container["image"] = str(image.get("newName", name)) + suffix
        set_images(value, image)


def container_images(node: Any) -> Iterator[str]:
    """The images of containers[] and initContainers[] anywhere in node, as set_images sees them."""
    if isinstance(node, list):
        for item in node:
            yield from container_images(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict) and isinstance(container.get("image"), str):
                        yield container["image"]
            yield from container_images(value)


def _major(text: str) -> int:
    found = re.search(r"v(\d+)\.\d+", text)
    return int(found.group(1)) if found else 0


@functools.cache
def kustomize_command() -> list[str] | None:
    """The command line of a kustomize v5 on PATH (`kustomize build`, or `kubectl kustomize` of a
    kubectl that embeds v5), without the directory; None if there is none. Older ones (Debian 12's
    kubectl 1.20 embeds kustomize 2) do not take the `patches` field."""

    def output(*command: str) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            return ""
        return done.stdout

    if shutil.which("kustomize") and _major(output("kustomize", "version")) >= 5:
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        try:
            info = json.loads(output("kubectl", "version", "--client", "-o", "json") or "{}")
        except ValueError:
            info = {}
        if _major(str(info.get("kustomizeVersion", ""))) >= 5:
            return ["kubectl", "kustomize"]
    return None


def render_kustomize(directory: Path, command: list[str] | None = None) -> list[dict]:
    command = command or kustomize_command()
    if command is None:
        raise RenderError("no kustomize or kubectl on PATH")
    out = subprocess.run(
        [*command, str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    if out.returncode != 0:
        raise RenderError(f"{' '.join(command)} {directory}: {out.stderr.strip()}")
    return [doc for doc in yaml.load_all(out.stdout, Loader=SAFE_LOADER) if doc is not None]


def overlays(root: Path = OVERLAYS_DIR) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


# ---------------------------------------------------------------------- CRD schema to JSON Schema

_COPIED = (
    "type",
    "required",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "format",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


def to_json_schema(node: dict) -> dict:
    """A CRD's structural schema node as JSON Schema draft 4 (descriptions and defaults dropped,
    except the defaults of list-map keys, which _list_type needs)."""
    out: dict[str, Any] = {k: copy.deepcopy(node[k]) for k in _COPIED if k in node}
    if "properties" in node:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    elif "additionalProperties" in node:
        out["additionalProperties"] = node["additionalProperties"]
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            out[key] = [to_json_schema(s) for s in node[key]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if out.get("x-kubernetes-list-type") == "map" and isinstance(node.get("items"), dict):
        item_props = node["items"].get("properties", {})
        out["x-list-map-defaults"] = {
            k: item_props[k]["default"]
            for k in out.get("x-kubernetes-list-map-keys", [])
            if "default" in item_props.get(k, {})
        }
    return out


def _list_type(validator, list_type, instance, schema):
    if not isinstance(instance, list):
        return
    if list_type == "set":
        seen = []
        for item in instance:
            if item in seen:
                yield jsonschema.ValidationError(f"duplicate item {item!r} in a list of type set")
            seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        defaults = schema.get("x-list-map-defaults", {})
        seen = set()
        for item in instance:
            if not isinstance(item, dict):
                continue
            key = tuple(json.dumps(item.get(k, defaults.get(k))) for k in keys)
            if key in seen:
                named = ", ".join(f"{k}={item.get(k, defaults.get(k))!r}" for k in keys)
                yield jsonschema.ValidationError(f"duplicate entries with {named}")
            seen.add(key)


def _format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())
    for name, (low, high) in INT_RANGES.items():

        def check(value: object, low: int = low, high: int = high) -> bool:
            if isinstance(value, bool) or not isinstance(value, int):
                return True  # "type" reports a non-integer
            return low <= value <= high

        checker.checks(name)(check)
    return checker


Validator = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type}
)


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    namespaced: bool
    validator: Any  # a Validator of the version's schema, None for built-in kinds
    source: str


def load_crds(crd_dir: Path = CRD_DIR) -> dict[tuple[str, str, str], Kind]:
    """(group, version, kind) -> Kind for every served version of every CRD in crd_dir."""
    kinds: dict[tuple[str, str, str], Kind] = {}
    checker = _format_checker()
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in load_documents(path):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec["versions"]:
                if not version.get("served", False):
                    continue
                schema = to_json_schema(version["schema"]["openAPIV3Schema"])
                Validator.check_schema(schema)
                key = (spec["group"], version["name"], spec["names"]["kind"])
                kinds[key] = Kind(
                    *key,
                    namespaced=spec["scope"] == "Namespaced",
                    validator=Validator(schema, format_checker=checker),
                    source=path.name,
                )
    return kinds


def pvc_spec_validator(kinds: dict[tuple[str, str, str], Kind]) -> Any:
    """PersistentVolumeClaimSpec, as the Volcano Job CRD embeds it (spec.volumes[].volumeClaim)."""
    job = kinds[("batch.volcano.sh", "v1alpha1", "Job")].validator.schema
    schema = job["properties"]["spec"]["properties"]["volumes"]["items"]["properties"]
    return Validator(schema["volumeClaim"], format_checker=_format_checker())


# ------------------------------------------------------------------------------- validation


def _path(error: jsonschema.ValidationError) -> str:
    return "/" + "/".join(str(p) for p in error.absolute_path)


def _metadata_errors(obj: dict, namespaced: bool) -> Iterator[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        yield "metadata: missing"
        return
    unknown = set(meta) - OBJECT_META_FIELDS
    if unknown:
        yield f"metadata: unknown fields {sorted(unknown)}"
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        yield "metadata.name: missing"
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        yield f"metadata.name {name!r}: not a DNS-1123 subdomain"
    namespace = meta.get("namespace")
    if namespace is not None and not namespaced:
        yield "metadata.namespace: set on a cluster-scoped kind"
    if namespace is not None and (len(namespace) > 63 or not DNS1123_LABEL.match(namespace)):
        yield f"metadata.namespace {namespace!r}: not a DNS-1123 label"
    for field in ("labels", "annotations"):
        values = meta.get(field, {})
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            yield f"metadata.{field}: must map strings to strings"
            continue
        for key, value in values.items():
            prefix, _, label = key.rpartition("/")
            if (
                len(label) > 63
                or not LABEL_NAME.match(label)
                or (prefix and not DNS1123_SUBDOMAIN.match(prefix))
            ):
                yield f"metadata.{field}: bad key {key!r}"
            if field == "labels" and (len(value) > 63 or not LABEL_VALUE.match(value)):
                yield f"metadata.labels[{key}]: bad value {value!r}"


def validate_object(obj: dict, kinds: dict[tuple[str, str, str], Kind]) -> list[str]:
    """The object's errors against its kind's schema (CRD) or the built-in checks."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind are required"]
    group, version = split_api_version(api_version)
    key = (group, version, kind)
    errors: list[str] = []
    if key in kinds:
        entry = kinds[key]
        for error in sorted(entry.validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            errors.append(f"{_path(error)}: {error.message} ({entry.source})")
        errors.extend(_metadata_errors(obj, entry.namespaced))
    elif key in BUILTIN_KINDS:
        errors.extend(_metadata_errors(obj, BUILTIN_KINDS[key]))
        if kind == "PersistentVolumeClaim":
            unknown = set(obj) - {"apiVersion", "kind", "metadata", "spec"}
            if unknown:
                errors.append(f"unknown fields {sorted(unknown)}")
            spec_validator = pvc_spec_validator(kinds)
            for error in spec_validator.iter_errors(obj.get("spec", {})):
                errors.append(f"/spec{_path(error)}: {error.message}")
    else:
        known = sorted({f"{g}/{v}".lstrip("/") + f" {k}" for g, v, k in [*kinds, *BUILTIN_KINDS]})
        errors.append(f"{api_version} {kind}: no pinned schema (known: {', '.join(known)})")
    return errors


def _pod_specs(obj: dict) -> Iterator[tuple[str, dict]]:
    """(where, pod spec) of the pod templates of the engines' kinds."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "MPIJob":
        for role, replica in (spec.get("mpiReplicaSpecs") or {}).items():
            yield role, ((replica or {}).get("template") or {}).get("spec") or {}
    elif kind == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        for task in spec.get("tasks") or []:
            yield task.get("name", "?"), (task.get("template") or {}).get("spec") or {}
    elif kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        for rjob in ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            job_spec = (rjob.get("template") or {}).get("spec") or {}
            yield rjob.get("name", "?"), (job_spec.get("template") or {}).get("spec") or {}


def engine_errors(obj: dict) -> Iterator[str]:
    """Rules of the engines that their CRD schemas do not carry."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    name = str((obj.get("metadata") or {}).get("name", ""))
    if kind == "MPIJob":
        # The operator's own validation (pkg/apis/kubeflow/validation), and launcherCreationPolicy,
        # whose enum the v0.8 CRD lacks (a malformed kubebuilder marker).
        replicas = spec.get("mpiReplicaSpecs") or {}
        launcher, worker = replicas.get("Launcher"), replicas.get("Worker") or {}
        if launcher is None or launcher.get("replicas", 1) != 1:
            yield "MPIJob: mpiReplicaSpecs.Launcher with replicas 1 is required"
        if int(worker.get("replicas", 0)) < 1:
            yield "MPIJob: mpiReplicaSpecs.Worker needs replicas >= 1"
        host = f"{name}-worker-{max(int(worker.get('replicas', 1)), 1) - 1}"
        if len(host) > 63 or not DNS1035_LABEL.match(host):
            yield f"MPIJob: pod hostname {host!r} is not a DNS-1035 label"
        for role, replica in replicas.items():
            if (replica or {}).get("restartPolicy", "Never") not in ("Never", "OnFailure"):
                yield f"MPIJob: {role}: restartPolicy must be Never or OnFailure"
        policy = spec.get("launcherCreationPolicy", "AtStartup")
        if policy not in ("AtStartup", "WaitForWorkersReady"):
            yield f"MPIJob: launcherCreationPolicy {policy!r}: AtStartup or WaitForWorkersReady"
    elif kind == "TrainJob":
        # The CRD's CEL rules (x-kubernetes-validations) on the name, which are not evaluated.
        if len(name) > 63 or not DNS1035_LABEL.match(name):
            yield "TrainJob: metadata.name must be an RFC 1035 DNS label (CEL rule of the CRD)"
    elif kind == "ClusterTrainingRuntime":
        policies = [
            p
            for p in ("torch", "mpi", "jax", "xgboost", "flux")
            if p in (spec.get("mlPolicy") or {})
        ]
        if len(policies) > 1:
            yield f"ClusterTrainingRuntime: only one ML policy (CEL rule of the CRD): {policies}"
        jobset = (spec.get("template") or {}).get("spec") or {}
        rjobs = jobset.get("replicatedJobs") or []
        if "startupPolicy" in jobset and any("dependsOn" in r for r in rjobs):
            yield "ClusterTrainingRuntime: startupPolicy and dependsOn exclude each other (CEL)"
        if rjobs and "dependsOn" in rjobs[0]:
            yield "ClusterTrainingRuntime: the first replicated Job cannot use dependsOn"
    elif kind == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        tasks = spec.get("tasks") or []
        names = [t.get("name") for t in tasks]
        if len(set(names)) != len(names):
            yield f"Volcano Job: duplicate task names {names}"
        total = sum(int(t.get("replicas", 0)) for t in tasks)
        if int(spec.get("minAvailable", 0)) > total:
            yield "Volcano Job: minAvailable exceeds the tasks' replicas"
        for t in tasks:
            if int(t.get("minAvailable", 0)) > int(t.get("replicas", 0)):
                yield f"Volcano Job: task {t.get('name')}: minAvailable exceeds replicas"
            for dep in (t.get("dependsOn") or {}).get("name", []):
                if dep not in names:
                    yield f"Volcano Job: task {t.get('name')} depends on unknown task {dep!r}"
        for where, policies in [("spec", spec.get("policies"))] + [
            (f"task {t.get('name')}", t.get("policies")) for t in tasks
        ]:
            events = [e for p in policies or [] for e in (p.get("events") or [p.get("event")]) if e]
            for policy in policies or []:
                # The CRD leaves action a free string; Volcano's admission webhook takes these.
                if "action" in policy and policy["action"] not in VOLCANO_ACTIONS:
                    yield f"Volcano Job: {where}: unknown policy action {policy['action']!r}"
            if len(set(events)) != len(events):
                yield f"Volcano Job: {where}: an event in more than one policy {events}"
        plugins = spec.get("plugins") or {}
        for plugin in ("mpi", "pytorch"):
            if plugin in plugins:
                args = dict(a.lstrip("-").split("=", 1) for a in plugins[plugin] if "=" in a)
                for role in ("master", "worker"):
                    task = args.get(role, role)
                    if task not in names:
                        yield f"Volcano Job: {plugin} plugin {role} task {task!r} does not exist"


def cross_object_errors(objects: list[dict]) -> Iterator[str]:
    """References between the objects of one overlay."""
    claims = {
        (o.get("metadata") or {}).get("name")
        for o in objects
        if o.get("kind") == "PersistentVolumeClaim"
    }
    runtimes = {
        (o.get("metadata") or {}).get("name")
        for o in objects
        if o.get("kind") == "ClusterTrainingRuntime"
    }
    for obj in objects:
        label = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        for where, pod in _pod_specs(obj):
            for volume in pod.get("volumes") or []:
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim is not None and claim not in claims:
                    yield f"{label}: {where}: claimName {claim!r} is in no object of the overlay"
        if obj.get("kind") == "TrainJob":
            ref = (obj.get("spec") or {}).get("runtimeRef") or {}
            if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" and (
                ref.get("name") not in runtimes
            ):
                yield f"{label}: runtimeRef {ref.get('name')!r} is in no object of the overlay"
        for message in engine_errors(obj):
            yield f"{label}: {message}"


def validate_objects(objects: Iterable[dict], kinds: dict | None = None) -> list[str]:
    """Every error of every object, each prefixed with its kind/name."""
    kinds = kinds if kinds is not None else load_crds()
    objects = list(objects)
    errors = []
    for obj in objects:
        label = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        errors.extend(f"{label}: {e}" for e in validate_object(obj, kinds))
    errors.extend(cross_object_errors(objects))
    return errors


# ------------------------------------------------------------------------------- SOURCES.md


def sources_table(crd_dir: Path = CRD_DIR) -> dict[str, str]:
    """file name -> sha256, from the table in SOURCES.md."""
    table = {}
    for line in (crd_dir / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if (
            len(cells) >= 7
            and cells[0].endswith(".yaml")
            and re.fullmatch(r"[0-9a-f]{64}", cells[-1])
        ):
            table[cells[0]] = cells[-1]
    return table


def source_errors(crd_dir: Path = CRD_DIR) -> list[str]:
    table = sources_table(crd_dir)
    files = {p.name for p in crd_dir.glob("*.yaml")}
    errors = [f"{name}: not in SOURCES.md" for name in sorted(files - set(table))]
    errors += [f"{name}: in SOURCES.md, not in {crd_dir}" for name in sorted(set(table) - files)]
    for name in sorted(files & set(table)):
        digest = hashlib.sha256((crd_dir / name).read_bytes()).hexdigest()
        if digest != table[name]:
            errors.append(f"{name}: sha256 {digest}, SOURCES.md says {table[name]}")
    return errors


# ------------------------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overlays", nargs="*", type=Path, help="default: every overlay")
    parser.add_argument(
        "--kustomize",
        action="store_true",
        help="also render with kustomize/kubectl on PATH and require the same objects",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    kinds = load_crds()
    failed = False
    for problem in source_errors():
        print(f"crds: {problem}")
        failed = True
    for directory in args.overlays or overlays():
        try:
            objects = render(directory)
        except RenderError as e:
            print(f"{directory}: render: {e}")
            failed = True
            continue
        errors = validate_objects(objects, kinds)
        if args.kustomize:
            theirs = render_kustomize(directory)
            if canonical(theirs) != canonical(objects):
                errors.append("kustomize renders different objects")
        for error in errors:
            print(f"{directory}: {error}")
        failed = failed or bool(errors)
        status = "FAILED" if errors else "ok"
        print(f"{directory}: {len(objects)} objects {status}")
    return 1 if failed else 0


def canonical(objects: Iterable[dict]) -> list[str]:
    """Objects as sorted JSON texts: the same set whatever the order or the key order."""
    return sorted(json.dumps(o, sort_keys=True) for o in objects)


if __name__ == "__main__":
    sys.exit(main())
