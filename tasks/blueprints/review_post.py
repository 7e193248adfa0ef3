"""review_pr's last step: one review with the person's token (never APPROVE), or the one
already there for this head."""

from __future__ import annotations

from collections.abc import Sequence

from github import GithubException
from github.PullRequestReview import PullRequestReview

from app.core.markdown import inline_code
from app.github.comments import details
from tasks.blueprints.review_state import Posted, Review, ReviewEvent
from tasks.review.findings import fixers, label
from tasks.review.suggest import ReviewComment, build_comments
from tasks.runner.people import as_person


def existing_review(state: Review) -> PullRequestReview | None:
    """This person's onloop review of this head, if there is one (asked twice: one review)."""
    pr = as_person(state.work, lambda: state.work.user_repo.get_pull(state.pull.number))
    for review in pr.get_reviews():
        if (
            review.user is not None
            and review.user.login == state.work.login
            and review.commit_id == state.head_sha
            and state.tag in (review.body or "")
        ):
            return review
    return None


def post(state: Review) -> str | None:
    if state.existing is not None:
        state.posted = Posted(state.existing.id, state.existing.html_url, already=True)
        return f"already reviewed: {state.existing.html_url}"
    names = [label(c) for c in fixers(state.detected, state.chosen, state.work.config.checks.fix)]
    state.built = build_comments(
        state.findings, state.edits, state.changed, names, state.agent_comments
    )
    review, comments, event = as_person(state.work, lambda: publish(state))
    state.posted = Posted(
        review.id,
        review.html_url,
        event=event,
        comments=len(comments),
        suggestions=sum("suggestion\n" in c.body for c in comments),
        findings=len(state.findings),
        left_out=state.built.outside + state.built.fixes_outside,
    )
    return f"{event} with {len(comments)} comments: {review.html_url}"


def publish(state: Review) -> tuple[PullRequestReview, list[ReviewComment], ReviewEvent]:
    """One review with the person's token: COMMENT, or REQUEST_CHANGES where the repository
    allows it; never APPROVE. Comments this person already has on the PR are not repeated."""
    work = state.work
    repo = work.user_repo
    pr = repo.get_pull(state.pull.number)
    present = {
        (c.path, c.line, c.body)
        for c in pr.get_review_comments()
        if c.user is not None and c.user.login == work.login
    }
    comments = [c for c in state.built.comments if (c.path, c.line, c.body) not in present]
    event = ReviewEvent.COMMENT
    if work.config.review.request_changes and comments and pr.user.login != work.login:
        event = ReviewEvent.REQUEST_CHANGES  # GitHub refuses it on one's own pull request
    commit = repo.get_commit(state.head_sha)
    work.ctx.before_write()
    try:
        review = pr.create_review(
            commit=commit,
            body=review_body(state, comments),
            event=event,
            comments=[c.api() for c in comments],  # type: ignore[misc]
        )
    except GithubException as exc:
        if exc.status != 422 or not comments:
            raise
        # "Pull request review thread line must be part of the diff": the PR moved under us.
        # Say it all in the review's body instead of inline.
        listed = "\n\n".join(f"{inline_code(c.path)} line {c.line}:\n{c.body}" for c in comments)
        body = review_body(state, []) + "\n\nOn the lines changed:\n\n" + listed[:50_000]
        work.ctx.before_write()
        review = pr.create_review(commit=commit, body=body, event=event)
        comments = []
    return review, comments, event


def review_body(state: Review, comments: Sequence[ReviewComment]) -> str:
    built, runs = state.built, state.runs
    suggested = sum("suggestion\n" in c.body for c in comments)
    lines = [state.tag]
    if not runs:
        lines.append(
            "onloop found no linter for the files this pull request changes (it runs ruff, "
            "mypy and eslint where the repository uses them, and `checks.fix` from "
            "`.github/onloop.yml`)."
        )
    elif not comments:
        lines.append(
            f"onloop found nothing to remark on the lines changed up to {state.head_sha[:7]}."
        )
    else:
        lines.append(
            f"onloop left {len(comments)} comment{'s' * (len(comments) != 1)} on the lines "
            f"changed up to {state.head_sha[:7]}"
            + (f", {suggested} with a fix you can commit from the comment." if suggested else ".")
        )
    lines += [f"- {r.summary()}" for r in runs]
    if built.outside or built.fixes_outside:
        lines.append(
            f"\n{built.outside + built.fixes_outside} more findings or fixes concern lines this "
            "pull request did not change; onloop leaves those alone."
        )
    if built.omitted:
        lines.append(f"{built.omitted} further comments were left out to keep this readable.")
    if state.agent_note:
        lines.append(f"\n{state.agent_note}")
    failed = [r for r in [*runs, *state.fixer_runs] if r.error or r.exit_code not in (0, 1)]
    for r in failed:
        lines.append(details(f"{r.name} output (exit code {r.exit_code})", r.output))
    return "\n".join(lines)
