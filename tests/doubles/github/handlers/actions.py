"""GitHub Actions: workflow runs, their jobs and job logs, and the check suites they make."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.doubles.github.api import ApiError, Ctx, Response, iso, not_found
from tests.doubles.github.auth import authorize

if TYPE_CHECKING:
    from tests.doubles.github.state import State

ACTIONS_APP = {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"}


@dataclass
class ActionsJob:
    id: int
    run_id: int
    name: str
    conclusion: str  # success | failure | ...
    log: str
    pending_log_reads: int = 0  # GET .../logs answers 404 this many times first
    log_key: str = field(default_factory=lambda: secrets.token_urlsafe(16))


@dataclass
class WorkflowRun:
    id: int
    repo: str
    name: str
    head_sha: str
    head_branch: str
    conclusion: str
    check_suite_id: int
    event: str = "pull_request"
    jobs: list[ActionsJob] = field(default_factory=list)
    created_at: float = 0.0


@dataclass
class Actions:
    """The Actions side of the double's world (`state.actions`)."""

    runs: dict[int, WorkflowRun] = field(default_factory=dict)

    def jobs(self) -> dict[int, ActionsJob]:
        return {j.id: j for r in self.runs.values() for j in r.jobs}

    def suite(self, suite_id: int) -> WorkflowRun | None:
        return next((r for r in self.runs.values() if r.check_suite_id == suite_id), None)


def add_run(
    state: State,
    repo: str,
    head_sha: str,
    head_branch: str,
    jobs: list[tuple[str, str, str]],
    *,
    name: str = "CI",
    event: str = "pull_request",
    pending_log_reads: int = 0,
) -> WorkflowRun:
    """A completed workflow run on `head_sha` with `jobs` as (name, conclusion, log text);
    its conclusion is failure when any job failed."""
    with state.lock:
        run = WorkflowRun(
            id=state.next_id(),
            repo=state.repo(repo).full_name,
            name=name,
            head_sha=head_sha,
            head_branch=head_branch,
            conclusion="failure" if any(c == "failure" for _, c, _ in jobs) else "success",
            check_suite_id=state.next_id(),
            event=event,
            created_at=state.now(),
        )
        for job_name, conclusion, log in jobs:
            run.jobs.append(
                ActionsJob(state.next_id(), run.id, job_name, conclusion, log, pending_log_reads)
            )
        state.actions.runs[run.id] = run
        return run


def _run_shape(ctx: Ctx, run: WorkflowRun) -> dict[str, Any]:
    api = ctx.api(f"/repos/{run.repo}/actions/runs/{run.id}")
    return {
        "id": run.id,
        "name": run.name,
        "node_id": f"WFR_{run.id}",
        "head_branch": run.head_branch,
        "head_sha": run.head_sha,
        "run_number": run.id % 1000,
        "event": run.event,
        "status": "completed",
        "conclusion": run.conclusion,
        "check_suite_id": run.check_suite_id,
        "url": api,
        "html_url": ctx.web(f"/{run.repo}/actions/runs/{run.id}"),
        "jobs_url": api + "/jobs",
        "logs_url": api + "/logs",
        "created_at": iso(run.created_at),
        "updated_at": iso(run.created_at),
        "pull_requests": [],
    }


def _job_shape(ctx: Ctx, run: WorkflowRun, job: ActionsJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "run_id": run.id,
        "name": job.name,
        "head_sha": run.head_sha,
        "status": "completed",
        "conclusion": job.conclusion,
        "url": ctx.api(f"/repos/{run.repo}/actions/jobs/{job.id}"),
        "html_url": ctx.web(f"/{run.repo}/actions/runs/{run.id}/job/{job.id}"),
        "check_run_url": ctx.api(f"/repos/{run.repo}/check-runs/{job.id}"),
        "started_at": iso(run.created_at),
        "completed_at": iso(run.created_at),
        "steps": [],
    }


