"""What a person sees of a job while it runs: an eyes reaction on their command, one status
comment edited in place, and a check run `onloop/<kind>` on the head; all as onloop itself
(the installation token), never as the person."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from github import GithubException
from github.CheckRun import CheckRun
from github.IssueComment import IssueComment
from github.PaginatedList import PaginatedList
from github.Repository import Repository
from sqlalchemy import select, update

from app.core.kinds import sandboxed
from app.github.comments import family, marker, thread
from app.store.models import Job, JobState
from tasks.feedback import progress
from tasks.feedback.access import Access, acknowledge
from tasks.feedback.throttle import Throttle
from tasks.runner.context import JobContext, JobListener

log = logging.getLogger(__name__)


class StatusComment:
    """The job's one status comment, found again by its hidden marker. It starts once the job
    is past policy and authorisation (refusals and sign-in requests are notices of their
    own, `queued` may have said that it waits) and then takes the notice's place: a job
    leaves one bot comment."""

    def __init__(self, ctx: JobContext, access: Access, *, attach: bool = False) -> None:
        self.ctx, self.access, self.attach = ctx, access, attach
        self.tag = marker(f"job-{ctx.job.id}-status")
        self.notices = family(f"job-{ctx.job.id}-status") or ""  # authorize, refused, ...
        self.comment: IssueComment | None = None
        self.started = False
        self.extra_links: dict[str, str | None] = {}
        self.throttle: Throttle[str] = Throttle(
            self._send, access.lock, ctx.settings.feedback_interval
        )

    @property
    def url(self) -> str | None:
        return self.comment.html_url if self.comment is not None else None

    def steps_changed(self, ctx: JobContext) -> None:
        if not self.started and not progress.work_started(ctx.steps):
            return
        self.started = True
        self.throttle.update(progress.running_text(ctx.job, ctx.steps, ctx.plan, page_url(ctx)))

    def finished(self, ctx: JobContext, state: str, result: dict[str, Any]) -> None:
        result = _with_reason(ctx, state, result)
        if not self.started:
            # `quiet`: refused in silence (an outsider told once already, tasks.blueprints.gate)
            quiet = state != JobState.FAILED or bool(result.get("quiet"))
            if quiet and result.get("quiet"):
                self._remove_queued()
            if quiet or self._find(any_notice=True) is not None:
                self.throttle.close()
                return  # its notice has said what happened
            self.started = True
        text = progress.final_text(
            ctx.job, ctx.steps, state, result, self.extra_links, authorize_url(ctx), page_url(ctx)
        )
        self.throttle.close(text)

    def _remove_queued(self) -> None:
        """A job refused in silence leaves no comment: not even the "queued" status that the
        caps may have posted before its policy step ran."""
        queued = self._find(any_notice=False)
        if queued is not None:
            queued.delete()

    def _find(self, any_notice: bool) -> IssueComment | None:
        if self.ctx.job.number is None:
            return None
        bot = self.ctx.settings.bot_login
        issue = thread(self.access.repo(), self.ctx.job.number)
        for comment in issue.get_comments():
            body = comment.body or ""
            if comment.user.login == bot and (
                self.tag in body or (any_notice and self.notices in body)
            ):
                return comment
        return None

    def _send(self, body: str) -> None:
        text = f"{self.tag}\n{body}"
        if self.ctx.job.number is None:
            return
        if self.comment is None:
            self.comment = self._find(any_notice=True)  # a notice gives way to the status
            if self.comment is None:
                if self.attach:
                    return
                issue = thread(self.access.repo(), self.ctx.job.number)
                self.comment = issue.create_comment(text)
                self._keep_url()
                return
            self._keep_url()
        self.comment.edit(text)  # a notice may have changed it meanwhile: always write

    def _keep_url(self) -> None:
        """Kept on the job's result: its page links to the comment."""
        if self.comment is not None:
            self.ctx.recorded["status_comment"] = self.comment.html_url


