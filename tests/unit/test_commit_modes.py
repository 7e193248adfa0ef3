"""`commits` and `rebase` in `.github/onloop.yml`: closed values, the line of a bad one, and
an organisation's `commits: verified` that a repository cannot turn off."""

from __future__ import annotations

import pytest

from app.policy.org_config import effective_config, parse_org_config
from app.policy.repo_config import (
    CommitMode,
    ConfigError,
    RebaseMode,
    RepoConfig,
    parse_repo_config,
)


def test_the_defaults_push_with_git_and_refuse_rebases_there() -> None:
    config = RepoConfig()
    assert (config.commits, config.rebase) == (CommitMode.GIT, RebaseMode.REFUSE)


def test_verified_commits_and_merges_are_read() -> None:
    config, unknown = parse_repo_config("commits: verified\nrebase: merge\n")
    assert (config.commits, config.rebase, unknown) == (CommitMode.VERIFIED, RebaseMode.MERGE, [])


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("auto_fix_ci: true\ncommits: signed\n", "line 2: commits: Input should be 'git' or"),
        ("rebase: squash\n", "line 1: rebase: Input should be 'refuse' or 'merge'"),
    ],
)
def test_an_unknown_value_is_answered_with_its_line(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(text)
    assert str(caught.value).startswith(said)


def test_a_repository_cannot_opt_out_of_the_organisations_verified_commits() -> None:
    org = parse_org_config("commits: verified\n")
    mine, _ = parse_repo_config("commits: git\nrebase: merge\n")
    effective = effective_config(org, mine)
    assert effective.commits == CommitMode.VERIFIED and effective.rebase == RebaseMode.MERGE
    asked, _ = parse_repo_config("commits: verified\n")
    assert effective_config(parse_org_config(""), asked).commits == CommitMode.VERIFIED
