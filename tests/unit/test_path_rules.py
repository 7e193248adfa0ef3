"""`paths.deny` matching: gitignore semantics, linear time, capped in size."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pathspec
import pytest

from app.policy.org_config import effective_config
from app.policy.path_rules import MAX_PATTERN_CHARS, MAX_PATTERNS, compile_rules
from app.policy.repo_config import ConfigError, parse_repo_config

PATTERNS = [".github/workflows/**", "*.pem", "docs/*.md", "**/secrets/*"]
# (path, the patterns that deny it) as git's gitignore rules read them.
TRUTH = [
    (".github/workflows/ci.yml", {".github/workflows/**"}),
    (".github/workflows/sub/deploy.yml", {".github/workflows/**"}),
    (".github/workflows", set()),
    (".github/dependabot.yml", set()),
    ("x/.github/workflows/ci.yml", set()),
    ("key.pem", {"*.pem"}),
    ("deploy/keys/prod.pem", {"*.pem"}),
    ("prod.pem.txt", set()),
    ("docs/guide.md", {"docs/*.md"}),
    ("docs/deep/guide.md", set()),
    ("src/docs/guide.md", set()),
    ("secrets/token", {"**/secrets/*"}),
    ("app/secrets/token", {"**/secrets/*"}),
    ("app/secrets/deep/token", {"**/secrets/*"}),  # its directory `app/secrets/deep` matches
    ("app/secrets", set()),
    ("src/app.py", set()),
    ("evil\n/key.pem", {"*.pem"}),  # git allows a newline in a name; `*` matches it
]


def denied_by(path: str) -> set[str]:
    return {rule.pattern for rule in compile_rules(PATTERNS) if rule.matches(path)}


@pytest.mark.parametrize(("path", "expected"), TRUTH)
def test_matches_follow_gitignore_rules(path: str, expected: set[str]) -> None:
    assert denied_by(path) == expected
    if "\n" not in path:  # pathspec's own `re` reading agrees, where `.` is no newline
        reference = {p for p in PATTERNS if pathspec.GitIgnoreSpec.from_lines([p]).match_file(path)}
        assert reference == expected


def test_blank_comment_and_negated_lines_deny_nothing() -> None:
    assert compile_rules(["", "  ", "# .github/**", "!.github/workflows/ci.yml"]) == []


def test_a_directory_that_could_hold_a_denied_path() -> None:
    (workflows,) = compile_rules([".github/workflows/**"])
    assert workflows.could_hold(".github") and workflows.could_hold(".github/workflows")
    assert not workflows.could_hold("src") and not workflows.could_hold(".github/ISSUE")
    (secrets,) = compile_rules(["**/secrets/*"])
    assert secrets.could_hold("anything/at/all")  # a `secrets` directory could be under it
    (docs,) = compile_rules(["docs/*.md"])
    assert docs.could_hold("docs") and not docs.could_hold("src")


def _within(seconds: float, work: Callable[[], object]) -> object:
    """`work()` in a thread, waited for at most `seconds`: a hang guard, not a benchmark."""
    box: dict[str, object] = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", work()), daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    assert not thread.is_alive(), f"still matching after {seconds} s"
    return box["out"]


def test_a_backtracking_pattern_is_matched_in_linear_time() -> None:
    # With Python's `re` (pathspec's own backend) this one pattern takes ~30 s on 40 chars.
    pattern = "*a" * 10 + "*b"
    (rule,) = compile_rules([pattern])
    long_dir = "/".join(["a" * 200] * 20)
    out = _within(
        5,
        lambda: (
            rule.matches("a" * 40),
            rule.matches("a" * 40 + "b"),
            rule.matches(long_dir),
            rule.could_hold("a" * 40),
        ),
    )
    assert out == (False, True, False, True)


def _deny(patterns: list[str]) -> str:
    return "paths:\n  deny:\n" + "".join(f"    - {p!r}\n" for p in patterns)


def test_at_most_100_patterns() -> None:
    parse_repo_config(_deny([f"p{n}/**" for n in range(MAX_PATTERNS)]))
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(_deny([f"p{n}/**" for n in range(MAX_PATTERNS + 1)]))
    assert "at most 100 patterns" in str(caught.value) and "paths.deny" in str(caught.value)


def test_at_most_200_characters_a_pattern() -> None:
    parse_repo_config(_deny(["a" * MAX_PATTERN_CHARS]))
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(_deny(["docs/", "a" * (MAX_PATTERN_CHARS + 1)]))
    assert "at most 200 characters" in str(caught.value)
    assert caught.value.line == 4  # the long pattern's own line


def test_a_pattern_git_cannot_read_is_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(_deny(["[unclosed"]))
    assert "`[unclosed` is not a valid pattern" in str(caught.value)


def test_the_organisation_and_the_repository_may_each_name_100() -> None:
    org, _ = parse_repo_config(_deny([f"org{n}/**" for n in range(MAX_PATTERNS)]))
    repo, _ = parse_repo_config(_deny([f"repo{n}/**" for n in range(MAX_PATTERNS)]))
    assert len(effective_config(org, repo).paths.deny) == 2 * MAX_PATTERNS
