"""campaign_change: a campaign's commands and/or task in one repository, on the campaign's
branch, with a PR opened or updated in the owner's name."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from github.PullRequest import PullRequest

from app.core.kinds import Kind
from app.core.markdown import inline_code
from app.policy.campaign_file import CampaignFile, parse_campaign
from app.policy.repo_config import ConfigError
from app.store import campaigns as store
from app.store.fleet_tables import Campaign, CampaignRepo, CampaignState
from tasks.agent import AgentTask, Quoted
from tasks.blueprints import Step, run_steps
from tasks.blueprints.change import STEPS as CHANGE_STEPS
from tasks.blueprints.change import (
    Change,
    ChangeOutcome,
    configured_agent,
    make_change,
    run_required,
)
from tasks.blueprints.checks import failures, plan
from tasks.blueprints.common import Work, begin, installation_repo
from tasks.blueprints.pushes import branch_lease
from tasks.feedback.campaigns import Line, pr_section, with_section
from tasks.git.process import git
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person
from tasks.sandbox.trust import HeadTrust

TRAILER = "Onloop-Campaign"
NOTHING = "nothing_to_change"  # the job's outcome when the change is empty here
ENDED = "campaign_ended"  # cancelled or closed while the job ran: nothing pushed
NO_AGENT = (
    "the campaign has a `task:` for the coding agent, but onloop has no agent configured "
    "(ONLOOP_AGENT); an operator can configure one, or the campaign can use `run:` only"
)


@dataclass
class CampaignChange:
    work: Work
    campaign: Campaign
    spec: CampaignFile
    base_sha: str
    lease: str = ""
    change: Change | None = None
    pushed: bool = False
    pr: PullRequest | None = None


def _plan(commands: list[str], change: Change) -> str | None:
    """The repository's own checks validate the change; the campaign's commands are its fix."""
    change.plan = plan(change.box, change.work.config)
    change.plan.fix = list(commands)
    return f"commands: {change.plan.fix}; validate: {change.plan.validation}"


def _commands(change: Change) -> str | None:
    """The campaign's `run:` commands, in the sandbox; one that fails stops the change."""
    change.fixes, said = run_required(change, change.plan.fix)
    return said


def _steps(commands: list[str]) -> list[Step[Change]]:
    """The change's steps, with the campaign's commands in place of the repository's fixers."""
    by_name = {s.name: s for s in CHANGE_STEPS}
    return [
        Step("plan", partial(_plan, commands)),
        by_name["agent"],
        Step("commands", _commands),
        by_name["validate"],
        by_name["commit"],
    ]


def _same_tree(state: CampaignChange, sha: str) -> bool:
    """The branch already holds exactly this change (an earlier run's): nothing to push."""
    if not state.lease:
        return False
    mirror = state.work.place.cache.mirror_path(state.work.repo.full_name)
    trees = [
        git(["rev-parse", f"{rev}^{{tree}}"], mirror).stdout.strip() for rev in (sha, state.lease)
    ]
    return trees[0] == trees[1]


def _still_wanted(state: CampaignChange) -> None:
    """The campaign was cancelled or closed while this job ran: it pushes and opens nothing
    (read again before each write; a pause lets running jobs finish)."""
    now = store.get(state.work.ctx.db, state.campaign.id)
    if now is None or now.state in (CampaignState.CANCELLED, CampaignState.CLOSED):
        ended = now.state if now else "deleted"
        raise JobFailed(
            f"the campaign was {ended} while this job ran, so it pushed and opened nothing",
            outcome=ENDED,
        )


def _push(state: CampaignChange) -> str | None:
    change = state.change
    if change is None or change.outcome != ChangeOutcome.READY or change.new_sha is None:
        return None
    _still_wanted(state)
    if _same_tree(state, change.new_sha):
        change.new_sha = state.lease
        return f"{state.spec.branch_name} already holds this change"
    change.new_sha = state.work.push(change.new_sha, state.spec.branch_name, lease=state.lease)
    state.pushed = True
    return f"pushed {change.new_sha[:12]} to {state.spec.branch_name}"


def _pr(state: CampaignChange) -> str | None:
    change = state.change
    if change is None or change.outcome != ChangeOutcome.READY:
        return None
    _still_wanted(state)
    state.pr = as_person(state.work, lambda: open_or_update(state))
    return f"#{state.pr.number}"


def sibling_lines(rows: list[CampaignRepo], repo: str) -> list[Line]:
    return [Line(r.repo, r.state, r.pr_number) for r in rows if r.repo != repo]


