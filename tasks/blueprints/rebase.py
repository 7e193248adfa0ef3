"""rebase_pr: rebase a PR's head onto its base tip in the sandbox, push with the person's token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from github.PullRequest import PullRequest
from github.Repository import Repository
from sqlalchemy import update

import app.github as gh
from app.models import Job
from tasks.blueprints import Step, run_steps
from tasks.comments import details, upsert_comment
from tasks.context import JobContext, JobFailed, WaitForAuthorization
from tasks.notices import ask_to_authorize, notice, refuse
from tasks.people import NeedsAuthorization, permitted, role_of, user_token
from tasks.replies import repository
from tasks.repo_settings import load_repo_config
from tasks.sandbox.job import collect_commits, job_sandbox
from tasks.workplace import workplace


@dataclass
class Rebase:
    ctx: JobContext
    repo: Repository
    pr: PullRequest
    token: gh.UserToken
    install_token: gh.InstallationToken
    base_sha: str = ""
    head_sha: str = ""
    new_sha: str | None = None
    conflicts: list[str] = field(default_factory=list)
    patch: str = ""
    outcome: str = ""


def _identity(login: str, user_id: int | None) -> dict[str, str]:
    email = (
        f"{user_id}+{login}@users.noreply.github.com"
        if user_id
        else f"{login}@users.noreply.github.com"
    )
    return {"GIT_COMMITTER_NAME": login, "GIT_COMMITTER_EMAIL": email}


def _rebase_in_sandbox(state: Rebase) -> str | None:
    ctx, place = state.ctx, workplace(state.ctx.settings)
    config = load_repo_config(ctx.db, state.repo).config
    name = state.repo.full_name
    place.cache.ensure(name, state.repo.clone_url, state.install_token, sha=state.base_sha)
    fork = state.pr.head.repo is None or state.pr.head.repo.full_name != name
    refs = [f"refs/pull/{state.pr.number}/head"] if fork else []
    env = _identity(ctx.job.requested_by, ctx.job.requested_by_id)
    with job_sandbox(
        place.backend,
        place.cache,
        job_id=str(ctx.job.id),
        repo=name,
        clone_url=state.repo.clone_url,
        rev=state.head_sha,
        image=config.sandbox.image or ctx.settings.sandbox_image,
        workspace_root=place.workspaces,
        limits=place.limits(config.sandbox.timeout),
        token=state.install_token,
        refs=refs,
        branch=state.pr.head.ref,
    ) as js:
        box = js.sandbox
        git = ["git", "-c", "rerere.enabled=true", "-c", "core.editor=true"]
        done = box.exec([*git, "rebase", "--no-autosquash", state.base_sha], env=env)
        if not done.ok:
            listed = box.exec(["git", "diff", "--name-only", "--diff-filter=U"])
            state.conflicts = sorted(set(listed.stdout.split()))
            box.exec(["git", "rebase", "--abort"])
            # Conflicts that are only about white space are safe to settle by ignoring it.
            done = box.exec(
                [*git, "rebase", "--no-autosquash", "-X", "ignore-space-change", state.base_sha],
                env=env,
            )
            if not done.ok:
                box.exec(["git", "rebase", "--abort"])
                state.outcome = "conflicts"
                return "conflicts: " + ", ".join(state.conflicts)
        state.conflicts = []
        state.new_sha = collect_commits(
            box, place.cache, name, state.base_sha, f"refs/onloop/job-{ctx.job.id}"
        )
        if fork and state.new_sha and not state.pr.maintainer_can_modify:
            patch = box.exec(["git", "format-patch", "--stdout", f"{state.base_sha}..HEAD"])
            state.patch = patch.stdout
    return (
        f"rebased onto {state.base_sha[:12]}: {state.head_sha[:12]} -> {(state.new_sha or '')[:12]}"
    )


def _push(state: Rebase) -> str | None:
    if state.outcome == "conflicts":
        return "nothing pushed: conflicts"
    if not state.new_sha or state.new_sha == state.head_sha:
        state.outcome = "up_to_date"
        return "already up to date"
    if state.patch:
        state.outcome = "patch"
        return "fork without maintainer_can_modify: patch commented"
    head_repo = state.pr.head.repo
    assert head_repo is not None
    place = workplace(state.ctx.settings)
    # Our own push makes GitHub send `synchronize` for the new head: name it first, so that
    # the delivery does not cancel this job as stale.
    with state.ctx.db.session() as s:
        s.execute(update(Job).where(Job.id == state.ctx.job.id).values(head_sha=state.new_sha))
    place.cache.push(
        state.repo.full_name,
        head_repo.clone_url,
        state.new_sha,
        f"refs/heads/{state.pr.head.ref}",
        state.token,
        lease=state.head_sha,
    )
    state.outcome = "pushed"
    return f"pushed {state.new_sha[:12]} with --force-with-lease={state.head_sha[:12]}"


def _report(state: Rebase) -> str | None:
    head, base = state.pr.head.ref, state.pr.base.ref
    if state.outcome == "pushed":
        body = (
            f"Rebased `{head}` onto `{base}` ({state.head_sha[:7]} → {(state.new_sha or '')[:7]})."
        )
    elif state.outcome == "up_to_date":
        body = f"`{head}` is already based on the tip of `{base}`; nothing to do."
    elif state.outcome == "patch":
        body = (
            f"`{head}` lives in a fork that does not allow edits from maintainers, so onloop did "
            "not push. Apply this patch there (`git am`), or tick *Allow edits by "
            "maintainers*.\n\n" + details("patch", state.patch, limit=60000)
        )
    else:
        files = "\n".join(f"- `{f}`" for f in state.conflicts) or "- (git listed none)"
        body = (
            f"`{head}` does not rebase cleanly onto `{base}`; the branch is untouched. "
            f"Conflicting files:\n\n{files}\n\nTo resolve them locally:\n\n```sh\n"
            f"git fetch origin\ngit checkout {head}\ngit rebase origin/{base}\n"
            "# fix the files, git add them, then: git rebase --continue\n"
            "git push --force-with-lease\n```"
        )
    issue = gh.user_client(state.ctx.settings, state.token).get_repo(state.repo.full_name)
    upsert_comment(
        issue.get_issue(state.pr.number),
        f"job-{state.ctx.job.id}",
        body,
        state.ctx.job.requested_by,
    )
    return state.outcome


STEPS: list[Step[Rebase]] = [
    Step("rebase", _rebase_in_sandbox),
    Step("push", _push),
    Step("report", _report),
]


def run_rebase(ctx: JobContext) -> dict[str, Any]:
    repo = repository(ctx)
    login = ctx.job.requested_by
    if ctx.command.get("authorization_expired"):
        notice(
            ctx,
            repo,
            "authorize",
            f"@{login} onloop waited for your authorisation and has now stopped. Comment "
            f"`/agent {ctx.params.get('verb', 'rebase')}` again once you have authorised it.",
        )
        raise JobFailed("authorization expired")
    with ctx.step("policy") as step:
        config = load_repo_config(ctx.db, repo).config
        role = role_of(repo, login)
        step["output"] = f"@{login} is {role}; {config.trigger_permission} needed"
        if not permitted(role, config.trigger_permission):
            refuse(ctx, repo, login, role, config.trigger_permission)
            raise JobFailed("refused", role=role)
    with ctx.step("authorization"):
        try:
            token = user_token(ctx, login, ctx.job.requested_by_id)
        except NeedsAuthorization as exc:
            ask_to_authorize(ctx, repo, login, exc.reason)
            raise WaitForAuthorization(exc.reason) from None
    assert ctx.job.number is not None and ctx.job.installation_id is not None
    pr = repo.get_pull(ctx.job.number)
    state = Rebase(
        ctx,
        repo,
        pr,
        token,
        gh.installation_token(ctx.settings, ctx.job.installation_id, repositories=[repo.name]),
        base_sha=repo.get_branch(pr.base.ref).commit.sha,
        head_sha=pr.head.sha,
    )
    with ctx.db.session() as s:
        s.execute(update(Job).where(Job.id == ctx.job.id).values(head_sha=state.head_sha))
    run_steps(ctx, STEPS, state)
    result = {"outcome": state.outcome, "old": state.head_sha, "new": state.new_sha}
    if state.outcome == "conflicts":
        raise JobFailed("conflicts", conflicts=state.conflicts, **result)
    return result
