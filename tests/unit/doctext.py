"""The documentation and the Makefile as the doc tests (test_docs, test_doc_snippets) read them:
read once, shared."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The pages a user reads: README.md, docs/, and the README of each deploy/ folder.
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "deploy").rglob("README.md")),
]


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


# --- what each make target reads ---------------------------------------------------------------
# `make TARGET VAR=value` works when TARGET reads VAR: its recipe (or a prerequisite's, or a
# sub-make's: `$(MAKE) build`) refers to it, directly or through another variable's value
# (TAG ?= $(FLAVOR)), or a script or hostkit tool that the recipe runs reads it from the
# environment, where make puts every variable given on its command line. A recipe that hands
# make itself to a tool ($(SUB_MAKE) to hostkit.testrun) may pass any variable on.
ASSIGN = re.compile(r"^(?:export\s+|override\s+)?([A-Za-z_]\w*)\s*(?:\?|::?|\+|!)?=\s?(.*)$")
RULE_HEADER = re.compile(r"^([^\s:=#][^:=]*?)\s*:(?![:=])(.*)$")
TARGET_WORD = re.compile(r"[\w$()/-][\w.$()/-]*")  # not .PHONY, not a `$(shell echo "x: y")`
REF = re.compile(r"\$[({](?:(?:origin|value|flavor)\s+)?([A-Za-z_]\w*)[)}]")
SUB_MAKE = re.compile(r"\$\(MAKE\)((?:\s+[^\s;&|]+)*)")
SCRIPT = re.compile(r"\b((?:scripts|tests/standin|deploy/slurm)/[\w.-]+\.sh)\b")
SHELL_READ = re.compile(r"\$\{?([A-Za-z_]\w*)")
SHELL_DEFAULT = re.compile(r"\$\{([A-Za-z_]\w*):?[-=?+]")  # ${X:-default}: X from the environment
SHELL_SET = re.compile(r"^\s*(?:local\s+|export\s+|readonly\s+)?([A-Za-z_]\w*)=", re.M)
PYTHON_READ = re.compile(r"(?:environ\.get|environ\[|getenv)\(?\s*[\"']([A-Za-z_]\w*)[\"']")
HOSTKIT_IMPORT = re.compile(r"^\s*from hostkit(?:\.([\w.]+))? import ([\w, ]+)", re.M)
HOSTKIT_RUN = re.compile(r"-m (hostkit(?:\.\w+)+)")


@dataclass
class Rule:
    prerequisites: list[str]
    recipe: list[str] = field(default_factory=list)


def parse_makefile(text: str) -> tuple[dict[str, Rule], dict[str, list[str]]]:
    """The rules (every target of a header) and every value each variable is given."""
    rules: dict[str, Rule] = {}
    variables: dict[str, list[str]] = {}
    current: Rule | None = None
    for line in text.splitlines():
        if line.startswith("\t"):
            if current is not None:
                current.recipe.append(line.strip())
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assign, header = ASSIGN.match(line), RULE_HEADER.match(line)
        if assign:
            variables.setdefault(assign[1], []).append(assign[2])
            current = None
        elif header and all(TARGET_WORD.fullmatch(w) for w in header[1].split()):
            current = Rule(re.split(r"##|;", header[2], maxsplit=1)[0].split())
            for target in header[1].split():
                rules[target] = current
        else:
            current = None
    return rules, variables


RULES, VARIABLES = parse_makefile(MAKEFILE)
# A variable that is make itself, handed to a tool that runs more targets with it.
MAKE_HANDLES = {v for v, values in VARIABLES.items() if values == ["$(MAKE)"]}


def module_file(module: str) -> Path | None:
    path = ROOT / module.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _file_reads(path: Path) -> tuple[set[str], list[Path]]:
    """The variables one script or module reads from its environment, and the scripts it names
    (sources or runs) and the hostkit modules it imports."""
    text = path.read_text(errors="replace")
    others: list[Path | None] = [ROOT / s for s in SCRIPT.findall(text)]
    if path.suffix != ".py":
        # A variable the script sets itself is its own, unless it defaults to the environment's.
        own = set(SHELL_SET.findall(text)) - set(SHELL_DEFAULT.findall(text))
        names = set(SHELL_READ.findall(text)) - own
        if "${!" in text:  # a name made at run time (${!given_var}): the names it spells stand in
            names |= set(re.findall(r"\b[A-Z][A-Z0-9_]*[A-Z0-9]\b", text))
        return names, [p for p in others if p is not None]
    for package, items in HOSTKIT_IMPORT.findall(text):
        base = "hostkit" + (f".{package}" if package else "")
        modules = [base, *(f"{base}.{item.strip()}" for item in items.split(","))]
        others += [module_file(m) for m in modules]
    return set(PYTHON_READ.findall(text)), [p for p in others if p is not None]


@functools.cache
def environment_reads(path: Path) -> frozenset[str]:
    """The variables a script or hostkit module reads from its environment, with those of every
    script and module it leads to."""
    names: set[str] = set()
    todo, seen = [path], {path}
    while todo:
        found, others = _file_reads(todo.pop())
        names |= found
        for other in others:
            if other.is_file() and other not in seen:
                seen.add(other)
                todo.append(other)
    return frozenset(names)


@dataclass
class Reads:
    """What `make TARGETS` reads: variables by name, or any (make handed to a tool), and the
    variables whose words a hostkit tool takes as its options (LOCAL_TRAIN_ARGS ->
    hostkit.local_train)."""

    names: set[str] = field(default_factory=set)
    any: bool = False
    tool_args: dict[str, str] = field(default_factory=dict)


def tool_arguments(text: str) -> dict[str, str]:
    """In a command that runs a hostkit tool (`$(PY) -m hostkit.X ...`, or through a variable
    whose value does: $(SUITES_CMD)), the variables that stand alone as words and are not an
    option's value: their words are the tool's options."""
    module = HOSTKIT_RUN.search(text)
    runner = None
    if module is None:
        for var in REF.findall(text):
            found = [HOSTKIT_RUN.search(value) for value in VARIABLES.get(var, [])]
            if any(found):
                module, runner = next(f for f in found if f), var
                break
    if module is None:
        return {}
    words = text.split()
    out = {}
    for i, word in enumerate(words):
        alone = re.fullmatch(r"\$\(([A-Za-z_]\w*)\)", word)
        if alone and alone[1] not in (runner, "PY") and not (i and words[i - 1].startswith("-")):
            out[alone[1]] = module[1]
    return out


@functools.cache
def _reads(targets: tuple[str, ...]) -> Reads:
    reads = Reads()
    texts: list[str] = []
    seen_rules: set[str] = set()
    seen_vars: set[str] = set()

    def add_rule(target: str) -> None:
        if target in RULES and target not in seen_rules:
            seen_rules.add(target)
            texts.extend([" ".join(RULES[target].prerequisites), *RULES[target].recipe])
            for prerequisite in RULES[target].prerequisites:
                add_rule(prerequisite)

    for target in targets:
        add_rule(target)
    while texts:
        text = texts.pop()
        reads.tool_args.update(tool_arguments(text))
        for var in REF.findall(text):
            reads.names.add(var)
            reads.any = reads.any or var in MAKE_HANDLES
            if var not in seen_vars:
                seen_vars.add(var)
                texts.extend(VARIABLES.get(var, []))
        for words in SUB_MAKE.findall(text):
            for word in words.split():
                if not word.startswith("-") and "=" not in word:
                    add_rule(word)
        for run in [*SCRIPT.findall(text), *HOSTKIT_RUN.findall(text)]:
            path = ROOT / run if run.endswith(".sh") else module_file(run)
            if path is not None and path.is_file():
                reads.names |= environment_reads(path)
    return reads


DEFAULT_GOAL = re.search(r"^\.DEFAULT_GOAL\s*:?=\s*(\S+)", MAKEFILE, re.M)


def make_reads(targets: list[str]) -> Reads:
    """What `make TARGETS` reads (no target: the default goal's)."""
    assert DEFAULT_GOAL, "Makefile: no .DEFAULT_GOAL"
    return _reads(tuple(targets or [DEFAULT_GOAL[1]]))
