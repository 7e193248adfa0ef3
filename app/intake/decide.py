"""`decide(event, repo_config)`: the pure step that turns a delivery into a command or nothing."""

from __future__ import annotations

from enum import StrEnum
from typing import TypedDict

from app.core.kinds import KINDS, Kind, Kinds, verbs
from app.intake.commands import (
    CancelStale,
    Command,
    CommandParams,
    InstallationChange,
    RevokeAuthorization,
    issue_digest,
    trigger_key,
)
from app.intake.events import Event
from app.intake.payloads import Repository, Run, User
from app.intake.routing import Router
from app.policy.repo_config import RepoConfig

Action = Command | CancelStale | InstallationChange | RevokeAuthorization


class Ignored(StrEnum):
    """Why a delivery makes no job: its outcome, as recorded and as answered."""

    UNROUTED = "ignored: event not handled"
    BOT_SENDER = "ignored: sender is a bot"
    OTHER_LABEL = "ignored: not the fix label"
    PULL_REQUEST_LABEL = "ignored: label on a pull request"
    NOT_A_COMMAND = "ignored: comment is not an /agent command"
    NOT_ON_PR = "ignored: /agent command on an issue, not a pull request"
    NOT_FAILURE = "ignored: conclusion is not failure"
    AUTO_FIX_OFF = "ignored: auto_fix_ci is off for this repository"
    NO_MATCHING_PR = "ignored: no pull request has this head"
    NO_REPOSITORY = "ignored: payload names no repository"
    NO_NUMBER = "ignored: payload names no issue or pull request number"
    NO_INSTALLATION = "ignored: payload names no installation"
    NO_SENDER = "ignored: payload names no sender"
    CLOSED = "ignored: issue or pull request is closed"
    OWN_CHECKS = "ignored: onloop's own check suite"
    NOT_A_REQUEST = "ignored: an approving or dismissed review asks for nothing"
    OUTSIDER_REVIEW = "ignored: review by someone without a role in the repository"
    REVIEWS_OFF = "ignored: `fix` is not in this repository's `commands`"
    IN_REVIEW = "ignored: an /agent line in a review's own comment (the review itself asks)"
    # Found by `record`, not `explain`: no token can be minted for such an installation.
    UNINSTALLED = "ignored: onloop was uninstalled from this account"
    SUSPENDED = "ignored: onloop's installation is suspended"
    # Found by `record`, which has a clock (app.intake.freshness): a replayed body, or one
    # delivered after ONLOOP_MAX_EVENT_AGE.
    STALE_EVENT = "ignored: the comment or label is older than ONLOOP_MAX_EVENT_AGE"
    # Found by `record`: the same comment or label under another GUID (a second hook, a
    # replayed body) started its work already; answered like a duplicate.
    REPEATED_TRIGGER = "ignored: this comment or label already started a job"
    # `record`'s answer to a GUID it has recorded before.
    DUPLICATE = "duplicate delivery"


router: Router[Action | Ignored] = Router()


def _is_bot(user: User) -> bool:
    return user.get("type") == "Bot" or user.get("login", "").endswith("[bot]")


class _Base(TypedDict):
    """The fields every Command from an event has."""

    repo: str
    repo_id: int | None
    installation_id: int | None
    requested_by: str
    requested_by_id: int | None


def _base(event: Event) -> _Base:
    sender = event.sender
    return _Base(
        repo=event.repo or "",  # `explain` ignores events that name no repository
        repo_id=event.payload.get("repository", {}).get("id"),
        installation_id=event.installation_id,
        requested_by=sender.get("login", ""),
        requested_by_id=sender.get("id"),
    )


