"""The documentation keeps up with the code: every make target, every Dockerfile build argument and
every BYOC_* / SM_* variable the code reads is named in README.md, docs/*.md or a deploy/ README,
and every relative link in them (and its #anchor) points at something that exists."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.unit.doctext import (
    HELP_RULE,
    MAKEFILE,
    PAGES,
    ROOT,
    TARGETS,
    TEXTS,
    name,
    without_code,
)

WHERE = "README.md, docs/*.md or deploy/**/README.md"

DOCS_TEXT = "\n".join(TEXTS.values())


def documented(word: str, *, prefix: bool = False) -> bool:
    """word appears as a whole name; a prefix (SM_CHANNEL_) may run on (SM_CHANNEL_<NAME>)."""
    tail = "" if prefix else r"(?![A-Za-z0-9_])"
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}{tail}", DOCS_TEXT) is not None


# --- make targets ------------------------------------------------------------------------------


def test_makefile_parsed():
    helped = set(HELP_RULE.findall(MAKEFILE))
    assert len(helped) >= 20, f"Makefile: only {sorted(helped)} have a ## help comment"
    assert helped <= set(TARGETS), f"Makefile: ## targets missed: {sorted(helped - set(TARGETS))}"


@pytest.mark.parametrize("target", TARGETS)
def test_make_target_is_documented(target):
    as_command = rf"\bmake\s+(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*{re.escape(target)}(?![\w-])"
    as_code = rf"`{re.escape(target)}`"
    assert re.search(as_command, DOCS_TEXT) or re.search(as_code, DOCS_TEXT), (
        f"make target {target!r} is neither `make {target}` nor `{target}` in {WHERE}"
    )


# --- build arguments ---------------------------------------------------------------------------
BUILD_ARGS = sorted(
    set(re.findall(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)", (ROOT / "Dockerfile").read_text(), re.M))
)


def test_dockerfile_parsed():
    assert "TORCH_VERSION" in BUILD_ARGS, f"Dockerfile: ARGs parsed as {BUILD_ARGS}"


@pytest.mark.parametrize("arg", BUILD_ARGS)
def test_build_arg_is_documented(arg):
    assert documented(arg), f"Dockerfile build argument {arg} is not in {WHERE}"


# --- BYOC_* and SM_* variables -----------------------------------------------------------------
# Every name the code, scripts, image files, manifests, Dockerfile and Makefile spell. tests/ is
# left out: switches only the test suites read need not be documented (most are, in tests.md).
# A name that ends in "_" is a prefix the code completes at run time (SM_CHANNEL_ + the channel,
# SM_HP_ + the hyperparameter, BYOC_DISCOVER_ in the list of variables SSH sessions get): it is
# documented when the docs spell it with anything after it (`SM_CHANNEL_<NAME>`, `SM_HP_*`,
# `BYOC_DISCOVER_HOSTS`). Every other name must appear whole.
SOURCES = ["entrypoint", "hostkit", "scripts", "docker", "deploy", "Dockerfile", "Makefile"]
VARIABLE = re.compile(r"\b(?:BYOC|SM)_[A-Z0-9_]+\b")
# Python identifiers that match the pattern but are no environment variable: the two constants
# holding the prefixes SM_CHANNEL_ and SM_HP_ (which are checked as prefixes), and the path of
# the SageMaker SDK's sm_train.sh in byoc/launch/sdk.py. Keep this list short.
NOT_VARIABLES = {"SM_CHANNEL_PREFIX", "SM_HP_PREFIX", "SM_TRAIN"}


def source_files() -> list[Path]:
    files = []
    for entry in SOURCES:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [
            p
            for p in candidates
            if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
        ]
    return files


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return "" if b"\0" in data else data.decode("utf-8", errors="replace")


SEEN_IN: dict[str, str] = {}  # variable: the first file that spells it, for the message
for _path in source_files():
    for _variable in VARIABLE.findall(read_text(_path)):
        SEEN_IN.setdefault(_variable, name(_path))
FOUND = sorted(SEEN_IN)
VARIABLES = [v for v in FOUND if v not in NOT_VARIABLES]


def test_variables_found():
    assert "BYOC_LAUNCHER" in VARIABLES and "SM_MODEL_DIR" in VARIABLES, f"found {VARIABLES}"
    stale = NOT_VARIABLES - set(FOUND)
    assert not stale, f"tests/unit/test_docs.py NOT_VARIABLES: {sorted(stale)} no longer in code"


@pytest.mark.parametrize("variable", VARIABLES)
def test_variable_is_documented(variable):
    prefix = variable.endswith("_")
    assert documented(variable, prefix=prefix), (
        f"{variable}{'<...> (a prefix)' if prefix else ''} is in {SEEN_IN[variable]} "
        f"but not in {WHERE}"
    )


# --- links -------------------------------------------------------------------------------------
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lowercase, punctuation but '-' and '_'
    dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache  # a page's headings, once however many links point at it
def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in without_code(TEXTS.get(path) or path.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, raw in without_code(TEXTS[path]):
        line = re.sub(r"`[^`]*`", "", raw)  # inline code is no link
        found += [(number, target) for target in INLINE_LINK.findall(line)]
        ref = REFERENCE_LINK.match(line)
        if ref:
            found.append((number, ref.group(1)))
    return found


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_relative_links_resolve(page):
    problems = []
    for number, target in links(page):
        if EXTERNAL.match(target):
            continue
        where, _, anchor = unquote(target).partition("#")
        dest = (page.parent / where).resolve() if where else page
        if not dest.exists():
            problems.append(f"{name(page)}:{number}: {target}: no file {where}")
            continue
        if not anchor:
            continue
        if dest.suffix != ".md":
            problems.append(f"{name(page)}:{number}: {target}: #{anchor} on a non-markdown file")
        elif anchor not in anchors(dest):
            problems.append(
                f"{name(page)}:{number}: {target}: no heading #{anchor} in {where or name(page)}"
            )
    assert not problems, "\n".join(problems)
