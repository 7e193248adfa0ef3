"""Jobs that answer in a comment: `/agent help`, `/agent status`, `/agent cancel`."""

from __future__ import annotations

import re
from typing import Any

from github.Repository import Repository
from sqlalchemy import select

from app.core.kinds import command_of, sandboxed
from app.core.markdown import inline_code, plain
from app.github.comments import thread, upsert_comment
from app.intake.commands import CommandParams
from app.policy.repo_config import ALLOWED_COMMANDS
from app.store.cancel import cancel_live
from app.store.models import LIVE_STATES, Job, JobState
from tasks.blueprints import gate
from tasks.blueprints.common import installation_repo
from tasks.feedback import listeners as feedback
from tasks.feedback import progress
from tasks.runner.context import JobContext
from tasks.runner.repo_settings import LoadedConfig, load_repo_config
from tasks.runner.steps import read_steps

STATUS_MARKER = re.compile(r"<!-- onloop:job-(\d+)-status -->")
VERB_HELP = {
    "rebase": "rebase this pull request onto its base branch",
    "fix": "make this pull request's failing checks pass",
    "review": "review this pull request with linters (and the agent, when one is configured)",
}


def repository(ctx: JobContext) -> Repository:
    """The job's repository through an installation token narrowed to it."""
    return installation_repo(ctx)[1]


def reply(ctx: JobContext, repo: Repository, body: str) -> int:
    """Post (or edit, when the job runs again) this job's one reply comment."""
    assert ctx.job.number is not None
    issue = thread(repo, ctx.job.number)
    ctx.before_write()
    comment = upsert_comment(issue, f"job-{ctx.job.id}", body, ctx.settings.bot_login)
    return int(comment.id)


def help_text(loaded: LoadedConfig, params: CommandParams) -> str:
    lines: list[str] = []
    if params.get("unknown_verb"):
        # the commenter's own word, whatever it holds: a code span it cannot leave
        lines.append(
            f"I don't know the command {inline_code('/agent ' + params['unknown_verb'])}.\n"
        )
    if params.get("refused_verb"):
        lines.append(
            f"`/agent {params['refused_verb']}` is not enabled for this repository "
            "(`commands:` in `.github/onloop.yml` on the default branch).\n"
        )
    lines.append("Commands on this pull request:\n")
    for verb in ALLOWED_COMMANDS:
        if verb in loaded.config.commands:
            lines.append(f"- `/agent {verb}`: {VERB_HELP[verb]}")
    if "fix" in loaded.config.commands:
        lines.append(
            "- `/agent apply`: commit every unresolved `suggestion` block of the reviews in "
            "one commit, in your name, once the checks pass (a review of onloop's own pull "
            "request is followed up by itself)"
        )
    lines += [
        "- `/agent allow`: open a pull request, in your name, that lets setup reach the "
        "hosts it was last refused here (those the organisation permits)",
        "- `/agent status`: show the state of onloop's jobs here",
        "- `/agent cancel`: stop onloop's running jobs here",
        "- `/agent help`: this list",
    ]
    if loaded.error is not None:  # it can quote the file: a code span it cannot leave
        lines.append(
            f"\n`.github/onloop.yml` is invalid at {inline_code(str(loaded.error))}: onloop "
            "does nothing in this repository until it is fixed."
        )
    lines += [f"\n{said}" for said in loaded.ignored()]
    return "\n".join(lines)


def who_asks(ctx: JobContext, repo: Repository, loaded: LoadedConfig) -> gate.Asker:
    """The `policy` step of an answer: the person's role against the trigger permission."""
    with ctx.step("policy") as step:
        who = gate.asker(ctx, repo, loaded)
        step.output = who.says()
    return who


def answered_lately(ctx: JobContext, who: gate.Asker) -> dict[str, Any] | None:
    """The result of a `help` or `status` asked again within a minute by the same person on
    the same thread (not answered again), or None: answer it."""
    if gate.first_time(ctx, f"reply-{ctx.job.kind}", gate.REPLY_SECONDS):
        return None
    return {
        "skipped": f"@{who.login} was answered on this thread less than "
        f"{gate.REPLY_SECONDS} s ago; not answered again"
    }


def run_help(ctx: JobContext) -> dict[str, Any]:
    repo = repository(ctx)
    loaded = load_repo_config(ctx.db, repo)
    who = who_asks(ctx, repo, loaded)
    if not who.permitted:
        gate.refuse_outsider(ctx, repo, who)
    if (skipped := answered_lately(ctx, who)) is not None:
        return skipped
    with ctx.step("reply") as step:
        step.output = f"comment {reply(ctx, repo, help_text(loaded, ctx.params))}"
    return {"comment": step.output}


def _pr_jobs(ctx: JobContext, live_only: bool) -> list[Job]:
    with ctx.db.read() as s:
        query = select(Job).where(
            Job.repo == ctx.job.repo,
            Job.number == ctx.job.number,
            Job.kind.in_(sandboxed(ctx.kinds)),
        )
        if live_only:
            query = query.where(Job.state.in_(LIVE_STATES))
        return list(s.scalars(query.order_by(Job.id.desc()).limit(10)))


