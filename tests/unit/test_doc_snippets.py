"""The code in the documentation runs as written, as far as can be told without running it.

- Every ```python block in README.md and docs/*.md compiles, and ruff's pyflakes rules (F) find
  nothing in it: an undefined name (a class used without its import, a variable no block
  defines) fails, naming the page and line. The blocks of one page are read in order as one
  program, as a reader does: a later block may use what an earlier one defined (sagemaker.md's
  `image_uri` and `role`). Unused imports (F401) are allowed: a snippet may import what its
  comments offer as the alternative. `...` for elided code is fine where it parses. A block that
  cannot be valid Python by design says so in its fence, ```python skip-check (keep it rare).
- In ```sh blocks and in inline code that starts with `make `: every `make TARGET` names a rule
  of the Makefile; a command run by its path (`scripts/cluster.sh kill node1`) exists in this
  repository and is executable; every other path into the repository's own folders exists, and
  `python -m hostkit.<module>` names a module of hostkit.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.unit.doctext import PAGES, ROOT, TARGETS, TEXTS, name, without_code

SKIP_CHECK = "skip-check"  # ```python skip-check: a block that is not meant to be valid Python
FENCE = re.compile(r"^(?P<indent>\s*)(?P<mark>`{3,}|~{3,})\s*(?P<info>.*)$")


@dataclass
class Block:
    page: Path
    line: int  # the line of the opening fence
    lang: str
    words: list[str]  # the rest of the fence's info string
    lines: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{name(self.page)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each line without the fence's indentation."""
    found: list[Block] = []
    current: Block | None = None
    indent = mark = ""
    for number, line in enumerate(TEXTS[page].splitlines(), 1):
        fence = FENCE.match(line)
        if current is None:
            if fence:
                indent, mark = fence["indent"], fence["mark"]
                info = fence["info"].split()
                current = Block(page, number, info[0] if info else "", info[1:])
            continue
        if fence and fence["mark"].startswith(mark) and not fence["info"]:
            found.append(current)
            current = None
            continue
        current.lines.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
    return found


BLOCKS = [b for page in PAGES for b in blocks(page)]
PYTHON = [b for b in BLOCKS if b.lang == "python" and SKIP_CHECK not in b.words]
SHELL = [b for b in BLOCKS if b.lang in ("sh", "bash", "shell", "console")]


def test_blocks_found():
    assert len(PYTHON) >= 6, [b.where for b in PYTHON]
    assert len(SHELL) >= 20, [b.where for b in SHELL]
    skipped = [b.where for b in BLOCKS if b.lang == "python" and SKIP_CHECK in b.words]
    assert len(skipped) <= 2, f"```python {SKIP_CHECK} is for rare cases: {skipped}"


# --- Python --------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.where)
def test_python_block_compiles(block):
    try:
        compile("\n".join(block.lines) + "\n", block.where, "exec")
    except SyntaxError as exc:
        line = block.line + (exc.lineno or 0)
        pytest.fail(f"{name(block.page)}:{line}: {exc.msg} (```python block at line {block.line})")


