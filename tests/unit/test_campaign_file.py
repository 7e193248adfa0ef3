"""The campaign file: typed values, errors with their line, nothing in it run or formatted."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.policy.campaign_file import parse_campaign, parse_window
from app.policy.repo_config import ConfigError
from tasks.feedback.campaigns import Line, pr_section, tracking_body, with_section

GOOD = """\
name: bump
owner: alice
repositories: [octo/*, topic:python, language:Go]
change:
  run:
    - sed -i 's/1.0/1.1/' version.py
  task: |
    Bump the version.
pacing:
  max_open_prs: 3
  per_hour: 5
  window: Mon-Fri 09:00-17:00 Europe/Paris
depends_on:
  octo/app: [octo/lib]
issue_repository: octo/campaigns
"""


def test_a_good_file_is_typed_values() -> None:
    spec = parse_campaign(GOOD)
    assert spec.branch_name == "onloop/campaign-bump"
    assert spec.repositories == ["octo/*", "topic:python", "language:Go"]
    assert spec.change.run == ["sed -i 's/1.0/1.1/' version.py"]
    assert spec.pacing.max_open_prs == 3 and spec.pacing.per_hour == 5
    assert spec.depends_on == {"octo/app": ["octo/lib"]}
    window = spec.window
    assert window is not None and window.tz == "Europe/Paris"
    assert window.open_at(datetime(2026, 12, 4, 10, 0, tzinfo=UTC))  # a Friday, 11:00 in Paris
    assert not window.open_at(datetime(2026, 12, 5, 10, 0, tzinfo=UTC))  # Saturday
    assert not window.open_at(datetime(2026, 12, 4, 16, 30, tzinfo=UTC))  # 17:30 in Paris
    assert spec.digest() == parse_campaign(GOOD).digest()
    assert spec.digest() != parse_campaign(GOOD.replace("1.1/", "1.2/")).digest()


@pytest.mark.parametrize(
    ("change", "line", "said"),
    [
        (("  max_open_prs: 3", "  max_open_prs: 3\n  burst: 2"), 11, "pacing.burst: unknown key"),
        (("owner: alice", "owner: alice\nbranch: main"), 3, "branch: a branch under `onloop/`"),
        (("octo/lib]", "octo/app]"), 14, "depends_on: a cycle (octo/app → octo/app)"),
        (("09:00-17:00", "17:00-09:00"), 12, "the window must end after it starts"),
        (("max_open_prs: 3", "max_open_prs: 0"), 10, "pacing.max_open_prs"),
        (("[octo/*,", "[octo/a b,"), 3, "repositories.0: a name glob"),
        (("owner: alice", 'owner: alice\ntitle: "{0.__class__} ${secret}"'), 3, "title: a templ"),
    ],
)
def test_errors_name_the_line(change: tuple[str, str], line: int, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_campaign(GOOD.replace(*change))
    assert caught.value.line == line and said in caught.value.message, str(caught.value)


def test_a_change_needs_commands_or_a_task_and_yaml_errors_have_a_line() -> None:
    with pytest.raises(ConfigError, match="a change needs"):
        parse_campaign(GOOD.split("change:")[0] + "change: {}\n")
    with pytest.raises(ConfigError) as caught:
        parse_campaign("name: [unclosed\nowner: x\n")
    assert caught.value.line is not None


def test_templates_are_data() -> None:
    spec = parse_campaign(
        GOOD.replace("owner: alice", 'owner: alice\ntitle: "{0} $$5 ${repository}"')
    )
    assert spec.render(spec.title, "octo/x") == "{0} $5 octo/x"
    with pytest.raises(ValueError, match="like"):
        parse_window("Someday 09:00-10:00")


def test_the_pr_section_is_replaced_not_appended() -> None:
    lines = [Line("octo/a", "pr_open", 1), Line("octo/b", "merged", 2), Line("octo/c", "queued")]
    first = pr_section(7, "bump", "https://gh", ("octo/t", 3), lines[:1], "octo/b")
    body = with_section("Intro.", 7, first)
    again = with_section(body, 7, pr_section(7, "bump", "https://gh", None, lines, "octo/c"))
    assert again.count("<!-- onloop:campaign-7 -->") == 1 and again.startswith("Intro.")
    assert "[octo/a#1](https://gh/octo/a/pull/1)" in again and "[octo/b#2]" in again
    table = tracking_body(7, "bump", "alice", "active", "https://gh", lines)
    assert "| octo/c | queued |" in table and "pr open: 1" not in table
    assert "**3 repositories**: queued: 1, PR open: 1, merged: 1." in table