def open_or_update(state: CampaignChange) -> PullRequest:
    """The campaign's PR for the branch, opened with the owner's token, or, when one is open
    already (a re-run pushes to the same branch and keeps its PR), its title and campaign
    section brought up to date; what people wrote in its body stays."""
    work, spec, campaign = state.work, state.spec, state.campaign
    repo_name = work.repo.full_name
    title = spec.render(spec.title, repo_name)[:240]
    issue = (campaign.issue_repo, campaign.issue_number) if campaign.issue_number else None
    lines = sibling_lines(store.repos(work.ctx.db, campaign.id), repo_name)
    section = pr_section(
        campaign.id, spec.name, work.ctx.settings.github_url, issue, lines, repo_name
    )
    owner = repo_name.split("/")[0]
    repo = work.user_repo
    existing = list(repo.get_pulls(state="open", head=f"{owner}:{spec.branch_name}"))
    work.ctx.before_write()
    if existing:
        pr = existing[0]
        body = with_section(pr.body or spec.render(spec.body, repo_name), campaign.id, section)
        if (pr.title, pr.body or "") != (title, body):
            pr.edit(title=title, body=body)
        return pr
    body = with_section(spec.render(spec.body, repo_name), campaign.id, section)
    pr = repo.create_pull(
        base=work.repo.default_branch, head=spec.branch_name, title=title, body=body
    )
    work.ctx.meter.inc("pull_requests_opened", kind=Kind.CAMPAIGN_CHANGE)
    return pr


AFTER: list[Step[CampaignChange]] = [Step("push", _push), Step("pr", _pr)]
PLAN = [
    "policy",
    "authorization",
    "branch",
    "plan",
    "agent",
    "commands",
    "validate",
    "commit",
    *(s.name for s in AFTER),
]


def load(ctx: JobContext) -> tuple[Campaign, CampaignFile]:
    campaign_id = ctx.params.get("campaign_id")
    campaign = store.get(ctx.db, int(campaign_id)) if campaign_id is not None else None
    if campaign is None:
        raise JobFailed("the campaign of this job is gone", outcome="no_campaign")
    if campaign.state == CampaignState.AWAITING_OWNER:  # its file changed after this job queued
        raise JobFailed(
            f"the campaign file changed: @{campaign.owner} must start it again on its page",
            outcome="awaiting_owner",
        )
    try:
        return campaign, parse_campaign(campaign.text)
    except ConfigError as exc:  # saved valid: only a hand-edited row gets here
        raise JobFailed(f"the campaign file is invalid: {inline_code(str(exc))}") from None


def run_campaign_change(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = list(PLAN)
    campaign, spec = load(ctx)
    work = begin(ctx, "campaign", installation_repo(ctx))
    task = (spec.change.task or "").strip()
    if task and configured_agent(ctx) is None:
        raise JobFailed(NO_AGENT, outcome="no_agent")
    base_sha = work.repo.get_branch(work.repo.default_branch).commit.sha
    ctx.head_sha = base_sha
    state = CampaignChange(work, campaign, spec, base_sha)
    mark = f"{TRAILER}: {campaign.id}"
    with ctx.step("branch") as record:
        again = "run the campaign again"
        state.lease = branch_lease(work, spec.branch_name, again, mark=mark)
        record.output = f"updating {state.lease[:12]}" if state.lease else "new branch"
    quoted = (Quoted(f"the task of campaign {spec.name}, by @{spec.owner}", task, "markdown"),)
    state.change = make_change(
        work,
        AgentTask(Kind.CAMPAIGN_CHANGE, f"Campaign {spec.name}", "", quoted=quoted if task else ()),
        rev=base_sha,
        branch=spec.branch_name,
        trust=HeadTrust.TRUSTED,  # the default branch's tip
        subject=spec.render(spec.title, work.repo.full_name)[:72],
        trailers=[mark],
        agent=bool(task),
        steps=_steps(list(spec.change.run)),
    )
    run_steps(ctx, AFTER, state)
    change = state.change
    result: dict[str, Any] = {**change.result(), "campaign_id": campaign.id, "pushed": state.pushed}
    if change.outcome == ChangeOutcome.NO_CHANGE:
        return {**result, "outcome": NOTHING}
    if change.outcome != ChangeOutcome.READY or state.pr is None:
        outcome = change.outcome or ChangeOutcome.NO_CHANGE
        said = change.report(outcome)
        if change.fixes and not all(o.ok for o in change.fixes):
            said = f"the campaign's commands failed:\n\n{failures(change.fixes)}"
        raise JobFailed(said, **{**result, "outcome": outcome})
    return {
        **result,
        "outcome": ChangeOutcome.PR,
        "pr": state.pr.number,
        "pull_request_url": state.pr.html_url,
    }
