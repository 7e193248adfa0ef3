"""Unified diff parsing against real `git diff` output, and suggestions applied as GitHub does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tasks.review.diff import (
    DIFF_OPTIONS,
    apply_suggestion,
    apply_suggestions,
    changed_lines,
    parse_diff,
    suggestion_block,
    suggestions_in,
    unquote_path,
)

ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def commit(repo: Path, files: dict[str, str | bytes | None]) -> str:
    for name, content in files.items():
        path = repo / name
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    git(repo, "add", "--all")
    git(repo, "commit", "-q", "-m", "change")
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    return tmp_path


def test_changed_lines_from_a_real_diff(repo: Path) -> None:
    lines = [f"line {n}" for n in range(1, 21)]
    base = commit(
        repo,
        {
            "a.py": "\n".join(lines) + "\n",
            "gone.txt": "bye\n",
            "logo.bin": b"\x00\x01\x02",
            "same.txt": "same\n",
        },
    )
    edited = list(lines)
    edited[2] = "line 3 changed"  # modified: new line 3, old line 3
    del edited[9:11]  # old lines 10 and 11 deleted
    edited.insert(14, "inserted")  # a pure addition
    head = commit(
        repo,
        {
            "a.py": "\n".join(edited) + "\n",
            "gone.txt": None,
            "logo.bin": b"\x00\x01\x03",
            "new dir/new file é.py": "x = 1\ny = 2\n",
        },
    )
    files = parse_diff(git(repo, *DIFF_OPTIONS, base, head))
    by_path = {f.path: f for f in files}
    assert set(by_path) == {"a.py", "gone.txt", "logo.bin", "new dir/new file é.py"}
    assert by_path["logo.bin"].binary
    assert by_path["gone.txt"].new_path is None and by_path["gone.txt"].old_path == "gone.txt"
    assert by_path["new dir/new file é.py"].old_path is None
    changed = changed_lines(files)
    assert changed.right["a.py"] == {3, 15}
    assert edited[14] == "inserted"
    assert changed.left["a.py"] == {3, 10, 11}
    assert changed.right["new dir/new file é.py"] == {1, 2}
    assert changed.left["gone.txt"] == {1} and "gone.txt" not in changed.right
    assert "logo.bin" not in changed.right and "same.txt" not in changed.right
    assert changed.paths == ["a.py", "new dir/new file é.py"]
    assert changed.covers("a.py", 3, 3) and not changed.covers("a.py", 3, 4)
    (hunk,) = [h for h in by_path["a.py"].hunks if h.added == (15,)]
    assert hunk.old_count == 0 and hunk.new_text == ("inserted",)


def test_no_newline_at_end_and_quoted_paths(repo: Path) -> None:
    base = commit(repo, {"t.txt": "a\nb"})
    head = commit(repo, {"t.txt": "a\nB", 'odd"name.txt': "q\n"})
    out = git(repo, *DIFF_OPTIONS, base, head)
    assert "\\ No newline at end of file" in out and '"b/odd\\"name.txt"' in out
    changed = changed_lines(parse_diff(out))
    assert changed.right == {"t.txt": {2}, 'odd"name.txt': {1}}
    assert unquote_path('"a/t\\303\\251st"') == "a/tést"
    assert unquote_path("b/with space\t") == "b/with space"


def test_suggestion_blocks_round_trip() -> None:
    for lines in (["x = 1"], ["", "two", ""], ["has ``` fence", "and ````"], []):
        body = f"- **ruff** `F401`: unused\n\n{suggestion_block(lines)}"
        assert suggestions_in(body) == [lines]
    assert suggestion_block([]) == "```suggestion\n```"
    assert suggestion_block(["a ```` b"]).startswith("`````suggestion\n")


def test_apply_suggestion_as_github_does() -> None:
    text = "one\ntwo\nthree\nfour\n"
    assert apply_suggestion(text, 2, 3, ["2", "2.5", "3"]) == "one\n2\n2.5\n3\nfour\n"
    assert apply_suggestion(text, 4, 4, []) == "one\ntwo\nthree\n"
    assert apply_suggestion("a\nb", 2, 2, ["B"]) == "a\nB"
    with pytest.raises(ValueError):
        apply_suggestion(text, 4, 5, ["x"])
    both = apply_suggestions(text, [(1, 1, ["ONE"]), (3, 4, ["END"])])
    assert both == "ONE\ntwo\nEND\n"
    with pytest.raises(ValueError, match="overlap"):
        apply_suggestions(text, [(1, 2, ["x"]), (2, 3, ["y"])])
