"""The code in the documentation runs as written, as far as can be told without running it.

The pages: README.md, docs/*.md and every deploy/**/README.md (tests/unit/doctext.py's PAGES).

- Every ```python block compiles, and ruff's pyflakes rules (F) find nothing in it: an undefined
  name (a class used without its import, a variable no block defines) fails, naming the page and
  line. The blocks of one page are read in order as one program, as a reader does: a later block
  may use what an earlier one defined (sagemaker.md's `image_uri` and `role`). Unused imports
  (F401) are allowed: a snippet may import what its comments offer as the alternative. `...` for
  elided code is fine where it parses. A block that cannot be valid Python by design says so in
  its fence, ```python skip-check (keep it rare).
- The commands of ```sh blocks and of inline code that is a command (make, python, kubectl, a
  script of ours with arguments; a span broken across lines is one command):
  - `make TARGET` names a rule of the Makefile; every `VAR=value` given to make is a variable
    that target reads (its recipe, a variable's value, a sub-make's, or a script or hostkit tool
    it runs: doctext.make_reads); an option make does not take itself (`make launch --spot`)
    fails, naming the variable that carries the tool's options (ARGS="--spot");
  - a hostkit tool's options, given to `python -m hostkit.X` or in the make variable the
    Makefile passes to it (LOCAL_TRAIN_ARGS, ARGS, K8S_SIM_ARGS, BENCH_ARGS ...), parse with
    the tool's own build_parser(); a tool that describes a SageMaker job (hostkit.job) also
    refuses the hyperparameters and variables it sets itself (`--hp sagemaker_program=`);
  - `kubectl apply -k` of an overlay in this repository, as it is, runs images that name a
    registry (the shipped overlays do not: `make k8s-overlay` writes one that does);
  - a command run by its path (`scripts/cluster.sh kill node1`) exists in this repository and
    is executable; every other path into the repository's own folders exists, and
    `python -m hostkit.<module>` names a module of hostkit.
  Placeholders pass: `...` (elided words), `<image_uri printed by push>`, `[--opt X]`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
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

from hostkit import HostError, job, k8s_validate
from hostkit.aws import limits
from hostkit.horovod_suites import SUITE_NAMES
from tests.unit.doctext import (
    PAGES,
    ROOT,
    TARGETS,
    TEXTS,
    make_reads,
    module_file,
    name,
    without_code,
)

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
# Inline code that is a command to check: make, python (-m hostkit...), kubectl, a script of ours
# with arguments (`scripts/lib.sh` alone names the file).
INLINE_COMMAND = re.compile(
    r"^(?:[A-Za-z_]\w*=\S*\s+)*(?:sudo\s+)?"
    r"(?:(?:make|python3?|\.venv/bin/python|kubectl)(?:\s|$)|scripts/\S+\s+\S)"
)
PLACEHOLDER = re.compile(r"<[^<>]*>")  # <image_uri printed by push>: a value the reader fills in


def inline_spans(text: str) -> list[tuple[int, str]]:
    """(line, code) of every inline code span outside fenced blocks; a span that breaks across
    the lines of a paragraph is joined with spaces, as Markdown shows it. A table row is a
    paragraph of its own."""
    kept = dict(without_code(text))  # fenced lines left out: they end a paragraph
    paragraphs: list[tuple[int, list[str]]] = []  # (first line, lines)
    going_on = False
    for number in range(1, len(text.splitlines()) + 1):
        line = kept.get(number, "")
        row = line.lstrip().startswith("|")
        if line.strip() and (row or not going_on):
            paragraphs.append((number, []))
        if line.strip():
            paragraphs[-1][1].append(line)
        going_on = bool(line.strip()) and not row
    found = []
    for first, lines in paragraphs:
        joined = "\n".join(lines)
        for match in re.finditer(r"`([^`]+)`", joined):
            code = " ".join(match[1].split("\n"))
            found.append((first + joined.count("\n", 0, match.start()), code))
    return found


def shell_sources() -> list[tuple[Path, int, str]]:
    """(page, line of the text's first line, shell text): every sh block's body, and every
    inline code span that is a command."""
    found = [(b.page, b.line + 1, "\n".join(b.lines)) for b in SHELL]
    for page in PAGES:
        found += [
            (page, n, code) for n, code in inline_spans(TEXTS[page]) if INLINE_COMMAND.match(code)
        ]
    return found


# --- make ----------------------------------------------------------------------------------------
@functools.cache
def make_options() -> frozenset[str] | None:
    """GNU make's long options, as its --help lists them; None without a make to ask."""
    try:
        done = subprocess.run(
            ["make", "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z-]*", done.stdout)) or None


def make_takes(option: str) -> bool:
    """Whether make takes --option (or an abbreviation of one only, as getopt does)."""
    known = make_options()
    if known is None:
        return True  # no make here to ask: nothing to say
    name = option.split("=", 1)[0]
    return name in known or len([o for o in known if o.startswith(name)]) == 1


def check_make(args: list[str]) -> list[str]:
    targets, variables, options = [], {}, []
    for arg in args:
        bare = arg.strip("[]")  # [VAR=...]: an optional variable, as the docs write it
        if ASSIGNMENT.match(bare):
            name, _, value = bare.partition("=")
            variables[name] = value
        elif arg.startswith("--"):
            options.append(arg)
        elif options and not make_takes(options[-1]):
            continue  # the value of an option meant for the tool, not a target
        elif not arg.startswith("-") and arg not in ("...", "…"):  # ...: elided
            targets.append(arg)
    problems = [f"make {t}: no such target in the Makefile" for t in targets if t not in TARGETS]
    reads = make_reads([t for t in targets if t in TARGETS])
    command = " ".join(["make", *targets])
    carriers = sorted(v for v in reads.tool_args if v.endswith("ARGS"))
    for option in options:
        if make_takes(option):
            continue
        where = (
            f'the tool\'s options go in {carriers[0]}="{option} ..."'
            if carriers
            else "make has no such option"
        )
        problems.append(f"{command} {option}: make stops at an option it does not know; {where}")
    for name, value in variables.items():
        if not (reads.any or name in reads.names):
            problems.append(
                f"{command} {name}=...: {command} does not read {name} (not in its recipe, "
                "nor read by a script or tool it runs)"
            )
        elif name in reads.tool_args:
            words = shlex.split(PLACEHOLDER.sub("PLACEHOLDER", value))
            found = path_problems(words) + check_tool(reads.tool_args[name], words)
            problems += [f"{command} {name}: {p}" for p in found]
    return problems


# --- hostkit tools -------------------------------------------------------------------------------
class Refused(Exception):
    """What argparse would say and exit 2 on."""


def check_tool(module_name: str, argv: list[str]) -> list[str]:
    """The options as the tool's own parser (its build_parser()) takes them: known options,
    values of the right type and choice. The options a tool requires are not required here (make
    gives them, or the docs leave them out: `make launch ARGS="... --env X=1"`). Where the tool
    describes a SageMaker job (TOOL, hostkit.job), the hyperparameters and variables are checked
    as its job is (a name the tool sets itself, such as --hp sagemaker_program, is refused)."""
    words = [w.strip("[]") for w in argv if w not in ("...", "…")]  # [--opt X]: optional
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return [f"-m {module_name}: cannot be imported: {exc}"]
    build = getattr(module, "build_parser", None)
    if build is None:
        if any(w.startswith("-") for w in words):
            return [f"-m {module_name}: no build_parser() to check {shlex.join(words)} against"]
        return []
    parser = build()
    for action in parser._actions:
        action.required = False
    for group in parser._mutually_exclusive_groups:
        group.required = False

    def refuse(message: str):
        raise Refused(message)

    parser.error = refuse
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            parsed = parser.parse_args(words)
    except Refused as exc:
        return [f"{module_name} {shlex.join(words)}: {exc}"]
    except SystemExit:  # --help
        return []
    tool = getattr(module, "TOOL", None)
    if isinstance(tool, job.Tool):
        try:
            job.Job(
                tool,
                name="doc-snippet",
                instance_type="ml.m5.xlarge",
                hyperparameters=getattr(parsed, "hp", []),
                environment=getattr(parsed, "env", []),
            )
        except HostError as exc:
            return [f"{module_name} {shlex.join(words)}: {exc}"]
    return []


# --- kubectl -------------------------------------------------------------------------------------
def check_kubectl(args: list[str]) -> list[str]:
    """`kubectl apply -k DIR` of an overlay in this repository, as it is: every image it runs
    must name a registry, or a pod starts only on a node that already has it."""
    if args[:1] not in (["apply"], ["create"]):
        return []
    problems = []
    for i, arg in enumerate(args):
        if arg in ("-k", "--kustomize") and i + 1 < len(args):
            path = args[i + 1]
        elif arg.startswith(("-k=", "--kustomize=")):
            path = arg.split("=", 1)[1]
        else:
            continue
        directory = ROOT / path.rstrip("/")
        if not path.startswith(REPO_DIRS) or not directory.is_dir():
            continue  # the user's own overlay (local/...), or a path the path rule reports
        try:
            images = set(k8s_validate.container_images(k8s_validate.render(directory)))
        except k8s_validate.RenderError as exc:
            problems.append(f"kubectl apply -k {path}: does not render: {exc}")
            continue
        bare = sorted(i for i in images if limits.image_registry(i) is None)
        if bare:
            overlay = directory.name if directory.parent == k8s_validate.OVERLAYS_DIR else "..."
            problems.append(
                f"kubectl apply -k {path}: its image {', '.join(bare)} names no registry, so a "
                f"pod starts only on a node that has it already: apply what `make k8s-overlay "
                f"OVERLAY={overlay} IMAGE_URI=...` writes"
            )
    return problems


# --- every command -------------------------------------------------------------------------------
def check_command(words: list[str]) -> list[str]:
    problems = []
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[:1] == ["sudo"]:
        words = words[1:]
    if not words:
        return problems
    program, args = words[0], words[1:]
    if program == "make":
        problems += check_make(args)
    elif program == "kubectl":
        problems += check_kubectl(args)
    elif "/" in program and not program.startswith(("/", "~", "$", ".")):
        path = ROOT / program
        if not path.is_file():
            problems.append(f"{program}: no such file in the repository")
        elif not os.access(path, os.X_OK):
            problems.append(f"{program}: not executable, yet run by its path")
    problems += path_problems(args)
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args) and args[i + 1].startswith("hostkit."):
            if module_file(args[i + 1]) is None:
                problems.append(f"-m {args[i + 1]}: no such module in hostkit/")
            else:
                problems += check_tool(args[i + 1], args[i + 2 :])
    return problems