def _check_run_shape(ctx: Ctx, run: WorkflowRun, job: ActionsJob) -> dict[str, Any]:
    # An Actions job is also a check run with the same id
    # (https://docs.github.com/en/rest/actions/workflow-jobs).
    return {
        "id": job.id,
        "name": job.name,
        "head_sha": run.head_sha,
        "status": "completed",
        "conclusion": job.conclusion,
        "url": ctx.api(f"/repos/{run.repo}/check-runs/{job.id}"),
        "html_url": ctx.web(f"/{run.repo}/actions/runs/{run.id}/job/{job.id}"),
        "details_url": ctx.web(f"/{run.repo}/actions/runs/{run.id}/job/{job.id}"),
        "check_suite": {"id": run.check_suite_id},
        "app": dict(ACTIONS_APP),
        "started_at": iso(run.created_at),
        "completed_at": iso(run.created_at),
        "output": {"title": None, "summary": None, "text": None, "annotations_count": 0},
    }


def _run(ctx: Ctx) -> WorkflowRun:
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "actions", "read")
    run = ctx.state.actions.runs.get(int(ctx.params["id"]))
    if run is None or run.repo != repo.full_name:
        raise not_found()
    return run


def list_runs(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/actions/runs?head_sha=&status=&branch="""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "actions", "read")
    runs = [r for r in ctx.state.actions.runs.values() if r.repo == repo.full_name]
    if sha := ctx.arg("head_sha"):
        runs = [r for r in runs if r.head_sha == sha]
    if branch := ctx.arg("branch"):
        runs = [r for r in runs if r.head_branch == branch]
    if status := ctx.arg("status"):
        runs = [r for r in runs if status in ("completed", r.conclusion)]
    runs.sort(key=lambda r: -r.id)
    shapes = [_run_shape(ctx, r) for r in runs]
    return Response(200, {"total_count": len(shapes), "workflow_runs": shapes})


def get_run(ctx: Ctx) -> Response:
    return Response(200, _run_shape(ctx, _run(ctx)))


def list_run_jobs(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/actions/runs/{id}/jobs"""
    run = _run(ctx)
    shapes = [_job_shape(ctx, run, j) for j in run.jobs]
    return Response(200, {"total_count": len(shapes), "jobs": shapes})


def job_logs(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/actions/jobs/{id}/logs: a 302 to a short-lived plain-text URL, or
    404 while the logs are not yet available
    (https://docs.github.com/en/rest/actions/workflow-jobs#download-job-logs-for-a-workflow-run)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "actions", "read")
    job = ctx.state.actions.jobs().get(int(ctx.params["id"]))
    if job is None or ctx.state.actions.runs[job.run_id].repo != repo.full_name:
        raise not_found()
    if job.pending_log_reads > 0:
        job.pending_log_reads -= 1
        raise not_found()
    return Response(302, b"", {"Location": ctx.web(f"/_actions/logs/{job.log_key}")})


def download_log(ctx: Ctx) -> Response:
    """The pre-signed log URL: no credentials needed, the key in the path is the secret."""
    for job in ctx.state.actions.jobs().values():
        if secrets.compare_digest(job.log_key, str(ctx.params["key"])):
            return Response(200, job.log.encode(), {"Content-Type": "text/plain; charset=utf-8"})
    raise ApiError(404, "The specified blob does not exist.")


def suite_check_runs(ctx: Ctx) -> Response:
    """GET /repos/{o}/{r}/check-suites/{id}/check-runs (the Actions jobs of that suite)."""
    repo = ctx.repo()
    authorize(ctx.state, ctx.identity, repo, "checks", "read")
    run = ctx.state.actions.suite(int(ctx.params["id"]))
    if run is None or run.repo != repo.full_name:
        raise not_found()
    shapes = [_check_run_shape(ctx, run, j) for j in run.jobs]
    if status := ctx.arg("status"):
        shapes = [s for s in shapes if s["status"] == status]
    return Response(200, {"total_count": len(shapes), "check_runs": shapes})
