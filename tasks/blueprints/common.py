"""What every sandboxed job shares: policy, the person's token, a sandbox, commits and pushes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from github.Repository import Repository
from sqlalchemy import update

import app.github as gh
from app.models import Job
from app.repo_config import RepoConfig
from tasks.context import JobContext, JobFailed, WaitForAuthorization
from tasks.notices import ask_to_authorize, notice, refuse
from tasks.people import NeedsAuthorization, permitted, role_of, user_token
from tasks.repo_settings import LoadedConfig, load_repo_config
from tasks.sandbox.base import ExecResult, Sandbox
from tasks.sandbox.job import JobSandbox, collect_commits, job_sandbox
from tasks.workplace import Workplace, workplace

TRAILER = "Onloop-Job"


@dataclass
class Session:
    """A permitted person's job: the repository (read with the installation token), its
    config from the default branch, and the person's own token for every write."""

    ctx: JobContext
    repo: Repository
    install_token: gh.InstallationToken
    loaded: LoadedConfig
    login: str
    token: gh.UserToken
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> RepoConfig:
        return self.loaded.config

    @property
    def place(self) -> Workplace:
        return workplace(self.ctx.settings)

    @cached_property
    def user_repo(self) -> Repository:
        """The same repository through the person's own token: PRs, pushes, comments."""
        return gh.user_client(self.ctx.settings, self.token).get_repo(self.repo.full_name)

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

    @contextlib.contextmanager
    def sandbox(
        self,
        rev: str,
        *,
        branch: str | None = None,
        refs: Sequence[str] = (),
        clone_url: str | None = None,
    ) -> Iterator[JobSandbox]:
        """A started sandbox with `rev` checked out (and the repo's setup done); removed after."""
        place, name = self.place, self.repo.full_name
        with job_sandbox(
            place.backend,
            place.cache,
            job_id=str(self.ctx.job.id),
            repo=name,
            clone_url=clone_url or self.repo.clone_url,
            rev=rev,
            image=self.config.sandbox.image or self.ctx.settings.sandbox_image,
            workspace_root=place.workspaces,
            limits=place.limits(self.config.sandbox.timeout),
            token=self.install_token,
            refs=refs,
            branch=branch,
            setup=self.config.sandbox.setup,
            snapshots=place.snapshots,
            pool=place.pool,
        ) as js:
            yield js

    def commit(self, box: Sandbox, subject: str, body: str = "") -> bool:
        """Commit everything the job changed in the sandbox, with the trailer that marks
        onloop's own work; False when there was nothing to commit."""
        env = self.identity()
        run(box, ["git", "add", "--all", "--", ".", ":(exclude)TASK.md"], "stage the changes")
        staged = box.exec(["git", "diff", "--cached", "--quiet"])
        if staged.exit_code == 0:
            return False
        bot = self.ctx.settings.bot_login or "onloop[bot]"
        trailers = (
            f"{TRAILER}: {self.ctx.job.id}\nCo-authored-by: {bot} <{bot}@users.noreply.github.com>"
        )
        paragraphs = [subject, *([body.strip()] if body.strip() else []), trailers]
        message = [arg for p in paragraphs for arg in ("-m", p)]
        run(box, ["git", "commit", "--quiet", "--no-verify", *message], "commit", env=env)
        return True

    def collect(self, box: Sandbox, base: str) -> str | None:
        """The sandbox's new commits since `base`, now in the mirror; the new tip or None."""
        return collect_commits(
            box, self.place.cache, self.repo.full_name, base, f"refs/onloop/job-{self.ctx.job.id}"
        )

    def push(
        self, sha: str, branch: str, *, lease: str | None, clone_url: str | None = None
    ) -> None:
        """Push `sha` to `branch` with the person's token. `lease` is the sha the branch must
        still have ("" when it must not exist yet). The job's head becomes `sha` first, so
        the `synchronize` our own push causes does not cancel this job as stale."""
        with self.ctx.db.session() as s:
            s.execute(update(Job).where(Job.id == self.ctx.job.id).values(head_sha=sha))
        self.place.cache.push(
            self.repo.full_name,
            clone_url or self.repo.clone_url,
            sha,
            f"refs/heads/{branch}",
            self.token,
            lease=lease,
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


def installation_repo(ctx: JobContext) -> tuple[gh.InstallationToken, Repository]:
    """The job's repository through an installation token narrowed to it (minted once)."""
    if ctx.job.installation_id is None:
        raise JobFailed("the delivery named no installation, so onloop cannot act on it")
    token = gh.installation_token(
        ctx.settings, ctx.job.installation_id, repositories=[ctx.job.repo.split("/", 1)[1]]
    )
    return token, gh.installation_client(ctx.settings, token).get_repo(ctx.job.repo)


def begin(ctx: JobContext, verb: str) -> Session:
    """Policy and authorisation before any work; refuses, or waits for the person's OAuth."""
    install_token, repo = installation_repo(ctx)
    login = ctx.job.requested_by
    if ctx.command.get("authorization_expired"):
        notice(
            ctx,
            repo,
            "authorize",
            f"@{login} onloop waited for your authorisation and has now stopped. Comment "
            f"`/agent {verb}` again once you have authorised it.",
        )
        raise JobFailed("authorization expired")
    with ctx.step("policy") as step:
        loaded = load_repo_config(ctx.db, repo)
        config = loaded.config
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
    return Session(ctx, repo, install_token, loaded, login, token)
