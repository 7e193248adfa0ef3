"""What every sandboxed job shares: policy, the person's token, a sandbox, commits and pushes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial

from github import Github
from github.Repository import Repository

import app.github.clients as gh
from app.core.aside import aside
from app.policy.repo_config import RepoConfig
from app.store import audit
from tasks.blueprints import pushes
from tasks.blueprints.budget import check_start
from tasks.blueprints.mirror_fetch import MirrorFetch, Wanted
from tasks.blueprints.pulls import PullRef
from tasks.blueprints.pushes import TRAILER
from tasks.blueprints.start import act_as, check_policy, effective_config, installation_repo
from tasks.blueprints.target_reads import TargetReads
from tasks.blueprints.targets import Target
from tasks.blueprints.work_sandbox import work_sandbox
from tasks.git.guard import check_diff
from tasks.runner.context import JobContext, JobFailed, WaitForAuthorization
from tasks.runner.notices import ask_to_authorize, notice
from tasks.runner.people import NeedsAuthorization, role_of, user_token
from tasks.runner.repo_settings import LoadedConfig
from tasks.sandbox.base import ExecResult, Sandbox
from tasks.sandbox.commits import CommitFailed, collect_commits, commit_all
from tasks.sandbox.workplace import Workplace

__all__ = ["TRAILER", "Work", "act_as", "begin", "installation_repo", "run"]


@dataclass
class Work:
    """A permitted person's job: the repository (read with the installation token), its
    config from the default branch, and the person's own token for every write."""

    ctx: JobContext
    repo: Repository
    install_token: gh.InstallationToken
    loaded: LoadedConfig
    login: str
    token: gh.UserToken
    # The mirror fetched early (`mirror.prefetch`) beside the job's GitHub reads; the
    # sandbox waits for that fetch before its own check of the mirror.
    mirror: MirrorFetch

    @property
    def config(self) -> RepoConfig:
        return self.loaded.config

    @property
    def place(self) -> Workplace:
        return self.ctx.workplace

    @cached_property
    def targets(self) -> TargetReads:
        """This job's push targets, each read once (pushes.push_target)."""
        return TargetReads(partial(pushes.push_target, self), self.repo.full_name)

    @cached_property
    def repo_client(self) -> Github:
        """onloop's own client for this repository (the job's installation token): GraphQL
        calls made as onloop, such as answering and resolving review threads."""
        return self.ctx.github.installation_client(self.install_token)

    @cached_property
    def user_repo(self) -> Repository:
        """The same repository through the person's own token: PRs, pushes, comments."""
        return self.ctx.github.user_client(self.token).get_repo(self.repo.full_name)

    def identity(self) -> dict[str, str]:
        """Author and committer: the person, under GitHub's no-reply address."""
        uid = self.ctx.job.requested_by_id
        email = f"{uid}+{self.login}@users.noreply.github.com" if uid else None
        email = email or f"{self.login}@users.noreply.github.com"
        return {
            "GIT_AUTHOR_NAME": self.login,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": self.login,
            "GIT_COMMITTER_EMAIL": email,
        }

    # A started sandbox with `rev` checked out, removed after: work_sandbox(self, rev, ...).
    sandbox = work_sandbox

    def commit(
        self,
        box: Sandbox,
        subject: str,
        *,
        trailers: Sequence[str] = (),
        bundle_since: str | None = None,
    ) -> bool:
        """Commit everything the job changed in the sandbox, with the trailer that marks
        onloop's own work; False when there was nothing to commit. `bundle_since`: bundle
        the commits since it in the same command, for `collect(bundled=True)`."""
        env = self.identity()
        bot = self.ctx.settings.bot_login or "onloop[bot]"
        lines = [
            f"{TRAILER}: {self.ctx.job.id}",
            *trailers,
            f"Co-authored-by: {bot} <{bot}@users.noreply.github.com>",
        ]
        message = ["-m", subject, "-m", "\n".join(lines)]
        try:
            return commit_all(box, message, env, bundle_since=bundle_since)
        except CommitFailed as exc:
            raise JobFailed(str(exc)) from None

    def collect(self, box: Sandbox, base: str, *, bundled: bool = False) -> str | None:
        """The sandbox's new commits since `base`, now in the mirror; the new tip or None.
        `bundled`: `commit(bundle_since=base)` bundled them already."""
        ref = f"refs/onloop/job-{self.ctx.job.id}"
        return collect_commits(
            box, self.place.cache, self.repo.full_name, base, ref, bundled=bundled
        )

    def branch_lease(self, branch: str, again: str) -> str:
        """What `branch` must still hold when onloop pushes its own branch (pushes.branch_lease)."""
        return pushes.branch_lease(self, branch, again)

    def guard(self, base: str, head: str, *, replay_of: str | None = None) -> list[str]:
        """Why pushing `head` over `base` must not happen (blast-radius rules over the net
        change and every commit, checked in the mirror before any push). `replay_of`: a
        rebase of that head onto `base`, which may only replay its commits."""
        cache, name = self.place.cache, self.repo.full_name
        with cache.lock(name, shared=True):
            found = check_diff(
                cache.mirror_path(name), base, head, self.config, replay_of=replay_of
            )
        detail: dict[str, object] = {"base": base, "head": head}
        if replay_of is not None:
            detail["replay_of"] = replay_of
        audit.record(
            self.ctx.db,
            audit.BLAST_RADIUS,
            repo=name,
            job_id=self.ctx.job.id,
            detail={**detail, "violations": [str(v) for v in found]},
        )
        return [str(v) for v in found]

    def push_target(self, branch: str, head_repo: str | None = None) -> Target:
        """Whether onloop may push to `branch` of `head_repo` (pushes.push_target), read
        once per job; `targets.prefetch` reads it early, beside the work, `targets.renew`
        again."""
        return self.targets.get(branch, head_repo)

    def push(
        self,
        sha: str,
        branch: str,
        *,
        lease: str | None,
        clone_url: str | None = None,
        head_repo: str | None = None,
        keep: tuple[str, str] | None = None,
    ) -> str:
        """Push `sha` to `branch` with the person's token, under `lease` (pushes.push); the
        branch's new head on GitHub (another sha where GitHub made verified commits)."""
        return pushes.push(
            self,
            sha,
            branch,
            lease=lease,
            clone_url=clone_url,
            head_repo=head_repo,
            keep=keep,
        )