def path_problems(words: list[str]) -> list[str]:
    return [
        f"{word}: no such path in the repository"
        for word in words
        if word.startswith(REPO_DIRS) and not (ROOT / word.rstrip("/")).exists()
    ]


def test_shell_commands_are_true_as_typed():
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
        ("true\nmake \\\n  nosuch", ["make nosuch: no such target in the Makefile"]),
        (
            "make k8s-sim \\\n  ENGINE=mpijob K8S_SIM_ARGS='--overlay deploy/nosuch'",
            ["make k8s-sim K8S_SIM_ARGS: deploy/nosuch: no such path in the repository"],
        ),
        # make variables: the target's recipe, a variable's value, a script or tool it runs
        (
            "make dev NOSUCH=1",
            [
                "make dev NOSUCH=...: make dev does not read NOSUCH (not in its recipe, nor read "
                "by a script or tool it runs)"
            ],
        ),
        (
            "make lint HOSTS=3",
            [
                "make lint HOSTS=...: make lint does not read HOSTS (not in its recipe, nor read "
                "by a script or tool it runs)"
            ],
        ),
        ("make dev DEV_ARGS='-e X=1' TAG=cpu", []),  # TAG: through IMAGE_OR_BUILD's sub-make
        ("make local-train FLAVOR=cpu HOSTS=2", []),  # FLAVOR: TAG ?= $(FLAVOR)
        ("make build BUILD_ARGS=--no-cache", []),  # read by scripts/build.sh
        ("make cluster-up CLUSTER_PROJECT=two NODES=3", []),  # read by scripts/cluster.sh
        ("make test NOSUCH=1", []),  # make itself goes to hostkit.testrun: any variable may pass
        (
            "make NOSUCH=1",  # the default goal, help
            [
                "make NOSUCH=...: make does not read NOSUCH (not in its recipe, nor read by a "
                "script or tool it runs)"
            ],
        ),
        # options given to make itself
        (
            "make launch --keep-alive-seconds 600",
            [
                "make launch --keep-alive-seconds: make stops at an option it does not know; the "
                'tool\'s options go in ARGS="--keep-alive-seconds ..."'
            ],
        ),
        (
            "make bench --quick",
            [
                "make bench --quick: make stops at an option it does not know; the tool's options "
                'go in BENCH_ARGS="--quick ..."'
            ],
        ),
        (
            "make dev --nosuch",
            [
                "make dev --nosuch: make stops at an option it does not know; make has no such "
                "option"
            ],
        ),
        ("make --no-print-directory -n build --dry-run --jobs=2", []),
        # a hostkit tool's options, given directly or in the make variable make passes to it
        (
            "make local-train LOCAL_TRAIN_ARGS='--hp epochs=2 --nosuch'",
            [
                "make local-train LOCAL_TRAIN_ARGS: hostkit.local_train --hp epochs=2 --nosuch: "
                "unrecognized arguments: --nosuch"
            ],
        ),
        (
            "make local-train LOCAL_TRAIN_ARGS='--hp sagemaker_program=/opt/x.py'",
            [
                "make local-train LOCAL_TRAIN_ARGS: hostkit.local_train --hp "
                "sagemaker_program=/opt/x.py: --hp sagemaker_program: set by --entry-point; use "
                "that, not --hp"
            ],
        ),
        (
            "make local-train LOCAL_TRAIN_ARGS='--source-dir src --entry-point train.py'",
            [],
        ),
        (
            "make launch ARGS='... --env TRAINING_JOB_NAME=x'",
            [
                "make launch ARGS: hostkit.aws.launch --env TRAINING_JOB_NAME=x: --env "
                "TRAINING_JOB_NAME: set by --job-name; use that, not --env"
            ],
        ),
        ('make launch ARGS="--image-uri <uri from push> --role <arn> --spot --wait"', []),
        (
            "make test-horovod HOROVOD_SUITES_ARGS='--suite nosuch'",
            [
                "make test-horovod HOROVOD_SUITES_ARGS: hostkit.horovod_suites --suite nosuch: "
                "argument --suite: invalid choice: 'nosuch' (choose from "
                + ", ".join(f"'{s}'" for s in SUITE_NAMES)
                + ")"
            ],
        ),
        (
            "sudo .venv/bin/python -m hostkit.k8s_sim --engine mpijob --workers two",
            [
                "hostkit.k8s_sim --engine mpijob --workers two: argument --workers: invalid int "
                "value: 'two'"
            ],
        ),
        ("python3 -m hostkit.k8s_sim --engine mpijob [--overlay DIR] ...", []),
        ("python3 -m hostkit.local_train --help", []),
        # kubectl apply -k of a shipped overlay as it is
        (
            "kubectl apply -k deploy/kubernetes/overlays/mpijob-cpu",
            [
                "kubectl apply -k deploy/kubernetes/overlays/mpijob-cpu: its image "
                "pytorch-horovod:cpu names no registry, so a pod starts only on a node that has it "
                "already: apply what `make k8s-overlay OVERLAY=mpijob-cpu IMAGE_URI=...` writes"
            ],
        ),
        ("kubectl kustomize deploy/kubernetes/overlays/mpijob-gpu", []),  # looking is fine
        ("kubectl apply -k local/k8s/mpijob-gpu", []),  # the user's own
    ],
)
def test_the_shell_check_itself(text, expected):
    if any("make stops at an option" in e for e in expected) and make_options() is None:
        pytest.skip("no make here to list its options")
    assert [p for _, words in commands(text) for p in check_command(words)] == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("run `make build`, then `make dev`", [(1, "make build"), (1, "make dev")]),
        # a span broken across a paragraph's lines is one command
        (
            "one `make launch --keep-alive-seconds\n600` two",
            [(1, "make launch --keep-alive-seconds 600")],
        ),
        ("a stray ` here\n\nthen `make dev`", [(3, "make dev")]),  # not paired across paragraphs
        (
            "| `make x | y` |\n| `a` | stray ` |\n`make z`",
            [(1, "make x | y"), (2, "a"), (3, "make z")],
        ),
        ("```sh\n`make fenced`\n```\n`make after`", [(4, "make after")]),
    ],
)
def test_inline_spans(text, expected):
    assert inline_spans(text) == expected
