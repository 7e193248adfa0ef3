"""onloop's own short notices, posted with the installation token: refusals, sign-in requests."""

from __future__ import annotations

from github.Repository import Repository

from app.github.comments import thread, upsert_comment
from tasks.runner.context import JobContext


def notice(ctx: JobContext, repo: Repository, key: str, body: str) -> int | None:
    """One bot comment per (job, key), edited when the job runs again; None for a job on no
    issue or pull request (a red default branch), where there is nowhere to say it."""
    if ctx.job.number is None:
        return None
    ctx.settle_feedback()  # a status comment being made meanwhile would be a second comment
    issue = thread(repo, ctx.job.number)
    comment = upsert_comment(issue, f"job-{ctx.job.id}-{key}", body, ctx.settings.bot_login)
    return int(comment.id)


def ask_to_authorize(ctx: JobContext, repo: Repository, login: str, reason: str) -> None:
    link = ctx.settings.public_url.rstrip("/") + "/oauth/login"
    notice(
        ctx,
        repo,
        "authorize",
        f"@{login} onloop acts in your own name, so that its work is yours and another person "
        f"reviews it, but it cannot act for you now: {reason}. [Authorise onloop]({link}) "
        f"and this `{ctx.job.kind}` job resumes by itself.",
    )
