"""allow: `/agent allow` opens the commenter's own PR adding to `sandbox.egress` the hosts the
thread's last setup was refused, as far as the organisation file permits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from github.PullRequest import PullRequest

from app.core.markdown import inline_code
from app.policy.config_edit import Edit, EditError
from app.policy.egress import describe
from app.policy.egress_proposal import CONFIG_PATH, Proposal, edit_for
from tasks.blueprints import Step, run_steps
from tasks.blueprints.common import TRAILER, Work, begin
from tasks.blueprints.refusals import last_refusals, proposal_for
from tasks.git.commit_file import commit_file, read_file
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.people import as_person

AGAIN = "comment `/agent allow` again"
BRANCH_PREFIX = "onloop/allow-"


@dataclass
class Allow:
    work: Work
    base_sha: str = ""
    proposal: Proposal = field(default_factory=Proposal)
    edit: Edit | None = None
    sha: str = ""
    branch: str = ""
    pr: PullRequest | None = None
    existing: bool = False  # `pr` is an earlier `/agent allow`'s, still open


def _operator(proposal: Proposal) -> str:
    if not proposal.operator:
        return ""
    names = ", ".join(inline_code(t) for t in proposal.operator)
    return (
        f" The organisation file does not let a repository allow {names}: onloop's operator "
        "must allow them in the organisation file (`sandbox.egress` in ONLOOP_CONFIG_FILE)."
    )


def _proposal(state: Allow) -> str:
    """The proposal from the database: the thread's last setup's refusals, the organisation
    file as it is now and the config file at the default branch's tip."""
    work, ctx = state.work, state.work.ctx
    assert ctx.job.number is not None
    last = last_refusals(ctx.db, ctx.job.repo, ctx.job.number)
    if last is None or not last.refused:
        raise JobFailed(
            "no job on this thread has been refused hosts in setup, so there is nothing to "
            "allow; `/agent allow` works after a job whose status says setup was refused hosts",
            outcome="nothing_refused",
        )
    name = work.repo.full_name
    state.base_sha = work.repo.get_branch(work.repo.default_branch).commit.sha
    mirror = work.place.cache.ensure(
        name, work.repo.clone_url, work.install_token, sha=state.base_sha
    )
    text = read_file(mirror, state.base_sha, CONFIG_PATH)
    state.proposal = proposal_for(ctx, text, last.refused)
    if not state.proposal.entries:
        raise JobFailed(
            f"nothing that job #{last.job_id}'s setup was refused can be allowed by "
            f"`{CONFIG_PATH}` (it allows them already, or the organisation does not "
            f"permit them).{_operator(state.proposal)}",
            outcome="nothing_to_allow",
        )
    try:
        state.edit = edit_for(state.proposal, text or "")
    except EditError as exc:
        entries = ", ".join(inline_code(describe(e)) for e in state.proposal.entries)
        raise JobFailed(
            f"onloop cannot edit `{CONFIG_PATH}` ({exc}); add {entries} to `sandbox.egress` "
            "by hand",
            outcome="cannot_edit",
        ) from None
    allowed = ", ".join(state.proposal.allowed)
    state.pr = _open_already(state)
    state.existing = state.pr is not None
    if state.pr is not None:
        return f"from job #{last.job_id}: allow {allowed}; proposed already in #{state.pr.number}"
    return f"from job #{last.job_id}: allow {allowed}; {len(state.edit.added)} line(s)"


def title_of(proposal: Proposal) -> str:
    return f"Allow setup to reach {', '.join(proposal.allowed)}"[:240]


def _open_already(state: Allow) -> PullRequest | None:
    """An open PR of an earlier `/agent allow` (its own `onloop/allow-*` branch in this
    repository) that proposes the same hosts: asked again, onloop points at it."""
    work, title = state.work, title_of(state.proposal)
    for pr in work.repo.get_pulls(state="open", base=work.repo.default_branch):
        same_repo = pr.head.repo is not None and pr.head.repo.full_name == work.repo.full_name
        if same_repo and pr.head.ref.startswith(BRANCH_PREFIX) and pr.title == title:
            return pr
    return None


