"""Check runs made by GitHub Apps: create, update, list for a commit; each write is kept."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tests.doubles.github import gitrepo
from tests.doubles.github.api import ApiError, Ctx, Response, iso, not_found
from tests.doubles.github.auth import authorize
from tests.doubles.github.model import Repo

STATUSES = ("queued", "in_progress", "completed")
CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)
# GitHub's answer to a user token (https://docs.github.com/en/rest/checks/runs: "OAuth apps
# and authenticated users are not able to create a check suite", nor runs).
NOT_AN_APP = "You must authenticate via a GitHub App."


@dataclass
class CheckRun:
    id: int
    repo: str
    name: str
    head_sha: str
    installation_id: int
    status: str = "queued"
    conclusion: str | None = None
    external_id: str | None = None
    details_url: str | None = None
    output: dict[str, Any] = field(default_factory=dict)
    started_at: float | None = None
    completed_at: float | None = None
    # (status, conclusion, output title) after each create or update, oldest first
    history: list[tuple[str, str | None, str | None]] = field(default_factory=list)


@dataclass
class Checks:
    """The checks side of the double's world (`state.checks`)."""

    runs: dict[int, CheckRun] = field(default_factory=dict)

    def for_commit(self, repo: str, sha: str, name: str | None = None) -> list[CheckRun]:
        """Check runs on `sha` of `repo` (full name), oldest first."""
        return [
            r
            for r in self.runs.values()
            if r.repo.lower() == repo.lower()
            and r.head_sha == sha
            and (name is None or r.name == name)
        ]


def _invalid(field_name: str, message: str | None = None) -> ApiError:
    error: dict[str, Any] = {"resource": "CheckRun", "field": field_name, "code": "invalid"}
    if message:
        error = {"resource": "CheckRun", "code": "custom", "field": field_name, "message": message}
    return ApiError(422, "Invalid request.", [error])


def _app_only(ctx: Ctx, repo: Repo) -> int:
    """Only an installation (an App acting on a repository) writes check runs."""
    if ctx.identity.kind != "installation":
        raise ApiError(403, NOT_AN_APP)
    authorize(ctx.state, ctx.identity, repo, "checks", "write")
    assert ctx.identity.installation_id is not None
    return ctx.identity.installation_id


def _apply(ctx: Ctx, run: CheckRun, body: dict[str, Any]) -> None:
    """Validate and apply the writable fields of a create or update."""
    status = body.get("status", run.status)
    conclusion = body.get("conclusion", run.conclusion if status == "completed" else None)
    if status not in STATUSES:
        raise _invalid("status")
    if conclusion is not None:
        if conclusion not in CONCLUSIONS:
            raise _invalid("conclusion")
        status = "completed"  # a conclusion completes the run, as on GitHub
    if status == "completed" and conclusion is None:
        raise _invalid("conclusion", "Conclusion can't be blank when status is completed")
    output = body.get("output")
    if output is not None:
        if not isinstance(output, dict) or not output.get("title") or not output.get("summary"):
            raise _invalid("output", "output requires a title and a summary")
        if len(str(output.get("summary"))) > 65535 or len(str(output.get("text") or "")) > 65535:
            raise _invalid("output", "output.summary and output.text are limited to 65535")
        run.output = dict(output)
    for key in ("external_id", "details_url", "name"):
        if key in body:
            setattr(run, key, body[key])
    run.status, run.conclusion = status, conclusion
    if status == "in_progress" and run.started_at is None:
        run.started_at = time.time()
    if status == "completed":
        run.completed_at = run.completed_at or time.time()
    run.history.append((run.status, run.conclusion, run.output.get("title")))


def create(ctx: Ctx) -> Response:
    """POST /repos/{o}/{r}/check-runs"""
    repo = ctx.repo()
    installation = _app_only(ctx, repo)
    body = ctx.body_dict()
    if not body.get("name"):
        raise _invalid("name")
    sha = str(body.get("head_sha") or "")
    if not sha or gitrepo.rev(repo.git_dir, sha) != sha:
        raise ApiError(422, f"No commit found for SHA: {sha}")
    run = CheckRun(ctx.state.next_id(), repo.full_name, body["name"], sha, installation)
    _apply(ctx, run, body)
    ctx.state.checks.runs[run.id] = run
    return Response(201, shape(ctx, run))


def _run(ctx: Ctx, repo: Repo) -> CheckRun:
    run = ctx.state.checks.runs.get(int(ctx.params["id"]))
    if run is None or run.repo != repo.full_name:
        raise not_found()
    return run


def update(ctx: Ctx) -> Response:
    """PATCH /repos/{o}/{r}/check-runs/{id}: only the installation that made it."""
    repo = ctx.repo()
    installation = _app_only(ctx, repo)
    run = _run(ctx, repo)
    if run.installation_id != installation:
        raise ApiError(403, "Only the app that created a check run can update it.")
    _apply(ctx, run, ctx.body_dict())
    return Response(200, shape(ctx, run))


def get(ctx: Ctx) -> Response:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "checks", "read")
    return Response(200, shape(ctx, _run(ctx, repo)))


def list_for_ref(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/commits/{ref}/check-runs?check_name=&status=&filter=latest|all"""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "checks", "read")
    sha = gitrepo.rev(repo.git_dir, ctx.params["ref"])
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {ctx.params['ref']}")
    runs = ctx.state.checks.for_commit(repo.full_name, sha, ctx.arg("check_name"))
    if ctx.arg("status"):
        runs = [r for r in runs if r.status == ctx.arg("status")]
    if ctx.arg("filter", "latest") == "latest":
        latest: dict[str, CheckRun] = {}
        for r in runs:
            latest[r.name] = r  # newest wins
        runs = list(latest.values())
    items = [shape(ctx, r) for r in sorted(runs, key=lambda r: -r.id)]
    return Response(200, {"total_count": len(items), "check_runs": items})


def shape(ctx: Ctx, run: CheckRun) -> dict[str, Any]:
    app = ctx.state.app
    output = {"title": None, "summary": None, "text": None, **run.output}
    output |= {
        "annotations_count": 0,
        "annotations_url": ctx.api(f"/repos/{run.repo}/check-runs/{run.id}/annotations"),
    }
    return {
        "id": run.id,
        "node_id": f"CR_{run.id}",
        "name": run.name,
        "head_sha": run.head_sha,
        "external_id": run.external_id,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": iso(run.started_at),
        "completed_at": iso(run.completed_at),
        "url": ctx.api(f"/repos/{run.repo}/check-runs/{run.id}"),
        "html_url": ctx.web(f"/{run.repo}/runs/{run.id}"),
        "details_url": run.details_url,
        "output": output,
        "check_suite": {"id": 1_000_000 + run.installation_id},
        "app": {"id": app.id, "slug": app.slug, "name": app.name},
        "pull_requests": [],
    }