def run(
    box: Sandbox,
    cmd: Sequence[str],
    what: str,
    *,
    env: dict[str, str] | None = None,
) -> ExecResult:
    """A git or setup command that must succeed; JobFailed naming `what` otherwise."""
    done = box.exec(list(cmd), env=env)
    if not done.ok:
        raise JobFailed(f"could not {what}: {done.output.strip()[-500:]}")
    return done


def begin(
    ctx: JobContext,
    verb: str,
    found: tuple[gh.InstallationToken, Repository] | None = None,
    pull: PullRef | None = None,
    acting: tuple[str, int | None] | None = None,
    prefetch: Callable[[], Wanted | None] | None = None,
) -> Work:
    """Policy and authorisation before any work; refuses, or waits for the person's OAuth.
    `found` is the job's `installation_repo` and `pull` its pull request, when known already.
    `acting`: the person whose token does the work when it is not the one who asked (a
    review's follow-up is the PR owner's commit): the asker passes the policy, then the job
    acts as them, and waits for their authorisation. `prefetch`: what the job's sandbox will
    want from the mirror, fetched from as soon as both have passed (None: nothing)."""
    install_token, repo = found or installation_repo(ctx)
    mirror = MirrorFetch(
        lambda wanted: ctx.workplace.cache.ensure(
            repo.full_name,
            repo.clone_url,
            install_token,
            sha=wanted.sha,
            refs=wanted.refs,
            also=wanted.also,
        )
    )
    login = ctx.job.requested_by
    if ctx.authorization_expired:
        notice(
            ctx,
            repo,
            "authorize",
            f"@{login} onloop waited for your authorisation and has now stopped. Comment "
            f"`/agent {verb}` again once you have authorised it.",
        )
        raise JobFailed("authorization expired")
    with ctx.step("policy") as step:
        # The person's permission is read beside the config: neither depends on the other.
        asked = aside("policy-role", role_of, repo, login)
        loaded = effective_config(ctx, repo)
        role = check_policy(ctx, repo, loaded, login, pull, role=asked.result())
        budgets = check_start(ctx, loaded.config)
        step.output = f"@{login} is {role}; {loaded.config.trigger_permission} needed"
        step.output += f"; budgets: {budgets or 'none'}"
    if acting is not None:
        act_as(ctx, *acting)
        login = acting[0]
    with ctx.step("authorization"):
        try:
            token = user_token(ctx, login, ctx.job.requested_by_id)
        except NeedsAuthorization as exc:
            if ctx.job.number is None:  # no thread to ask in: say why in the job's record
                raise JobFailed(
                    f"@{login} has not authorised onloop ({exc.reason}), and there is no pull "
                    "request to ask them on; they can authorise at "
                    f"{ctx.settings.public_url.rstrip('/')}/oauth/login"
                ) from None
            ask_to_authorize(ctx, repo, login, exc.reason)
            raise WaitForAuthorization(exc.reason) from None
    # Beside the job's next reads; only once the policy passed and the person's token is at
    # hand: a command from someone without the permission fetches nothing, and a job that
    # waits for an authorisation leaves no fetch running.
    if prefetch is not None and (wanted := prefetch()) is not None:
        mirror.prefetch(wanted)
    return Work(ctx, repo, install_token, loaded, login, token, mirror)