def _commit(state: Allow) -> str | None:
    work, edit = state.work, state.edit
    assert edit is not None
    if state.pr is not None:
        return None
    ctx, name = work.ctx, work.repo.full_name
    allowed = ", ".join(state.proposal.allowed)
    message = (
        f"Allow setup to reach {allowed}"[:72]
        + f"\n\nAdds {', '.join(describe(e) for e in state.proposal.entries)} to sandbox.egress"
        + f" in {CONFIG_PATH}, as asked with /agent allow.\n\n{TRAILER}: {ctx.job.id}\n"
    )
    with work.place.cache.lock(name):
        mirror = work.place.cache.mirror_path(name)
        state.sha = commit_file(
            mirror, state.base_sha, CONFIG_PATH, edit.text, message, work.identity()
        )
    violations = work.guard(state.base_sha, state.sha)
    if violations:
        rules = "\n".join(f"- {v}" for v in violations)
        raise JobFailed(f"onloop refused to push the change:\n\n{rules}", outcome="refused")
    return f"committed {state.sha[:12]}"


def _push(state: Allow) -> str | None:
    work = state.work
    if state.pr is not None:
        state.branch = state.pr.head.ref
        return None
    state.branch = f"{BRANCH_PREFIX}{work.ctx.job.id}"
    lease = work.branch_lease(state.branch, AGAIN)
    if lease == state.sha:
        return f"{state.branch} holds {state.sha[:12]} already"
    state.sha = work.push(state.sha, state.branch, lease=lease)
    return f"pushed {state.sha[:12]} to {state.branch}"


def _open_pr(state: Allow) -> str:
    if state.pr is not None:
        return f"#{state.pr.number} (open already)"
    state.pr = as_person(state.work, lambda: _open_or_find(state))
    return f"#{state.pr.number}"


def _open_or_find(state: Allow) -> PullRequest:
    """The PR for the branch, opened with the person's own token; an earlier run's is kept."""
    work = state.work
    owner = work.repo.full_name.split("/")[0]
    repo = work.user_repo
    existing = list(repo.get_pulls(state="open", head=f"{owner}:{state.branch}"))
    if existing:
        return existing[0]
    number = work.ctx.job.number
    body = (
        f"Lets `sandbox.setup` reach {', '.join(inline_code(a) for a in state.proposal.allowed)}"
        f", which it was refused (see #{number}). The organisation file permits "
        f"{'it' if len(state.proposal.allowed) == 1 else 'them'}; this adds "
        f"{', '.join(inline_code(describe(e)) for e in state.proposal.entries)} to "
        f"`sandbox.egress` in `{CONFIG_PATH}`. Asked for by @{work.login} with `/agent allow`."
    )
    pr = repo.create_pull(
        base=work.repo.default_branch,
        head=state.branch,
        title=title_of(state.proposal),
        body=body,
    )
    work.ctx.meter.inc("pull_requests_opened", kind="allow")
    return pr


STEPS: list[Step[Allow]] = [
    Step("proposal", _proposal),
    Step("commit", _commit),
    Step("push", _push),
    Step("pr", _open_pr),
]


def run_allow(ctx: JobContext) -> dict[str, Any]:
    ctx.plan = ["policy", "authorization", *(s.name for s in STEPS)]
    if ctx.job.number is None:
        raise JobFailed("`/agent allow` works on the thread where setup was refused hosts")
    state = Allow(begin(ctx, "allow"))
    run_steps(ctx, STEPS, state)
    assert state.pr is not None
    return {
        "outcome": "already_open" if state.existing else "pr",
        "pr": state.pr.number,
        "pull_request_url": state.pr.html_url,
        "allowed": list(state.proposal.allowed),
        "entries": [describe(e) for e in state.proposal.entries],
        "branch": state.branch,
    }
