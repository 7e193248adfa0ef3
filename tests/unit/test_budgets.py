"""Daily budgets: a repository may only lower the organisation's; what refuses a job, when."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.core.kinds import Kind
from app.intake.commands import Command
from app.intake.decide import decide
from app.intake.events import Event
from app.policy.budgets import (
    Budget,
    Line,
    Scope,
    Spend,
    cost_of,
    lines_of,
    reached,
    refusal,
    refused_message,
    resets_at,
    tokens_left,
)
from app.policy.org_config import effective_config, parse_org_config, raised_budgets
from app.policy.repo_config import RepoConfig, parse_repo_config
from tasks.runner.repo_settings import LoadedConfig
from tests.doubles.webhooks import load_fixture

ORG = """
budgets:
  agent_tokens: 1000
  jobs: 5
  installation:
    cost_usd: 2.5
"""


def test_a_repository_lowers_a_budget_and_a_raise_is_refused() -> None:
    org = parse_org_config(ORG)
    repo, ignored = parse_repo_config("budgets:\n  agent_tokens: 400\n  jobs: 50\n")
    assert ignored == []
    config = effective_config(org, repo)
    assert config.budgets.agent_tokens == 400  # lowered
    assert config.budgets.jobs == 5  # a raise keeps the organisation's
    assert config.budgets.installation.cost_usd == 2.5
    assert raised_budgets(org, repo) == ["budgets.jobs"]


def test_only_the_organisation_sets_the_installation_budget() -> None:
    repo, ignored = parse_repo_config("budgets:\n  installation:\n    jobs: 100\n")
    assert ignored == ["budgets.installation"]
    config = effective_config(parse_org_config(ORG), repo)
    assert config.budgets.installation.jobs is None


def test_a_repository_may_set_a_budget_the_organisation_left_open() -> None:
    repo, _ = parse_repo_config("budgets:\n  sandbox_minutes: 30\n")
    assert effective_config(parse_org_config(ORG), repo).budgets.sandbox_minutes == 30


def test_the_first_budget_a_new_job_would_exceed_refuses_it() -> None:
    config = effective_config(parse_org_config(ORG), parse_repo_config("")[0])
    fresh = lines_of(config, Spend(agent_tokens=999, jobs=4), Spend(cost_usd=1.0))
    assert refusal(fresh) is None and tokens_left(fresh) == 1
    jobs = lines_of(config, Spend(agent_tokens=10, jobs=5), Spend())
    line = refusal(jobs)
    assert line is not None and (line.scope, line.budget) == (Scope.REPOSITORY, Budget.JOBS)
    assert reached(jobs) is None  # a used-up job count stops nothing mid-way
    spent = lines_of(config, Spend(), Spend(cost_usd=2.5))
    line = refusal(spent)
    assert line is not None and (line.scope, line.budget) == (Scope.INSTALLATION, Budget.COST_USD)
    assert reached(spent) == line


def test_the_refusal_names_the_budget_the_spend_the_limit_and_the_reset() -> None:
    now = datetime(2026, 12, 4, 15, 30, tzinfo=UTC)
    assert resets_at(now) == datetime(2026, 12, 5, tzinfo=UTC)
    text = refused_message(Line(Scope.REPOSITORY, Budget.AGENT_TOKENS, 1200, 1000), now)
    assert "repository's daily `agent_tokens` budget (1200 of 1000 spent)" in text
    assert "2026-12-05 00:00 UTC" in text


def test_cost_is_priced_per_million_tokens_and_unknown_models_cost_nothing() -> None:
    prices = {"gpt-4o-mini": {"input": 0.15, "output": 0.6}}
    assert cost_of(prices, "gpt-4o-mini", 1_000_000, 500_000) == pytest.approx(0.45)
    assert cost_of(prices, "other", 1_000_000, 1_000_000) == 0.0


def test_agent_continue_is_routed_on_an_issue_and_on_a_pull_request() -> None:
    on_issue = load_fixture("issue_comment.created.with-installation")
    on_issue["issue"].pop("pull_request", None)
    on_issue["comment"]["body"] = "/agent continue"
    command = decide(Event(name="issue_comment", delivery_guid="g", data=on_issue), RepoConfig())
    assert isinstance(command, Command) and command.kind == Kind.CONTINUE
    on_issue["comment"]["body"] = "/agent rebase"  # other commands stay on pull requests
    assert (
        decide(Event(name="issue_comment", delivery_guid="g", data=on_issue), RepoConfig()) is None
    )


def test_a_raised_budget_is_reported_with_the_other_keys_of_no_effect() -> None:
    loaded = LoadedConfig(RepoConfig(), raised=["budgets.jobs"])
    (said,) = loaded.ignored()
    assert "budgets above the organisation's, refused" in said and "`budgets.jobs`" in said
