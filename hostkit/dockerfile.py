"""The one reader of the Dockerfile's pins: the defaults of its `ARG NAME=VALUE` lines.

Versions, URLs and checksums are declared once, in the Dockerfile; every host tool, script and
test that needs one reads it here (the shell scripts through the command line):

    python3 -m hostkit.dockerfile NAME [NAME ...]   (one value a line; 2: a name it lacks)

A value may use the ARGs declared before it, as Docker expands them (${NAME}, $NAME); arg()
gives it expanded, raw() as written. The first declaration of a name is its default (a later
`ARG NAME` in a stage only brings it into scope). Standard library only: the build scripts run
this on the system python3.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

from hostkit import HostError, run

DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"
_ARG = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@cache
def _declared(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise HostError(f"cannot read {path}: {exc.strerror}") from None
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _ARG.match(line.strip())
        if match and match.group(1) not in found:
            value = match.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            found[match.group(1)] = value
    return found


def raw(name: str, path: Path = DOCKERFILE) -> str:
    """ARG name's default as the Dockerfile writes it; HostError where it declares none."""
    declared = _declared(path)
    if name not in declared:
        raise HostError(f"ARG {name} is not in {path} (with a default)")
    return declared[name]


def arg(name: str, path: Path = DOCKERFILE) -> str:
    """ARG name's default with the ARGs it uses expanded (an unknown one: HostError)."""
    declared = _declared(path)
    order = list(declared)

    def expand(value: str, seen: tuple[str, ...]) -> str:
        def one(match: re.Match) -> str:
            ref = match.group(1) or match.group(2)
            if ref not in declared or order.index(ref) >= order.index(seen[-1]):
                raise HostError(
                    f"ARG {seen[-1]} in {path} uses ${{{ref}}}, which no ARG declares before it"
                )
            return expand(declared[ref], (*seen, ref))

        return _REF.sub(one, value)

    return expand(raw(name, path), (name,))


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    if not names:
        raise HostError("usage: python3 -m hostkit.dockerfile NAME [NAME ...]")
    values = [arg(n) for n in names]  # all checked before any is printed
    print("\n".join(values))
    return 0


if __name__ == "__main__":
    sys.exit(run("dockerfile", main))