class CheckRunListener:
    """A check run `onloop/<kind>` on the head the job works on: in_progress once the job is
    past policy and authorisation and its head is known, completed when it ends."""

    def __init__(
        self, ctx: JobContext, access: Access, status: StatusComment, *, attach: bool = False
    ) -> None:
        self.ctx, self.access, self.status, self.attach = ctx, access, status, attach
        self.name = f"onloop/{ctx.job.kind}"
        self.run: CheckRun | None = None
        self.throttle: Throttle[dict[str, str]] = Throttle(
            self._edit, access.lock, ctx.settings.feedback_interval
        )

    def _sha(self) -> str | None:
        if self.ctx.head_sha:
            return self.ctx.head_sha
        with self.ctx.db.read() as s:
            return s.scalar(select(Job.head_sha).where(Job.id == self.ctx.job.id))

    def _output(self, ctx: JobContext, title: str, summary: str) -> dict[str, str]:
        return progress.check_output(ctx.job, ctx.steps, title, summary)

    def steps_changed(self, ctx: JobContext) -> None:
        if not progress.work_started(ctx.steps):
            return
        output = self._output(
            ctx,
            f"Running {progress.position(ctx.steps, ctx.plan)}".replace("**", ""),
            progress.running_text(ctx.job, ctx.steps, ctx.plan, page_url(ctx)),
        )
        if self.run is None:
            with self.access.lock:
                self._open(output)
        else:
            self.throttle.update(output)

    def finished(self, ctx: JobContext, state: str, result: dict[str, Any]) -> None:
        self.throttle.close()
        result = _with_reason(ctx, state, result)
        titles: dict[str, str] = {
            JobState.SUCCEEDED: progress.result_summary(result) or "Done",
            JobState.CANCELLED: "Cancelled",
            JobState.WAITING_FOR_AUTHORIZATION: f"Waiting for @{ctx.job.requested_by}",
        }
        title = titles.get(state, f"Failed: {str(result.get('error') or '')[:150]}")
        summary = progress.final_text(
            ctx.job, ctx.steps, state, result, self._links(), authorize_url(ctx), page_url(ctx)
        )
        output = self._output(ctx, title, summary)
        with self.access.lock:
            if self.run is None and (self.attach or progress.work_started(ctx.steps)):
                self._open(output)
            if self.run is None:
                return
            self.run.edit(
                status="completed",
                conclusion=progress.conclusion(state, result),
                completed_at=datetime.now(UTC),
                details_url=page_url(ctx),
                output=output,
            )

    def _links(self) -> dict[str, str | None]:
        return {"status": self.status.url}

    def _open(self, output: dict[str, str]) -> None:
        """Take up this job's open check run (a job run again, or settled from outside its
        run: by the id it recorded, else on its head) or start one."""
        repo = self.access.repo()
        known = self.ctx.job.check_run_id
        if known is not None:
            try:
                run = repo.get_check_run(known)
            except GithubException as exc:
                if exc.status != 404:  # gone: look on the head, as for a run never recorded
                    raise
            else:
                if run.status != "completed":
                    self.run = run
        sha = self._sha()
        if self.run is None and sha:
            for run in _check_runs(repo, sha, self.name):
                if run.external_id == str(self.ctx.job.id) and run.status != "completed":
                    self.run = run
                    break
        if self.run is None and sha and not self.attach:
            self.run = repo.create_check_run(
                self.name,
                sha,
                status="in_progress",
                started_at=datetime.now(UTC),
                external_id=str(self.ctx.job.id),
                details_url=page_url(self.ctx),
                output=dict(output),
            )
        if self.run is not None:
            self.status.extra_links["check run"] = self.run.html_url
            if known != self.run.id:  # so that it can be concluded whatever the head is then
                with self.ctx.db.transaction() as s:
                    s.execute(
                        update(Job)
                        .where(Job.id == self.ctx.job.id)
                        .values(check_run_id=self.run.id)
                    )
                self.ctx.job.check_run_id = self.run.id

    def _edit(self, output: dict[str, str]) -> None:
        if self.run is not None:
            self.run.edit(output=output)


