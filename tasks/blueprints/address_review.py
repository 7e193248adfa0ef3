"""address_review: a review of a pull request onloop opened or pushed to, followed up in the
PR owner's name (so the reviewer stays a second person who may approve)."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from github.PullRequest import PullRequest

from app.core.kinds import Kind
from tasks.blueprints import followup as f
from tasks.blueprints.common import act_as, begin, installation_repo
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.pushes import TRAILER
from tasks.runner.context import JobContext

MAX_COMMITS = 250  # GitHub lists at most 250 commits of a pull request
_OURS = re.compile(rf"^{TRAILER}: \d+$", re.MULTILINE)


class ReviewOutcome(StrEnum):
    """How a follow-up ends besides what became of its change (ChangeOutcome)."""

    NOT_ONLOOP = "not_onloop"  # nobody asked onloop: the PR is not one onloop made or pushed to
    CLOSED = "closed"


def is_onloops(pr: PullRequest) -> bool:
    """onloop opened the pull request (its `onloop/` branch) or pushed to it (a commit with
    its `Onloop-Job:` trailer among the PR's commits)."""
    if pr.head.ref.startswith("onloop/"):
        return True
    for i, commit in enumerate(pr.get_commits()):
        if i >= MAX_COMMITS:
            break
        if _OURS.search(commit.commit.message or ""):
            return True
    return False


def run_address_review(ctx: JobContext) -> dict[str, Any]:
    found = installation_repo(ctx)
    repo = found[1]
    assert ctx.job.number is not None
    pr = repo.get_pull(ctx.job.number)
    if pr.state != "open":
        return {"outcome": ReviewOutcome.CLOSED, "summary": "The pull request is closed."}
    if not is_onloops(pr):  # said nowhere: the review was for people, not for onloop
        return {"outcome": ReviewOutcome.NOT_ONLOOP, "quiet": True}
    asker = ctx.command
    act_as(ctx, asker.requested_by, asker.requested_by_id)  # a resumed job asks again
    ctx.plan = list(f.PLAN)
    pull = PullRef.of(pr, repo)
    owner = (pr.user.login, pr.user.id)
    work = begin(ctx, "fix", found, pull, acting=owner)
    ctx.head_sha = pull.head_sha
    state = f.Followup(
        work,
        pr,
        pull,
        Kind.ADDRESS_REVIEW,
        asker.requested_by,
        f"Address review by @{asker.requested_by}",
    )
    review_id = ctx.params.get("review_id")
    if review_id is not None:
        state.review_text = pr.get_review(int(review_id)).body or ""
    return f.follow_up(state, remarks=True)
