"""fix_ci and fix_issue end to end: webhook → worker → Docker sandbox → push or PR through the
GitHub double with the person's own token (the CI-fix cap: test_ci_fix_cap_e2e.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store import audit
from app.store.models import Job, JobState
from tests.doubles.github.double import GitHubDouble
from tests.doubles.github.handlers.actions import WorkflowRun, add_run
from tests.doubles.markdown import code_blocks, outside_code
from tests.doubles.payloads import check_suite_failed, issue_labeled, workflow_run_failed
from tests.doubles.webhooks import deliver
from tests.doubles.worker_proc import wait_until
from tests.e2e import world as e2e
from tests.e2e.world import REPO, World

pytestmark = [pytest.mark.docker, pytest.mark.slow]
PYPROJECT = '[project]\nname = "widgets"\nversion = "0"\n\n[tool.ruff]\nline-length = 100\n'
BAD = "import os\nimport sys\n\n\ndef main( ):\n    return sys.argv\n"
RUFF_LOG = """\
2026-12-01T10:00:00.0000000Z ##[group]Run ruff check .
2026-12-01T10:00:00.1000000Z ruff check .
2026-12-01T10:00:00.2000000Z ##[endgroup]
2026-12-01T10:00:01.0000000Z bad.py:1:8: F401 [*] `os` imported but unused
2026-12-01T10:00:01.0000000Z Found 1 error.
2026-12-01T10:00:01.0000000Z [*] 1 fixable with the `--fix` option.
2026-12-01T10:00:01.1000000Z ##[error]Process completed with exit code 1.
"""


def tree_at(double: GitHubDouble, sha: str, dest: Path) -> Path:
    """The files of commit `sha` in the double's repository, written out to `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", sha], cwd=double.git_dir(REPO), capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def message(double: GitHubDouble, sha: str) -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%B", sha],
        cwd=double.git_dir(REPO),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def failing_run(world: World, head: str = "feature") -> WorkflowRun:
    """A completed Actions run on `head`'s tip whose `lint` job failed on ruff."""
    sha = world.double.branch_sha(REPO, head)
    assert sha is not None
    return add_run(world.double, REPO, sha, head, [("lint", "failure", RUFF_LOG)])


def label_issue(
    world: World, labeller: str, title: str = "Typo in README", body: str = "It says teh."
) -> tuple[Any, Job]:
    """alice files an issue, `labeller` (authorised) labels it `agent:fix`; the finished job."""
    world.authorize(labeller)
    issue = world.double.create_issue(REPO, title, body, user="alice")
    payload = issue_labeled(world.double, REPO, issue.number, user=labeller)
    (job_id,) = world.deliver("issues", payload)
    return issue, world.wait(job_id)


def make_world(
    double: GitHubDouble, database_url: str, tmp_path: Path, **settings: Any
) -> Iterator[World]:
    """The shared e2e world, with a Python repository and alice's PR `feature` adding bad.py."""
    files: dict[str, str | bytes] = {"pyproject.toml": PYPROJECT, "README.md": "teh widgets\n"}
    for world in e2e.make_world(
        double, database_url, tmp_path, files, sandbox_pool_size=0, **settings
    ):
        double.create_branch(REPO, "feature")
        double.commit(REPO, "feature", {"bad.py": BAD}, message="Add bad.py")
        double.create_pull(REPO, "feature", title="Feature", user="alice")
        yield world


@pytest.fixture
def world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(github_double, database_url, tmp_path)