def _check_runs(repo: Repository, sha: str, name: str) -> PaginatedList[CheckRun]:
    """The check runs called `name` on `sha`: GET /repos/{owner}/{repo}/commits/{ref}/check-runs
    needs checks: read only (https://docs.github.com/en/rest/checks/runs#list-check-runs-for-a-git-reference),
    where PyGithub's repo.get_commit(sha) reads the commit first, which needs contents: read."""
    return PaginatedList(
        CheckRun,
        repo.requester,
        f"{repo.url}/commits/{quote(sha, safe='')}/check-runs",
        {"check_name": name},
        list_item="check_runs",
    )


def authorize_url(ctx: JobContext) -> str:
    return ctx.settings.public_url.rstrip("/") + "/oauth/login"


def page_url(ctx: JobContext) -> str:
    """The job's page on onloop (GET /jobs/<id>): the status comment links to it, and the
    check run's `details_url` is it, GitHub's "Details" link
    (https://docs.github.com/en/rest/checks/runs#create-a-check-run)."""
    return ctx.settings.public_url.rstrip("/") + f"/jobs/{ctx.job.id}"


def _with_reason(ctx: JobContext, state: str, result: dict[str, Any]) -> dict[str, Any]:
    """A cancelled job's result as `/agent cancel` (or a newer push) recorded it."""
    if state != JobState.CANCELLED or result.get("reason"):
        return result
    with ctx.db.read() as s:
        stored = s.scalar(select(Job.result).where(Job.id == ctx.job.id)) or {}
    return {**stored, **result}


def listeners_for(ctx: JobContext) -> list[JobListener]:
    """Acknowledge a comment's command, then follow a sandboxed job with its status comment
    and check run. Nothing here may fail the job."""
    if ctx.job.installation_id is None:
        return []
    access = Access(ctx)

    def react() -> None:
        try:
            acknowledge(ctx, access)
        except Exception:
            log.warning("could not react to the command's comment", exc_info=True)

    # On the job's feedback lane, first in it (a token and a POST: round trips the job's
    # own reads need not wait for); a notice of the job's waits for the lane (settle).
    ctx.feedback.submit(react) if ctx.feedback is not None else react()
    if ctx.job.kind not in sandboxed(ctx.kinds):
        return []
    status = StatusComment(ctx, access)
    listeners: list[JobListener] = [status, CheckRunListener(ctx, access, status)]
    return listeners


def queued(ctx: JobContext, reason: str, position: int | None) -> None:
    """A job the caps hold back before it starts: 👀 on its command now, and (sandboxed
    kinds) its status comment says it is queued and where. Call it, with a context made
    outside the job's run, when the job is put back in the queue or its place changes."""
    job = ctx.job
    if job.installation_id is None:
        return
    access = Access(ctx)
    try:
        acknowledge(ctx, access)
        if job.kind in sandboxed(ctx.kinds) and job.number is not None:
            status = StatusComment(ctx, access)
            status.started = True
            status.throttle.close(progress.queued_text(job, reason, position, page_url(ctx)))
    except Exception:
        log.warning("could not tell that job %s is queued", job.id, exc_info=True)


def settle(
    ctx: JobContext,
    state: str,
    result: dict[str, Any],
    *,
    strict: bool = False,
    post: bool = False,
) -> None:
    """Bring a job's status comment and check run, if it has them, to `state` from outside
    the job (e.g. `/agent cancel` of a job that waits for authorisation, or a job given up
    after its workers died); with `post`, a job that has no status comment yet gets one. A
    failed GitHub call is logged; with `strict` it raises instead, so that the caller tries
    again later."""
    if ctx.job.installation_id is None:
        return
    access = Access(ctx)
    status = StatusComment(ctx, access, attach=not post)
    status.started = True
    for listener in (status, CheckRunListener(ctx, access, status, attach=True)):
        try:
            listener.finished(ctx, state, result)
            if strict and listener is status and status.throttle.sent is None:
                raise RuntimeError("could not edit the status comment")  # the throttle logs
        except Exception:
            if strict:
                raise
            log.warning("could not settle job %s's progress", ctx.job.id, exc_info=True)
