"""onloop never merges and never approves: no code path asks GitHub for either.

At run time the GitHub double refuses and records both, and its fixture fails any test that
tried (tests/doubles/github/fixtures.py); this reads the source for calls no test reaches."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(p for d in ("app", "tasks") for p in (ROOT / d).rglob("*.py"))
SESSIONS = {"s", "session", "db"}  # SQLAlchemy's Session.merge is not GitHub's
# The one merge onloop asks for merges no pull request: with `rebase: merge` on a head that
# takes only verified commits, GitHub merges the *base* into the PR's head branch
# (`POST /repos/{o}/{r}/merges`, what "Update branch" does), signed, as the person. The PR
# still needs its review; the double's PR merges stay empty (tests/e2e/test_verified_e2e.py).
BRANCH_UPDATES = {("tasks/blueprints/rebase_verified.py", "work.user_repo.merge")}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def offences(source: str, path: str = "") -> list[str]:
    """Merges and approvals asked of GitHub in `source`: PyGithub's `merge`/automerge, the
    REST merge path, and the review event APPROVE (`path`'s one branch update excepted)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("enable_automerge", "merge"):
            receiver = node.value
            if (path, ast.unparse(node)) in BRANCH_UPDATES:
                continue
            if not (isinstance(receiver, ast.Name) and receiver.id in SESSIONS):
                out.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            if text.strip().upper() == "APPROVE" or text.rstrip("/").endswith("/merge"):
                out.append(f"line {node.lineno}: {text!r}")
    return out


def test_the_scan_finds_what_it_looks_for() -> None:
    bad = 'pr.merge()\nrepo.create_review(event="APPROVE")\nreq("PUT", f"{url}/merge")\n'
    assert len(offences(bad)) == 3
    assert offences('"""We never APPROVE."""\ns.merge(row)\n') == []
    update = "work.user_repo.merge(branch, base, message)\n"
    assert offences(update) and not offences(update, "tasks/blueprints/rebase_verified.py")
    assert offences("pr.merge()\n", "tasks/blueprints/rebase_verified.py")  # only that call


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_code_path_merges_or_approves(path: Path) -> None:
    assert offences(path.read_text(), str(path.relative_to(ROOT))) == []
