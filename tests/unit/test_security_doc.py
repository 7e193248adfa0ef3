"""docs/security.md names real tests: every `file::test` it cites exists, so the threat model
cannot drift from what is checked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
# `tests/x.py::name`, `tests/x.py`, or `::name` (same file as the last one named before it)
REF = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?(?:\[([^\]`]*)\])?`")


def cited() -> list[tuple[str, str | None, str | None]]:
    refs: list[tuple[str, str | None, str | None]] = []
    last: str | None = None
    for match in REF.finditer(DOC.read_text()):
        path, name, case = match.group(1), match.group(2), match.group(3)
        if path is None and name is None:
            continue
        path = path or last
        assert path is not None, f"`::{name}` has no file before it"
        last = path
        refs.append((path, name, case))
    return refs


def test_the_threat_model_cites_tests() -> None:
    assert len(cited()) > 50


def test_every_test_the_threat_model_cites_exists() -> None:
    missing = []
    for path, name, case in cited():
        source = ROOT / path
        if not source.is_file():
            missing.append(path)
        elif name and not re.search(rf"^def {name}\(", source.read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
        elif case and f'"{case}"' not in source.read_text():  # a parametrised case's id
            missing.append(f"{path}::{name}[{case}]")
    assert not missing, missing