@router.register("issues", "labeled")
def _issue_labeled(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    issue = event.payload.get("issue", {})
    if event.payload.get("label", {}).get("name") != config.fix_label:
        return Ignored.OTHER_LABEL
    if "pull_request" in issue:
        return Ignored.PULL_REQUEST_LABEL
    if issue.get("state") == "closed":
        return Ignored.CLOSED
    number = issue.get("number")
    if number is None:
        return Ignored.NO_NUMBER
    # The payload's issue is the issue as it read when it was labelled: the job works on that
    # text or on none (tasks/blueprints/fix_issue.py compares the digest).
    params: CommandParams = {
        "issue_updated_at": issue.get("updated_at", ""),
        "issue_sha256": issue_digest(issue.get("title"), issue.get("body")),
    }
    base = _base(event)
    labelled_at = issue.get("updated_at", "")
    trigger = trigger_key(
        "label", base["repo"], base["repo_id"], number, config.fix_label, labelled_at
    )
    return Command(kind=Kind.FIX_ISSUE, numbers=(number,), params=params, trigger=trigger, **base)


def parse_command(body: str) -> tuple[str, str] | None:
    """`/agent <verb> [args]` on the comment's first non-empty line → (verb, args)."""
    for line in body.strip().splitlines()[:1]:
        words = line.strip().split(maxsplit=2)
        if not words or words[0].lower() != "/agent":
            return None
        verb = words[1].lower() if len(words) > 1 else "help"
        return verb, (words[2] if len(words) > 2 else "")
    return None


@router.register("issue_comment", "created")
def _comment_created(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    issue = event.payload.get("issue", {})
    comment = event.payload.get("comment", {})
    if _is_bot(comment.get("user", {})):
        return Ignored.BOT_SENDER
    parsed = parse_command(comment.get("body", ""))
    if parsed is None:
        return Ignored.NOT_A_COMMAND
    verb, args = parsed
    # Issue comments and PR conversation comments share this event; only PRs carry
    # `issue.pull_request` (https://docs.github.com/en/webhooks/webhook-events-and-payloads#issue_comment).
    known = verbs(kinds)
    spec = kinds.get(known.get(verb, ""))
    if "pull_request" not in issue and not (spec is not None and spec.on_issues):
        return Ignored.NOT_ON_PR
    number = issue.get("number")
    if number is None:
        return Ignored.NO_NUMBER
    kind = known.get(verb, Kind.HELP)
    params: CommandParams = {"verb": verb, "args": args}
    if verb not in known:
        params["unknown_verb"] = verb
    elif not config.allows(verb):
        kind, params["refused_verb"] = Kind.HELP, verb
    base = _base(event)
    comment_id = comment.get("id")
    trigger = None
    if comment_id is not None:
        trigger = trigger_key("comment", base["repo"], base["repo_id"], comment_id)
    return Command(
        kind=kind,
        numbers=(number,),
        comment_id=comment_id,
        params=params,
        trigger=trigger,
        **base,
    )


def _failed_run(event: Event, config: RepoConfig, run: Run) -> Action | Ignored:
    if run.get("conclusion") != "failure":
        return Ignored.NOT_FAILURE
    if not config.auto_fix_ci:
        return Ignored.AUTO_FIX_OFF
    repo: Repository = event.payload.get("repository", {})
    head_sha = run.get("head_sha")
    head_repo_id = run.get("head_repository", {}).get("id", repo.get("id"))
    listed = run.get("pull_requests", [])
    prs = [
        number
        for pr in listed
        if (number := pr.get("number")) is not None
        and pr.get("head", {}).get("sha") == head_sha
        and pr.get("head", {}).get("repo", {}).get("id") == head_repo_id
    ]
    is_fork = head_repo_id != repo.get("id")
    on_default = run.get("head_branch") == repo.get("default_branch") and not is_fork
    if listed and not prs:
        return Ignored.NO_MATCHING_PR  # every listed PR has moved on to a newer head
    params: CommandParams = {
        "automatic": True,
        "run_kind": event.name,
        "run_id": run.get("id"),
        "head_branch": run.get("head_branch"),
        "head_repo_id": head_repo_id,
        # GitHub sends an empty `pull_requests` for runs from forks
        # (https://github.com/orgs/community/discussions/25220): the worker finds them by sha.
        "find_prs": not prs and is_fork,
        "default_branch": on_default and not prs,
    }
    base = _base(event)
    base["requested_by"] = base["requested_by"] or "github-actions"
    return Command(kind=Kind.FIX_CI, numbers=tuple(prs), head_sha=head_sha, params=params, **base)


# What a review's `author_association` says of someone with no role in the repository
# (https://docs.github.com/en/graphql/reference/enums#commentauthorassociation): unless the
# repository lets readers trigger work, their reviews start nothing, not even a refused job.
OUTSIDERS = frozenset({"NONE", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR", "CONTRIBUTOR", "MANNEQUIN"})
REVIEW_REQUESTS = ("commented", "changes_requested")


@router.register("pull_request_review", "submitted")
def _review_submitted(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    """A review of a pull request: onloop's own follow-up when the PR is onloop's (its branch
    says so here; otherwise the worker looks for its `Onloop-Job:` trailers and pushes)."""
    review = event.payload.get("review", {})
    pr = event.payload.get("pull_request", {})
    if _is_bot(review.get("user", {})):
        return Ignored.BOT_SENDER
    if review.get("state", "").lower() not in REVIEW_REQUESTS:
        return Ignored.NOT_A_REQUEST
    if pr.get("state") == "closed":
        return Ignored.CLOSED
    if not config.allows("fix"):
        return Ignored.REVIEWS_OFF
    if config.trigger_permission != "read" and review.get("author_association") in OUTSIDERS:
        return Ignored.OUTSIDER_REVIEW
    number, review_id = pr.get("number"), review.get("id")
    if number is None or review_id is None:
        return Ignored.NO_NUMBER
    base = _base(event)
    params: CommandParams = {"review_id": review_id, "implicit": True}
    trigger = trigger_key("review", base["repo"], base["repo_id"], review_id)
    head = pr.get("head", {})
    return Command(
        kind=Kind.ADDRESS_REVIEW,
        numbers=(number,),
        head_sha=head.get("sha"),
        params=params,
        trigger=trigger,
        **base,
    )


@router.register("pull_request_review_comment", "created")
def _review_comment(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    """`/agent apply` anywhere in a review, or any other `/agent` line as a reply in a review
    thread: a follow-up of that review (the kinds are the fixed two; a review thread is not
    the conversation that `/agent help` and the like answer in)."""
    comment = event.payload.get("comment", {})
    pr = event.payload.get("pull_request", {})
    if _is_bot(comment.get("user", {})):
        return Ignored.BOT_SENDER
    parsed = parse_command(comment.get("body", ""))
    if parsed is None:
        return Ignored.NOT_A_COMMAND
    verb, args = parsed
    if verb != "apply" and comment.get("in_reply_to_id") is None:
        return Ignored.IN_REVIEW
    if pr.get("state") == "closed":
        return Ignored.CLOSED
    if not config.allows("fix"):
        return Ignored.REVIEWS_OFF
    number, comment_id = pr.get("number"), comment.get("id")
    if number is None:
        return Ignored.NO_NUMBER
    kind = Kind.APPLY_SUGGESTIONS if verb == "apply" else Kind.ADDRESS_REVIEW
    params: CommandParams = {"verb": verb, "args": args}
    base = _base(event)
    trigger = None
    if comment_id is not None:
        trigger = trigger_key("review-comment", base["repo"], base["repo_id"], comment_id)
    return Command(
        kind=kind,
        numbers=(number,),
        head_sha=pr.get("head", {}).get("sha"),
        params=params,
        trigger=trigger,
        **base,
    )


@router.register("check_suite", "completed")
def _check_suite(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    return _failed_run(event, config, event.payload.get("check_suite", {}))


@router.register("workflow_run", "completed")
def _workflow_run(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    return _failed_run(event, config, event.payload.get("workflow_run", {}))


@router.register("pull_request", "synchronize")
@router.register("pull_request", "closed")
def _pull_request_moved(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    pr = event.payload.get("pull_request", {})
    number = pr.get("number") or event.payload.get("number")
    if not number:
        return Ignored.NO_NUMBER
    return CancelStale(
        repo=event.repo or "",  # `explain` ignores events that name no repository
        number=number,
        head_sha=None if event.action == "closed" else pr.get("head", {}).get("sha"),
        reason=f"pull request {event.action}",
    )


def _names(repositories: list[Repository]) -> tuple[str, ...]:
    return tuple(name for r in repositories if (name := r.get("full_name")) is not None)


def _installation(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    payload = event.payload
    installation = payload.get("installation", {})
    installation_id = installation.get("id")
    if installation_id is None:
        return Ignored.NO_INSTALLATION
    account = installation.get("account", {})
    added = payload.get("repositories") or payload.get("repositories_added") or []
    return InstallationChange(
        installation_id=installation_id,
        action=event.action or "",
        account_login=account.get("login", ""),
        account_type=account.get("type"),
        repositories=_names(added),
        removed=_names(payload.get("repositories_removed", [])),
    )


router.register("installation")(_installation)
router.register("installation_repositories")(_installation)


@router.register("github_app_authorization", "revoked")
def _authorization_revoked(event: Event, config: RepoConfig, kinds: Kinds) -> Action | Ignored:
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#github_app_authorization
    user_id = event.sender.get("id")
    if user_id is None:
        return Ignored.NO_SENDER
    return RevokeAuthorization(user_id=user_id, login=event.sender.get("login", ""))


# Installation and authorisation events are the App's own bookkeeping and name no
# repository; bots are ignored everywhere else, our own `<slug>[bot]` above all.
_ANY_SENDER = {"installation", "installation_repositories", "github_app_authorization"}


def _own_suite(event: Event, own_app_id: int | None) -> bool:
    # Apps with checks:write get every check suite, their own too
    # (https://docs.github.com/en/webhooks/webhook-events-and-payloads#check_suite): a failed
    # `onloop/*` check run must not start a CI fix of itself.
    app_id = event.payload.get("check_suite", {}).get("app", {}).get("id")
    return own_app_id is not None and app_id == own_app_id


def explain(
    event: Event, config: RepoConfig, own_app_id: int | None = None, kinds: Kinds = KINDS
) -> Action | Ignored:
    """Like `decide`, but says why an event was ignored. `own_app_id` is onloop's App id,
    whose own check suites are ignored; `kinds` the job kinds `/agent <verb>` may ask for."""
    handler = router.handler_for(event)
    if event.name == "check_suite" and _own_suite(event, own_app_id):
        return Ignored.OWN_CHECKS
    if handler is None:
        return Ignored.UNROUTED
    if event.name not in _ANY_SENDER:
        if _is_bot(event.sender) and event.name not in ("check_suite", "workflow_run"):
            return Ignored.BOT_SENDER
        if event.repo is None:
            return Ignored.NO_REPOSITORY
    return handler(event, config, kinds)


def decide(
    event: Event, config: RepoConfig, own_app_id: int | None = None, kinds: Kinds = KINDS
) -> Action | None:
    """The command an event asks for, or None when it is ignored. Pure: no I/O."""
    result = explain(event, config, own_app_id, kinds)
    return None if isinstance(result, Ignored) else result
