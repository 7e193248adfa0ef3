"""Organisation defaults: loaded from ONLOOP_CONFIG_FILE; a repository narrows, never widens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.policy.org_config import (
    OrgConfigLoader,
    effective_config,
    effective_for,
    load_org_config,
    parse_org_config,
)
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config

ROOT = Path(__file__).resolve().parents[2]

ORG = """\
commands: [fix, rebase]
auto_fix_ci: true
max_ci_fix_attempts: 3
trigger_permission: maintain
sandbox:
  timeout: 600
  image: org/image:1
paths:
  deny: [".github/workflows/**", "secrets/**"]
limits:
  max_files: 10
  max_changed_lines: 300
  max_file_bytes: 100000
"""


def repo(text: str) -> RepoConfig:
    config, unknown = parse_repo_config(text)
    assert not unknown
    return config


@pytest.fixture
def org() -> RepoConfig:
    return parse_org_config(ORG)


def test_a_repository_without_a_file_gets_the_org_defaults(org: RepoConfig) -> None:
    assert effective_config(org, repo("")) == org


def test_commands_are_intersected(org: RepoConfig) -> None:
    assert effective_config(org, repo("commands: [rebase, review]")).commands == ["rebase"]


def test_auto_fix_ci_needs_both(org: RepoConfig) -> None:
    assert effective_config(org, repo("auto_fix_ci: false")).auto_fix_ci is False
    off = parse_org_config("auto_fix_ci: false\n")
    assert effective_config(off, repo("auto_fix_ci: true")).auto_fix_ci is False


def test_ci_fix_attempts_take_the_smaller(org: RepoConfig) -> None:
    assert effective_config(org, repo("max_ci_fix_attempts: 1")).max_ci_fix_attempts == 1
    assert effective_config(org, repo("max_ci_fix_attempts: 9")).max_ci_fix_attempts == 3


def test_trigger_permission_takes_the_stricter(org: RepoConfig) -> None:
    assert effective_config(org, repo("trigger_permission: read")).trigger_permission == "maintain"
    assert effective_config(org, repo("trigger_permission: admin")).trigger_permission == "admin"


def test_denied_paths_are_the_union(org: RepoConfig) -> None:
    config = effective_config(org, repo("paths:\n  deny: ['*.pem']\n"))
    assert config.paths.deny == [".github/workflows/**", "secrets/**", "*.pem"]
    assert effective_config(org, repo("paths:\n  deny: []\n")).paths.deny == org.paths.deny


def test_limits_and_timeout_take_the_smaller(org: RepoConfig) -> None:
    config = effective_config(
        org,
        repo(
            "limits:\n  max_files: 50\n  max_changed_lines: 100\n"
            "sandbox:\n  timeout: 3600\n  image: python:3.12\n"
        ),
    )
    assert (config.limits.max_files, config.limits.max_changed_lines) == (10, 100)
    assert config.limits.max_file_bytes == 100000  # not set by the repo: the org's
    assert config.sandbox.timeout == 600
    assert config.sandbox.image == "python:3.12"  # the repository's own choice


def test_unset_keys_keep_the_org_value_not_the_builtin_default() -> None:
    generous = parse_org_config("limits:\n  max_files: 100\nmax_ci_fix_attempts: 5\n")
    config = effective_config(generous, repo("checks:\n  test: pytest -q\n"))
    assert config.limits.max_files == 100 and config.max_ci_fix_attempts == 5
    assert config.checks.test == "pytest -q"


def test_every_numeric_or_list_key_has_a_narrowing_rule(org: RepoConfig) -> None:
    """A repository that asks for everything wider gets nothing wider than the org."""
    wide = repo(
        "commands: [fix, rebase, review]\nauto_fix_ci: true\nmax_ci_fix_attempts: 10\n"
        "trigger_permission: read\nsandbox:\n  timeout: 21600\npaths:\n  deny: []\n"
        "limits:\n  max_files: 100000\n  max_changed_lines: 100000\n  max_file_bytes: 999999999\n"
    )
    config = effective_config(org, wide)
    assert config.model_dump(exclude={"sandbox": {"image"}}) == org.model_dump(
        exclude={"sandbox": {"image"}}
    )


def test_org_file_is_loaded_from_settings_and_reloaded_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "onloop.yml"
    path.write_text(ORG)
    settings = Settings(_env_file=None, config_file=path)  # type: ignore[call-arg]
    loader = OrgConfigLoader()  # a worker's
    first = loader.load(settings)
    assert first.trigger_permission == "maintain" and loader.load(settings) is first  # kept
    assert load_org_config(settings) == first and load_org_config(settings) is not first
    assert effective_for(settings, repo("commands: [review]")).commands == []
    assert loader.effective(settings, repo("commands: [review]")).commands == []
    before = path.stat().st_mtime_ns
    path.write_text("trigger_permission: admin\n# changed\n")
    os.utime(path, ns=(before + 10**9, before + 10**9))
    assert loader.load(settings).trigger_permission == "admin"
    assert load_org_config(settings).trigger_permission == "admin"
    assert OrgConfigLoader().load(Settings(_env_file=None)) == RepoConfig()  # type: ignore[call-arg]
    assert load_org_config(Settings(_env_file=None)) == RepoConfig()  # type: ignore[call-arg]


def test_two_loaders_keep_nothing_in_common(tmp_path: Path) -> None:
    """No process-wide cache: a loader that never read the file reads it now."""
    path = tmp_path / "onloop.yml"
    path.write_text(ORG)
    settings = Settings(_env_file=None, config_file=path)  # type: ignore[call-arg]
    first, second = OrgConfigLoader(), OrgConfigLoader()
    assert first.load(settings) is not second.load(settings)


def test_a_bad_org_file_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = tmp_path / "org.yml"
    settings = Settings(_env_file=None, config_file=path)  # type: ignore[call-arg]
    path.write_text("commands: [fix]\nlimits:\n  max_filez: 3\n")
    with pytest.raises(ConfigError) as err:
        load_org_config(settings)
    assert err.value.line == 3 and "limits.max_filez" in str(err.value)
    assert str(path) in str(err.value)
    path.write_text("commands: [fix]\ntrigger_permission: owner\n")
    with pytest.raises(ConfigError) as err:
        load_org_config(settings)
    assert err.value.line == 2


def test_the_example_file_is_valid() -> None:
    config = parse_org_config((ROOT / "config" / "onloop.example.yml").read_text())
    assert ".github/workflows/**" in config.paths.deny
