"""Every Horovod patch we carry says what, why and which upstream issue, and docs/patches.md
lists it (the build applies whatever is in docker/patches/, so an undocumented one would ship)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOROVOD = sorted((ROOT / "docker" / "patches").glob("horovod-*.patch"))
TESTS = sorted((ROOT / "tests" / "conformance" / "patches").glob("*.patch"))
INDEX = (ROOT / "docs" / "patches.md").read_text()


def header(path: Path) -> str:
    text = path.read_text()
    start = text.find("\n--- a/")
    assert start > 0, f"{path.name}: no unified diff (--- a/...) after the header"
    return text[:start]


@pytest.mark.parametrize("path", HOROVOD + TESTS, ids=lambda p: p.name)
def test_patch_says_what_why_and_upstream(path):
    text = header(path)
    for field in ("What:", "Why:") + (("Upstream:",) if path in HOROVOD else ()):
        assert re.search(rf"^{field}", text, re.M), f"{path.name}: no {field!r} line"


@pytest.mark.parametrize("path", HOROVOD + TESTS, ids=lambda p: p.name)
def test_patch_is_in_the_index(path):
    short = re.sub(r"^horovod-[0-9.]+-", "", path.stem)
    assert f"| `{short}` |" in INDEX, f"docs/patches.md has no row for {short}"


def test_there_are_horovod_patches():
    assert HOROVOD, "docker/patches/horovod-*.patch: none found"
