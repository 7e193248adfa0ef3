"""apply_suggestions (`/agent apply`): every unresolved suggestion block committed at once, by
the person who asked, once the checks pass; the outdated and conflicting ones listed."""

from __future__ import annotations

from typing import Any

from app.core.kinds import Kind
from tasks.blueprints import followup as f
from tasks.blueprints.common import begin, installation_repo
from tasks.blueprints.pulls import PullRef
from tasks.runner.context import JobContext, JobFailed


def run_apply(ctx: JobContext) -> dict[str, Any]:
    found = installation_repo(ctx)
    repo = found[1]
    assert ctx.job.number is not None
    pr = repo.get_pull(ctx.job.number)
    if pr.state != "open":
        raise JobFailed("the pull request is closed, so there is nothing to apply")
    ctx.plan = list(f.PLAN)
    pull = PullRef.of(pr, repo)
    work = begin(ctx, "apply", found, pull)
    ctx.head_sha = pull.head_sha
    subject = f"Apply suggestions from review (asked by @{work.login})"
    state = f.Followup(work, pr, pull, Kind.APPLY_SUGGESTIONS, work.login, subject)
    return f.follow_up(state, remarks=False)
