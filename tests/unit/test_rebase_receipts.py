"""A rebase receipt's text: restore command, range-diff and hunks that no content breaks out of."""

from __future__ import annotations

import shlex

import pytest
from markdown_it import MarkdownIt

from tasks.blueprints.receipts import (
    CheckRun,
    Hunk,
    Receipt,
    Resolution,
    backup_ref,
    classify,
    parse_backup_ref,
    receipt_markdown,
    restore_command,
)
from tasks.git.conflicts import conflicts, has_markers
from tests.doubles.markdown import code_blocks, code_spans, outside_code

OLD, NEW, BASE = "a" * 40, "b" * 40, "c" * 40
HOSTILE = (
    "1:  1234567 = 1:  89abcde Add feature\n"
    "    ```\n    </details>\n    <details><summary>@mallory</summary>\n"
    "    ````` #123\n    <!-- onloop:job-1 -->\n"
)


def receipt(**kw: object) -> Receipt:
    values: dict[str, object] = {
        "branch": "feature",
        "old": OLD,
        "new": NEW,
        "base": BASE,
        "backup": backup_ref("feature", 42),
        "range_diff": HOSTILE,
    }
    values.update(kw)
    return Receipt(**values)  # type: ignore[arg-type]


def html_blocks(markdown: str) -> list[str]:
    return [t.content for t in MarkdownIt("commonmark").parse(markdown) if t.type == "html_block"]


def test_the_range_diff_stays_inside_its_fence_and_fold() -> None:
    text = receipt_markdown(receipt())
    assert HOSTILE in code_blocks(text)
    assert "@mallory" not in outside_code(text) and "#123" not in outside_code(text)
    folds = html_blocks(text)
    assert [b.count("<details>") for b in folds] == [1, 0] and "</details>" in folds[1]


def test_the_restore_script_fetches_the_backup_then_restores_the_old_head() -> None:
    script = next(b for b in code_blocks(receipt_markdown(receipt())) if "git push" in b)
    fetch, push = script.strip().splitlines()
    assert shlex.split(fetch) == ["git", "fetch", "origin", "refs/onloop/backup/feature/42"]
    assert shlex.split(push) == [
        "git",
        "push",
        f"--force-with-lease=feature:{NEW}",
        "origin",
        f"{OLD}:feature",
    ]


def test_a_hostile_branch_name_is_one_shell_word_and_one_code_span() -> None:
    branch = "x`$(touch pwned)`;@mallory"
    command = restore_command(branch, OLD, NEW)
    assert shlex.split(command)[-1] == f"{OLD}:{branch}"
    text = receipt_markdown(receipt(branch=branch, backup=backup_ref(branch, 7)))
    assert backup_ref(branch, 7) in code_spans(text) and "@mallory" not in outside_code(text)


def test_without_a_backup_it_says_why_and_still_restores() -> None:
    text = receipt_markdown(receipt(backup=None, backup_note="403 from the base repository"))
    assert "could not keep a backup ref (403 from the base repository)" in text
    (script, _) = code_blocks(text)
    assert "git fetch" not in script and restore_command("feature", OLD, NEW) in script


def test_a_failed_range_diff_is_named() -> None:
    text = receipt_markdown(receipt(range_diff="", range_diff_error="timed out after 60s"))
    assert "No range-diff" in text and "timed out after 60s" in code_spans(text)


def test_a_long_range_diff_is_shortened() -> None:
    text = receipt_markdown(receipt(range_diff="x" * 100_000))
    assert len(text) < 40_000 and "shortened: 100000 characters" in text


def test_hunks_and_checks_are_listed_with_both_sides_fenced() -> None:
    base = "A = 2\n\n```\n</details>\n"  # a blank line, a fence and a closing tag
    hunk = Hunk("lib.py", 3, "d" * 40, base, "A = '@x'\n", Resolution.PR)
    checks = [CheckRun("pytest -q", 0), CheckRun("ruff check .", 1)]
    text = receipt_markdown(receipt(hunks=[hunk], checks=checks))
    assert "`lib.py` line 3, replaying `dddddddddddd`: kept the pull request's side" in text
    (sides,) = [b for b in code_blocks(text) if "=======" in b]
    assert sides == f"<<<<<<< base\n{base}=======\nA = '@x'\n>>>>>>> pull request\n"
    assert "@x" not in outside_code(text)
    assert "- ✓ `pytest -q` (exit 0)" in text and "- ✗ `ruff check .` (exit 1)" in text


def test_no_configured_checks_is_said() -> None:
    assert "none is configured" in receipt_markdown(receipt(checks=[]))
    assert "Checks run" not in receipt_markdown(receipt(checks=None))


@pytest.mark.parametrize(
    ("resolved", "expected"),
    [
        ("x = 1\n", Resolution.BASE),
        ("x = 2\n", Resolution.PR),
        ("x = 1\nx = 2\n", Resolution.BOTH),
        ("x = 3\n", Resolution.REWRITTEN),
    ],
)
def test_a_resolution_is_told_by_the_sides_it_kept(resolved: str, expected: Resolution) -> None:
    assert classify("x = 1\n", "x = 2\n", resolved) is expected


def test_an_empty_side_is_not_counted_as_kept() -> None:
    assert classify("", "x = 2\n", "x = 2\n") is Resolution.PR
    assert classify("", "x = 2\n", "y\n") is Resolution.BASE
    assert classify("x = 1\n", "", "x = 1\n") is Resolution.BASE


def test_conflict_markers_are_read_with_their_lines() -> None:
    text = (
        "a\n<<<<<<< HEAD\nbase\n=======\npr\n>>>>>>> 1234 (Clash)\nb\n"
        "<<<<<<< HEAD\n||||||| parent\nold\n=======\n>>>>>>> 1234 (Clash)\n<<<<<<< open\n"
    )
    found = conflicts(text)
    assert [(c.line, c.ours, c.theirs) for c in found] == [(2, "base\n", "pr\n"), (8, "", "")]
    assert has_markers(text) and not has_markers("a\n=======\nb\n")


def test_backup_refs_name_their_branch_and_job() -> None:
    assert parse_backup_ref(backup_ref("feat/x/9", 42)) == ("feat/x/9", 42)
    assert parse_backup_ref("refs/onloop/backup/feature") is None
    assert parse_backup_ref("refs/heads/feature/42") is None
    assert parse_backup_ref("refs/onloop/backup/feature/0") is None


def test_many_hunks_are_counted_and_only_the_first_shown_in_full() -> None:
    hunks = [Hunk(f"f{n}.py", 1, "d" * 40, "x" * 2000, "y", Resolution.BOTH) for n in range(50)]
    text = receipt_markdown(receipt(hunks=hunks))
    assert all(f"`f{n}.py` line 1" in text for n in range(40)) and "`f40.py`" not in text
    assert "stopped on 50 conflicted hunk(s)" in text and "… and 10 more." in text
    assert len([b for b in code_blocks(text) if "=======" in b]) == 12 and len(text) < 65536


def test_the_largest_receipt_fits_in_a_comment() -> None:
    """GitHub refuses a comment body over 65536 characters."""
    side = "`" * 5 + "x" * 5000
    hunks = [Hunk("p" * 200, 1, "d" * 40, side, side, Resolution.BOTH) for _ in range(200)]
    checks = [CheckRun("c" * 300, 1) for _ in range(20)]
    text = receipt_markdown(receipt(range_diff="z" * 500_000, hunks=hunks, checks=checks))
    assert len(text) < 65536 - 1000
