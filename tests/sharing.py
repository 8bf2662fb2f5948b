"""Pytest runs that share one suite's modules: `make test`'s lanes (hostkit/testrun.py).

The container tests are the longest stage of `make test`; three lanes run them side by side,
each taking over the modules not yet begun. Each run goes through the modules in the order
pytest collected them, from the front or from the back, and runs a module only where it is the
first to claim it (an atomic mkdir in a directory every run is given), so every module runs
once, whole (its module fixtures as written), in one of them.

    BYOC_TEST_SHARE       the claims' directory (it must exist); unset: pytest's own loop
    BYOC_TEST_SHARE_FROM  front or back

A run that claims nothing collected its tests but ran none: it passes, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hostkit.testrun import SHARE_DIR_ENV as DIR_ENV
from hostkit.testrun import SHARE_FROM_ENV as FROM_ENV

ENDS = ("front", "back")


@dataclass
class Share:
    claims: Path
    end: str
    modules: int = 0  # in the suite this run collected
    ran: list[str] = field(default_factory=list)

    def claim(self, module: str) -> bool:
        """True where this run is the first to ask for the module."""
        try:
            (self.claims / module.replace("/", "__")).mkdir()
        except FileExistsError:
            return False
        return True


def from_env(env: Mapping[str, str]) -> Share | None:
    """The share this run is part of; None where none is set. A bad setting is a usage error
    naming the variable."""
    where = env.get(DIR_ENV, "")
    end = env.get(FROM_ENV, "")
    if not where and not end:
        return None
    if not where:
        raise pytest.UsageError(f"{FROM_ENV} is set but {DIR_ENV} is not")
    if end not in ENDS:
        raise pytest.UsageError(f"{FROM_ENV} must be front or back, not {end!r}")
    claims = Path(where)
    if not claims.is_dir():
        raise pytest.UsageError(f"{DIR_ENV}={where}: not a directory")
    return Share(claims, end)


def run(session: pytest.Session, share: Share) -> bool:
    """pytest's run loop over the modules this run claims, in its order; each item is told the
    next one it will run (so fixtures that outlive a module stay up across a claimed boundary)."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in session.items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    share.modules = len(modules)
    pending = iter(modules if share.end == "front" else reversed(modules))

    def next_claimed() -> str | None:
        for module in pending:
            if share.claim(module):
                return module
        return None

    current = next_claimed()
    while current is not None:
        share.ran.append(current)
        items = modules[current]
        following = None
        for i, item in enumerate(items):
            if i + 1 < len(items):
                nextitem = items[i + 1]
            else:
                following = next_claimed()
                nextitem = modules[following][0] if following is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        current = following
    return True


def summary(share: Share) -> str:
    """What the run did of the shared suite, for its closing line."""
    ran = ", ".join(Path(m).name for m in share.ran) or "none"
    return (
        f"shared with another run ({DIR_ENV}, from the {share.end}): {len(share.ran)} "
        f"module(s) ran here ({ran}); {share.modules - len(share.ran)} ran in the others"
    )


# The hooks; a conftest imports them (tests/container/conftest.py).
SHARE = pytest.StashKey[Share]()


def pytest_configure(config: pytest.Config) -> None:
    share = from_env(os.environ)  # a bad setting stops the run here, named
    if share is not None:
        config.stash[SHARE] = share


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """Collection errors and --collect-only go to pytest's own loop, which reports them."""
    share = session.config.stash.get(SHARE, None)
    if share is None or session.testsfailed or session.config.option.collectonly:
        return None
    return run(session, share)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    share = config.stash.get(SHARE, None)
    if share is not None:
        terminalreporter.write_line(summary(share))
