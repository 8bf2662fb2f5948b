"""SageMaker's own input limits, so the host tools refuse what CreateTrainingJob would refuse.

Read from botocore's SageMaker service model (the shape named with each limit). Standard library
only: local_train.py runs under any python3, and without botocore it uses FALLBACK, a copy of the
model's values (tests/unit/hostile/test_host_tools.py checks the copy against the model).
"""

from __future__ import annotations

import json
import re
from functools import cache

from hostkit import HostError

# The API's "integer" shapes are 32-bit; the model gives most of them a minimum only.
API_INT_MAX = 2**31 - 1
# MaxRuntimeInSeconds' documentation in the model: "The maximum value is 28 days."
MAX_RUNTIME_S = 28 * 24 * 3600
# Characters no name or key should hold: C0/C1 controls (NUL, newline, ...), DEL, and the
# separators Java's "." does not match (the model's ".*" patterns are Java regexes).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

FALLBACK: dict[str, dict] = {
    "ChannelName": {"min": 1, "max": 64, "pattern": r"[A-Za-z0-9\.\-_]+"},
    "TrainingJobName": {"min": 1, "max": 63, "pattern": r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"},
    "HyperParameters": {"min": 0, "max": 100},
    "HyperParameterKey": {"min": 0, "max": 256, "pattern": ".*"},
    "HyperParameterValue": {"min": 0, "max": 2500, "pattern": ".*"},
    "TrainingEnvironmentMap": {"min": 0, "max": 100},
    "TrainingEnvironmentKey": {"min": 0, "max": 512, "pattern": "[a-zA-Z_][a-zA-Z0-9_]*"},
    "TrainingEnvironmentValue": {"min": 0, "max": 512, "pattern": r"[\S\s]*"},
    "InputDataConfig": {"min": 1, "max": 20},
    "S3Uri": {"min": 0, "max": 1024, "pattern": "(https|s3)://([^/]+)/?(.*)"},
    "AlgorithmImage": {"min": 0, "max": 255, "pattern": ".*"},
    "RoleArn": {
        "min": 20,
        "max": 2048,
        "pattern": r"arn:aws[a-z\-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+",
    },
    "ContentType": {"min": 0, "max": 256, "pattern": ".*"},
    "SubnetId": {"min": 0, "max": 32, "pattern": "[-0-9a-zA-Z]+"},
    "Subnets": {"min": 1, "max": 16},
    "SecurityGroupId": {"min": 0, "max": 32, "pattern": "[-0-9a-zA-Z]+"},
    "VpcSecurityGroupIds": {"min": 1, "max": 5},
    "TrainingInstanceCount": {"min": 0},
    "InstanceGroups": {"min": 0, "max": 5},
    "InstanceGroupName": {"min": 1, "max": 64, "pattern": ".+"},
    "VolumeSizeInGB": {"min": 1},
    "MaxRuntimeInSeconds": {"min": 1},
    "MaxWaitTimeInSeconds": {"min": 1},
}


@cache
def service_model():
    """botocore's SageMaker model, or None where botocore is not installed."""
    try:
        import botocore.session
    except ImportError:
        return None
    return botocore.session.get_session().get_service_model("sagemaker")


@cache
def shape(name: str) -> dict:
    """The shape's min, max and pattern (those it has)."""
    model = service_model()
    if model is None:
        return dict(FALLBACK[name])
    meta = model.shape_for(name).metadata
    return {key: meta[key] for key in ("min", "max", "pattern") if key in meta}


def java_length(text: str) -> int:
    """The length the API counts: UTF-16 code units, as Java's String.length()."""
    return len(text.encode("utf-16-le")) // 2


def text_problem(value: str, name: str, controls: bool = False) -> str | None:
    """Why value does not fit shape `name` (length, pattern; control characters when asked
    or when the pattern is Java's ".*", whose "." matches no line break), or None."""
    limits = shape(name)
    pattern = limits.get("pattern")
    if "\x00" in value or ((controls or pattern == ".*") and CONTROL.search(value)):
        return "holds a control character (NUL, newline, tab, ...)"
    length = java_length(value)
    low, high = limits.get("min", 0), limits.get("max")
    if length < low or (high is not None and length > high):
        what = f"{low}-{high}" if high is not None else f"at least {low}"
        return f"is {length} characters; SageMaker's {name} allows {what}"
    if pattern and not re.fullmatch(pattern, value):
        return f"does not match SageMaker's {name} pattern {pattern}"
    return None


def count_limit(name: str) -> int:
    """The most entries a list or map shape may hold."""
    return shape(name)["max"]


def int_range(name: str, low: int | None = None, high: int | None = None) -> tuple[int, int]:
    """(min, max) of an integer shape; low/high tighten it where SageMaker documents more."""
    limits = shape(name)
    lo = max(limits.get("min", 0), low if low is not None else 0)
    hi = min(limits.get("max", API_INT_MAX), high if high is not None else API_INT_MAX)
    return lo, hi


# --- checks the tools share; each raises HostError with a message naming the option -----------

# Docker's image reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
IMAGE_REFERENCE = re.compile(
    rf"(?:{_DOMAIN}(?:\.{_DOMAIN})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,128})?"
)
IMAGE_REFERENCE_MAX = 255  # docker's NameTotalLengthMax


def image_problem(ref: str) -> str | None:
    if not IMAGE_REFERENCE.fullmatch(ref):
        return "is not an image reference ([registry/]name[:tag][@digest], lower-case name)"
    name = ref.split("@", maxsplit=1)[0]
    head, sep, tail = name.rpartition(":")
    if sep and "/" not in tail:  # a tag; a ':' before a '/' is a registry's port
        name = head
    if len(name) > IMAGE_REFERENCE_MAX:
        return f"has a name longer than {IMAGE_REFERENCE_MAX} characters"
    return None


def image_registry(ref: str) -> str | None:
    """The registry an image reference names, None where it names none (Docker then pulls from
    Docker Hub, or a node uses an image it already has): as Docker reads it, the first component
    is a registry when it has a '.' or a ':' or is localhost, and more components follow."""
    first, slash, _ = ref.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def env_key(name: str) -> str:
    """The toolkit's SM_HP_<KEY> / SM_CHANNEL_<NAME> spelling (entrypoint/byoc/config.py)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def split_pair(item: str, flag: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep:
        raise HostError(f"{flag} {item!r}: expected NAME=VALUE")
    if not key:
        raise HostError(f"{flag} {item!r}: the name before '=' is empty")
    return key, value


def parse_value(text: str, flag: str = "--hp", key: str = "") -> object:
    """A hyperparameter's value: JSON when it parses (3, 0.1, true, [1,2]), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:
        raise HostError(f"{flag} {key}: the value is nested too deeply to be JSON") from None


def hyperparameters(
    items: list[str], own: dict[str, object], owners: dict[str, str], flag: str = "--hp"
) -> dict[str, str]:
    """The job's hyperparameters, every value JSON-encoded as the SDK sends them: the user's
    (KEY=VALUE) and the tool's own, checked against SageMaker's limits. owners: keys the user
    may not give, and the option that sets each."""
    values: dict[str, object] = {}
    for item in items:
        key, text = split_pair(item, flag)
        problem = text_problem(key, "HyperParameterKey", controls=True)
        if problem:
            raise HostError(f"{flag} {key!r}: the name {problem}")
        if key in owners:
            raise HostError(f"{flag} {key}: set by {owners[key]}; use that, not {flag}")
        if key in values:
            raise HostError(f"{flag} {key}: given twice")
        values[key] = parse_value(text, flag, key)
    values.update(own)
    limit = count_limit("HyperParameters")
    if len(values) > limit:
        raise HostError(
            f"{flag}: {len(values) - len(own)} given and {len(own)} set by the tool; SageMaker's "
            f"HyperParameters holds at most {limit}"
        )
    encoded: dict[str, str] = {}
    seen: dict[str, str] = {}
    for key, value in values.items():
        name = owners.get(key, flag)
        other = seen.setdefault(env_key(key), key)
        if other != key:
            raise HostError(
                f"{name} {key}: collides with {other!r} (both are SM_HP_{env_key(key)} in the job)"
            )
        try:
            text = json.dumps(value)
        except (RecursionError, ValueError):
            raise HostError(f"{name} {key}: the value is nested too deeply to be JSON") from None
        problem = text_problem(text, "HyperParameterValue")
        if problem:
            raise HostError(f"{name} {key}: the value, JSON-encoded as the SDK sends it, {problem}")
        encoded[key] = text
    return encoded


def environment(
    items: list[str], owners: dict[str, str], flag: str = "--env", extra: int = 0
) -> dict[str, str]:
    """NAME=VALUE items as a map, checked against SageMaker's Environment limits. owners: names
    the tool sets itself, and the option that sets each; extra: how many the tool adds."""
    env: dict[str, str] = {}
    for item in items:
        name, value = split_pair(item, flag)
        problem = text_problem(name, "TrainingEnvironmentKey", controls=True)
        if problem:
            raise HostError(f"{flag} {name!r}: the name {problem}")
        if name in owners:
            raise HostError(f"{flag} {name}: set by {owners[name]}; use that, not {flag}")
        if name in env:
            raise HostError(f"{flag} {name}: given twice")
        problem = text_problem(value, "TrainingEnvironmentValue")
        if problem:
            raise HostError(f"{flag} {name}: the value {problem}")
        env[name] = value
    limit = count_limit("TrainingEnvironmentMap")
    if len(env) + extra > limit:
        raise HostError(
            f"{flag}: {len(env) + extra} variables; SageMaker's Environment holds {limit}"
        )
    return env


def channel_names(names: list[str], flag: str = "--channel") -> None:
    """Each a valid, distinct ChannelName that is not '.' or '..'; at most InputDataConfig's."""
    limit = count_limit("InputDataConfig")
    if len(names) > limit:
        raise HostError(f"{flag}: {len(names)} channels; SageMaker's InputDataConfig holds {limit}")
    seen: dict[str, str] = {}
    for name in names:
        problem = text_problem(name, "ChannelName", controls=True)
        if problem is None and name in (".", ".."):
            problem = "is '.' or '..': it would be the data directory itself or its parent"
        if problem:
            raise HostError(f"{flag} {name!r}: the channel name {problem}")
        if names.count(name) > 1:
            raise HostError(f"{flag} {name}: given twice")
        other = seen.setdefault(env_key(name), name)
        if other != name:
            raise HostError(
                f"{flag} {name}: collides with channel {other!r} (both are "
                f"SM_CHANNEL_{env_key(name)} in the job)"
            )