def ruff() -> list[str]:
    """The venv's ruff (requirements-dev.txt), as `make lint` runs it."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("ruff")
    if found:
        return [found]
    return [sys.executable, "-m", "ruff"]


def test_python_snippets_have_no_undefined_names(tmp_path):
    """One program per page (its blocks in order), checked by ruff's pyflakes rules at once;
    every finding is mapped back to its page and line."""
    origin: dict[tuple[str, int], str] = {}  # (file, line) -> page:line
    files = []
    for page in PAGES:
        mine = [b for b in PYTHON if b.page == page]
        if not mine:
            continue
        path = tmp_path / (name(page).replace("/", "__") + ".py")
        out: list[str] = []
        for block in mine:
            for offset, line in enumerate(block.lines, 1):
                out.append(line)
                origin[(str(path), len(out))] = f"{name(page)}:{block.line + offset}"
            out.append("")
        path.write_text("\n".join(out) + "\n")
        files.append(path)
    assert files, "no ```python blocks found"
    cmd = [*ruff(), "check", "--isolated", "--no-cache", "--select", "F", "--ignore", "F401"]
    cmd += ["--target-version", "py310", "--output-format", "json", *map(str, files)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode in (0, 1), f"{shlex.join(cmd)}: {result.stderr}"
    problems = [
        f"{origin.get((f['filename'], f['location']['row']), f['filename'])}: "
        f"{f['code']} {f['message']}"
        for f in json.loads(result.stdout or "[]")
    ]
    assert not problems, "\n".join(problems)


# --- shell ---------------------------------------------------------------------------------------
def commands(text: str) -> list[tuple[int, list[str]]]:
    """Simple commands of a shell text, each with the (0-based) line it starts on and its words
    (unquoted): continuation lines joined, comments dropped, split at ; && || | & and newlines."""
    logical: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines()):
        start, before = pending or (number, "")
        if line.endswith("\\"):
            pending = (start, before + line[:-1] + " ")
            continue
        pending = None
        logical.append((start, before + line))
    if pending:
        logical.append(pending)
    out = []
    for number, line in logical:
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = list(lexer)
        except ValueError:  # an unbalanced quote (a heredoc's body): nothing to check here
            continue
        current: list[str] = []
        for word in [*words, ";"]:
            if word and set(word) <= set(";&|()<>"):
                if current:
                    out.append((number, current))
                current = []
            else:
                current.append(word)
    return out


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Top-level folders of this repository a path in the docs may point into (other relative paths,
# such as slurm/horovod.sbatch or local/my-job, are the user's or the container's).
REPO_DIRS = ("scripts/", "hostkit/", "deploy/", "docker/", "tests/", "entrypoint/", "docs/")
INLINE_MAKE = re.compile(r"`(make [^`]+)`")


def shell_sources() -> list[tuple[Path, int, str]]:
    """(page, line of the text's first line, shell text): every sh block's body, and every
    inline code span that runs make."""
    found = [(b.page, b.line + 1, "\n".join(b.lines)) for b in SHELL]
    for page in PAGES:
        for number, line in without_code(TEXTS[page]):
            found += [(page, number, m) for m in INLINE_MAKE.findall(line)]
    return found


def check_command(words: list[str]) -> list[str]:
    problems = []
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return problems
    program, args = words[0], words[1:]
    if program == "make":
        # [VAR=...]: an optional variable, as the docs write it
        targets = [a for a in args if not re.match(r"^(-|\[?[A-Za-z_][A-Za-z0-9_]*=)", a)]
        missing = [t for t in targets if t not in TARGETS]
        problems += [f"make {t}: no such target in the Makefile" for t in missing]
    elif "/" in program and not program.startswith(("/", "~", "$", ".")):
        path = ROOT / program
        if not path.is_file():
            problems.append(f"{program}: no such file in the repository")
        elif not os.access(path, os.X_OK):
            problems.append(f"{program}: not executable, yet run by its path")
    for i, arg in enumerate(args):
        if arg.startswith(REPO_DIRS) and not (ROOT / arg.rstrip("/")).exists():
            problems.append(f"{arg}: no such path in the repository")
        if arg == "-m" and i + 1 < len(args) and args[i + 1].startswith("hostkit."):
            module = ROOT / args[i + 1].replace(".", "/")
            if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
                problems.append(f"-m {args[i + 1]}: no such module in hostkit/")
    return problems


def test_shell_commands_name_what_exists():
    problems = []
    checked = 0
    for page, first, text in shell_sources():
        for offset, words in commands(text):
            checked += 1
            problems += [f"{name(page)}:{first + offset}: {p}" for p in check_command(words)]
    assert checked >= 50, f"only {checked} commands found"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("make nosuch", ["make nosuch: no such target in the Makefile"]),
        ("X=1 make dev FLAVOR=cpu && make -n build", []),
        ("make build FLAVOR=cpu && make bench  # comment make nothing", []),
        ("make canary TORCH_VERSION=2.15.0 [TORCHVISION_VERSION=...]", []),
        ("scripts/nosuch.sh up", ["scripts/nosuch.sh: no such file in the repository"]),
        ("scripts/lib.sh", ["scripts/lib.sh: not executable, yet run by its path"]),  # sourced
        ("kubectl apply -k deploy/nosuch", ["deploy/nosuch: no such path in the repository"]),
        ("python3 -m hostkit.nosuch", ["-m hostkit.nosuch: no such module in hostkit/"]),
        ("python3 -m hostkit.local_train --hosts 2", []),
        ("cp -r deploy/slurm /fsx/slurm && sbatch slurm/ddp.sbatch", []),
        ("make k8s-sim \\\n  ENGINE=mpijob K8S_SIM_ARGS='--overlay deploy/nosuch'", []),
        ("true\nmake \\\n  nosuch", ["make nosuch: no such target in the Makefile"]),
    ],
)
def test_the_shell_check_itself(text, expected):
    assert [p for _, words in commands(text) for p in check_command(words)] == expected