@pytest.mark.parametrize("event", ["workflow_run", "check_suite"])
def test_ruff_failure_is_fixed_and_pushed_as_the_pr_author(
    world: World, event: str, tmp_path: Path
) -> None:
    world.authorize("alice")
    old = world.double.branch_sha(REPO, "feature")
    run = failing_run(world)
    build = workflow_run_failed if event == "workflow_run" else check_suite_failed
    (job_id,) = world.deliver(event, build(world.double, REPO, run, 1, user="bob"))
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    assert job.requested_by == "alice"  # automatic fixes act as the PR's author
    new = world.double.branch_sha(REPO, "feature")
    assert new != old and new is not None
    (push,) = world.double.pushes
    assert (push.identity.kind, push.identity.login) == ("user", "alice")
    assert push.updates[0].old == old and push.updates[0].new == new
    text = message(world.double, new)
    assert f"Onloop-Job: {job_id}" in text and "Onloop-Kind: fix_ci" in text
    files = tree_at(world.double, new, tmp_path / "after")
    lint = subprocess.run(["ruff", "check", "."], cwd=files, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    assert "import os" not in (files / "bad.py").read_text()
    names = [s["name"] for s in job.steps]
    assert names[:2] == ["policy", "authorization"] and "validate" in names
    # in the sandbox: the probe, 2 fixers, 2 checks, and the commit with its bundle (stage,
    # look, commit, bundle: one command, four before)
    execs = audit.entries(world.db, job_id=job_id, action=audit.SANDBOX_EXEC)
    assert len(execs) == 6, [e.detail["argv"][:3] for e in execs]
    assert world.containers() == []  # removed while it pushed, and before the job ended


def test_checks_that_still_fail_push_nothing_and_say_which(world: World) -> None:
    world.authorize("alice")
    world.double.commit(
        REPO,
        "main",
        {".github/onloop.yml": "bogus: 1\nchecks:\n  test: python3 -c 'raise SystemExit(3)'\n"},
    )
    head = world.double.branch_sha(REPO, "feature")
    run = failing_run(world)
    (job_id,) = world.deliver("workflow_run", workflow_run_failed(world.double, REPO, run, 1))
    job = world.wait(job_id)
    assert job.state == JobState.FAILED and job.result["outcome"] == "unvalidated", job.result
    assert world.double.branch_sha(REPO, "feature") == head and not world.double.pushes
    report = world.bot_comment_with("nothing was pushed")
    assert "SystemExit(3)" in report.body and "exit 3" in report.body
    unknown = world.bot_comment_with("keys onloop does not know")
    assert "`bogus`" in unknown.body


def test_fix_issue_without_an_agent_says_how_to_configure_one(world: World) -> None:
    issue, job = label_issue(world, "alice")
    assert job.state == JobState.FAILED and job.result["outcome"] == "no_agent"
    notice = world.bot_comment_with("ONLOOP_AGENT", issue.number)
    assert "no coding agent" in notice.body and not world.double.pushes


AGENT = "grep -q 'says teh' TASK.md && sed -i 's/teh/the/' README.md"


@pytest.fixture
def agent_world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(
        github_double, database_url, tmp_path, agent="command", agent_command=AGENT
    )


def test_fix_issue_opens_a_pr_in_the_labellers_name(agent_world: World, tmp_path: Path) -> None:
    world = agent_world
    issue, job = label_issue(world, "carol")
    job_id = job.id
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    branch = f"onloop/issue-{issue.number}"
    sha = world.double.branch_sha(REPO, branch)
    assert sha is not None
    (push,) = world.double.pushes
    assert push.identity.login == "carol"
    pr = world.double.issue(REPO, job.result["pr"])
    assert pr.pull is not None and pr.pull.head_ref == branch and pr.user == "carol"
    assert f"Fixes #{issue.number}" in (pr.body or "")
    assert "reviewer" in (pr.body or "") or "review" in (pr.body or "")
    assert f"Onloop-Job: {job_id}" in message(world.double, sha)
    files = tree_at(world.double, sha, tmp_path / "after")
    assert (files / "README.md").read_text() == "the widgets\n"
    assert not (files / "TASK.md").exists()
    assert "agent" in [s["name"] for s in job.steps]


# The agent's last lines are its summary, quoted in the pull request's body.
LOUD_AGENT = AGENT + " && printf 'done @mallory\\n```\\n@octo-org/admins #1 <img src=x>\\n'"


@pytest.fixture
def loud_world(github_double: GitHubDouble, database_url: str, tmp_path: Path) -> Iterator[World]:
    yield from make_world(
        github_double, database_url, tmp_path, agent="command", agent_command=LOUD_AGENT
    )


def test_the_agents_summary_in_the_pr_body_mentions_nobody(loud_world: World) -> None:
    """What the agent writes reaches the pull request only as escaped, defanged text."""
    _, job = label_issue(loud_world, "carol")
    assert job.state == JobState.SUCCEEDED, (job.result, loud_world.worker.output())
    body = loud_world.double.issue(REPO, job.result["pr"]).body or ""
    assert "done @\u200bmallory" in body and not code_blocks(body), body
    shown = outside_code(body)
    for said in ("@mallory", "@octo", "#1"):
        assert said not in shown, (said, body)
    assert "<img" not in body and "@carol" in shown


def test_agent_fix_comment_reads_the_failed_runs_of_the_head(world: World) -> None:
    from tests.doubles.payloads import pr_comment

    world.authorize("carol")
    failing_run(world)
    payload = pr_comment(world.double, REPO, 1, "/agent fix", "carol")
    (job_id,) = world.deliver("issue_comment", payload)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    (push,) = world.double.pushes
    assert push.identity.login == "carol"  # the commenter acts, not the PR's author
    failures = next(s for s in job.steps if s["name"] == "failures")
    assert failures["output"] == "lint"


def test_red_default_branch_gets_a_fix_pr(world: World, tmp_path: Path) -> None:
    world.authorize("alice")
    world.double.commit(REPO, "main", {"bad.py": BAD}, message="Break main")
    run = failing_run(world, "main")
    payload = workflow_run_failed(world.double, REPO, run, None, user="alice")
    (job_id,) = world.deliver("workflow_run", payload)
    job = world.wait(job_id)
    assert job.state == JobState.SUCCEEDED, (job.result, job.steps, world.worker.output())
    branch = f"onloop/fix-ci-{run.head_sha[:7]}"
    sha = world.double.branch_sha(REPO, branch)
    assert sha is not None and world.double.branch_sha(REPO, "main") == run.head_sha
    (pr,) = [i for i in world.double.repo(REPO).issues.values() if i.pull and i.number != 1]
    assert pr.pull is not None and pr.pull.head_ref == branch and pr.user == "alice"
    files = tree_at(world.double, sha, tmp_path / "after")
    assert subprocess.run(["ruff", "check", "."], cwd=files).returncode == 0


def test_metrics_count_jobs_steps_sandboxes_and_the_merge_rate(agent_world: World) -> None:
    from tests.doubles.payloads import _installation_id, _repository
    from tests.doubles.webhooks import load_fixture

    world = agent_world
    issue, job = label_issue(world, "carol")
    assert job.state == JobState.SUCCEEDED, job.result
    closed = load_fixture("pull_request.opened")
    closed["action"] = "closed"
    closed["repository"] = _repository(world.double, REPO)
    closed["installation"] = {"id": _installation_id(world.double, REPO)}
    closed["number"] = closed["pull_request"]["number"] = job.result["pr"]
    closed["pull_request"]["merged"] = True
    closed["pull_request"]["head"]["ref"] = f"onloop/issue-{issue.number}"
    deliver(world.client, "pull_request", closed)
    finished = 'onloop_jobs_finished_total{kind="fix_issue",state="succeeded"} 1.0'

    def scrape() -> set[str] | None:
        lines = set(world.client.get("/metrics").get_data(as_text=True).splitlines())
        return lines if finished in lines else None

    lines = wait_until(scrape, 30, finished)
    assert 'onloop_pull_requests_opened_total{kind="fix_issue"} 1.0' in lines
    assert 'onloop_pull_requests_closed_total{outcome="merged"} 1.0' in lines
    assert 'onloop_deliveries_total{event="issues",outcome="202"} 1.0' in lines
    assert "onloop_sandbox_start_seconds_count 1.0" in lines
    assert 'onloop_step_duration_seconds_count{kind="fix_issue",step="agent"} 1.0' in lines
    assert 'onloop_jobs{kind="fix_issue",state="succeeded"} 1.0' in lines


WORKFLOW_AGENT = "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml"


@pytest.fixture
def workflow_world(
    github_double: GitHubDouble, database_url: str, tmp_path: Path
) -> Iterator[World]:
    yield from make_world(
        github_double, database_url, tmp_path, agent="command", agent_command=WORKFLOW_AGENT
    )


def test_an_agent_that_edits_a_workflow_is_refused_and_nothing_is_pushed(
    workflow_world: World,
) -> None:
    world = workflow_world
    issue, job = label_issue(world, "carol", "Add CI", "Please add a workflow.")
    assert job.state == JobState.FAILED and job.result["outcome"] == "refused", job.result
    assert any(v.startswith("paths.deny") for v in job.result["violations"]), job.result
    assert not world.double.pushes
    assert world.double.branch_sha(REPO, f"onloop/issue-{issue.number}") is None
    refusal = world.bot_comment_with("refused to push", issue.number)
    assert ".github/workflows/ci.yml" in refusal.body


def test_the_audit_log_accounts_for_every_write_of_a_job(agent_world: World) -> None:
    from app.store import audit

    world = agent_world
    issue, job = label_issue(world, "carol")
    job_id = job.id
    assert job.state == JobState.SUCCEEDED, job.result
    world.bot_comment_with("Done", issue.number)  # the status comment's last edit
    # and the check run's, which may come a moment later: until then a write is still to come

    def concluded() -> bool:
        runs = [r for r in world.double.checks.runs.values() if r.external_id == str(job_id)]
        return bool(runs) and all(r.status == "completed" for r in runs)

    wait_until(concluded, 30, "the job's check run to be completed")

    def seen() -> list[tuple[str, str, str | None]]:
        calls = world.double.calls(surface="api")
        return sorted((c.method, c.path, c.identity.kind) for c in calls if c.method != "GET")

    def logged() -> list[tuple[str, str, str | None]]:
        entries = audit.entries(world.db, job_id=job_id, action=audit.GITHUB_WRITE)
        return sorted((e.detail["method"], e.detail["path"], e.token_kind) for e in entries)

    # The double answers a write a moment before onloop records it.
    try:
        wait_until(lambda: logged() == seen(), 30, "the audit log to account for every write")
    finally:
        assert logged() == seen()
    assert ("POST", f"/repos/{REPO}/pulls", "user") in logged()
    (push,) = world.double.pushes
    (pushed,) = audit.entries(world.db, job_id=job_id, action=audit.GIT_PUSH)
    assert (pushed.detail["new"], pushed.identity) == (push.updates[0].new, "carol")
    actions = {e.action for e in audit.entries(world.db, job_id=job_id)}
    assert {audit.DELIVERY, audit.POLICY, audit.STEP, audit.SANDBOX_EXEC} <= actions
