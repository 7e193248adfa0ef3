"""Before a job works: its repository (narrowed token), the effective config, the policy."""

from __future__ import annotations

import contextlib

from github.Repository import Repository
from sqlalchemy import update

import app.github.clients as gh
from app.core.kinds import Kind
from app.core.markdown import inline_code
from app.github.comments import thread, upsert_comment
from app.policy import governance
from app.policy.org_config import raised_budgets
from app.policy.repo_config import ConfigError
from app.store.models import Job
from tasks.blueprints.gate import Asker, refuse_outsider
from tasks.blueprints.pulls import PullRef
from tasks.runner.context import JobContext, JobFailed
from tasks.runner.notices import notice
from tasks.runner.people import role_of
from tasks.runner.repo_settings import CONFIG_PATH, LoadedConfig, load_repo_config

# Refusals of automatic fixes that nobody asked for: said in the job's record, not in a comment.
QUIET_RULES = ("auto_fix_ci", "fork.automatic", "max_ci_fix_attempts")
# The marker of the comment about `.github/onloop.yml` problems: one per thread, edited in place.
CONFIG_COMMENT = "config"


def installation_repo(ctx: JobContext) -> tuple[gh.InstallationToken, Repository]:
    """The job's repository through an installation token minted once for this job, narrowed
    to this one repository and to the permissions its kind needs."""
    if ctx.job.installation_id is None:
        raise JobFailed("the delivery named no installation, so onloop cannot act on it")
    token = ctx.github.installation_token(
        ctx.job.installation_id,
        repositories=[ctx.job.repo.split("/", 1)[1]],
        permissions=governance.token_permissions(ctx.job.kind, ctx.kinds),
    )
    return token, ctx.github.installation_client(token).get_repo(ctx.job.repo)


def act_as(ctx: JobContext, login: str, user_id: int | None) -> None:
    """Make `login` the job's acting person (automatic CI fixes act as the PR's author), so
    that their authorisation resumes it."""
    ctx.job.requested_by, ctx.job.requested_by_id = login, user_id
    with ctx.db.transaction() as s:
        s.execute(
            update(Job)
            .where(Job.id == ctx.job.id)
            .values(requested_by=login, requested_by_id=user_id)
        )


def effective_config(ctx: JobContext, repo: Repository) -> LoadedConfig:
    """`.github/onloop.yml` from the default branch, narrowed by the organisation's file
    (or the built-in defaults). An invalid file refuses the job: falling back to defaults
    would drop the repository's stricter settings (`trigger_permission`, `commands`,
    `paths.deny`) on one typo."""
    loaded = load_repo_config(ctx.db, repo)
    with contextlib.suppress(ConfigError):  # a bad organisation file is refused below
        loaded.raised = raised_budgets(ctx.org_config.load(ctx.settings), loaded.config)
    report_config_problems(ctx, repo, loaded)
    if loaded.error is not None:
        raise JobFailed(
            f"`{CONFIG_PATH}` on the default branch is invalid "
            f"({inline_code(str(loaded.error))}); onloop does "
            "nothing in this repository until it is fixed",
            rule="config",
        )
    try:
        loaded.config = ctx.org_config.effective(ctx.settings, loaded.config)
    except ConfigError as exc:
        raise JobFailed(
            f"the organisation's onloop config (ONLOOP_CONFIG_FILE) is not usable: {exc}; "
            "ask the operator to fix it (`onloop doctor` checks it)",
            rule="org_config",
        ) from None
    return loaded


def report_config_problems(ctx: JobContext, repo: Repository, loaded: LoadedConfig) -> None:
    """A bad `.github/onloop.yml`, unknown keys or keys only the organisation file sets: one
    comment per thread, found again by its marker and edited in place, kept apart from the
    job's status so that it is not edited away."""
    text = config_problems(loaded)
    if text and ctx.job.number is not None:
        issue = thread(repo, ctx.job.number)
        upsert_comment(issue, CONFIG_COMMENT, text, ctx.settings.bot_login)


def config_problems(loaded: LoadedConfig) -> str:
    """What is wrong with the file (the line that is wrong, the keys with no effect), or ''.
    The file's text can appear in the error: it is a code span it cannot leave."""
    problems = []
    if loaded.error is not None:
        problems.append(
            f"`{CONFIG_PATH}` is invalid ({inline_code(str(loaded.error))}), so onloop will do "
            "nothing in this repository until it is fixed."
        )
    problems += loaded.ignored()
    return " ".join(problems) + " It is read from the default branch." if problems else ""


def check_policy(
    ctx: JobContext,
    repo: Repository,
    loaded: LoadedConfig,
    login: str,
    pull: PullRef | None = None,
    role: str | None = None,
) -> str:
    """The person's role, once every policy rule allows the job; otherwise one polite notice
    (none for automatic fixes nobody asked for) and JobFailed naming the rule. A person below
    the trigger permission gets that notice once per thread and day, whatever the rule
    (`gate.refuse_outsider`), and is refused in silence after it. `role`: the person's, when
    read already (`role_of`)."""
    role = role if role is not None else role_of(repo, login)
    automatic = bool(ctx.params.get("automatic"))
    attempts = 0
    head = pull.head_sha if pull is not None else ctx.command.head_sha
    if automatic and ctx.job.kind == Kind.FIX_CI and head:
        attempts = governance.ci_fix_attempts(
            ctx.db, ctx.job.repo, ctx.job.number, head, job_id=ctx.job.id
        )
    request = governance.Request(
        kind=ctx.job.kind,
        repo=repo.full_name,
        requested_by=login,
        role=role,
        automatic=automatic,
        fork=pull is not None and pull.fork,
        maintainer_can_modify=pull is not None and pull.maintainer_can_modify,
        ci_fix_attempts=attempts,
    )
    verdict = governance.check(
        ctx.db,
        request,
        loaded.config,
        installation_id=ctx.job.installation_id,
        job_id=ctx.job.id,
        kinds=ctx.kinds,
    )
    if not verdict.allowed:
        # A review asked for nothing by name: its refusals are said nowhere but the record.
        implicit = bool(ctx.params.get("implicit"))
        quiet = (automatic and verdict.rule in QUIET_RULES) or implicit
        who = Asker(login, role, loaded.config.trigger_permission)
        if not who.permitted and not quiet:  # an outsider: one notice a day, then silence
            message = ""
            if verdict.rule == "trigger_permission":
                message = (
                    f"Sorry @{login}: {verdict.message} Ask a maintainer to run it, or to "
                    "change `trigger_permission` in `.github/onloop.yml`."
                )
            refuse_outsider(ctx, repo, who, message)
        if not quiet:
            notice(ctx, repo, "refused", f"Sorry @{login}: {verdict.message}")
        # `quiet`: no status comment either (tasks.feedback.listeners); the record says why.
        said: dict[str, object] = {"quiet": True, "reason": verdict.message} if quiet else {}
        if verdict.rule == "max_ci_fix_attempts":
            said["attempts"] = attempts
        raise JobFailed("refused", rule=verdict.rule, role=role, **said)
    return role
