"""The one reader of pytest's JUnit reports, for the tools that run pytest and judge its results
(horovod_suites, soak)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    outcome: str  # passed | failed (a failure or an error) | skipped
    seconds: float
    message: str  # the failure's or skip's message attribute ("" where none)
    text: str  # the failure's body: pytest's report of it ("" where none)


def cases(path: Path) -> list[Case]:
    """Every testcase of the report at path; ValueError naming it where it cannot be read."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ValueError(f"{path.name}: not a readable JUnit report ({exc})") from exc
    found = []
    for case in root.iter("testcase"):
        outcome, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message, text = (
                    "failed",
                    child.get("message") or child.tag,
                    child.text or "",
                )
                break
            if child.tag == "skipped":
                outcome, message = "skipped", (child.get("message") or "").strip()
        try:
            seconds = float(case.get("time") or 0)
        except ValueError:
            seconds = 0.0
        found.append(
            Case(case.get("classname", ""), case.get("name", "?"), outcome, seconds, message, text)
        )
    return found
