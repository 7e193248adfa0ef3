"""`backup_days`: how long a rebase's backup ref is kept; only the organisation file sets it."""

from __future__ import annotations

import pytest

from app.policy.org_config import effective_config, parse_org_config
from app.policy.repo_config import ConfigError, parse_repo_config


def test_thirty_days_unless_the_organisation_says_otherwise() -> None:
    assert parse_org_config("").backup_days == 30
    assert parse_org_config("backup_days: 7\n").backup_days == 7


def test_a_repository_cannot_set_it() -> None:
    repo, unknown = parse_repo_config("backup_days: 1\n")
    assert unknown == ["backup_days"]  # reported back as the organisation's key
    assert effective_config(parse_org_config("backup_days: 90\n"), repo).backup_days == 90


@pytest.mark.parametrize("value", ["0", "-3", "many", "100000"])
def test_a_bad_value_names_the_key_and_line(value: str) -> None:
    with pytest.raises(ConfigError, match="backup_days") as caught:
        parse_org_config(f"commands: [rebase]\nbackup_days: {value}\n")
    assert caught.value.line == 2
