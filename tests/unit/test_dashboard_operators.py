"""`dashboard.operators` in the organisation file: logins and org/team only, organisation-only,
and an unusable file names nobody."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.settings import Settings
from app.policy.dashboard import operators, org_operators
from app.policy.org_config import parse_org_config
from app.policy.repo_config import ConfigError, parse_repo_config


def test_logins_and_teams_are_read_as_written() -> None:
    text = "dashboard:\n  operators: [alice, acme/site-ops]\n"
    assert org_operators(text) == ("alice", "acme/site-ops")
    parse_org_config(text)  # a known key of the organisation file
    assert org_operators("commands: [fix]\n") == ()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("dashboard:\n  operators: [alice, 'not a login']\n", 2),
        ("dashboard:\n  operators: alice\n", 2),
        ("dashboard:\n  viewers: [alice]\n", 1),
    ],
)
def test_anything_else_is_an_error_with_its_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_org_config(text)
    assert caught.value.line == line


def test_a_repository_cannot_name_operators() -> None:
    _, ignored = parse_repo_config("dashboard:\n  operators: [mallory]\n")
    assert ignored == ["dashboard"]


def test_an_unusable_organisation_file_names_nobody(tmp_path: Path) -> None:
    path = tmp_path / "org.yml"
    settings = Settings(_env_file=None, config_file=path)  # type: ignore[call-arg]
    assert operators(settings) == ()  # missing
    path.write_text("dashboard:\n  operators: [alice]\n")
    assert operators(settings) == ("alice",)
    path.write_text("dashboard:\n  operators: [alice, 'x y']\n")
    assert operators(settings) == ()
