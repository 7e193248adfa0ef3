"""Bad config changes nothing: an invalid `.github/onloop.yml` refuses work, the built-in
defaults are the ceiling without an organisation file, and a bad organisation file stops the
services at start (or fails a job clearly) instead of every job failing as an internal error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.policy.org_config import OrgConfigError, check_file, effective_for, parse_org_config
from app.policy.repo_config import ConfigError, RepoConfig, parse_repo_config
from app.store.models import JobState
from tests.doubles.github.double import GitHubDouble
from tests.e2e.world import REPO, World, make_world
from tests.integration.test_cli import clean_env, full_settings, onloop

# Stricter than the defaults, then one typo further down: the strictness must survive it.
STRICT_THEN_TYPO = "trigger_permission: maintain\nsandbox:\n  timeout: abc\n"


def line_of_error(text: str) -> int | None:
    with pytest.raises(ConfigError) as err:
        parse_repo_config(text)
    return err.value.line


def test_a_bad_nested_value_is_reported_on_its_own_line() -> None:
    assert line_of_error("sandbox:\n  timeout: abc\n") == 2
    assert line_of_error(STRICT_THEN_TYPO) == 3
    assert line_of_error("commands:\n  - fix\n  - deploy\n") == 3
    # `timeout` first appears under `checks`, where it is merely unknown
    text = "checks:\n  timeout: 5\nlimits:\n  max_files: 3\nsandbox:\n  timeout: 1\n"
    assert line_of_error(text) == 6


def test_an_unknown_org_key_is_found_under_its_own_section() -> None:
    with pytest.raises(ConfigError) as err:
        parse_org_config("sandbox:\n  timeout: 600\nlimits:\n  timeout: 3\n")
    assert err.value.line == 4 and "limits.timeout" in str(err.value)


def test_without_an_org_file_the_builtin_defaults_are_the_ceiling() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.config_file is None
    wide, _ = parse_repo_config(
        "max_ci_fix_attempts: 10\ntrigger_permission: read\nsandbox:\n  timeout: 21600\n"
        "paths:\n  deny: []\nlimits:\n  max_files: 100000\n  max_changed_lines: 100000\n"
        "review:\n  request_changes: true\n"
    )
    assert effective_for(settings, wide) == RepoConfig()
    narrow, _ = parse_repo_config("commands: [review]\nsandbox:\n  timeout: 60\n")
    config = effective_for(settings, narrow)
    assert config.commands == ["review"] and config.sandbox.timeout == 60


def test_check_file_summarises_a_good_file_and_names_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "org.yml"
    path.write_text("trigger_permission: maintain\npaths:\n  deny: ['a/**', 'b/**']\n")
    summary = check_file(path)
    assert str(path) in summary and "maintain" in summary and "2 denied" in summary
    path.write_text("commands: [fix]\nlimits:\n  max_files: lots\n")
    with pytest.raises(OrgConfigError) as err:
        check_file(path)
    assert str(err.value).startswith(f"{path}, line 3: limits.max_files")
    with pytest.raises(OrgConfigError) as err:
        check_file(tmp_path / "gone.yml")
    assert str(err.value) == f"{tmp_path / 'gone.yml'}: cannot be read (no such file or directory)"


@pytest.mark.parametrize("command", ["web", "worker", "dev"])
def test_services_refuse_to_start_on_a_missing_org_file(tmp_path: Path, command: str) -> None:
    gone = tmp_path / "org.yml"
    env = clean_env(
        **full_settings(tmp_path),
        ONLOOP_REDIS_URL="redis://127.0.0.1:1",
        ONLOOP_CONFIG_FILE=str(gone),
    )
    result = onloop(
        [command, "--bind", "127.0.0.1:1"] if command != "worker" else [command], tmp_path, env
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"onloop: ONLOOP_CONFIG_FILE {gone}: cannot be read (no such file or directory)"
    ]


@pytest.mark.parametrize("command", ["web", "worker"])
def test_services_refuse_to_start_on_an_invalid_org_file(tmp_path: Path, command: str) -> None:
    path = tmp_path / "org.yml"
    path.write_text("commands: [fix]\nsandbox:\n  timeout: soon\n")
    env = clean_env(
        **full_settings(tmp_path),
        ONLOOP_REDIS_URL="redis://127.0.0.1:1",
        ONLOOP_CONFIG_FILE=str(path),
    )
    result = onloop([command], tmp_path, env)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"onloop: ONLOOP_CONFIG_FILE {path}, line 3: sandbox.timeout"), line


# --- end to end: the worker refuses ----------------------------------------------------


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    org = tmp_path / "org.yml"
    org.write_text("trigger_permission: write\n")
    yield from make_world(github_double, database_url, tmp_path, config_file=org)


def pull_request(world: World, config: str) -> int:
    files = {"pyproject.toml": "[tool.ruff]\n", ".github/onloop.yml": config}
    world.double.commit(REPO, "main", files)  # type: ignore[arg-type]
    world.double.create_branch(REPO, "more")
    world.double.commit(REPO, "more", {"more.py": "import os\n"}, message="More")
    return world.double.create_pull(REPO, "more", title="More", user="bob").number


@pytest.mark.docker
@pytest.mark.slow
def test_an_invalid_repo_file_refuses_work_until_it_is_fixed(world: World) -> None:
    number = pull_request(world, STRICT_THEN_TYPO)
    world.authorize("alice")  # write: enough under the defaults, not under `maintain`
    job = world.wait(world.comment("/agent review", "alice", number))
    assert job.state == JobState.FAILED and job.result["rule"] == "config", job.result
    assert "line 3" in job.result["error"] and "until it is fixed" in job.result["error"]
    assert not world.double.reviews, "no work under the defaults"
    (explained,) = [c for c in world.bot_comments(number) if "<!-- onloop:config -->" in c.body]
    assert "is invalid (`line 3: sandbox.timeout" in explained.body
    assert "onloop will do nothing in this repository until it is fixed" in explained.body

    again = world.wait(world.comment("/agent review", "alice", number))
    assert again.state == JobState.FAILED and again.result["rule"] == "config"
    notes = [c for c in world.bot_comments(number) if "<!-- onloop:config -->" in c.body]
    assert [c.id for c in notes] == [explained.id]  # the same comment, not a second one

    # fixed on the default branch: the next command reads it afresh and its strictness holds
    world.double.commit(REPO, "main", {".github/onloop.yml": "trigger_permission: maintain\n"})
    refused = world.wait(world.comment("/agent review", "alice", number))
    assert refused.result.get("rule") == "trigger_permission", refused.result
    world.authorize("carol")
    done = world.wait(world.comment("/agent review", "carol", number))
    assert done.state == JobState.SUCCEEDED, (done.result, world.worker.output())


@pytest.mark.docker
@pytest.mark.slow
def test_an_org_file_gone_after_start_fails_jobs_clearly(world: World) -> None:
    number = pull_request(world, "commands: [review]\n")
    helped = world.wait(world.comment("/agent help", "alice", number))
    assert helped.state == JobState.SUCCEEDED  # the worker is up, past its start-up check
    org = Path(str(world.settings.config_file))
    os.remove(org)
    world.authorize("alice")
    job = world.wait(world.comment("/agent review", "alice", number))
    assert job.state == JobState.FAILED and job.result["rule"] == "org_config", job.result
    error = job.result["error"]
    assert not error.startswith("internal error")
    assert f"{org}: cannot be read" in error and "ONLOOP_CONFIG_FILE" in error


def test_help_on_an_invalid_file_says_onloop_does_nothing_here() -> None:
    from app.policy.repo_config import ConfigError, RepoConfig
    from tasks.blueprints.replies import help_text
    from tasks.runner.repo_settings import LoadedConfig

    loaded = LoadedConfig(RepoConfig(), error=ConfigError("sandbox.timeout: not a number", 3))
    text = help_text(loaded, {})
    assert "is invalid at" in text and "line 3" in text
    assert "onloop does nothing in this repository until it is fixed" in text
    assert "defaults apply" not in text