def _status_links(repo: Repository, number: int, bot: str | None) -> dict[int, str]:
    """Job id → its status comment's URL, from one look at the PR's comments."""
    found: dict[int, str] = {}
    for comment in thread(repo, number).get_comments():
        m = STATUS_MARKER.search(comment.body or "")
        if m and (bot is None or comment.user.login == bot):
            found[int(m.group(1))] = comment.html_url
    return found


def status_text(jobs: list[Job], urls: dict[int, str]) -> str:
    """A table of the PR's recent jobs, then the steps of the live ones (or the latest)."""
    if not jobs:
        return "onloop has no jobs on this pull request. `/agent help` lists what it can do."
    rows = ["| job | command | state | requested by |", "|---|---|---|---|"]
    for j in jobs:
        state = f"{progress.ICONS.get(j.state, '')} {j.state}".strip()
        if j.state == JobState.RUNNING and j.steps:
            state += f", {progress.position(read_steps(j.steps), [])}".replace("**", "")
        link = f"[#{j.id}]({urls[j.id]})" if j.id in urls else f"#{j.id}"
        rows.append(f"| {link} | {command_of(j.kind)} | {state} | @{j.requested_by} |")
    shown = [j for j in jobs if j.state in LIVE_STATES] or jobs[:1]
    for j in shown[:3]:
        rows += ["", f"**#{j.id}** {command_of(j.kind)}, {j.state}:", ""]
        rows += progress.step_lines(read_steps(j.steps)) or ["- no steps yet"]
        error = (j.result or {}).get("error") or (j.result or {}).get("reason")
        if error:
            # A job's error can hold text onloop did not write (the agent's, a file's, a
            # branch's): one escaped line that mentions nobody.
            rows += ["", f"> {plain(str(error)[:300])}"]
    return "\n".join(rows)


def run_status(ctx: JobContext) -> dict[str, Any]:
    repo = repository(ctx)
    who = who_asks(ctx, repo, load_repo_config(ctx.db, repo))
    if not who.permitted:
        gate.refuse_outsider(ctx, repo, who)
    if (skipped := answered_lately(ctx, who)) is not None:
        return skipped
    jobs = _pr_jobs(ctx, live_only=False)
    assert ctx.job.number is not None
    with ctx.step("reply"):
        urls = _status_links(repo, ctx.job.number, ctx.settings.bot_login) if jobs else {}
        reply(ctx, repo, status_text(jobs, urls))
    return {"jobs": [j.id for j in jobs]}


def run_cancel(ctx: JobContext) -> dict[str, Any]:
    """Cancel the PR's live jobs that the person may cancel: all of them with the trigger
    permission, else only those they asked for (an outsider's are cancelled, but answered
    only as `gate.tell_outsider` allows). A running job sees it within a second or so (its
    cancel watch stops its sandbox, tasks.runner.context.JobContext.cancel_watch) and reports
    itself; for a queued or waiting one, this job brings its status comment and check run up
    to date."""
    repo = repository(ctx)
    who = who_asks(ctx, repo, load_repo_config(ctx.db, repo))
    live = _pr_jobs(ctx, live_only=True)
    mine = [j for j in live if who.permitted or gate.same_person(j, ctx.job)]
    left = [j for j in live if j not in mine]
    cancelled = _cancel(ctx, mine, f"cancelled by @{who.login}")
    result: dict[str, Any] = {"cancelled": [j.id for j in cancelled]}
    if left:
        result["left_running"] = [j.id for j in left]
        result["why_left"] = f"asked by others, and @{who.login} lacks {who.required}"
    if not who.permitted:
        if not cancelled:  # nothing of theirs: refused, like any outsider's command
            gate.refuse_outsider(ctx, repo, who, **result)
        return {**result, **gate.tell_outsider(ctx, repo, who)}
    with ctx.step("reply"):
        reply(ctx, repo, cancel_text(cancelled))
    return result


def _cancel(ctx: JobContext, jobs: list[Job], reason: str) -> list[Job]:
    """Cancel those of `jobs` still live; the ones this call cancelled."""
    cancelled: list[Job] = []
    for job in jobs:
        if cancel_live(ctx.db, job.id, reason):
            cancelled.append(job)
    for job in cancelled:
        if job.state != JobState.RUNNING:
            other = JobContext(
                ctx.settings, ctx.db, job, ctx.github, ctx.meter, steps=read_steps(job.steps)
            )
            feedback.settle(other, JobState.CANCELLED, {"reason": reason})
    return cancelled


def cancel_text(cancelled: list[Job]) -> str:
    """What was cancelled. Someone with the trigger permission may cancel every job, so
    nothing is left running for them; what an outsider left is in their job's result."""
    lines = [
        f"- #{j.id} {command_of(j.kind)} ({j.state})"
        + (": its sandbox stops within seconds" if j.state == JobState.RUNNING else "")
        for j in cancelled
    ]
    return "Cancelled:\n\n" + "\n".join(lines) if cancelled else "Nothing to cancel here."
