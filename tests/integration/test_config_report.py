"""What onloop says back about a repository's `.github/onloop.yml`, read from the GitHub
double: keys only the organisation file sets are reported (never silently ignored), and the
file's own text (key names, values quoted in the error) cannot mention anyone or leave its
code span."""

from __future__ import annotations

import json

from github import Auth, Github
from github.Repository import Repository

from app.core.markdown import ZWSP
from app.store.db import Database
from tasks.blueprints.replies import help_text
from tasks.blueprints.start import config_problems
from tasks.runner.repo_settings import LoadedConfig, load_repo_config
from tests.doubles.github import GitHubDouble
from tests.doubles.markdown import code_blocks, code_spans, outside_code

REPO = "octo/hello"
ORG_KEYS = ["sandbox.images", "sandbox.untrusted_egress", "sandbox.private_indexes"]


def loaded(double: GitHubDouble, db: Database, config: str, name: str = REPO) -> LoadedConfig:
    """`config` as `name`'s `.github/onloop.yml`, read as a job reads it."""
    double.create_repo(name, files={"README.md": "hi\n", ".github/onloop.yml": config})
    inst = next(i for i in double.installations.values() if i.account == "octo")
    token = double.issue_installation_token(inst.id).value
    client = Github(auth=Auth.Token(token), base_url=double.api_url, retry=0)
    repo: Repository = client.get_repo(name)
    return load_repo_config(db, repo)


def readable(text: str) -> str:
    return text.replace(ZWSP, "")


def test_keys_only_the_organisation_sets_are_reported_back(
    github_double: GitHubDouble, db: Database
) -> None:
    config = (
        "bogus: 1\nsandbox:\n  setup: make\n  images: ['evil:latest']\n"
        "  untrusted_egress: public\n  private_indexes: ['169.254.169.254']\n"
    )
    found = loaded(github_double, db, config)
    assert found.error is None and found.unknown == ["bogus"]
    assert found.org_only == ORG_KEYS
    text = config_problems(found)
    assert "keys onloop does not know, ignored: `bogus`." in text
    assert "keys only the organisation file (ONLOOP_CONFIG_FILE) sets, ignored:" in text
    assert code_spans(text)[-3:] == ORG_KEYS
    assert all(key in help_text(found, {}) for key in ORG_KEYS)
    # and they have no effect: the file's own values are not the organisation's
    assert found.config.sandbox.setup == "make"


def test_key_names_and_the_quoted_error_stay_code(
    github_double: GitHubDouble, db: Database
) -> None:
    # JSON strings are YAML double-quoted scalars: the key and the value hold line breaks
    evil = "a`@mallory`\n```\n@octo-org/admins #1 <img src=x>"
    unknown = loaded(github_double, db, f"{json.dumps(evil)}: 1\n", "octo/one")
    assert unknown.unknown == [evil]
    invalid = loaded(github_double, db, f"sandbox:\n  image: {json.dumps(evil)}\n", "octo/two")
    assert invalid.error is not None and "@mallory" in str(invalid.error)
    for found in (unknown, invalid):
        for text in (config_problems(found), help_text(found, {})):
            assert not code_blocks(text), text
            shown = outside_code(text)
            assert "@mallory" not in shown and "@octo" not in shown, text
            assert "#1" not in shown and "<img" not in shown, text
            spans = [readable(s) for s in code_spans(text)]
            assert any("a`@mallory`" in s and "@octo-org/admins #1" in s for s in spans), spans
