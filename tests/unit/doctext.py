"""The documentation and the Makefile as the doc tests (test_docs, test_doc_snippets) read them:
read once, shared."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def without_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) for the lines outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opener = re.match(r"^\s*(`{3,}|~{3,})", line)
        if opener:
            mark = opener.group(1)[0] * 3
            if fence is None:
                fence = mark
            elif mark == fence:
                fence = None
            continue
        if fence is None:
            lines.append((number, line))
    return lines


TEXTS = {p: p.read_text() for p in PAGES}  # read once: every test below looks at them

# `make help` lists the rules with a `## text` comment (grep '^[a-zA-Z0-9_-]+:.*?## '). We check
# those and, beyond them, every other rule with a plain name (letters, digits, '-', '_') and every
# .PHONY name: all of them are commands a user may type. Left out on purpose: file targets
# ($(DEV_STAMP), i.e. .venv/.installed: a stamp the other targets depend on), special targets
# (.PHONY, .DEFAULT_GOAL) and pattern rules; the regex below never matches those, nor variable
# assignments (`X := ...`, `X ?= ...`).
MAKEFILE = (ROOT / "Makefile").read_text().replace("\\\n", " ")
RULE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]*)[ \t]*:(?![:=])", re.M)
HELP_RULE = re.compile(r"^([a-zA-Z0-9_-]+):.*?## ", re.M)
PHONY = {t for line in re.findall(r"^\.PHONY:(.*)$", MAKEFILE, re.M) for t in line.split()}
TARGETS = sorted(set(RULE.findall(MAKEFILE)) | PHONY)
